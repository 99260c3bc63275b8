"""End-to-end test of the installed kiln_sdk package against a real cluster.

    KILN_URL=http://127.0.0.1:8080 KILN_TOKEN=<tenant token> KILN_ADMIN_TOKEN=<admin token> \
        <venv>/bin/python tests/sdk/python/test_sdk.py

tests/sdk/python/run.sh installs the package into a fresh venv first; this
file imports only the installed package, never cli/sdk/python. The retry,
stream-resume, tool-handler, SSE parser and webhook tests need no cluster: they
talk to a scripted http.server on 127.0.0.1, or to nothing. Every cluster test
uses its own session ids, so runs do not collide. Exits non-zero on any failure.
"""

import asyncio
import datetime
import hashlib
import hmac
import http.server
import json
import os
import pathlib
import threading
import time
import unittest
import uuid

import httpx

import kiln_sdk
from kiln_sdk import _sse

URL = os.environ.get("KILN_URL", "")
TOKEN = os.environ.get("KILN_TOKEN", "")
ADMIN_TOKEN = os.environ.get("KILN_ADMIN_TOKEN", "")

# Prints 0..2 on stdout a line at a time, so the output comes in several chunks.
STREAMING_CODE = (
    "import sys, time\n"
    "for i in range(3):\n"
    "    print(i, flush=True)\n"
    "    time.sleep(0.3)\n"
    "print('careful', file=sys.stderr, flush=True)\n")


# A tool declared with a JSON Schema: the worker refuses calls whose
# arguments do not match (ToolRefused in the sandbox) before they reach us.
ADD_TOOL = {"name": "add", "description": "Adds two integers.",
            "parameters": {"type": "object",
                           "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "required": ["a", "b"], "additionalProperties": False}}

# Calls the tool five times and prints the sum of the answers: 1 + 2 + ... + 5.
TOOL_LOOP_CODE = (
    "total = 0\n"
    "for i in range(5):\n"
    "    total += kiln.tool('add', {'a': i, 'b': 1})\n"
    "print(total)\n")

# Two calls that fail: the handler raises; no handler for the tool.
TOOL_ERROR_CODE = (
    "for name in ('search', 'lookup'):\n"
    "    try:\n"
    "        kiln.tool(name, {'q': 'kiln'})\n"
    "    except kiln.ToolError as e:\n"
    "        print(f'caught {type(e).__name__}: {e}')\n")


def unique(name: str) -> str:
    return f"pysdk-{name}-{uuid.uuid4().hex[:10]}"


class InstalledPackageTest(unittest.TestCase):
    def test_imports_the_installed_package_not_the_source_tree(self):
        source = pathlib.Path(__file__).resolve().parents[3] / "cli" / "sdk" / "python"
        installed = pathlib.Path(kiln_sdk.__file__).resolve()
        self.assertNotIn(source, installed.parents, f"kiln_sdk imported from {installed}")


class SSEParserTest(unittest.TestCase):
    STREAM = ("event: execution_start\r\nid: start\r\ndata: {\"a\":1}\r\n\r\n"
              ": keepalive\n\n"
              "event: output_chunk\rid: 17-0\rdata: h\u00e9\rdata: llo\r\r"
              "event: execution_end\nid: end\ndata: {}\n\n").encode()

    def expected(self):
        return [("execution_start", "start", '{"a":1}'), ("output_chunk", "17-0", "h\u00e9\nllo"),
                ("execution_end", "end", "{}")]

    def test_whole_and_byte_by_byte(self):
        for step in (len(self.STREAM), 1, 3):
            parser = _sse.SSEParser()
            events = []
            for i in range(0, len(self.STREAM), step):
                events += parser.feed(self.STREAM[i:i + step])
            self.assertEqual([(e.name, e.id, e.data) for e in events], self.expected(), step)


class ScriptedServer:
    """An http.server on 127.0.0.1 answering from a script; it records what
    each request carried. Handler functions get (handler, body bytes)."""

    def __init__(self, handle):
        outer = self
        self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((self.command, self.path, dict(self.headers)))
                handle(self, body)

            do_GET = do_POST = _serve

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def answer(handler, status, body, headers=None):
    data = json.dumps(body).encode()
    handler.send_response(status)
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class RetryTest(unittest.TestCase):
    UNAVAILABLE = {"error": {"code": "UNAVAILABLE", "message": "x", "retryable": True}}

    def test_submit_retries_with_the_same_idempotency_key(self):
        count = [0]

        def handle(h, body):
            count[0] += 1
            if count[0] == 1:
                answer(h, 503, self.UNAVAILABLE, {"Retry-After": "1"})
            elif count[0] == 2:
                answer(h, 503, self.UNAVAILABLE)
            else:
                answer(h, 202, {"id": "ex_x", "status": "queued"})

        srv = ScriptedServer(handle)
        try:
            with kiln_sdk.Client(srv.url, "t") as client:
                start = time.monotonic()
                self.assertEqual(client.submit("print(1)"), "ex_x")
                elapsed = time.monotonic() - start
        finally:
            srv.close()
        self.assertEqual(len(srv.requests), 3)
        self.assertTrue(all(r[:2] == ("POST", "/v1/executions") for r in srv.requests))
        keys = {r[2].get("Idempotency-Key") for r in srv.requests}
        self.assertEqual(len(keys), 1, keys)
        self.assertTrue(keys.pop())
        self.assertGreaterEqual(elapsed, 0.9, "Retry-After: 1 was not honoured")

    def test_gives_up_after_max_retries_and_skips_unretryable(self):
        srv = ScriptedServer(lambda h, body: answer(h, 503, self.UNAVAILABLE, {"Retry-After": "0"}))
        try:
            with kiln_sdk.Client(srv.url, "t", max_retries=2) as client:
                with self.assertRaises(kiln_sdk.Unavailable) as ctx:
                    client.get("ex_x")
        finally:
            srv.close()
        self.assertEqual(len(srv.requests), 3)
        self.assertEqual((ctx.exception.code, ctx.exception.status), ("UNAVAILABLE", 503))

        bad = {"error": {"code": "INVALID_REQUEST", "message": "language: no", "retryable": False}}
        srv = ScriptedServer(lambda h, body: answer(h, 400, bad))
        try:
            with kiln_sdk.Client(srv.url, "t") as client:
                with self.assertRaises(kiln_sdk.InvalidRequest):
                    client.submit("1", "ruby")
        finally:
            srv.close()
        self.assertEqual(len(srv.requests), 1)

    def test_connection_refused_is_unavailable(self):
        srv = ScriptedServer(lambda h, body: None)
        url = srv.url
        srv.close()  # nothing listens there any more
        with kiln_sdk.Client(url, "t", max_retries=1) as client:
            with self.assertRaises(kiln_sdk.Unavailable) as ctx:
                client.health()
        self.assertTrue(ctx.exception.retryable)


class StreamResumeTest(unittest.TestCase):
    def test_dropped_stream_resumes_after_the_last_event(self):
        record = {"id": "ex_r", "status": "succeeded", "stdout": "a\nb\n", "exit_code": 0}

        def handle(h, body):
            # HTTP/1.0 without Content-Length: the body ends when we close.
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.end_headers()
            if h.headers.get("Last-Event-ID") is None:
                h.wfile.write(b'event: execution_start\nid: start\ndata: {"id":"ex_r"}\n\n'
                              b'event: output_chunk\nid: 1-0\n'
                              b'data: {"stream":"stdout","seq":0,"data":"a\\n"}\n\n')
            else:
                h.wfile.write(b'event: output_chunk\nid: 2-0\n'
                              b'data: {"stream":"stdout","seq":1,"data":"b\\n"}\n\n'
                              b'event: execution_end\nid: end\ndata: '
                              + json.dumps(record).encode() + b"\n\n")

        srv = ScriptedServer(handle)
        chunks = []
        try:
            with kiln_sdk.Client(srv.url, "t") as client:
                ex = client.wait("ex_r", on_stdout=chunks.append)
        finally:
            srv.close()
        self.assertEqual(chunks, ["a\n", "b\n"])
        self.assertEqual(ex.stdout, "a\nb\n")
        self.assertEqual([r[2].get("Last-Event-ID") for r in srv.requests], [None, "1-0"])


def sse(name, event_id, data):
    return f"event: {name}\nid: {event_id}\ndata: {json.dumps(data)}\n\n".encode()


class ToolBroker:
    """A scripted broker for tool handlers: the events stream of ex_t sends
    `calls` as tool_call events (ids 1-0, 2-0, ...) and keepalives until each
    call has an answer that is not a 503, then a tool_result per accepted
    answer and execution_end. POST tool-results is answered by
    `reply(n, body)` -> (status, body), n counting from 1; default 200.
    With drop_after_calls the first connection ends after the calls (the
    client must resume after the last one)."""

    RECORD = {"id": "ex_t", "status": "succeeded", "stdout": "", "exit_code": 0}

    def __init__(self, calls, reply=None, drop_after_calls=False, replay=False):
        self.posts = []  # (call_id, body) in arrival order
        self.settled = {}  # call_id -> status of its last answer
        self.done = threading.Event()
        lock = threading.Lock()
        ids = {c["call_id"] for c in calls}

        def handle(h, body):
            if h.command == "POST":
                self.assert_path(h.path)
                data = json.loads(body)
                with lock:
                    self.posts.append((data.get("call_id"), data))
                    n = len(self.posts)
                status, answer_body = reply(n, data) if reply else (200, None)
                if status == 200 and answer_body is None:
                    answer_body = {"call_id": data["call_id"], "accepted": True}
                with lock:
                    if status != 503:
                        self.settled[data["call_id"]] = (status, data)
                    if ids <= set(self.settled):
                        self.done.set()
                answer(h, status, answer_body, {"Retry-After": "0"} if status == 503 else None)
                return
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.end_headers()
            if h.headers.get("Last-Event-ID") is None:
                out = sse("execution_start", "start", {"id": "ex_t", "status": "running"})
                for i, call in enumerate(calls, 1):
                    out += sse("tool_call", f"{i}-0", call)
                    if replay:  # an ended job: each call answered already
                        out += sse("tool_result", f"{i}-1",
                                   {"call_id": call["call_id"], "ok": True})
                if replay:
                    h.wfile.write(out + sse("execution_end", "end", self.RECORD))
                    return
                h.wfile.write(out)
                if drop_after_calls:
                    return
            deadline = time.monotonic() + 10
            while not self.done.wait(0.05) and time.monotonic() < deadline:
                h.wfile.write(b": keepalive\n\n")
            out = b""
            for i, (call_id, (status, data)) in enumerate(sorted(self.settled.items()), 1):
                if status == 200:
                    out += sse("tool_result", f"{100 + i}-0", {"call_id": call_id,
                                                               "ok": "result" in data})
            h.wfile.write(out + sse("execution_end", "end", self.RECORD))

        self.server = ScriptedServer(handle)
        self.url = self.server.url

    @staticmethod
    def assert_path(path):
        if path != "/v1/executions/ex_t/tool-results":
            raise AssertionError(f"POST to {path}")

    def answers(self):
        """call_id -> the body of its last answer."""
        return {call_id: body for call_id, body in self.posts}

    def close(self):
        self.server.close()


def call(call_id, name, **arguments):
    return {"call_id": call_id, "name": name, "arguments": arguments}


class ToolHandlersTest(unittest.TestCase):
    """tool_handlers and submit_tool_result against a scripted broker."""

    def test_handlers_answer_each_call_and_see_the_events(self):
        calls = [call("c1", "add", a=2, b=3), call("c2", "search", q="x"), call("c3", "nope"),
                 call("c4", "nothing"), call("c5", "unjson"), call("c6", "empty")]
        broker = ToolBroker(calls)
        events, seen = [], []

        def search(args):
            raise RuntimeError(f"the index is down ({args['q']})")

        def empty(args):
            raise KeyError()  # no text: its class name is sent

        handlers = {"add": lambda args: seen.append(args) or args["a"] + args["b"],
                    "search": search, "nothing": lambda args: None, "unjson": lambda args: {1, 2},
                    "empty": empty}
        try:
            with kiln_sdk.Client(broker.url, "t") as client:
                ex = client.wait("ex_t", tool_handlers=handlers,
                                 on_event=lambda name, data: events.append((name, data)))
        finally:
            broker.close()
        self.assertEqual(ex.status, "succeeded")
        self.assertEqual(seen, [{"a": 2, "b": 3}])
        answers = broker.answers()
        self.assertEqual(answers["c1"], {"call_id": "c1", "result": 5})
        self.assertEqual(answers["c2"], {"call_id": "c2", "error": "the index is down (x)"})
        self.assertEqual(answers["c3"], {"call_id": "c3", "error": "no handler for tool nope"})
        self.assertEqual(answers["c4"], {"call_id": "c4", "result": None})
        self.assertRegex(answers["c5"]["error"], "^the handler of tool unjson returned a value "
                                                 "that is not JSON")
        self.assertEqual(answers["c6"], {"call_id": "c6", "error": "KeyError"})
        self.assertEqual(len(broker.posts), 6)
        # The user's on_event sees the tool events too.
        self.assertEqual([d for n, d in events if n == "tool_call"], calls)
        self.assertEqual(sorted(d["call_id"] for n, d in events if n == "tool_result"),
                         [f"c{i}" for i in range(1, 7)])

    def test_handlers_run_concurrently(self):
        barrier = threading.Barrier(2, timeout=5)  # both calls must be in their handlers at once

        def add(args):
            barrier.wait()
            return args["a"] + args["b"]

        broker = ToolBroker([call("c1", "add", a=1, b=1), call("c2", "add", a=2, b=2)])
        try:
            with kiln_sdk.Client(broker.url, "t") as client:
                client.wait("ex_t", tool_handlers={"add": add})
        finally:
            broker.close()
        self.assertEqual({k: v["result"] for k, v in broker.answers().items()}, {"c1": 2, "c2": 4})

    def test_503_is_retried_and_409_after_it_counts_as_answered(self):
        # The first try was accepted but its answer lost (here: a 503), the
        # retry finds the call closed: done, not a failure.
        replies = {1: (503, {"error": {"code": "UNAVAILABLE", "message": "worker not here",
                                       "retryable": True}}),
                   2: (409, {"error": {"code": "TOOL_CALL_CLOSED", "message": "answered",
                                       "retryable": False}})}
        broker = ToolBroker([call("c1", "add", a=1, b=2)], reply=lambda n, body: replies[n])
        try:
            with kiln_sdk.Client(broker.url, "t") as client:
                ex = client.wait("ex_t", tool_handlers={"add": lambda a: a["a"] + a["b"]})
        finally:
            broker.close()
        self.assertEqual(ex.status, "succeeded")
        self.assertEqual([body for _, body in broker.posts], [{"call_id": "c1", "result": 3}] * 2)

    def test_a_refused_result_is_replaced_by_an_error(self):
        too_big = (400, {"error": {"code": "LIMIT_EXCEEDED", "retryable": False,
                                   "message": "result: over 1048576 bytes"}})
        broker = ToolBroker([call("c1", "big")],
                            reply=lambda n, body: too_big if "result" in body else (200, None))
        try:
            with kiln_sdk.Client(broker.url, "t") as client:
                client.wait("ex_t", tool_handlers={"big": lambda a: "x"})
        finally:
            broker.close()
        self.assertEqual(len(broker.posts), 2)
        self.assertEqual(broker.posts[1][1], {"call_id": "c1", "error": (
            "the result of tool big was refused: LIMIT_EXCEEDED: result: over 1048576 bytes")})

    def test_an_answer_that_cannot_be_sent_ends_the_wait(self):
        forbidden = (403, {"error": {"code": "FORBIDDEN", "message": "admin", "retryable": False}})
        broker = ToolBroker([call("c1", "add", a=1, b=2)], reply=lambda n, body: forbidden)
        try:
            with kiln_sdk.Client(broker.url, "t") as client:
                with self.assertRaises(kiln_sdk.Forbidden) as ctx:
                    client.wait("ex_t", tool_handlers={"add": lambda a: 3})
        finally:
            broker.close()
        self.assertEqual(ctx.exception.execution_id, "ex_t")

    def test_a_resumed_stream_does_not_call_a_handler_twice(self):
        seen = []
        broker = ToolBroker([call("c1", "add", a=1, b=2)], drop_after_calls=True)
        try:
            with kiln_sdk.Client(broker.url, "t") as client:
                client.wait("ex_t", tool_handlers={"add": lambda a: seen.append(a) or 3})
        finally:
            broker.close()
        self.assertEqual(seen, [{"a": 1, "b": 2}])
        gets = [r[2].get("Last-Event-ID") for r in broker.server.requests if r[0] == "GET"]
        self.assertEqual(gets, [None, "1-0"])

    def test_a_replayed_call_answered_already_is_not_handled(self):
        seen = []
        broker = ToolBroker([call("c1", "add", a=1, b=2)], replay=True)
        try:
            with kiln_sdk.Client(broker.url, "t") as client:
                ex = client.wait("ex_t", tool_handlers={"add": lambda a: seen.append(a) or 3})
        finally:
            broker.close()
        self.assertEqual((ex.status, seen, broker.posts), ("succeeded", [], []))

    def test_submit_tool_result(self):
        closed = {"error": {"code": "TOOL_CALL_CLOSED", "message": "timed out", "retryable": False}}
        broker = ToolBroker([], reply=lambda n, body: (409, closed) if n == 3 else (200, None))
        try:
            with kiln_sdk.Client(broker.url, "t") as client:
                self.assertEqual(client.submit_tool_result("ex_t", "c1", result=None),
                                 {"call_id": "c1", "accepted": True})
                client.submit_tool_result("ex_t", "c2", error="no such user")
                with self.assertRaises(kiln_sdk.ToolCallClosed) as ctx:
                    client.submit_tool_result("ex_t", "c3", result={"rows": [1, 2]})
                for bad in ({}, {"result": 1, "error": "x"}, {"error": 42}):
                    with self.assertRaises(TypeError):
                        client.submit_tool_result("ex_t", "c4", **bad)
        finally:
            broker.close()
        self.assertEqual([body for _, body in broker.posts], [
            {"call_id": "c1", "result": None}, {"call_id": "c2", "error": "no such user"},
            {"call_id": "c3", "result": {"rows": [1, 2]}}])
        err = ctx.exception
        self.assertEqual((err.code, err.status, err.retryable), ("TOOL_CALL_CLOSED", 409, False))
        self.assertIsInstance(err, kiln_sdk.KilnError)
        self.assertIs(kiln_sdk.ERRORS_BY_CODE["TOOL_CALL_CLOSED"], kiln_sdk.ToolCallClosed)

    def test_handlers_are_checked_before_anything_is_sent(self):
        srv = ScriptedServer(lambda h, body: answer(h, 500, {}))
        try:
            with kiln_sdk.Client(srv.url, "t") as client:
                with self.assertRaises(ValueError):  # handlers for tools never declared
                    client.run("1", tool_handlers={"add": lambda a: 1})
                with self.assertRaises(TypeError):
                    client.run("1", tools=[{"name": "add"}], tool_handlers={"add": 1})

                async def add(args):
                    return 1
                with self.assertRaises(TypeError):  # the sync client cannot await it
                    client.run("1", tools=[{"name": "add"}], tool_handlers={"add": add})
        finally:
            srv.close()
        self.assertEqual(srv.requests, [])


class AsyncToolHandlersTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_and_plain_handlers_concurrently(self):
        broker = ToolBroker([call("c1", "add", a=1, b=2), call("c2", "add", a=3, b=4),
                             call("c3", "neg", x=5), call("c4", "fail")])
        started, both = [], asyncio.Event()

        async def add(args):  # both calls are in here at once, or this never returns
            started.append(args)
            if len(started) == 2:
                both.set()
            await asyncio.wait_for(both.wait(), 5)
            return args["a"] + args["b"]

        async def fail(args):
            raise ValueError("refused by policy")

        events = []
        try:
            async with kiln_sdk.AsyncClient(broker.url, "t") as client:
                ex = await client.wait("ex_t", tool_handlers={
                    "add": add, "neg": lambda args: -args["x"], "fail": fail},
                    on_event=lambda name, data: events.append(name))
        finally:
            await asyncio.to_thread(broker.close)
        self.assertEqual(ex.status, "succeeded")
        self.assertEqual(broker.answers(), {
            "c1": {"call_id": "c1", "result": 3}, "c2": {"call_id": "c2", "result": 7},
            "c3": {"call_id": "c3", "result": -5},
            "c4": {"call_id": "c4", "error": "refused by policy"}})
        self.assertEqual((events.count("tool_call"), events.count("tool_result")), (4, 4))

    async def test_submit_tool_result_and_409(self):
        closed = {"error": {"code": "TOOL_CALL_CLOSED", "message": "x", "retryable": False}}
        broker = ToolBroker([], reply=lambda n, body: (409, closed) if n == 2 else (200, None))
        try:
            async with kiln_sdk.AsyncClient(broker.url, "t") as client:
                accepted = await client.submit_tool_result("ex_t", "c1", result=0)
                self.assertEqual(accepted, {"call_id": "c1", "accepted": True})
                with self.assertRaises(kiln_sdk.ToolCallClosed):
                    await client.submit_tool_result("ex_t", "c1", error="again")
                with self.assertRaises(TypeError):
                    await client.submit_tool_result("ex_t", "c1")
        finally:
            await asyncio.to_thread(broker.close)
        self.assertEqual(len(broker.posts), 2)


# The known answer, shared with tests/sdk/typescript/test_sdk.mjs: both SDKs
# must sign these bytes the same way (computed with hmac.new, Node's
# createHmac and `openssl dgst -sha256 -hmac`).
WEBHOOK_SECRET = "whsec_test_0123456789"
WEBHOOK_T = 1700000000
WEBHOOK_BODY = b'{"id":"ex_1","status":"succeeded"}'
WEBHOOK_HEX = "58cd265606efcc8d917df28b4b7a761d6a54f97c21bf1a87712e177333d22244"


class WebhookTest(unittest.TestCase):
    def test_known_answer(self):
        mac = hmac.new(WEBHOOK_SECRET.encode(), b"%d.%s" % (WEBHOOK_T, WEBHOOK_BODY),
                       hashlib.sha256).hexdigest()
        self.assertEqual(mac, WEBHOOK_HEX)
        header = kiln_sdk.sign_webhook(WEBHOOK_SECRET, WEBHOOK_BODY, WEBHOOK_T)
        self.assertEqual(header, f"t={WEBHOOK_T},v1={WEBHOOK_HEX}")
        # str and bytes secrets and bodies are the same thing.
        self.assertEqual(kiln_sdk.sign_webhook(WEBHOOK_SECRET.encode(), WEBHOOK_BODY.decode(),
                                               WEBHOOK_T), header)
        record = kiln_sdk.verify_webhook(WEBHOOK_SECRET, WEBHOOK_BODY, header,
                                         now=WEBHOOK_T + 299)
        self.assertEqual(record, {"id": "ex_1", "status": "succeeded"})

    def assert_rejected(self, pattern, *args, **kwargs):
        with self.assertRaisesRegex(kiln_sdk.WebhookVerificationError, pattern):
            kiln_sdk.verify_webhook(*args, **kwargs)

    def test_accepts_fresh_and_rejects_what_does_not_match(self):
        header = kiln_sdk.sign_webhook(WEBHOOK_SECRET, WEBHOOK_BODY)  # now
        self.assertEqual(kiln_sdk.verify_webhook(WEBHOOK_SECRET, WEBHOOK_BODY, header)["id"],
                         "ex_1")
        self.assert_rejected("no v1 signature matches", WEBHOOK_SECRET,
                             WEBHOOK_BODY.replace(b"succeeded", b"failed"), header)
        # Parsed and dumped again: same data, other bytes, so no match.
        self.assert_rejected("no v1 signature matches", WEBHOOK_SECRET,
                             json.dumps(json.loads(WEBHOOK_BODY)), header)
        self.assert_rejected("no v1 signature matches", "whsec_other", WEBHOOK_BODY, header)
        err = kiln_sdk.WebhookVerificationError("x")
        self.assertIsInstance(err, ValueError)
        self.assertNotIsInstance(err, kiln_sdk.KilnError)

    def test_timestamp_tolerance(self):
        header = f"t={WEBHOOK_T},v1={WEBHOOK_HEX}"
        args = (WEBHOOK_SECRET, WEBHOOK_BODY, header)
        self.assert_rejected("301 s old", *args, now=WEBHOOK_T + 301)
        self.assert_rejected("in the future", *args, now=WEBHOOK_T - 301)
        self.assertEqual(kiln_sdk.verify_webhook(*args, now=WEBHOOK_T - 300)["id"], "ex_1")
        self.assert_rejected("old", *args)  # 2023 by the real clock
        self.assert_rejected("31 s old", *args, tolerance_s=30, now=WEBHOOK_T + 31)
        self.assertEqual(kiln_sdk.verify_webhook(*args, tolerance_s=None)["id"], "ex_1")
        for bad in (0, -5):
            with self.assertRaises(ValueError):
                kiln_sdk.verify_webhook(*args, tolerance_s=bad)
        # A stale header re-signed with a fresh t is what a replay cannot do.
        fresh = kiln_sdk.sign_webhook(WEBHOOK_SECRET, WEBHOOK_BODY)
        self.assert_rejected("no v1 signature matches", WEBHOOK_SECRET, WEBHOOK_BODY,
                             fresh.split(",")[0] + f",v1={WEBHOOK_HEX}")

    def test_malformed_headers(self):
        for header in ("v1=xyz", f"t={WEBHOOK_T},v1=xyz", f"v1={WEBHOOK_HEX}", "", None,
                       f"t=soon,v1={WEBHOOK_HEX}", f"t=+{WEBHOOK_T},v1={WEBHOOK_HEX}",
                       f"t={WEBHOOK_T},v1={WEBHOOK_HEX[:-1]}",
                       f"t={WEBHOOK_T},t={WEBHOOK_T},v1={WEBHOOK_HEX}"):
            with self.subTest(header=header):
                self.assert_rejected("Kiln-Signature", WEBHOOK_SECRET, WEBHOOK_BODY, header,
                                     now=WEBHOOK_T)

    def test_rotation_unknown_parts_and_body_checks(self):
        other = kiln_sdk.sign_webhook("whsec_old_secret", WEBHOOK_BODY, WEBHOOK_T).split(",")[1]
        for header in (f"t={WEBHOOK_T},{other},v1={WEBHOOK_HEX}",    # the second matches
                       f"v0=legacy, t={WEBHOOK_T}, v1={WEBHOOK_HEX.upper()}, x=1",
                       f"t={WEBHOOK_T},v1=xyz,v1={WEBHOOK_HEX}".encode()):
            with self.subTest(header=header):
                self.assertEqual(kiln_sdk.verify_webhook(WEBHOOK_SECRET, WEBHOOK_BODY, header,
                                                         now=WEBHOOK_T)["status"], "succeeded")
        for body, pattern in ((b"not json", "not UTF-8 JSON"), (b"\xff{}", "not UTF-8 JSON"),
                              (b"[1]", "not an object")):
            with self.subTest(body=body):
                header = kiln_sdk.sign_webhook(WEBHOOK_SECRET, body, WEBHOOK_T)
                self.assert_rejected(pattern, WEBHOOK_SECRET, body, header, now=WEBHOOK_T)
        with self.assertRaises(TypeError):  # the parsed record is not the signed bytes
            kiln_sdk.verify_webhook(WEBHOOK_SECRET, {"id": "ex_1"}, f"t=1,v1={WEBHOOK_HEX}")
        with self.assertRaises(ValueError):
            kiln_sdk.verify_webhook("", WEBHOOK_BODY, f"t=1,v1={WEBHOOK_HEX}")

    def test_round_trip_through_an_http_receiver(self):
        received = []

        # The receiver of EXAMPLES.md, "Verify a webhook".
        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    record = kiln_sdk.verify_webhook(WEBHOOK_SECRET, body,
                                                     self.headers.get("Kiln-Signature"))
                except kiln_sdk.WebhookVerificationError as e:
                    self.send_error(400, str(e))
                    return
                received.append((self.headers["Kiln-Webhook-Id"], record))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/hooks/kiln"
        body = json.dumps({"id": "ex_rt", "status": "succeeded", "stdout": "h\u00e9\n"},
                          ensure_ascii=False).encode()
        try:
            # What the broker does: POST the bytes, signed (no proxy for 127.0.0.1).
            with httpx.Client(trust_env=False) as sender:
                def deliver(signature):
                    return sender.post(url, content=body, headers={
                        "Content-Type": "application/json", "Kiln-Webhook-Id": "ex_rt",
                        "Kiln-Webhook-Attempt": "1", "Kiln-Signature": signature})

                self.assertEqual(deliver(kiln_sdk.sign_webhook(WEBHOOK_SECRET, body)).status_code,
                                 204)
                forged = deliver(kiln_sdk.sign_webhook("whsec_guess", body))
                self.assertEqual(forged.status_code, 400)
        finally:
            server.shutdown()
            server.server_close()
        self.assertEqual(received, [("ex_rt", {"id": "ex_rt", "status": "succeeded",
                                               "stdout": "h\u00e9\n"})])


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = kiln_sdk.Client(URL, TOKEN)

    @unittest.skipUnless(os.environ.get("KILN_WEBHOOK_SECRET"),
                         "the cluster gives this tenant no webhooks (KILN_WEBHOOK_SECRET unset)")
    def test_callback_url_delivers_the_signed_record(self):
        secret = os.environ["KILN_WEBHOOK_SECRET"]
        received = []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    received.append(kiln_sdk.verify_webhook(secret, body,
                                                            self.headers.get("Kiln-Signature")))
                    self.send_response(200)
                except kiln_sdk.WebhookVerificationError:
                    self.send_response(400)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/kiln"
            ex = self.client.run("print('called back')", callback_url=url)
            self.assertTrue(ex.ok, ex)
            deadline = time.time() + 30
            while not received and time.time() < deadline:
                time.sleep(0.1)
        finally:
            server.shutdown()
            server.server_close()
        self.assertEqual(len(received), 1)
        self.assertEqual(received[0]["id"], ex.id)
        self.assertEqual(received[0]["stdout"], "called back\n")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_run_prints_and_returns_a_result(self):
        ex = self.client.run("print('hello')\nresult = {'answer': 6 * 7}")
        self.assertTrue(ex.ok, ex)
        self.assertEqual((ex.status, ex.exit_code, ex.stdout), ("succeeded", 0, "hello\n"))
        self.assertEqual(ex.result, {"answer": 42})
        self.assertTrue(ex.id.startswith("ex_"))
        self.assertEqual(ex.raw["language"], "python")

    def test_failing_job_is_a_record_not_an_exception(self):
        ex = self.client.run("import sys\nsys.exit(3)")
        self.assertFalse(ex.ok)
        self.assertEqual((ex.status, ex.exit_code), ("failed", 3))
        ex = self.client.run("raise ValueError('boom')")
        self.assertEqual(ex.status, "failed")
        self.assertEqual(ex.error["code"], "EXECUTION_FAILED")
        self.assertEqual(ex.error["type"], "ValueError")
        self.assertIn("boom", ex.stderr + ex.error.get("message", ""))

    def test_streaming_callbacks(self):
        out, err, events = [], [], []
        ex = self.client.run(STREAMING_CODE, on_stdout=out.append, on_stderr=err.append,
                             on_event=lambda name, data: events.append(name))
        self.assertTrue(ex.ok, ex)
        self.assertGreater(len(out), 1, out)
        self.assertEqual("".join(out), ex.stdout)
        self.assertEqual(ex.stdout, "0\n1\n2\n")
        self.assertEqual("".join(err), ex.stderr)
        self.assertEqual(ex.stderr, "careful\n")
        self.assertEqual(events[0], "execution_start")
        self.assertEqual(events[-1], "execution_end")
        self.assertEqual(events.count("output_chunk"), len(out) + len(err))
        # Following an ended job replays its output from the start.
        replay = []
        again = self.client.wait(ex.id, on_stdout=replay.append)
        self.assertEqual(("".join(replay), again.id), (ex.stdout, ex.id))

    def test_input_env_and_stdin(self):
        ex = self.client.run(
            "import os, sys\nprint(name, os.environ['MODE'], sys.stdin.read().strip())\n"
            "result = sum(numbers)",
            input={"numbers": [1, 2, 3], "name": "kiln"}, env={"MODE": "fast"},
            stdin="from stdin\n")
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.result, 6)
        self.assertEqual(ex.stdout, "kiln fast from stdin\n")

    def test_files_in_and_collected_out(self):
        blob = bytes(range(256)) * 4
        ex = self.client.run(
            "import os\n"
            "data = open('in/blob.bin', 'rb').read()\n"
            "os.makedirs('out', exist_ok=True)\n"
            "open('out/reversed.bin', 'wb').write(data[::-1])\n"
            "open('out/note.txt', 'w').write(open('note.txt').read().upper())\n",
            files={"in/blob.bin": blob, "note.txt": "h\u00e9llo"}, collect=["out/*"])
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.files["out/reversed.bin"], blob[::-1])
        self.assertEqual(ex.files["out/note.txt"].decode("utf-8"), "H\u00c9LLO")
        self.assertFalse(ex.files_truncated)

    def test_session_keeps_state_and_is_deleted_at_exit(self):
        with self.client.session(session_id=unique("session")) as s:
            self.assertTrue(s.run("x = 41").ok)
            ex = s.run("x += 1\nprint(x)")
            self.assertEqual((ex.stdout, ex.session_id, ex.session_epoch), ("42\n", s.id, 1))
            self.assertIn(s.id, [x["id"] for x in self.client.list_sessions()])
        self.assertNotIn(s.id, [x["id"] for x in self.client.list_sessions()])
        with self.assertRaises(kiln_sdk.SessionNotFound) as ctx:
            self.client.delete_session(s.id)
        self.assertEqual((ctx.exception.code, ctx.exception.status), ("SESSION_NOT_FOUND", 404))

    def test_generated_session_id_and_conversation(self):
        conversation = unique("conv")
        with self.client.session(conversation_id=conversation) as s:
            s.run("pass")
            listed = self.client.list_sessions(conversation_id=conversation)
            self.assertEqual([x["id"] for x in listed], [s.id])
        self.assertEqual(self.client.list_sessions(conversation_id=conversation), [])

    def test_errors(self):
        with self.assertRaises(kiln_sdk.InvalidRequest) as ctx:
            self.client.run("1", "ruby")
        self.assertEqual((ctx.exception.code, ctx.exception.status), ("INVALID_REQUEST", 400))
        self.assertIn("language", ctx.exception.message)
        self.assertFalse(ctx.exception.retryable)
        with kiln_sdk.Client(URL, "not-a-token") as bad:
            with self.assertRaises(kiln_sdk.Unauthorized) as ctx:
                bad.capabilities()
        self.assertEqual(ctx.exception.code, "UNAUTHORIZED")
        with self.assertRaises(kiln_sdk.NotFound) as ctx:
            self.client.get("ex_doesnotexist0000000")
        self.assertEqual((ctx.exception.code, ctx.exception.status), ("NOT_FOUND", 404))
        with self.assertRaises(kiln_sdk.LimitExceeded):
            self.client.run("1", timeout_ms=10_000_000)

    def test_idempotency_key_reused_gives_the_same_job(self):
        key = unique("key")
        first = self.client.submit("print('once')", idempotency_key=key)
        second = self.client.submit("print('twice')", idempotency_key=key)
        self.assertEqual(first, second)
        ex = self.client.run("print('thrice')", idempotency_key=key)
        self.assertEqual((ex.id, ex.stdout), (first, "once\n"))

    def test_list_executions_follows_the_cursor(self):
        with self.client.session(session_id=unique("list")) as s:
            ids = [s.run(f"print({i})").id for i in range(3)]
        listed = list(self.client.list_executions(session_id=s.id, page_size=1))
        self.assertEqual([x["id"] for x in listed], ids[::-1])  # newest first
        self.assertTrue(all(x["session_id"] == s.id for x in listed))
        failed = list(self.client.list_executions(session_id=s.id, status=["failed", "error"]))
        self.assertEqual(failed, [])

    def test_submit_batch(self):
        results = self.client.submit_batch([{"language": "python", "code": "print('batched')"},
                                            {"language": "ruby", "code": "1"}])
        self.assertEqual(len(results), 2)
        self.assertEqual(results[1]["error"]["code"], "INVALID_REQUEST")
        ex = self.client.wait(results[0]["id"])
        self.assertEqual((ex.status, ex.stdout), ("succeeded", "batched\n"))

    def test_submit_get_cancel(self):
        job = self.client.submit("import time\ntime.sleep(30)", timeout_ms=40_000)
        self.assertIn(self.client.get(job).status, ("queued", "running"))
        self.client.cancel(job)
        ex = self.client.wait(job)
        self.assertEqual(ex.status, "cancelled")
        self.assertEqual(ex.error["code"], "CANCELLED")

    def test_capabilities_runtimes_health(self):
        caps = self.client.capabilities()
        self.assertIsInstance(caps, dict)
        self.assertIn("python", caps["runtimes"])
        self.assertTrue(caps["code_execution"])
        runtimes = self.client.runtimes()
        self.assertIn("python", [r["language"] for r in runtimes["runtimes"]])
        self.assertEqual(self.client.health()["status"], "ok")

    # --- tool callbacks (code mode) ---------------------------------------

    def test_tool_calls_are_answered_by_the_handler(self):
        calls, events = [], []

        def add(args):
            calls.append(args)
            return args["a"] + args["b"]

        ex = self.client.run(TOOL_LOOP_CODE, tools=[ADD_TOOL], tool_handlers={"add": add},
                             on_event=lambda name, data: events.append((name, data)))
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.stdout, "15\n")
        self.assertEqual(calls, [{"a": i, "b": 1} for i in range(5)])
        # Each call, then its answer, on the events stream; the user's on_event sees both.
        tool_events = [(name, data) for name, data in events if name.startswith("tool_")]
        self.assertEqual([name for name, _ in tool_events], ["tool_call", "tool_result"] * 5)
        self.assertEqual([(d["call_id"], d["name"], d["arguments"]) for n, d in tool_events
                          if n == "tool_call"],
                         [(f"c{i + 1}", "add", {"a": i, "b": 1}) for i in range(5)])
        self.assertEqual([(d["call_id"], d["ok"]) for n, d in tool_events if n == "tool_result"],
                         [(f"c{i}", True) for i in range(1, 6)])
        # Following the ended job again replays its calls: handled again or
        # not, their answers are refused (409), which is no failure.
        again = self.client.wait(ex.id, tool_handlers={"add": add})
        self.assertEqual((again.id, again.stdout), (ex.id, "15\n"))

    def test_tool_handler_errors_reach_the_sandbox_as_tool_error(self):
        def search(args):
            raise RuntimeError(f"the index is down ({args['q']})")

        ex = self.client.run(TOOL_ERROR_CODE,
                             tools=[{"name": "search"}, {"name": "lookup", "description": "x"}],
                             tool_handlers={"search": search})
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.stdout.splitlines(), ["caught ToolError: the index is down (kiln)",
                                                  "caught ToolError: no handler for tool lookup"])

    def test_tool_arguments_that_break_the_schema_are_refused_in_the_sandbox(self):
        calls, events = [], []
        code = ("for name, args in (('add', {'a': 'one', 'b': 1}), ('add', {'a': 1}),\n"
                "                   ('undeclared', {})):\n"
                "    try:\n"
                "        kiln.tool(name, args)\n"
                "    except kiln.ToolRefused:\n"
                "        print('refused', name)\n")
        ex = self.client.run(code, tools=[ADD_TOOL], tool_handlers={"add": calls.append},
                             on_event=lambda name, data: events.append(name))
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.stdout, "refused add\nrefused add\nrefused undeclared\n")
        self.assertEqual(calls, [])  # the handler was never called
        self.assertNotIn("tool_call", events)

    def test_tool_calls_answered_by_hand(self):
        code = "print(repr(kiln.tool('add', {'a': 1, 'b': 2})))\n"
        job = self.client.submit(code, tools=[ADD_TOOL])
        answers = []

        def on_event(name, data):
            if name == "tool_call":
                answers.append(self.client.submit_tool_result(job, data["call_id"], result=None))
                with self.assertRaises(kiln_sdk.ToolCallClosed):  # answered already
                    self.client.submit_tool_result(job, data["call_id"], result=3)

        ex = self.client.wait(job, on_event=on_event)
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.stdout, "None\n")  # result=None is an answer: JSON null
        self.assertEqual(answers, [{"call_id": "c1", "accepted": True}])

    def test_submit_tool_result_after_the_end_is_tool_call_closed(self):
        code = ("try:\n"
                "    kiln.tool('add', {'a': 1, 'b': 2})\n"
                "except kiln.ToolTimeout:\n"
                "    print('timed out')\n")
        job = self.client.submit(code, tools=[ADD_TOOL], tool_timeout_ms=1000)
        events = []
        ex = self.client.wait(job, on_event=lambda name, data: events.append((name, data)))
        self.assertEqual((ex.status, ex.stdout), ("succeeded", "timed out\n"))
        call_ids = [data["call_id"] for name, data in events if name == "tool_call"]
        self.assertEqual(call_ids, ["c1"])
        for answer in ({"result": 3}, {"error": "too late"}):
            with self.assertRaises(kiln_sdk.ToolCallClosed) as ctx:
                self.client.submit_tool_result(job, "c1", **answer)
            self.assertEqual((ctx.exception.code, ctx.exception.status), ("TOOL_CALL_CLOSED", 409))
        with self.assertRaises(TypeError):
            self.client.submit_tool_result(job, "c1")

    def test_tools_from_shell(self):
        def search(args):
            raise RuntimeError("the index is down")

        code = ("kiln-tool add '{\"a\": 2, \"b\": 3}'\n"
                "kiln-tool search '{\"q\": \"x\"}'; echo \"exit $?\"\n"
                "kiln-tool add '{\"a\": \"two\", \"b\": 3}'; echo \"exit $?\"\n")
        ex = self.client.run(code, "shell", tools=[ADD_TOOL, {"name": "search"}],
                             tool_handlers={"add": lambda a: a["a"] + a["b"], "search": search})
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.stdout, "5\nexit 1\nexit 2\n")
        self.assertIn("kiln-tool: ToolError: the index is down", ex.stderr)
        self.assertIn("kiln-tool: ToolRefused: ", ex.stderr)

    def test_tools_in_a_session(self):
        with self.client.session(session_id=unique("tools")) as s:
            s.run("seen = []")
            ex = s.run("seen.append(kiln.tool('add', {'a': 20, 'b': 22}))\nprint(seen)",
                       tools=[ADD_TOOL], tool_handlers={"add": lambda a: a["a"] + a["b"]})
        self.assertEqual((ex.status, ex.stdout), ("succeeded", "[42]\n"))

    def test_tool_declarations_are_checked_at_submit(self):
        with self.assertRaises(kiln_sdk.InvalidRequest) as ctx:
            self.client.run("pass", tools=[{"name": "not a name"}])
        self.assertIn("tools[0].name", ctx.exception.message)
        with self.assertRaises(kiln_sdk.LimitExceeded):
            self.client.run("pass", tools=[{"name": f"t{i}"} for i in range(33)])

    def test_usage_with_the_admin_token(self):
        tenant = self.client.capabilities()["tenant"]
        self.client.run("print('counted')")
        today = datetime.datetime.now(datetime.timezone.utc).date()
        with kiln_sdk.Client(URL, ADMIN_TOKEN) as admin:
            usage = admin.usage(tenant=tenant, from_date=today - datetime.timedelta(days=1),
                                to_date=today)
        self.assertEqual([t["tenant"] for t in usage["tenants"]], [tenant])
        days = usage["tenants"][0]["days"]
        self.assertEqual([d["date"] for d in days],
                         [str(today - datetime.timedelta(days=1)), str(today)])
        self.assertGreater(sum(d["executions"] for d in days), 0)
        with self.assertRaises(kiln_sdk.Forbidden):
            self.client.usage()


class AsyncClusterTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.client = kiln_sdk.AsyncClient(URL, TOKEN)

    async def asyncTearDown(self):
        await self.client.aclose()

    async def test_run(self):
        ex = await self.client.run("print('async')\nresult = 7", input={"unused": 1})
        self.assertEqual((ex.status, ex.stdout, ex.result), ("succeeded", "async\n", 7))
        failed = await self.client.run("import sys\nsys.exit(2)")
        self.assertEqual((failed.status, failed.exit_code), ("failed", 2))
        with self.assertRaises(kiln_sdk.InvalidRequest):
            await self.client.run("1", "ruby")

    async def test_streaming_callbacks(self):
        out, err = [], []

        async def on_stdout(text):  # coroutine callbacks are awaited
            await asyncio.sleep(0)
            out.append(text)

        ex = await self.client.run(STREAMING_CODE, on_stdout=on_stdout, on_stderr=err.append)
        self.assertTrue(ex.ok, ex)
        self.assertGreater(len(out), 1, out)
        self.assertEqual(("".join(out), "".join(err)), (ex.stdout, ex.stderr))

    async def test_session_and_list_executions(self):
        async with self.client.session(session_id=unique("async")) as s:
            await s.run("items = ['a']")
            await s.run("items.append('b')")
            ex = await s.run("print(','.join(items))")
            self.assertEqual(ex.stdout, "a,b\n")
        self.assertNotIn(s.id, [x["id"] for x in await self.client.list_sessions()])
        listed = [x["id"] async for x in self.client.list_executions(session_id=s.id, page_size=2)]
        self.assertEqual(len(listed), 3)
        self.assertEqual(listed[0], ex.id)

    async def test_tool_handlers_may_be_coroutines(self):
        active, peak = [0], [0]

        async def add(args):
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            await asyncio.sleep(0.3)
            active[0] -= 1
            return args["a"] + args["b"]

        # asyncio.gather in the sandbox: five calls in flight at once.
        code = ("import asyncio\n"
                "async def main():\n"
                "    return await asyncio.gather(*(kiln.tool_async('add', {'a': i, 'b': 1})\n"
                "                                  for i in range(5)))\n"
                "answers = asyncio.run(main())\n"
                "print(answers, sum(answers))\n"
                "print(kiln.tool('neg', {'x': 7}))\n")
        ex = await self.client.run(code, tools=[ADD_TOOL, {"name": "neg"}],
                                   tool_handlers={"add": add, "neg": lambda a: -a["x"]})
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.stdout, "[1, 2, 3, 4, 5] 15\n-7\n")
        self.assertGreater(peak[0], 1, "the handlers did not run concurrently")

    async def test_tool_error_and_closed_call(self):
        async def search(args):
            raise RuntimeError(f"the index is down ({args['q']})")

        ex = await self.client.run(TOOL_ERROR_CODE, tools=[{"name": "search"}, {"name": "lookup"}],
                                   tool_handlers={"search": search})
        self.assertEqual(ex.stdout.splitlines(), ["caught ToolError: the index is down (kiln)",
                                                  "caught ToolError: no handler for tool lookup"])
        with self.assertRaises(kiln_sdk.ToolCallClosed):
            await self.client.submit_tool_result(ex.id, "c1", result="late")


if __name__ == "__main__":
    # Without a cluster the cluster tests would fail one by one; say why once.
    missing = [n for n in ("KILN_URL", "KILN_TOKEN", "KILN_ADMIN_TOKEN") if not os.environ.get(n)]
    if missing:
        raise SystemExit(f"test_sdk.py: set {', '.join(missing)} (the cluster to test against)")
    unittest.main(verbosity=2)
