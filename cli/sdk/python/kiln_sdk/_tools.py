"""Tool callbacks ("code mode"): what the sync and async clients share.

Code in the sandbox calls a tool its submitter declared (`tools=`): the call
reaches the client as a `tool_call` event on the execution's stream,
`{"call_id", "name", "arguments"}`, and is answered with
`POST /v1/executions/{id}/tool-results` (`{"call_id", "result"}` or
`{"call_id", "error"}`); the answer goes back into the sandbox. With
`tool_handlers` the clients answer by themselves: the handler of the call's
tool gets the arguments, its return value is the result, an exception it
raises is the error (its text), and a tool without a handler is answered
with the error "no handler for tool NAME".

Pure functions and bookkeeping, no I/O: `client.py` and `aio.py` run the
handlers (threads or tasks) and send the answers.
"""

import inspect
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Set

# The broker's fixed limits (GET /v1/capabilities, limits.tools).
MAX_IN_FLIGHT = 8  # unanswered calls per execution
MAX_RESULT_BYTES = 1 << 20  # the compact JSON of a result
MAX_ERROR_BYTES = 4096  # an error's text, UTF-8

ToolHandler = Callable[[Dict[str, Any]], Any]


class _Unset:
    """The default of submit_tool_result's `result`/`error`: not given (so
    `result=None`, a JSON null, is an answer)."""

    _instance: Optional["_Unset"] = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


@dataclass(frozen=True)
class ToolCall:
    """One `tool_call` event: what a handler is asked."""
    call_id: str
    name: str
    arguments: Dict[str, Any]


class AnswerFailed(Exception):
    """Internal: sending an answer failed for good (`error`: the KilnError);
    it ends the wait with that error, not with a reconnect."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def check_handlers(handlers: Optional[Mapping[str, ToolHandler]], *,
                   allow_async: bool) -> Optional[Dict[str, ToolHandler]]:
    """`tool_handlers` checked: a mapping of tool name -> callable (the sync
    client refuses coroutine functions: it could not await them)."""
    if handlers is None:
        return None
    if not isinstance(handlers, Mapping):
        raise TypeError("tool_handlers: expected a dict of tool name -> function")
    for name, fn in handlers.items():
        if not isinstance(name, str) or not callable(fn):
            raise TypeError(f"tool_handlers[{name!r}]: expected a str key and a callable")
        if not allow_async and inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool_handlers[{name!r}] is a coroutine function: "
                            "use AsyncClient to have it awaited")
    return dict(handlers)


def check_declared(handlers: Optional[Mapping[str, ToolHandler]],
                   tools: Optional[Sequence[Any]]) -> None:
    """run(): handlers without declared tools would never be called."""
    if handlers is not None and not tools:
        raise ValueError("tool_handlers without tools: declare the tools the code may call "
                         "(tools=[{'name': ..., 'parameters': {...}}])")


def answer_body(call_id: str, result: Any, error: Any) -> Dict[str, Any]:
    """The body of POST /v1/executions/{id}/tool-results."""
    if not isinstance(call_id, str) or not call_id:
        raise TypeError("call_id: expected the call's id (a tool_call event's call_id)")
    if (result is UNSET) == (error is UNSET):
        raise TypeError("submit_tool_result: pass exactly one of result= and error=")
    if error is not UNSET:
        if not isinstance(error, str):
            raise TypeError("error: expected a string (the message the sandbox sees)")
        return {"call_id": call_id, "error": error}
    return {"call_id": call_id, "result": result}


def truncate_utf8(text: str, limit: int) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, on a character boundary
    (the answer's error must be valid UTF-8 of at most 4,096 bytes)."""
    data = text.encode("utf-8", "replace")  # a lone surrogate becomes "?"
    return data[:limit].decode("utf-8", "ignore")


def error_answer(message: str) -> Dict[str, Any]:
    return {"error": truncate_utf8(message, MAX_ERROR_BYTES)}


def no_handler_answer(name: str) -> Dict[str, Any]:
    return error_answer(f"no handler for tool {name}")


def exception_answer(exc: BaseException) -> Dict[str, Any]:
    """A handler's exception: its text (its class name when it has none)."""
    return error_answer(str(exc) or type(exc).__name__)


def result_answer(name: str, value: Any) -> Dict[str, Any]:
    """A handler's return value as the answer, or an error the sandbox can
    read when the broker would refuse it (not JSON, over 1 MiB)."""
    try:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as e:  # UnicodeEncodeError is a ValueError
        return error_answer(f"the handler of tool {name} returned a value that is not JSON: {e}")
    if size > MAX_RESULT_BYTES:
        return error_answer(f"the result of tool {name} is {size} bytes of JSON, "
                            f"over the limit of {MAX_RESULT_BYTES}")
    return {"result": value}


def refused_answer(name: str, err: Any) -> Dict[str, Any]:
    """The broker refused a result (400/413): say so to the sandbox rather
    than let the call wait for its timeout."""
    return error_answer(f"the result of tool {name} was refused: {err.code}: {err.message}")


class CallTracker:
    """Which calls of one execution were handed to a handler, which the
    stream showed answered, and the first failure to send an answer.

    A call is handed out once, even if the stream shows it again (following
    from the start replays every event); a call whose `tool_result` was seen
    before its handler started is skipped (a replay of an ended job)."""

    def __init__(self) -> None:
        self._handed: Set[str] = set()
        self.answered: Set[str] = set()
        self._lock = threading.Lock()
        self.failure: Optional[BaseException] = None

    def take(self, name: str, data: Any) -> Optional[ToolCall]:
        """The call event `name`/`data` asks to be answered, else None."""
        if not isinstance(data, dict) or not isinstance(data.get("call_id"), str):
            return None
        call_id = data["call_id"]
        if name == "tool_result":
            self.answered.add(call_id)
            return None
        if name != "tool_call" or call_id in self._handed:
            return None
        self._handed.add(call_id)
        arguments = data.get("arguments")
        return ToolCall(call_id, str(data.get("name", "")),
                        arguments if isinstance(arguments, dict) else {})

    def fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.failure is None:
                self.failure = exc
