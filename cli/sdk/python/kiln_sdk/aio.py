"""Asyncio client for Kiln's HTTP API: `Client`'s twin (same methods, same
retries), each call a coroutine.

    async with AsyncClient() as kiln:
        ex = await kiln.run("print(6 * 7)", on_stdout=print)
        async for summary in kiln.list_executions(status="failed"):
            ...

Wraps one httpx.AsyncClient; use it from one event loop. Callbacks may be
plain functions or coroutine functions (awaited in order). Tool handlers
(code mode) may be either too; each call is answered by a task of its own.
"""

import asyncio
import inspect
from typing import Any, AsyncIterator, Callable, Dict, List, Mapping, Optional, Sequence, Set

import httpx

from . import _tools, _wire, errors
from ._sse import SSEParser
from .models import TERMINAL_STATUSES, Execution

TextCallback = Optional[Callable[[str], Any]]
EventCallback = Optional[Callable[[str, Any], Any]]
ToolHandlers = Optional[Mapping[str, Callable[[Dict[str, Any]], Any]]]
Tools = Optional[Sequence[Mapping[str, Any]]]


class AsyncClient:
    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 timeout: float = 30.0, max_retries: int = 3,
                 transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        from . import __version__

        base, headers = _wire.connection(url, token, f"kiln-sdk-python/{__version__}")
        self._timeout = timeout
        self._max_retries = max_retries
        self._http = httpx.AsyncClient(base_url=base, headers=headers, timeout=timeout,
                                  transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # --- executions ------------------------------------------------------

    async def run(self, code: str, language: str = "python", *, session_id: Optional[str] = None,
                  conversation_id: Optional[str] = None, input: Optional[Dict[str, Any]] = None,
                  files: Optional[_wire.Files] = None, collect: Optional[List[str]] = None,
                  env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None,
                  packages: Optional[List[str]] = None, network: Any = None,
                  limits: Optional[Dict[str, int]] = None, timeout_ms: Optional[int] = None,
                  priority: Optional[int] = None, callback_url: Optional[str] = None,
                  tools: Tools = None, tool_timeout_ms: Optional[int] = None,
                  tool_handlers: ToolHandlers = None,
                  on_stdout: TextCallback = None, on_stderr: TextCallback = None, on_event: EventCallback = None,
                  idempotency_key: Optional[str] = None) -> Execution:
        """Runs `code` to its end. A job that fails is an Execution with its
        status, not an exception. With a callback, output is streamed.

        `tools` declares the tools the code may call; with `tool_handlers`
        ({name: fn(arguments) -> result}, plain or async functions) each
        call is answered with its handler's return value (or its
        exception's text)."""
        handlers = _tools.check_handlers(tool_handlers, allow_async=True)
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
        answer = await self._submit(body, key, read_s)
        if streaming or answer.get("status") not in TERMINAL_STATUSES:
            # Streaming, or the broker's wait ended first (queued too long).
            return await self.wait(answer["id"], on_stdout=on_stdout, on_stderr=on_stderr,
                                   on_event=on_event, tool_handlers=handlers)
        return Execution.from_json(answer)

    async def submit(self, code: str, language: str = "python", *, session_id: Optional[str] = None,
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
        answer = await self._submit(body, idempotency_key or _wire.new_key(), None)
        return answer["id"]

    async def get(self, execution_id: str) -> Execution:
        return Execution.from_json(await self._request("GET", f"/v1/executions/{execution_id}"))

    async def cancel(self, execution_id: str) -> Execution:
        """Cancels a job; the answer is its final record, or {id, status}
        when the worker has not confirmed within 5 s (wait() for the end)."""
        path = f"/v1/executions/{execution_id}/cancel"
        return Execution.from_json(await self._request("POST", path))

    async def wait(self, execution_id: str, *, on_stdout: TextCallback = None,
                   on_stderr: TextCallback = None, on_event: EventCallback = None,
                   tool_handlers: ToolHandlers = None) -> Execution:
        """Follows the job's events to its end and returns the final record;
        a dropped stream is resumed with Last-Event-ID.

        With `tool_handlers`, each `tool_call` event is answered by the
        handler of its tool in a task of its own, and wait returns once the
        job ended and every handler it started returned."""
        handlers = _tools.check_handlers(tool_handlers, allow_async=True)
        runner = _AsyncToolRunner(self, execution_id, handlers) if handlers is not None else None
        try:
            ex = await self._follow(execution_id, (on_stdout, on_stderr, on_event), runner)
            if runner is not None:
                await runner.finish()
        except _tools.AnswerFailed as e:
            runner.abandon()  # type: ignore[union-attr]
            raise e.error from None
        except BaseException:
            if runner is not None:
                runner.abandon()
            raise
        return ex

    async def _follow(self, execution_id: str, callbacks: tuple,
                      runner: Optional["_AsyncToolRunner"]) -> Execution:
        path = f"/v1/executions/{execution_id}/events"
        stream_timeout = httpx.Timeout(self._timeout, read=_wire.STREAM_READ_TIMEOUT_S)
        follow = _wire.Follow()
        while True:
            try:
                async with self._http.stream("GET", path, headers=follow.headers(),
                                             timeout=stream_timeout) as r:
                    if r.status_code == 204:  # the broker says we saw the end already
                        return await self.get(execution_id)
                    if r.status_code >= 400:
                        await r.aread()
                        raise _wire.answer_error(r.status_code, _wire.json_or_none(r.content),
                                                 r.headers.get("Retry-After"))
                    record = await self._read_events(r, follow, callbacks, runner)
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
            await asyncio.sleep(_wire.backoff_s(follow.failures, err))
            follow.failures += 1

    @staticmethod
    async def _read_events(r: httpx.Response, follow: _wire.Follow, callbacks: tuple,
                           runner: Optional["_AsyncToolRunner"]) -> Optional[Dict[str, Any]]:
        """One connection's events: the final record, or None when the
        connection ended first (or with an error object): resume then."""
        parser = SSEParser()
        async for chunk in r.aiter_bytes():  # keepalives come every 15 s
            if runner is not None:
                runner.check()
            for ev in parser.feed(chunk):
                data, ended, record = follow.take(ev.name, ev.id, ev.data)
                await _dispatch(ev.name, data, *callbacks)
                if runner is not None:
                    runner.event(ev.name, data)
                if ended:
                    return record
        return None

    async def list_executions(self, status: Any = None, session_id: Optional[str] = None,
                              since: Optional[int] = None, until: Optional[int] = None,
                              page_size: int = 20) -> AsyncIterator[Dict[str, Any]]:
        """The tenant's execution summaries, newest first, following
        next_cursor page by page (`status`: a status or a list of them)."""
        params = _wire.list_params(status, session_id, since, until, page_size)
        while True:
            page = await self._request("GET", "/v1/executions", params=params)
            for summary in page.get("executions") or []:
                yield summary
            if not page.get("next_cursor"):
                return
            params = {**params, "cursor": page["next_cursor"]}

    async def submit_batch(self, items: List[Dict[str, Any]], *,
                           idempotency_key: Optional[str] = None) -> List[Dict[str, Any]]:
        """Submits raw submit bodies at once; returns a result per item, in
        order: {"id", "status"} or {"error": {...}}."""
        key = idempotency_key or _wire.new_key()
        answer = await self._request("POST", "/v1/executions/batch", json={"executions": items},
                                     headers={"Idempotency-Key": key})
        return answer["results"]

    # --- tool callbacks (code mode) --------------------------------------

    async def submit_tool_result(self, execution_id: str, call_id: str, *,
                                 result: Any = _tools.UNSET,
                                 error: Any = _tools.UNSET) -> Dict[str, Any]:
        """Answers tool call `call_id` of a running job: `result=` any JSON
        value (None is JSON null) or `error=` a message, exactly one
        (Client.submit_tool_result). Raises ToolCallClosed (409) when the
        call takes no answer any more."""
        body = _tools.answer_body(call_id, result, error)
        return await self._request("POST", f"/v1/executions/{execution_id}/tool-results",
                                   json=body)

    async def _answer_call(self, execution_id: str, call: _tools.ToolCall,
                           answer: Dict[str, Any]) -> None:
        """A handler's answer sent; a call that takes none any more is done."""
        try:
            await self._request("POST", f"/v1/executions/{execution_id}/tool-results",
                                json={"call_id": call.call_id, **answer})
        except errors.ToolCallClosed:
            pass  # answered (a retry after our accepted answer), timed out, or the job ended
        except (errors.InvalidRequest, errors.LimitExceeded, errors.PayloadTooLarge) as e:
            if "result" not in answer:
                raise
            await self._answer_call(execution_id, call, _tools.refused_answer(call.name, e))

    # --- sessions --------------------------------------------------------

    def session(self, language: str = "python", session_id: Optional[str] = None,
                conversation_id: Optional[str] = None) -> "AsyncSession":
        return AsyncSession(self, language, session_id or f"sdk-{_wire.new_key()}", conversation_id)

    async def list_sessions(self, conversation_id: Optional[str] = None) -> List[Dict[str, Any]]:
        params = {"conversation_id": conversation_id} if conversation_id else None
        return (await self._request("GET", "/v1/sessions", params=params))["sessions"]

    async def delete_session(self, session_id: str) -> Dict[str, Any]:
        return await self._request("DELETE", f"/v1/sessions/{session_id}")

    # --- the cluster -----------------------------------------------------

    async def capabilities(self) -> Dict[str, Any]:
        return await self._request("GET", "/v1/capabilities")

    async def runtimes(self) -> Dict[str, Any]:
        return await self._request("GET", "/v1/runtimes")

    async def health(self) -> Dict[str, Any]:
        return await self._request("GET", "/v1/health")

    async def usage(self, tenant: Optional[str] = None, from_date: Any = None,
                    to_date: Any = None) -> Dict[str, Any]:
        """Per-day usage (admin token); dates as YYYY-MM-DD or datetime.date."""
        return await self._request("GET", "/v1/usage",
                                   params=_wire.usage_params(tenant, from_date, to_date))

    # --- transport -------------------------------------------------------

    async def _submit(self, body: Dict[str, Any], key: str,
                      read_s: Optional[float]) -> Dict[str, Any]:
        timeout = httpx.Timeout(self._timeout, read=read_s) if read_s else None
        return await self._request("POST", "/v1/executions", json=body,
                                   headers={"Idempotency-Key": key}, timeout=timeout)

    async def _request(self, method: str, path: str, *, json: Any = None,
                       params: Optional[Dict[str, Any]] = None,
                       headers: Optional[Dict[str, str]] = None,
                       timeout: Optional[httpx.Timeout] = None) -> Any:
        """Sends a request, retrying retryable failures; returns the JSON answer."""
        attempt = 0
        while True:
            try:
                r = await self._http.request(method, path, json=json, params=params,
                                             headers=headers,
                                             timeout=timeout or httpx.Timeout(self._timeout))
                body = _wire.json_or_none(r.content)
                err = _wire.answer_error(r.status_code, body, r.headers.get("Retry-After"))
                if err is None:
                    return body if body is not None else {}
            except httpx.TransportError as e:
                err = _wire.network_error(method, path, e)
            if not err.retryable or attempt >= self._max_retries:
                raise err
            await asyncio.sleep(_wire.backoff_s(attempt, err))
            attempt += 1


async def _dispatch(name: str, data: Any, on_stdout: TextCallback, on_stderr: TextCallback,
                    on_event: EventCallback) -> None:
    if name == "output_chunk" and isinstance(data, dict):
        cb = on_stdout if data.get("stream") == "stdout" else on_stderr
        if cb:
            await _call(cb, data.get("data", ""))
    if on_event:
        await _call(on_event, name, data)


class _AsyncToolRunner:
    """Answers one execution's tool calls with the caller's handlers, each
    call in a task of its own, so the stream is read on while handlers run.
    Plain handlers run on the event loop (wrap blocking work in
    asyncio.to_thread); coroutine functions are awaited."""

    def __init__(self, client: AsyncClient, execution_id: str,
                 handlers: Dict[str, Callable[[Dict[str, Any]], Any]]) -> None:
        self._client = client
        self._id = execution_id
        self._handlers = handlers
        self._calls = _tools.CallTracker()
        self._tasks: Set["asyncio.Task[None]"] = set()

    def event(self, name: str, data: Any) -> None:
        call = self._calls.take(name, data)
        if call is None:
            return
        # Started on the loop's next turn: the rest of this chunk's events
        # (a replay's tool_result for it) are seen first.
        task = asyncio.get_running_loop().create_task(self._answer(call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, call: _tools.ToolCall) -> None:
        try:
            if call.call_id in self._calls.answered:
                return  # a replayed call the stream showed answered already
            fn = self._handlers.get(call.name)
            if fn is None:
                answer = _tools.no_handler_answer(call.name)
            else:
                try:
                    value = fn(call.arguments)
                    if inspect.isawaitable(value):
                        value = await value
                    answer = _tools.result_answer(call.name, value)
                except Exception as e:  # the handler's failure is the sandbox's ToolError
                    answer = _tools.exception_answer(e)
            await self._client._answer_call(self._id, call, answer)
        except Exception as e:  # not CancelledError: abandon() cancels
            if isinstance(e, errors.KilnError) and e.execution_id is None:
                e.execution_id = self._id
            self._calls.fail(e)

    def check(self) -> None:
        """Raises AnswerFailed once an answer could not be sent."""
        if self._calls.failure is not None:
            raise _tools.AnswerFailed(self._calls.failure)

    async def finish(self) -> None:
        """At the job's end: waits for the handlers still running (their late
        answers are refused as closed), then raises a failure to send one."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))
        if self._calls.failure is not None:
            raise self._calls.failure

    def abandon(self) -> None:
        """The wait failed or was cancelled: running handlers are cancelled."""
        for task in list(self._tasks):
            task.cancel()


class AsyncSession:
    """A session: one interpreter whose state outlives each run. As an async
    context manager it deletes the session on exit.

        async with client.session() as s:
            await s.run("x = 1")
            await s.run("print(x)")
    """

    def __init__(self, client: AsyncClient, language: str, session_id: str,
                 conversation_id: Optional[str]) -> None:
        self.client = client
        self.language = language
        self.id = session_id
        self.conversation_id = conversation_id

    async def run(self, code: str, **kwargs: Any) -> Execution:
        """AsyncClient.run in this session (same keyword arguments)."""
        return await self.client.run(code, self.language, session_id=self.id,
                                     conversation_id=self.conversation_id, **kwargs)

    async def submit(self, code: str, **kwargs: Any) -> str:
        return await self.client.submit(code, self.language, session_id=self.id,
                                        conversation_id=self.conversation_id, **kwargs)

    async def delete(self) -> None:
        """Deletes the session (a session already gone is fine)."""
        try:
            await self.client.delete_session(self.id)
        except errors.SessionNotFound:
            pass

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.delete()


async def _call(cb: Callable[..., Any], *args: Any) -> None:
    result = cb(*args)
    if inspect.isawaitable(result):
        await result
