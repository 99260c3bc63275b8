#!/usr/bin/python3
"""Tool callbacks in the sandbox (docs/runtimes.md, "Tool callbacks: the
`kiln` helpers"): the real one-shot wrappers and session drivers, with their
kiln-include parts put in as worker/runtimes/sources.cmake does, run outside
any sandbox, with fd 0 the frames, fd 3 the control pipe and fd 6 one end of
a socket pair, whose other end this test holds, playing the worker.

usage: /usr/bin/python3 tool_channel_test.py [SOURCE_DIR] [unittest options]
Standard library only. KILN_TEST_NODE picks another node (e.g. a Node 18)."""
import fcntl, json, os, re, selectors, signal, socket, sys, tempfile, time, unittest

SOURCE_DIR = (sys.argv.pop(1) if len(sys.argv) > 1 and os.path.isdir(sys.argv[1])
              else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
WRAPPERS = os.path.join(SOURCE_DIR, "worker", "runtimes", "wrappers")
PYTHON, BASH = "/usr/bin/python3", "/bin/bash"
NODE = os.environ.get("KILN_TEST_NODE", "/usr/bin/node")
WAIT = 10  # seconds, the longest any one wait may take
MAX_ID = 1 << 53


def read(name):
    with open(os.path.join(WRAPPERS, name), encoding="utf-8") as f:
        return f.read()


def program(name):
    """The wrapper as the worker embeds it: each `# kiln-include: F` or
    `// kiln-include: F` line replaced by the text of F."""
    text, n = re.subn(r"(?m)^[ \t]*(?:#|//) kiln-include: (\S+)\n", lambda m: read(m.group(1)),
                      read(name))
    assert n > 0, name
    return text


# A python one-shot sandbox as the zygote makes it: the wrapper loaded in a
# process, which forks; the child runs the job.
ZYGOTE_SHIM = """
import os, sys
w = {"__name__": "kiln_oneshot"}
exec(compile(sys.argv[1], "<string>", "exec"), w)
pid = os.fork()
if pid == 0:
    w["_kiln_main"]()
    os._exit(0)
os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) & 0xFF)
"""


def launch(kind):
    """argv for kind = (language, "oneshot" | "session" | "zygote"), as Runtime launches it."""
    lang, mode = kind
    if lang == "python":
        text = program("python_session.py" if mode == "session" else "python_oneshot.py")
        return [PYTHON, "-I", "-c", ZYGOTE_SHIM, text] if mode == "zygote" else [PYTHON, "-I", "-c", text]
    if lang == "javascript":
        return [NODE, "--experimental-vm-modules", "-e", program("javascript_%s.js" % mode)]
    return [BASH, "--noprofile", "--norc", "-c", program("shell_%s.sh" % mode), "bash"]


def job(lang, code, inputs=None):
    """Runtime::EncodeJob's frame (shell: an empty header, no inputs)."""
    if lang == "shell":
        assert not inputs
        return ("\n" + code + ".").encode()
    return json.dumps({"input": inputs or {}, "env": {}}).encode() + b"\n" + code.encode()


class Sandbox:
    """A wrapper or driver run as the worker runs it: fds 0-3 pipes, fd 6 the
    tool channel (closed when tools=False), its own process group, default
    signal dispositions. Everything it writes is collected by pump()."""

    def __init__(self, kind, tools=True, env=None):
        self.kind, self.lang = kind, kind[0]
        fds = {}
        ours = {}
        for target, (r, w) in ((0, os.pipe()), (1, os.pipe()), (2, os.pipe()), (3, os.pipe())):
            fds[target], ours[target] = (r, w) if target == 0 else (w, r)
        self.sock = None
        if tools:
            self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            fds[6] = theirs.detach()
        # Above the targets, so that no dup2 is a no-op that keeps close-on-exec.
        high = {t: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for t, fd in fds.items()}
        base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tempfile.gettempdir(),
                "TMPDIR": tempfile.gettempdir(), "LANG": "C.UTF-8"}
        base.update(env or {})
        argv = launch(kind)
        self.pid = os.posix_spawn(
            argv[0], argv, base,
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, t) for t, fd in high.items()],
            setpgroup=0, setsigmask=(),
            setsigdef=(signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGPIPE, signal.SIGHUP))
        for fd in list(fds.values()) + list(high.values()):
            os.close(fd)
        self.stdin = ours[0]
        self.sel = selectors.DefaultSelector()
        self.data = {"out": b"", "err": b"", "ctl": b"", "sock": b""}
        for name, fd in (("out", ours[1]), ("err", ours[2]), ("ctl", ours[3])):
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, name)
        if self.sock:
            self.sock.setblocking(False)
            self.sel.register(self.sock, selectors.EVENT_READ, "sock")
        self.sel.register(os.pidfd_open(self.pid), selectors.EVENT_READ, "exit")
        self.status = None
        self.open = {"out", "err", "ctl"}

    def close(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the process and whatever it left behind
        except ProcessLookupError:
            pass
        if self.status is None:
            os.waitpid(self.pid, 0)
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fileobj)
            if key.data != "sock":
                os.close(key.fd)
        if self.sock:
            self.sock.close()
        if self.stdin is not None:
            os.close(self.stdin)
        self.sel.close()

    def pump(self, until, what):
        deadline = time.monotonic() + WAIT
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for %s; so far (the ends): %r"
                                     % (what, {k: v[-2000:] for k, v in self.data.items()}))
            for key, _ in self.sel.select(left):
                if key.data == "exit":
                    self.sel.unregister(key.fd)
                    os.close(key.fd)
                    self.status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
                    continue
                chunk = key.fileobj.recv(1 << 16) if key.data == "sock" else os.read(key.fd, 1 << 16)
                self.data[key.data] += chunk
                if not chunk:
                    self.sel.unregister(key.fileobj)
                    if key.data != "sock":
                        os.close(key.fd)
                    self.open.discard(key.data)

    # The worker's side of fd 6.
    def raw_request(self):
        """The next request line, as sent (with its newline). Empty lines are
        skipped, as the worker does: python ends a line an interrupt may have
        cut short with one."""
        while True:
            self.pump(lambda: b"\n" in self.data["sock"], "a tool request")
            line, _, self.data["sock"] = self.data["sock"].partition(b"\n")
            if line:
                return line + b"\n"

    def request(self, name=None):
        line = self.raw_request()
        req = json.loads(line)
        assert set(req) == {"id", "name", "arguments"}, line
        assert type(req["id"]) is int and 0 <= req["id"] <= MAX_ID, line
        assert isinstance(req["arguments"], dict), line
        if name is not None:
            assert req["name"] == name, line
        return req

    def send(self, data):
        self.sock.settimeout(WAIT)  # what the sandbox does not read in time fails the test
        self.sock.sendall(data)
        self.sock.setblocking(False)

    def reply(self, i, result):  # exactly the worker's shape
        self.send(b'{"id":%d,"result":%s}\n' % (i, json.dumps(result, separators=(",", ":")).encode()))

    def error(self, i, type, message):
        self.send(b'{"id":%s,"error":{"type":"%s","message":%s}}\n'
                  % (b"null" if i is None else b"%d" % i, type.encode(), json.dumps(message).encode()))

    def assert_no_request(self):
        assert self.data["sock"] == b"", self.data["sock"]


def parse_control(lang, body):
    if lang == "shell":
        status, _, rest = body.partition(b"\n")
        return {"exit_code": int(status), **({"result": rest[1:].decode()} if rest else {})}
    return json.loads(body)


class OneShot(Sandbox):
    def __init__(self, kind, code, inputs=None, **kw):
        super().__init__(kind, **kw)
        os.write(self.stdin, job(self.lang, code, inputs))
        os.close(self.stdin)
        self.stdin = None

    def finish(self):
        """The control frame, once the job let go of fds 1-3 and exited."""
        self.pump(lambda: not self.open and self.status is not None, "the job's end")
        frame = parse_control(self.lang, self.data["ctl"])
        assert frame["exit_code"] == self.status, (frame, self.status)
        return frame


class Session(Sandbox):
    def run(self, code, inputs=None):
        payload = job(self.lang, code, inputs)
        os.write(self.stdin, b"%d\n%s" % (len(payload), payload))

    def frame(self):
        def complete():
            head, nl, rest = self.data["ctl"].partition(b"\n")
            return nl and len(rest) >= int(head)
        self.pump(complete, "a control frame")
        head, _, rest = self.data["ctl"].partition(b"\n")
        body, self.data["ctl"] = rest[:int(head)], rest[int(head):]
        return parse_control(self.lang, body)

    def interrupt(self):
        os.killpg(self.pid, signal.SIGINT)


def serve_add(sb, n):
    for _ in range(n):
        req = sb.request("add")
        sb.reply(req["id"], req["arguments"]["a"] + req["arguments"]["b"])


def serve_big(sb, n):
    """Answers n calls with strings of the length they ask for."""
    for _ in range(n):
        req = sb.request("big")
        sb.reply(req["id"], "x" * req["arguments"]["n"])


def serve_echo_out_of_order(test, sb, n):
    """Takes n calls (all waiting at once), then answers them in reverse order,
    after a line with an id of null and one with an id nobody waits for."""
    reqs = [sb.request("echo") for _ in range(n)]
    ids = [r["id"] for r in reqs]
    test.assertEqual(len(set(ids)), n)
    sb.error(None, "ToolRefused", "a request over 81920 bytes was dropped")
    sb.reply(max(ids) + 1000, "not yours")
    for r in reversed(reqs):
        sb.reply(r["id"], r["arguments"])


MESSAGE = 'no "answer"\nwithin \\ 5 ms / {}'  # the escapes a message may need


def serve_errors(sb, types):
    for t in types:
        req = sb.request("fail")
        assert req["arguments"] == {"type": t}, req
        sb.error(req["id"], t, MESSAGE)


ERROR_TYPES = ["ToolError", "ToolTimeout", "ToolRefused", "ToolUnavailable", "Strange"]


class Case(unittest.TestCase):
    def start(self, cls, kind, *args, **kw):
        sb = cls(kind, *args, **kw)
        self.addCleanup(sb.close)
        return sb


# ---------------------------------------------------------------- python

PY_LOOP = """
import os
total = 0
for i in range(5):
    total = kiln.tool("add", {"a": total, "b": i})
import kiln as again
result = {"total": total, "module": again is kiln, "inheritable": os.get_inheritable(6),
          "kw": kiln.tool("add", a=1, b=2)}
"""

PY_CONCURRENT = """
import asyncio, threading
got = {}
def call(k):
    got[k] = kiln.tool("echo", {"k": k})
threads = [threading.Thread(target=call, args=("t%d" % i,)) for i in range(3)]
for t in threads:
    t.start()
async def main():
    return await asyncio.gather(*(kiln.tool_async("echo", k="a%d" % i) for i in range(3)))
got["async"] = asyncio.run(main())
for t in threads:
    t.join()
result = got
"""
PY_CONCURRENT_RESULT = {"t0": {"k": "t0"}, "t1": {"k": "t1"}, "t2": {"k": "t2"},
                        "async": [{"k": "a0"}, {"k": "a1"}, {"k": "a2"}]}

PY_ERRORS = """
out = []
for t in %r:
    try:
        kiln.tool("fail", {"type": t})
    except kiln.ToolError as e:
        out.append([type(e).__name__, str(e), type(e).__module__])
result = out
kiln.tool("fail", {"type": "ToolTimeout"})
""" % (ERROR_TYPES,)

PY_REFUSED = """
import asyncio
out = []
for name, args in [("echo", {"s": "x" * 65529}), ("bad name", {}), ("echo", [1]),
                   ("echo", {"f": float("nan")}), ("echo", {"o": object()})]:
    try:
        kiln.tool(name, args)
    except kiln.ToolRefused as e:
        out.append(str(e))
try:
    asyncio.run(kiln.tool_async("echo", {"s": "x" * 70000}))
except kiln.ToolRefused as e:
    out.append(str(e))
try:
    kiln.tool("echo", {"a": 1}, b=2)
except TypeError:
    out.append("TypeError")
result = {"out": out, "max": len(kiln.tool("echo", {"s": "x" * 65528})["s"]),
          "surrogate": kiln.tool("echo", {"s": "a\\ud800b"})}
"""

PY_UNAVAILABLE = """
out = []
for i in range(2):
    try:
        kiln.tool("echo", {})
    except kiln.ToolUnavailable as e:
        out.append(str(e))
result = out
"""


class PythonTest(Case):
    def test_calls_in_a_loop(self):
        for mode in ("oneshot", "zygote"):
            with self.subTest(mode):
                sb = self.start(OneShot, ("python", mode), PY_LOOP)
                for i in range(5):
                    line = sb.raw_request()
                    req = json.loads(line)
                    self.assertEqual(line, b'{"id":%d,"name":"add","arguments":{"a":%d,"b":%d}}\n'
                                     % (req["id"], req["arguments"]["a"], i))
                    sb.reply(req["id"], req["arguments"]["a"] + i)
                serve_add(sb, 1)
                frame = sb.finish()
                self.assertEqual(frame.get("result"),
                                 {"total": 10, "module": True, "inheritable": True, "kw": 3}, sb.data)

    def test_threads_and_asyncio_answered_out_of_order(self):
        sb = self.start(OneShot, ("python", "oneshot"), PY_CONCURRENT)
        serve_echo_out_of_order(self, sb, 6)
        self.assertEqual(sb.finish().get("result"), PY_CONCURRENT_RESULT, sb.data)

    def test_each_error_type(self):
        sb = self.start(OneShot, ("python", "oneshot"), PY_ERRORS)
        serve_errors(sb, ERROR_TYPES + ["ToolTimeout"])
        frame = sb.finish()
        self.assertEqual(frame["result"], [[t if t != "Strange" else "ToolError", MESSAGE, "kiln"]
                                           for t in ERROR_TYPES])
        self.assertEqual(frame["exit_code"], 1)
        self.assertEqual(frame["error"]["type"], "ToolTimeout")
        self.assertEqual(frame["error"]["message"], MESSAGE)
        tb = frame["error"]["traceback"]
        # The traceback ends at the helper's entry point, not in its insides.
        self.assertEqual(re.findall(r'File "([^"]+)", line \d+, in (\S+)', tb),
                         [("<code>", "<module>"), ("<string>", "tool")], tb)
        self.assertIn("kiln.ToolTimeout: " + MESSAGE, tb)

    def test_an_answer_too_deep_for_json(self):
        code = ("try:\n"
                "    kiln.tool('deep', {})\n"
                "except kiln.ToolError as e:\n"
                "    result = [type(e).__name__, str(e).split(':')[0], kiln.tool('echo', n=1)]\n")
        sb = self.start(OneShot, ("python", "oneshot"), code)
        req = sb.request("deep")
        sb.send(b'{"id":%d,"result":%s%s}\n' % (req["id"], b"[" * 100000, b"]" * 100000))
        req = sb.request("echo")
        sb.reply(req["id"], req["arguments"])
        self.assertEqual(sb.finish().get("result"),
                         ["ToolError", "the answer could not be decoded", {"n": 1}], sb.data)

    def test_refused_locally_without_a_request(self):
        sb = self.start(OneShot, ("python", "oneshot"), PY_REFUSED)
        req = sb.request("echo")  # the first request is the one at the limit
        self.assertEqual(len(json.dumps(req["arguments"], separators=(",", ":"))), 65536)
        sb.reply(req["id"], req["arguments"])
        req = sb.request("echo")
        self.assertEqual(req["arguments"], {"s": "a?b"})
        sb.reply(req["id"], req["arguments"])
        result = sb.finish().get("result")
        self.assertEqual((result["max"], result["surrogate"]), (65528, {"s": "a?b"}), sb.data)
        expected = [r"arguments of 65537 bytes, above the maximum of 65536",
                    r"invalid tool name 'bad name'",
                    r"arguments must be a dict, not list",
                    r"arguments are not JSON: Out of range float values are not JSON compliant",
                    r"arguments are not JSON: Object of type object is not JSON serializable",
                    r"arguments of 70008 bytes, above the maximum of 65536",
                    r"TypeError"]
        self.assertEqual(len(result["out"]), len(expected), result)
        for message, start in zip(result["out"], expected):  # json's texts vary with the version
            self.assertTrue(message.startswith(start), (message, start))
        sb.assert_no_request()

    def test_big_results_on_a_non_blocking_channel(self):
        code = ("import fcntl, threading\n"
                "fcntl.fcntl(6, fcntl.F_SETFL, fcntl.fcntl(6, fcntl.F_GETFL) | os.O_NONBLOCK)\n"
                "got = []\n"
                "def call():\n"
                "    got.append(len(kiln.tool('big', n=1 << 20)))\n"
                "threads = [threading.Thread(target=call) for i in range(2)]\n"
                "for t in threads:\n"
                "    t.start()\n"
                "for t in threads:\n"
                "    t.join()\n"
                "result = got\n")
        sb = self.start(OneShot, ("python", "oneshot"), "import os\n" + code)
        serve_big(sb, 2)
        self.assertEqual(sb.finish().get("result"), [1 << 20] * 2, sb.data)

    def test_no_channel(self):
        sb = self.start(OneShot, ("python", "oneshot"), PY_UNAVAILABLE, tools=False)
        self.assertEqual(sb.finish().get("result"),
                         ["no tool channel (fd 6: Bad file descriptor)"] * 2, sb.data)

    def test_channel_closed(self):
        sb = self.start(OneShot, ("python", "oneshot"), PY_UNAVAILABLE)
        sb.request("echo")
        sb.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(sb.finish().get("result"), ["the tool channel closed"] * 2, sb.data)

    def test_input_named_kiln(self):
        sb = self.start(OneShot, ("python", "oneshot"),
                        "import sys\nresult = [kiln, sys.modules['kiln'].__name__]", {"kiln": 7})
        self.assertEqual(sb.finish().get("result"), [7, "kiln"], sb.data)

    def test_session(self):
        sb = self.start(Session, ("python", "session"))
        sb.run(PY_LOOP)
        serve_add(sb, 6)
        self.assertEqual(sb.frame().get("result")["total"], 10, sb.data)
        sb.run(PY_CONCURRENT)
        serve_echo_out_of_order(self, sb, 6)
        self.assertEqual(sb.frame().get("result"), PY_CONCURRENT_RESULT, sb.data)
        # An interrupted call: its late reply is dropped, the next call gets its own.
        sb.run('kiln.tool("slow", {})')
        stale = sb.request("slow")
        sb.interrupt()
        frame = sb.frame()
        self.assertEqual((frame["exit_code"], frame["error"]["type"]), (130, "KeyboardInterrupt"))
        sb.reply(stale["id"], "stale")
        sb.run('result = kiln.tool("echo", {"n": 3})')
        req = sb.request("echo")
        self.assertNotEqual(req["id"], stale["id"])
        sb.reply(req["id"], req["arguments"])
        self.assertEqual(sb.frame().get("result"), {"n": 3}, sb.data)
        sb.run("result = kiln", {"kiln": 1})
        self.assertEqual(sb.frame().get("result"), 1)
        sb.run('import kiln as k\nresult = k.tool("echo", {"n": 4})')
        req = sb.request("echo")
        sb.reply(req["id"], req["arguments"])
        self.assertEqual(sb.frame().get("result"), {"n": 4}, sb.data)

    def test_session_without_channel(self):
        sb = self.start(Session, ("python", "session"), tools=False)
        sb.run(PY_UNAVAILABLE)
        self.assertEqual(sb.frame().get("result"),
                         ["no tool channel (fd 6: Bad file descriptor)"] * 2, sb.data)


# ---------------------------------------------------------------- javascript

JS_LOOP = """
let total = 0;
for (let i = 0; i < 5; i++) total = await kiln.tool('add', {a: total, b: i});
result = total;
"""

JS_CONCURRENT = "result = await Promise.all([0, 1, 2, 3].map((k) => kiln.tool('echo', {k})));"

JS_ERRORS = """
const out = [];
for (const t of %s) {
  try {
    await kiln.tool('fail', {type: t});
  } catch (e) {
    out.push([e.name, e.message, e instanceof Error]);
  }
}
result = out;
await kiln.tool('fail', {type: 'ToolTimeout'});
""" % json.dumps(ERROR_TYPES)

JS_REFUSED = r"""
const out = [];
for (const [name, args] of [['echo', {s: 'x'.repeat(65529)}], ['bad name', {}], ['echo', [1]],
                            ['echo', null], ['echo', 5], ['echo', {b: 1n}], [7, {}]]) {
  try {
    await kiln.tool(name, args);
  } catch (e) {
    out.push(e.name + ': ' + e.message);
  }
}
result = {out, max: (await kiln.tool('echo', {s: 'x'.repeat(65528)})).s.length,
          surrogate: await kiln.tool('echo', {s: 'a\ud800b', 'k\udc00': '\\ud800'})};
"""

JS_UNAVAILABLE = """
const out = [];
for (let i = 0; i < 2; i++) {
  try {
    await kiln.tool('echo', {});
  } catch (e) {
    out.push(e.name + ': ' + e.message);
  }
}
result = out;
"""


class JavaScriptTest(Case):
    def assertNoChannel(self, result):
        # Without a channel node's own descriptors (epoll, eventfd) may take fd 6.
        self.assertEqual(len(result), 2, result)
        for r in result:
            self.assertRegex(r, r"^ToolUnavailable: no tool channel \(fd 6(: EBADF| is not a socket)\)$")

    def test_calls_in_a_loop_and_the_job_ends(self):
        # The test keeps its end of fd 6 open: the job ends all the same.
        sb = self.start(OneShot, ("javascript", "oneshot"), JS_LOOP)
        serve_add(sb, 5)
        self.assertEqual(sb.finish().get("result"), 10, sb.data)

    def test_promise_all_answered_out_of_order(self):
        sb = self.start(OneShot, ("javascript", "oneshot"), JS_CONCURRENT)
        reqs = [sb.request("echo") for _ in range(4)]
        sb.error(None, "ToolRefused", "not JSON")
        # One reply cut in two writes, the next one in the same write as its end.
        first = b'{"id":%d,"result":{"k":"%d"}}\n' % (reqs[3]["id"], 3)
        sb.send(first[:10])
        sb.send(first[10:] + b'{"id":%d,"result":{"k":"2"}}\n' % reqs[2]["id"])
        for r in reversed(reqs[:2]):
            sb.reply(r["id"], {"k": str(r["arguments"]["k"])})
        self.assertEqual(sb.finish().get("result"), [{"k": str(k)} for k in range(4)], sb.data)

    def test_each_error_type(self):
        sb = self.start(OneShot, ("javascript", "oneshot"), JS_ERRORS)
        serve_errors(sb, ERROR_TYPES + ["ToolTimeout"])
        frame = sb.finish()
        self.assertEqual(frame["result"], [[t if t != "Strange" else "ToolError", MESSAGE, True]
                                           for t in ERROR_TYPES])
        self.assertEqual(frame["exit_code"], 1)
        self.assertEqual((frame["error"]["type"], frame["error"]["message"]), ("ToolTimeout", MESSAGE))
        # The stack is the caller's: it starts in the code.
        self.assertRegex(frame["error"]["traceback"], r"^ToolTimeout: no \"answer\"\n.*\n    at <code>:")

    def test_refused_locally_without_a_request(self):
        sb = self.start(OneShot, ("javascript", "oneshot"), JS_REFUSED)
        req = sb.request("echo")
        self.assertEqual(len(json.dumps(req["arguments"], separators=(",", ":"))), 65536)
        sb.reply(req["id"], req["arguments"])
        req = sb.request("echo")
        self.assertEqual(req["arguments"], {"s": "a\ufffdb", "k\ufffd": "\\ud800"})
        sb.reply(req["id"], req["arguments"])
        frame = sb.finish()
        self.assertEqual(frame.get("result"), {
            "out": ["ToolRefused: arguments of 65537 bytes, above the maximum of 65536",
                    'ToolRefused: invalid tool name "bad name"',
                    "ToolRefused: arguments must be an object",
                    "ToolRefused: arguments must be an object",
                    "ToolRefused: arguments must be an object",
                    "ToolRefused: arguments are not JSON: Do not know how to serialize a BigInt",
                    "ToolRefused: invalid tool name number"],
            "max": 65528, "surrogate": {"s": "a\ufffdb", "k\ufffd": "\\ud800"}}, sb.data)
        sb.assert_no_request()

    def test_big_result(self):
        sb = self.start(OneShot, ("javascript", "oneshot"),
                        "result = (await kiln.tool('big', {n: 1 << 20})).length;")
        serve_big(sb, 1)
        self.assertEqual(sb.finish().get("result"), 1 << 20, sb.data)

    def test_no_channel(self):
        sb = self.start(OneShot, ("javascript", "oneshot"), JS_UNAVAILABLE, tools=False)
        self.assertNoChannel(sb.finish().get("result"))

    def test_channel_closed(self):
        sb = self.start(OneShot, ("javascript", "oneshot"), JS_UNAVAILABLE)
        sb.request("echo")
        sb.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(sb.finish().get("result"),
                         ["ToolUnavailable: the tool channel closed"] * 2, sb.data)

    def test_a_child_calls_while_node_waits(self):
        # Between its calls node does not read fd 6 (which it made
        # non-blocking), so a child's reply reaches the child. Node marks the
        # descriptors it inherits close-on-exec: the child gets fd 6 through stdio.
        code = r"""
const {spawn} = require('child_process');
const first = await kiln.tool('echo', {n: 1});
const child = await new Promise((resolve, reject) => {
  const p = spawn('/bin/bash', ['-c', process.env.KILN_SHELL_TOOLS + "\nkiln-tool echo '{\"n\": 2}'"],
                  {stdio: ['ignore', 'pipe', 'inherit', 'ignore', 'ignore', 'ignore', 6]});
  let out = '';
  p.stdout.on('data', (d) => { out += d; });
  p.on('close', (status) => (status === 0 ? resolve(out) : reject(new Error('status ' + status))));
});
result = [first, child, await kiln.tool('echo', {n: 3})];
"""
        sb = self.start(OneShot, ("javascript", "oneshot"), code, env={"KILN_SHELL_TOOLS": read("shell_tools.sh")})
        ids = []
        for n in (1, 2, 3):
            req = sb.request("echo")
            self.assertEqual(req["arguments"], {"n": n})
            ids.append(req["id"])
            sb.reply(req["id"], req["arguments"])
        self.assertEqual(len(set(ids)), 3)
        self.assertEqual(sb.finish().get("result"), [{"n": 1}, '{"n":2}\n', {"n": 3}], sb.data)

    def test_input_named_kiln(self):
        sb = self.start(OneShot, ("javascript", "oneshot"), "result = kiln", {"kiln": 7})
        self.assertEqual(sb.finish().get("result"), 7, sb.data)

    def test_session(self):
        sb = self.start(Session, ("javascript", "session"))
        sb.run(JS_LOOP)
        serve_add(sb, 5)
        self.assertEqual(sb.frame().get("result"), 10, sb.data)
        sb.run(JS_CONCURRENT)
        serve_echo_out_of_order(self, sb, 4)
        self.assertEqual(sb.frame().get("result"), [{"k": k} for k in range(4)], sb.data)
        # The call after the script's synchronous part: a SIGINT during that
        # part can be lost (vm's breakOnSigint takes it, and the script ends).
        sb.run("await new Promise((r) => setTimeout(r, 0)); await kiln.tool('slow', {});")
        stale = sb.request("slow")
        sb.interrupt()
        self.assertEqual(sb.frame()["exit_code"], 130)
        sb.reply(stale["id"], "stale")
        sb.run("result = await kiln.tool('echo', {n: 3});")
        req = sb.request("echo")
        self.assertNotEqual(req["id"], stale["id"])
        sb.reply(req["id"], req["arguments"])
        self.assertEqual(sb.frame().get("result"), {"n": 3}, sb.data)

    def test_session_without_channel(self):
        sb = self.start(Session, ("javascript", "session"), tools=False)
        sb.run(JS_UNAVAILABLE)
        self.assertNoChannel(sb.frame().get("result"))


# ---------------------------------------------------------------- shell

SH_LOOP = """
t=0
for i in 0 1 2 3 4; do t=$(kiln-tool add "{\\"a\\": $t, \\"b\\": $i}") || exit 9; done
kiln-tool echo '{
  "x": [1, 2]
}'
bash -c 'kiln-tool echo "{\\"child\\": true}"'
result=$t
"""

SH_ERRORS = """
for t in %s; do kiln-tool fail "{\\"type\\":\\"$t\\"}"; echo "$t=$?"; done
""" % " ".join(ERROR_TYPES)

SH_REFUSED = """
kiln-tool echo "{\\"s\\": \\"$(printf '%65528s' '')\\"}" >/dev/null; echo "big=$?"
kiln-tool 'bad name' '{}'; echo "name=$?"
kiln-tool; echo "usage=$?"
kiln-tool echo "{\\"s\\":\\"$(printf '%65528s' '')\\"}" | wc -c
"""


class ShellTest(Case):
    def test_calls_in_a_loop_from_subshells_and_children(self):
        sb = self.start(OneShot, ("shell", "oneshot"), SH_LOOP)
        ids = []
        for i in range(5):
            req = sb.request("add")
            self.assertEqual(req["arguments"]["b"], i)
            ids.append(req["id"])
            sb.reply(req["id"], req["arguments"]["a"] + req["arguments"]["b"])
        line = sb.raw_request()
        self.assertEqual(json.loads(line)["arguments"], {"x": [1, 2]})
        self.assertIn(b'"arguments":{\t  "x": [1, 2]\t}}\n', line)  # one line, same JSON
        ids.append(json.loads(line)["id"])
        sb.reply(ids[-1], {"x": [1, 2]})
        req = sb.request("echo")
        ids.append(req["id"])
        sb.reply(req["id"], req["arguments"])
        frame = sb.finish()
        self.assertEqual((frame["exit_code"], frame.get("result")), (0, "10"), sb.data)
        self.assertEqual(sb.data["out"], b'{"x":[1,2]}\n{"child":true}\n')
        self.assertEqual(len(set(ids)), 7)

    def test_each_error_type_and_exit_codes(self):
        sb = self.start(OneShot, ("shell", "oneshot"), SH_ERRORS)
        serve_errors(sb, ERROR_TYPES)
        self.assertEqual(sb.finish()["exit_code"], 0)
        self.assertEqual(sb.data["out"].decode(),
                         "ToolError=1\nToolTimeout=124\nToolRefused=2\nToolUnavailable=3\nStrange=1\n")
        self.assertEqual(sb.data["err"].decode(), "".join(
            "kiln-tool: %s: %s\n" % (t if t != "Strange" else "ToolError", MESSAGE)
            for t in ERROR_TYPES))

    def test_other_ids_are_skipped_and_a_null_id_answers(self):
        code = ("set -eux\nkiln-tool echo '{\"a\":1}'\n"
                "kiln-tool echo '{bad' || echo \"rc=$?\"\n")
        sb = self.start(OneShot, ("shell", "oneshot"), code)
        req = sb.request("echo")
        sb.reply(req["id"] + 1, "another call's")
        sb.reply(req["id"], {"a": 1})
        line = sb.raw_request()
        self.assertTrue(line.endswith(b'"arguments":{bad}\n'), line)
        sb.error(None, "ToolRefused", "tool request: parse error")
        self.assertEqual(sb.finish()["exit_code"], 0, sb.data)
        self.assertEqual(sb.data["out"], b'{"a":1}\nrc=2\n')
        err = sb.data["err"].decode()
        self.assertIn("kiln-tool: ToolRefused: tool request: parse error\n", err)
        self.assertNotIn("+ local", err)  # xtrace stays outside the helper

    def test_refused_locally_without_a_request(self):
        sb = self.start(OneShot, ("shell", "oneshot"), SH_REFUSED)
        req = sb.request("echo")
        self.assertEqual(len(json.dumps(req["arguments"], separators=(",", ":"))), 65536)
        sb.reply(req["id"], req["arguments"])
        sb.finish()
        self.assertEqual(sb.data["out"].decode().split(), ["big=2", "name=2", "usage=2", "65537"])
        self.assertEqual(sb.data["err"].decode(),
                         "kiln-tool: ToolRefused: arguments of 65537 bytes, above the maximum of 65536\n"
                         'kiln-tool: ToolRefused: invalid tool name "bad name"\n'
                         "usage: kiln-tool NAME [JSON-ARGUMENTS]\n")
        sb.assert_no_request()

    def test_big_result(self):
        sb = self.start(OneShot, ("shell", "oneshot"), "kiln-tool big '{\"n\": 100000}' | wc -c")
        serve_big(sb, 1)
        sb.finish()
        self.assertEqual(sb.data["out"], b"100003\n")  # the quotes and a newline

    def test_no_channel(self):
        sb = self.start(OneShot, ("shell", "oneshot"), "kiln-tool echo '{}'; echo $?", tools=False)
        sb.finish()
        self.assertEqual(sb.data["out"], b"3\n")
        self.assertEqual(sb.data["err"],
                         b"kiln-tool: ToolUnavailable: no tool channel (fd 6 cannot be written)\n")

    def test_channel_closed(self):
        sb = self.start(OneShot, ("shell", "oneshot"), "kiln-tool echo '{}'; echo $?")
        sb.request("echo")
        sb.sock.shutdown(socket.SHUT_WR)
        sb.finish()
        self.assertEqual(sb.data["out"], b"3\n")
        self.assertEqual(sb.data["err"], b"kiln-tool: ToolUnavailable: the tool channel closed\n")

    def test_session(self):
        sb = self.start(Session, ("shell", "session"))
        sb.run("result=$(kiln-tool add '{\"a\": 1, \"b\": 2}')")
        serve_add(sb, 1)
        self.assertEqual(sb.frame().get("result"), "3", sb.data)
        # An interrupted call returns 130 (the driver's trap cannot abandon
        # the code from inside a function: it goes on); the next call skips
        # the late reply.
        sb.run("kiln-tool slow '{}'; echo \"rc=$?\"")
        stale = sb.request("slow")
        sb.interrupt()
        self.assertEqual(sb.frame()["exit_code"], 0)
        self.assertEqual(sb.data["out"], b"rc=130\n")
        sb.reply(stale["id"], "stale")
        sb.run("kiln-tool echo '{\"n\": 3}'")
        req = sb.request("echo")
        self.assertNotEqual(req["id"], stale["id"])
        sb.reply(req["id"], {"n": 3})
        self.assertEqual(sb.frame()["exit_code"], 0)
        self.assertEqual(sb.data["out"], b'rc=130\n{"n":3}\n')

    def test_session_without_channel(self):
        sb = self.start(Session, ("shell", "session"), tools=False)
        sb.run("kiln-tool echo '{}'")
        self.assertEqual(sb.frame()["exit_code"], 3)


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="kiln_tool_channel_test_")
    os.chdir(tmp)  # the wrappers' cwd (they put it on sys.path)
    try:
        unittest.main(verbosity=2)
    finally:
        os.chdir("/")
        os.rmdir(tmp)
