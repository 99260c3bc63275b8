"""End-to-end test of the installed kiln_sdk package against a real cluster.

    KILN_URL=http://127.0.0.1:8080 KILN_TOKEN=<tenant token> KILN_ADMIN_TOKEN=<admin token> \
        <venv>/bin/python tests/sdk/python/test_sdk.py

tests/sdk/python/run.sh installs the package into a fresh venv first; this
file imports only the installed package, never cli/sdk/python. The retry,
stream-resume, SSE parser and webhook tests need no cluster: they talk to a
scripted http.server on 127.0.0.1, or to nothing. Every cluster test uses its own session ids, so
runs do not collide. Exits non-zero on any failure.
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


if __name__ == "__main__":
    # Without a cluster the cluster tests would fail one by one; say why once.
    missing = [n for n in ("KILN_URL", "KILN_TOKEN", "KILN_ADMIN_TOKEN") if not os.environ.get(n)]
    if missing:
        raise SystemExit(f"test_sdk.py: set {', '.join(missing)} (the cluster to test against)")
    unittest.main(verbosity=2)
