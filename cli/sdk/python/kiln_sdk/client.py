"""Synchronous client for Kiln's HTTP API (docs/api.md).

    with Client("http://127.0.0.1:8080", "my-token") as kiln:
        print(kiln.run("print(6 * 7)").stdout)

Wraps one httpx.Client (a connection pool; usable from several threads, as
httpx's is). Retryable failures are retried with backoff; every submit
carries an Idempotency-Key, so a retried submit never runs a job twice.
Tool handlers (code mode) run on threads of their own while the events
stream is read on.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

import httpx

from . import _tools, _wire, errors
from ._sse import SSEParser
from .models import TERMINAL_STATUSES, Execution

TextCallback = Optional[Callable[[str], Any]]
EventCallback = Optional[Callable[[str, Any], Any]]
ToolHandlers = Optional[Mapping[str, Callable[[Dict[str, Any]], Any]]]
Tools = Optional[Sequence[Mapping[str, Any]]]


class Client:
    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 timeout: float = 30.0, max_retries: int = 3,
                 transport: Optional[httpx.BaseTransport] = None) -> None:
        from . import __version__

        base, headers = _wire.connection(url, token, f"kiln-sdk-python/{__version__}")
        self._timeout = timeout
        self._max_retries = max_retries
        self._http = httpx.Client(base_url=base, headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- executions ------------------------------------------------------

    def run(self, code: str, language: str = "python", *, session_id: Optional[str] = None,
            conversation_id: Optional[str] = None, input: Optional[Dict[str, Any]] = None,
            files: Optional[_wire.Files] = None, collect: Optional[List[str]] = None,
            env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None,
            packages: Optional[List[str]] = None, network: Any = None,
            limits: Optional[Dict[str, int]] = None, timeout_ms: Optional[int] = None,
            priority: Optional[int] = None, callback_url: Optional[str] = None,
            tools: Tools = None, tool_timeout_ms: Optional[int] = None,
            tool_handlers: ToolHandlers = None,
            on_stdout: TextCallback = None, on_stderr: TextCallback = None,
            on_event: EventCallback = None,
            idempotency_key: Optional[str] = None) -> Execution:
        """Runs `code` to its end. A job that fails is an Execution with its
        status, not an exception. With a callback, output is streamed.

        `tools` declares the tools the code may call (`kiln.tool(name, args)`
        in the sandbox); with `tool_handlers` ({name: fn(arguments) ->
        result}) the job is followed over its events stream and each call is
        answered with its handler's return value (or its exception's text)."""
        handlers = _tools.check_handlers(tool_handlers, allow_async=False)
        _tools.check_declared(handlers, tools)
        streaming = bool(on_stdout or on_stderr or on_event or handlers is not None)
        body = _wire.submit_body(
            code, language, wait=not streaming, session_id=session_id,
            conversation_id=conversation_id, input=input, files=files, collect=collect,
            env=env, stdin=stdin, packages=packages, network=network, limits=limits,
            timeout_ms=timeout_ms, priority=priority,
            callback_url=callback_url, tools=tools, tool_timeout_ms=tool_timeout_ms)
        key = idempotency_key or _wire.new_key()
        read_s = _wire.wait_read_timeout(body, self._timeout) if not streaming else None
        answer = self._submit(body, key, read_s)
        if streaming or answer.get("status") not in TERMINAL_STATUSES:
            # Streaming, or the broker's wait ended first (queued too long).
            return self.wait(answer["id"], on_stdout=on_stdout, on_stderr=on_stderr,
                             on_event=on_event, tool_handlers=handlers)
        return Execution.from_json(answer)

    def submit(self, code: str, language: str = "python", *, session_id: Optional[str] = None,
               conversation_id: Optional[str] = None, input: Optional[Dict[str, Any]] = None,
               files: Optional[_wire.Files] = None, collect: Optional[List[str]] = None,
               env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None,
               packages: Optional[List[str]] = None, network: Any = None,
               limits: Optional[Dict[str, int]] = None, timeout_ms: Optional[int] = None,
               priority: Optional[int] = None, callback_url: Optional[str] = None,
               tools: Tools = None, tool_timeout_ms: Optional[int] = None,
               idempotency_key: Optional[str] = None) -> str:
        """Queues `code` and returns the execution id at once (answer its
        tool calls with wait(id, tool_handlers=...) or submit_tool_result)."""
        body = _wire.submit_body(
            code, language, wait=False, session_id=session_id, conversation_id=conversation_id,
            input=input, files=files, collect=collect, env=env, stdin=stdin, packages=packages,
            network=network, limits=limits, timeout_ms=timeout_ms, priority=priority,
            callback_url=callback_url, tools=tools, tool_timeout_ms=tool_timeout_ms)
        answer = self._submit(body, idempotency_key or _wire.new_key(), None)
        return answer["id"]

    def get(self, execution_id: str) -> Execution:
        return Execution.from_json(self._request("GET", f"/v1/executions/{execution_id}"))

    def cancel(self, execution_id: str) -> Execution:
        """Cancels a job; the answer is its final record, or {id, status}
        when the worker has not confirmed within 5 s (wait() for the end)."""
        path = f"/v1/executions/{execution_id}/cancel"
        return Execution.from_json(self._request("POST", path))

    def wait(self, execution_id: str, *, on_stdout: TextCallback = None,
             on_stderr: TextCallback = None, on_event: EventCallback = None,
             tool_handlers: ToolHandlers = None) -> Execution:
        """Follows the job's events to its end and returns the final record;
        a dropped stream is resumed with Last-Event-ID.

        With `tool_handlers`, each `tool_call` event is answered by the
        handler of its tool, on a thread of its own (at most 8 at once), and
        wait returns once the job ended and every handler it started returned."""
        handlers = _tools.check_handlers(tool_handlers, allow_async=False)
        runner = _ToolRunner(self, execution_id, handlers) if handlers is not None else None
        try:
            ex = self._follow(execution_id, (on_stdout, on_stderr, on_event), runner)
            if runner is not None:
                runner.finish()
        except _tools.AnswerFailed as e:
            runner.abandon()  # type: ignore[union-attr]
            raise e.error from None
        except BaseException:
            if runner is not None:
                runner.abandon()
            raise
        return ex

    def _follow(self, execution_id: str, callbacks: tuple,
                runner: Optional["_ToolRunner"]) -> Execution:
        path = f"/v1/executions/{execution_id}/events"
        stream_timeout = httpx.Timeout(self._timeout, read=_wire.STREAM_READ_TIMEOUT_S)
        follow = _wire.Follow()
        while True:
            try:
                with self._http.stream("GET", path, headers=follow.headers(),
                                       timeout=stream_timeout) as r:
                    if r.status_code == 204:  # the broker says we saw the end already
                        return self.get(execution_id)
                    if r.status_code >= 400:
                        r.read()
                        raise _wire.answer_error(r.status_code, _wire.json_or_none(r.content),
                                                 r.headers.get("Retry-After"))
                    record = self._read_events(r, follow, callbacks, runner)
                if record is not None:
                    return Execution.from_json(record)
                err: errors.KilnError = errors.Unavailable(
                    "events stream ended before the execution did", code="UNAVAILABLE",
                    retryable=True)
            except httpx.TransportError as e:
                err = _wire.network_error("GET", path, e)
            except errors.KilnError as e:
                err = e
            except ValueError as e:  # the SSE parser's line cap
                raise errors.Internal(f"GET {path}: {e}", code="INTERNAL") from e
            if not err.retryable or follow.failures >= self._max_retries:
                raise err
            time.sleep(_wire.backoff_s(follow.failures, err))
            follow.failures += 1

    @staticmethod
    def _read_events(r: httpx.Response, follow: _wire.Follow, callbacks: tuple,
                     runner: Optional["_ToolRunner"]) -> Optional[Dict[str, Any]]:
        """One connection's events: the final record, or None when the
        connection ended first (or with an error object): resume then."""
        parser = SSEParser()
        for chunk in r.iter_bytes():  # keepalives come every 15 s
            if runner is not None:
                runner.check()
            for ev in parser.feed(chunk):
                data, ended, record = follow.take(ev.name, ev.id, ev.data)
                _dispatch(ev.name, data, *callbacks)
                if runner is not None:
                    runner.event(ev.name, data)
                if ended:
                    return record
            if runner is not None:
                runner.start_calls()
        return None

    def list_executions(self, status: Any = None, session_id: Optional[str] = None,
                        since: Optional[int] = None, until: Optional[int] = None,
                        page_size: int = 20) -> Iterator[Dict[str, Any]]:
        """The tenant's execution summaries, newest first, following
        next_cursor page by page (`status`: a status or a list of them)."""
        params = _wire.list_params(status, session_id, since, until, page_size)
        while True:
            page = self._request("GET", "/v1/executions", params=params)
            yield from page.get("executions") or []
            if not page.get("next_cursor"):
                return
            params = {**params, "cursor": page["next_cursor"]}

    def submit_batch(self, items: List[Dict[str, Any]], *,
                     idempotency_key: Optional[str] = None) -> List[Dict[str, Any]]:
        """Submits raw submit bodies at once; returns a result per item, in
        order: {"id", "status"} or {"error": {...}}."""
        key = idempotency_key or _wire.new_key()
        answer = self._request("POST", "/v1/executions/batch", json={"executions": items},
                               headers={"Idempotency-Key": key})
        return answer["results"]

    # --- tool callbacks (code mode) --------------------------------------

    def submit_tool_result(self, execution_id: str, call_id: str, *,
                           result: Any = _tools.UNSET, error: Any = _tools.UNSET) -> Dict[str, Any]:
        """Answers tool call `call_id` (a `tool_call` event's) of a running
        job: `result=` any JSON value (None is JSON null) or `error=` a
        message, exactly one. Returns {"call_id", "accepted": True}.

        A 503 (the job's worker not connected to this broker) is retried.
        Raises ToolCallClosed (409) when the call takes no answer any more:
        answered already (also by an earlier try of this request), timed
        out, or the job is no longer running."""
        body = _tools.answer_body(call_id, result, error)
        return self._request("POST", f"/v1/executions/{execution_id}/tool-results", json=body)

    def _answer_call(self, execution_id: str, call: _tools.ToolCall,
                     answer: Dict[str, Any]) -> None:
        """A handler's answer sent; a call that takes none any more is done."""
        try:
            self._request("POST", f"/v1/executions/{execution_id}/tool-results",
                          json={"call_id": call.call_id, **answer})
        except errors.ToolCallClosed:
            pass  # answered (a retry after our accepted answer), timed out, or the job ended
        except (errors.InvalidRequest, errors.LimitExceeded, errors.PayloadTooLarge) as e:
            if "result" not in answer:
                raise
            self._answer_call(execution_id, call, _tools.refused_answer(call.name, e))

    # --- sessions --------------------------------------------------------

    def session(self, language: str = "python", session_id: Optional[str] = None,
                conversation_id: Optional[str] = None) -> "Session":
        return Session(self, language, session_id or f"sdk-{_wire.new_key()}", conversation_id)

    def list_sessions(self, conversation_id: Optional[str] = None) -> List[Dict[str, Any]]:
        params = {"conversation_id": conversation_id} if conversation_id else None
        return self._request("GET", "/v1/sessions", params=params)["sessions"]

    def delete_session(self, session_id: str) -> Dict[str, Any]:
        return self._request("DELETE", f"/v1/sessions/{session_id}")

    # --- the cluster -----------------------------------------------------

    def capabilities(self) -> Dict[str, Any]:
        return self._request("GET", "/v1/capabilities")

    def runtimes(self) -> Dict[str, Any]:
        return self._request("GET", "/v1/runtimes")

    def health(self) -> Dict[str, Any]:
        return self._request("GET", "/v1/health")

    def usage(self, tenant: Optional[str] = None, from_date: Any = None,
              to_date: Any = None) -> Dict[str, Any]:
        """Per-day usage (admin token); dates as YYYY-MM-DD or datetime.date."""
        return self._request("GET", "/v1/usage",
                             params=_wire.usage_params(tenant, from_date, to_date))

    # --- transport -------------------------------------------------------

    def _submit(self, body: Dict[str, Any], key: str, read_s: Optional[float]) -> Dict[str, Any]:
        timeout = httpx.Timeout(self._timeout, read=read_s) if read_s else None
        return self._request("POST", "/v1/executions", json=body,
                             headers={"Idempotency-Key": key}, timeout=timeout)

    def _request(self, method: str, path: str, *, json: Any = None,
                 params: Optional[Dict[str, Any]] = None, headers: Optional[Dict[str, str]] = None,
                 timeout: Optional[httpx.Timeout] = None) -> Any:
        """Sends a request, retrying retryable failures; returns the JSON answer."""
        attempt = 0
        while True:
            try:
                r = self._http.request(method, path, json=json, params=params, headers=headers,
                                       timeout=timeout or httpx.Timeout(self._timeout))
                body = _wire.json_or_none(r.content)
                err = _wire.answer_error(r.status_code, body, r.headers.get("Retry-After"))
                if err is None:
                    return body if body is not None else {}
            except httpx.TransportError as e:
                err = _wire.network_error(method, path, e)
            if not err.retryable or attempt >= self._max_retries:
                raise err
            time.sleep(_wire.backoff_s(attempt, err))
            attempt += 1


def _dispatch(name: str, data: Any, on_stdout: TextCallback, on_stderr: TextCallback,
              on_event: EventCallback) -> None:
    if name == "output_chunk" and isinstance(data, dict):
        cb = on_stdout if data.get("stream") == "stdout" else on_stderr
        if cb:
            cb(data.get("data", ""))
    if on_event:
        on_event(name, data)


class _ToolRunner:
    """Answers one execution's tool calls with the caller's handlers. Each
    call runs on a pool thread (8: the broker's max_in_flight), so the
    stream is read on, and output callbacks keep coming, while handlers run."""

    def __init__(self, client: Client, execution_id: str,
                 handlers: Dict[str, Callable[[Dict[str, Any]], Any]]) -> None:
        self._client = client
        self._id = execution_id
        self._handlers = handlers
        self._calls = _tools.CallTracker()
        self._queued: List[_tools.ToolCall] = []
        self._pool: Optional[ThreadPoolExecutor] = None

    def event(self, name: str, data: Any) -> None:
        call = self._calls.take(name, data)
        if call is not None:
            self._queued.append(call)

    def start_calls(self) -> None:
        """Hands the calls of the chunk just read to the pool. Started only
        after the whole chunk, so a replay's tool_result for a call is seen
        first and the call is skipped."""
        for call in self._queued:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_tools.MAX_IN_FLIGHT,
                                                thread_name_prefix="kiln-tool")
            self._pool.submit(self._answer, call)
        self._queued.clear()

    def _answer(self, call: _tools.ToolCall) -> None:
        try:
            if call.call_id in self._calls.answered:
                return  # a replayed call the stream showed answered already
            fn = self._handlers.get(call.name)
            if fn is None:
                answer = _tools.no_handler_answer(call.name)
            else:
                try:
                    answer = _tools.result_answer(call.name, fn(call.arguments))
                except Exception as e:  # the handler's failure is the sandbox's ToolError
                    answer = _tools.exception_answer(e)
            self._client._answer_call(self._id, call, answer)
        except BaseException as e:
            if isinstance(e, errors.KilnError) and e.execution_id is None:
                e.execution_id = self._id
            self._calls.fail(e)

    def check(self) -> None:
        """Raises AnswerFailed once an answer could not be sent."""
        if self._calls.failure is not None:
            raise _tools.AnswerFailed(self._calls.failure)

    def finish(self) -> None:
        """At the job's end: waits for the handlers still running (their late
        answers are refused as closed), then raises a failure to send one."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._calls.failure is not None:
            raise self._calls.failure

    def abandon(self) -> None:
        """The wait failed: calls not started are dropped, running ones end
        on their own."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class Session:
    """A session: one interpreter whose state outlives each run. As a context
    manager it deletes the session on exit.

        with client.session() as s:
            s.run("x = 1")
            s.run("print(x)")
    """

    def __init__(self, client: Client, language: str, session_id: str,
                 conversation_id: Optional[str]) -> None:
        self.client = client
        self.language = language
        self.id = session_id
        self.conversation_id = conversation_id

    def run(self, code: str, **kwargs: Any) -> Execution:
        """Client.run in this session (same keyword arguments)."""
        return self.client.run(code, self.language, session_id=self.id,
                               conversation_id=self.conversation_id, **kwargs)

    def submit(self, code: str, **kwargs: Any) -> str:
        return self.client.submit(code, self.language, session_id=self.id,
                                  conversation_id=self.conversation_id, **kwargs)

    def delete(self) -> None:
        """Deletes the session (a session already gone is fine)."""
        try:
            self.client.delete_session(self.id)
        except errors.SessionNotFound:
            pass

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete()
