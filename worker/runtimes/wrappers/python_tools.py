# Kiln's python wrappers, tool callbacks (docs/runtimes.md, "Tool callbacks:
# the `kiln` helpers"): embedded at configure time (worker/runtimes/sources.cmake)
# into python_oneshot.py and python_session.py where they say
# `# kiln-include: python_tools.py`. Defines _kiln_tools_module(), which builds
# the module `kiln`. Its calls travel over fd 6, a SOCK_STREAM unix socket to
# the worker: one JSON line per request and per reply, the replies in any
# order (docs/api.md, "Tool callbacks"). The module is built while the
# sandbox (or the zygote) is warm; select and threading, which only calls
# need, are imported by the first call.
import _thread, json, os, re, stat, sys


def _kiln_tools_module():
    kiln = type(sys)("kiln")
    kiln.__doc__ = "Calls to the tools the execution declared (docs/runtimes.md, \"Tool callbacks\")."

    class ToolError(Exception):
        """A tool call failed. Raised as such when the client answered with an error."""

    class ToolTimeout(ToolError):
        """No answer within the execution's tool_timeout_ms."""

    class ToolRefused(ToolError):
        """Refused: an undeclared tool, arguments that are not allowed or too large, too many calls."""

    class ToolUnavailable(ToolError):
        """The execution has no tool channel (fd 6), or the worker is going away."""

    errors = {}
    for cls in (ToolError, ToolTimeout, ToolRefused, ToolUnavailable):
        cls.__module__, cls.__qualname__ = "kiln", cls.__name__  # tracebacks say kiln.ToolTimeout
        errors[cls.__name__] = cls
        setattr(kiln, cls.__name__, cls)
    valid_name = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}").fullmatch
    FD, MAX_ARGUMENT_BYTES = 6, 65536

    def request(name, arguments, kwargs):
        """The request line after its id: what the worker would refuse for its
        form is refused here, so every line sent is one it can read."""
        if arguments is None:
            arguments = kwargs
        elif kwargs:
            raise TypeError("kiln.tool() takes arguments or keyword arguments, not both")
        if not isinstance(name, str) or not valid_name(name):
            raise ToolRefused("invalid tool name %r" % (name,))
        if not isinstance(arguments, dict):
            raise ToolRefused("arguments must be a dict, not %s" % type(arguments).__name__)
        try:
            text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ToolRefused("arguments are not JSON: %s" % e) from None
        data = text.encode("utf-8", "replace")  # lone surrogates become "?", as in the frames
        if len(data) > MAX_ARGUMENT_BYTES:
            raise ToolRefused("arguments of %d bytes, above the maximum of %d"
                              % (len(data), MAX_ARGUMENT_BYTES))
        return b'"name":"%s","arguments":%s}\n' % (name.encode(), data)

    def failure(reply):
        e = reply["error"] if isinstance(reply.get("error"), dict) else {}
        t = e.get("type")
        return errors.get(t, ToolError) if isinstance(t, str) else ToolError, str(e.get("message"))

    class Channel:
        """This process's calls on fd 6. One thread at a time reads: a calling
        thread that finds nobody reading, or the pump (a daemon thread) while
        tool_async futures wait; the others wait on the Condition. The reader
        hands each reply to its call: a thread's through `replies`, a future's
        in its loop. A reply to no waiting call (an id of null, a call given up
        by an interrupt, another process's) is dropped."""

        def __init__(self):
            import select, threading
            self.select, self.threading = select, threading
            self.cv = threading.Condition(threading.Lock())
            self.send_lock = threading.Lock()
            self.poll = select.poll()
            self.poll.register(FD, select.POLLIN)
            # Ids unique across the processes that share fd 6 (forks, children):
            # the pid above 2^31 calls, all within 2^53.
            self.base, self.count = os.getpid() << 31, 0
            self.waiting = {}  # id -> None (a thread's call) or (loop, future)
            self.replies = {}  # id -> reply, for the threads
            self.reading = self.pump = self.torn = False
            self.buf = b""
            self.broken = None  # why fd 6 is unusable for good (EOF, a read error)

        def enter(self, waiter):  # with self.cv held
            if self.broken:
                raise ToolUnavailable(self.broken)
            self.count += 1
            i = self.base + self.count
            self.waiting[i] = waiter
            return i

        def send(self, line):
            with self.send_lock:
                # A line that may have been cut short (an interrupt during the
                # write) is ended first: the worker refuses it instead of reading
                # it into this one (or skips the empty line, if it was whole).
                view = memoryview(b"\n" + line if self.torn else line)
                self.torn = True
                try:
                    while view:
                        try:
                            view = view[os.write(FD, view):]
                        except BlockingIOError:  # something (node) made fd 6 non-blocking
                            self.select.select([], [FD], [])
                except OSError as e:
                    raise ToolUnavailable("the tool channel failed: %s" % e.strerror) from None
                self.torn = False

        def receive(self):  # without the lock: blocks until fd 6 has data
            while True:
                self.poll.poll()
                try:
                    return os.read(FD, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError as e:
                    return e

        def read_until(self, done):  # with self.cv held
            while not done():
                if self.reading:
                    self.cv.wait()
                    continue
                self.reading = True
                self.cv.release()
                try:
                    data = self.receive()
                finally:
                    self.cv.acquire()
                    self.reading = False
                    self.cv.notify_all()  # their replies, or the reader's role to take
                self.dispatch(data)

        def dispatch(self, data):  # with self.cv held
            if not isinstance(data, bytes) or not data:
                self.broken = ("the tool channel closed" if not data else
                               "reading the tool channel failed: %s" % data.strerror)
                for i, w in list(self.waiting.items()):
                    if w is not None:
                        del self.waiting[i]
                        self.settle(w, {"error": {"type": "ToolUnavailable", "message": self.broken}})
                return
            lines = (self.buf + data).split(b"\n")
            self.buf = lines.pop()
            for line in lines:
                try:
                    reply = json.loads(line)
                except (ValueError, RecursionError) as e:
                    # Too deep for json, say: the call fails rather than wait forever.
                    m = re.match(rb'\{"id":(\d+),', line)
                    if not m:
                        continue
                    reply = {"id": int(m.group(1)), "error": {
                        "type": "ToolError", "message": "the answer could not be decoded: %s" % e}}
                i = reply.get("id") if isinstance(reply, dict) else None
                if type(i) is not int or i not in self.waiting:
                    continue
                if self.waiting[i] is None:
                    self.replies[i] = reply
                else:
                    self.settle(self.waiting.pop(i), reply)

        def settle(self, waiter, reply):
            loop, fut = waiter
            try:
                loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(reply))
            except RuntimeError:  # its loop is closed: nobody waits
                pass

        def call(self, rest):
            with self.cv:
                i = self.enter(None)
            try:
                self.send(b'{"id":%d,%s' % (i, rest))
                with self.cv:
                    self.read_until(lambda: i in self.replies or self.broken)
                    if i in self.replies:
                        return self.replies.pop(i)
                    raise ToolUnavailable(self.broken)
            finally:  # answered, failed or interrupted: a late reply is dropped
                with self.cv:
                    self.waiting.pop(i, None)
                    self.replies.pop(i, None)

        # tool_async: the futures' replies are read by one daemon thread, the
        # pump, while any wait (however many: one thread, in a sandbox with a
        # small pids limit), and handed to their loops. Reading in the loop
        # itself (add_reader) would stall whenever a thread of the same
        # process held the reader's role, or the loop blocked in a kiln.tool().
        def call_async(self, rest, loop):
            fut = loop.create_future()
            with self.cv:
                i = self.enter((loop, fut))
                try:
                    if not self.pump:
                        self.threading.Thread(target=self.run_pump, name="kiln-tools",
                                              daemon=True).start()
                        self.pump = True
                except BaseException:
                    del self.waiting[i]
                    raise

            def forget(f):  # cancelled: its reply is dropped
                with self.cv:
                    self.waiting.pop(i, None)

            fut.add_done_callback(forget)
            try:
                self.send(b'{"id":%d,%s' % (i, rest))
            except BaseException:
                fut.cancel()
                raise
            return fut

        def run_pump(self):
            with self.cv:
                try:
                    self.read_until(lambda: not any(self.waiting.values()))
                finally:
                    self.pump = False

    current, making = None, _thread.allocate_lock()

    def channel():
        """This process's Channel (made by its first call), or ToolUnavailable."""
        nonlocal current
        try:
            if not stat.S_ISSOCK(os.fstat(FD).st_mode):
                raise ToolUnavailable("no tool channel (fd 6 is not a socket)")
        except OSError as e:
            raise ToolUnavailable("no tool channel (fd 6: %s)" % e.strerror) from None
        with making:
            if current is None:
                current = Channel()
            return current

    def forked():  # a forked child starts afresh: its parent's calls, reader and locks are not its own
        nonlocal current, making
        current, making = None, _thread.allocate_lock()

    os.register_at_fork(after_in_child=forked)

    def tool(name, arguments=None, /, **kwargs):
        """Calls the tool `name` with `arguments` (a dict) or keyword arguments
        and returns its result. Raises ToolError or a subclass. Thread-safe."""
        try:
            rest = request(name, arguments, kwargs)
            reply = channel().call(rest)
        except ToolError as e:  # raised from here: the traceback ends at the caller's line
            raise e.with_traceback(None)
        if "error" in reply:
            cls, message = failure(reply)
            raise cls(message)
        return reply.get("result")

    async def tool_async(name, arguments=None, /, **kwargs):
        """kiln.tool for asyncio: several calls may wait at once (asyncio.gather)."""
        import asyncio
        try:
            rest = request(name, arguments, kwargs)
            reply = await channel().call_async(rest, asyncio.get_running_loop())
        except ToolError as e:
            raise e.with_traceback(None)
        if "error" in reply:
            cls, message = failure(reply)
            raise cls(message)
        return reply.get("result")

    for f in (tool, tool_async):
        f.__module__, f.__qualname__ = "kiln", f.__name__
        setattr(kiln, f.__name__, f)
    return kiln
