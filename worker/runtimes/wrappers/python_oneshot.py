# Kiln one-shot Python wrapper (docs/runtimes.md). Started warm, before the
# job is known, as:  python3 -I -c <this text>
# or loaded by the python zygote (python_zygote.py), which calls _kiln_main()
# in each sandbox it forks.
# fd 0: the job frame  <JSON {"input": {...}, "env": {...}, "stdin": "..."?}> "\n" <code bytes>
#       ("stdin", when given, is put on fd 0 for the code: a memfd, rewound)
# fd 3: control pipe; at exit it gets one JSON object
#       {"exit_code": n, "result": <json>?, "error": {"type","message","traceback"}?,
#        "outputs": [{"mime", "text" | "base64"}]?, "outputs_truncated": true?}
# fd 6: the tool channel, when the execution has one: a unix stream socket to
#       the worker for the `kiln` module's calls (python_tools.py); left
#       inheritable, unlike fd 3: os.system() and the like pass it on,
#       subprocess only with pass_fds=(6,).
import _io, atexit, binascii, builtins, io, json, os, sys, linecache, traceback

# kiln-include: python_tools.py

_KILN_MAX_OUTPUTS, _KILN_MAX_OUTPUT_BYTES = 16, 4 << 20  # protocol::kMaxRichOutputs, ...Bytes


class _KilnOutputs:
    """An execution's rich outputs, bounded as the worker bounds them."""

    def __init__(self):
        self.items, self.size, self.truncated = [], 0, False

    def full(self):
        return len(self.items) >= _KILN_MAX_OUTPUTS

    def add(self, mime, data):  # str for text mimes, bytes otherwise
        n = len(data.encode("utf-8", "replace")) if isinstance(data, str) else len(data)
        if self.full() or self.size + n > _KILN_MAX_OUTPUT_BYTES:
            self.truncated = True
            return
        self.size += n
        if isinstance(data, str):
            self.items.append({"mime": mime, "text": data})
        else:
            self.items.append({"mime": mime,
                               "base64": binascii.b2a_base64(data, newline=False).decode()})

    def figures(self):
        """Open matplotlib figures become image/png outputs, then are closed.
        Only when the code imported pyplot: matplotlib is never imported here."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            nums = plt.get_fignums()
        except Exception:
            return
        for n in nums:
            if self.full():  # not rendered: the bound is reached
                self.truncated = True
                break
            try:
                buf = io.BytesIO()
                plt.figure(n).savefig(buf, format="png")
                self.add("image/png", buf.getvalue())
            except Exception:
                pass
        try:
            plt.close("all")
        except Exception:
            pass

    def frame(self):
        text = ""
        if self.items:
            text += ', "outputs": ' + json.dumps(self.items, ensure_ascii=False)
        if self.truncated:
            text += ', "outputs_truncated": true'
        return text


class _KilnPyplotHook:
    """A meta path finder that only wraps the loading of matplotlib.pyplot, so
    that plt.show() hands the open figures to `sink()` (and closes them), as a
    notebook shows them, instead of the Agg backend's no-op."""

    def __init__(self, sink):
        self.sink = sink

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader, sink = spec.loader, self.sink
        load = loader.exec_module

        def exec_module(module):
            load(module)

            def show(*args, **kwargs):
                sink().figures()

            module.show = show

        loader.exec_module = exec_module
        return spec


def _kiln_set_stdin(text):
    # fd 0 itself, so child processes read it too: a memfd (a file in /tmp
    # without one) holding the text, rewound; sys.stdin reopened on it.
    data = text.encode("utf-8", "replace")
    try:
        fd = os.memfd_create("kiln-stdin", 0)
    except (AttributeError, OSError):
        fd = os.open(os.environ.get("TMPDIR") or "/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)
    sys.stdin = open(0, closefd=False)

# A process's first compile() sets the compiler up (~1 ms, most of a trivial
# job's time): do it now, while the sandbox (or the zygote) is warm.
compile("", "<warm>", "exec")
# `import kiln` and the global `kiln`: built now, shared by the zygote's
# children (each starts with fresh calls: the module resets after a fork).
_kiln_tools = sys.modules["kiln"] = _kiln_tools_module()


def _kiln_main():
    ctl = 3
    os.set_inheritable(ctl, False)  # inherited fds are inheritable: keep it from os.system & co.
    state = {"status": 0, "error": None}
    # Line-buffered as on a terminal, so print() streams without flush=True.
    sys.stdout.reconfigure(line_buffering=True)

    # Everything above ran while the sandbox was warm; this blocks until the job arrives.
    # Afterwards fd 0 is a pipe at EOF, i.e. an empty stdin for the user's code.
    data = sys.stdin.buffer.read()
    if not data:  # stdin closed without a job: the warm sandbox is being retired
        os._exit(0)
    head, _, code = data.partition(b"\n")
    job = json.loads(head)
    os.environ.update(job["env"])
    if job.get("stdin"):
        try:
            _kiln_set_stdin(job["stdin"])
        except OSError as e:  # the code finds stdin empty and is told why
            sys.stderr.write("kiln: stdin could not be set up: %s\n" % e)
    # Packages on request: the worker mounted the job's set at /packages
    # (otherwise an empty folder); it comes before the system's packages.
    try:
        if os.listdir("/packages"):
            sys.path.insert(0, "/packages")
    except OSError:
        pass
    outputs = _KilnOutputs()
    sys.meta_path.insert(0, _KilnPyplotHook(lambda: outputs))

    # The user's code runs as a fresh __main__ module (pickle, dataclasses and
    # `if __name__ == "__main__"` behave as in `python3 main.py`), importing from cwd.
    main = type(sys)("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.path.insert(0, os.getcwd())
    glb = main.__dict__
    glb["kiln"] = _kiln_tools  # an input named kiln replaces it
    glb.update(job["input"])
    text = code.decode("utf-8", "replace")
    linecache.cache["<code>"] = (len(text), None, text.splitlines(True), "<code>")

    def default(o):  # numpy arrays/scalars and sets; everything else is an error
        if hasattr(o, "tolist"):
            return o.tolist()
        if isinstance(o, (set, frozenset)):
            return list(o)
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    def finish():  # registered first, so it runs last: after threads and user atexit handlers
        frame = '{"exit_code": %d' % state["status"]
        if "result" in glb:
            try:
                frame += ', "result": ' + json.dumps(glb["result"], ensure_ascii=False,
                                                     default=default, allow_nan=False)
            except Exception as e:  # keep the exit code; say why there is no result
                state["error"] = state["error"] or {
                    "type": "ResultNotSerializable", "message": str(e), "traceback": ""}
        if state["error"]:
            frame += ', "error": ' + json.dumps(state["error"], ensure_ascii=False)
        frame += outputs.frame()
        # Flush what the code wrote, including files it left open in its
        # globals, then let go of stdout/stderr: once fds 1, 2 and 3 reach EOF
        # the worker has the whole job and need not wait for the interpreter's
        # shutdown (its late output, if any, goes to /dev/null).
        # _io._IOBase, the C base of every file object: io.IOBase's ABC
        # isinstance costs ~0.3 us per global.
        for s in [sys.stdout, sys.stderr] + [v for v in list(glb.values()) if isinstance(v, _io._IOBase)]:
            try:
                s.flush()
            except Exception:
                pass
        try:
            nul = os.open("/dev/null", os.O_WRONLY)
            os.dup2(nul, 1)
            os.dup2(nul, 2)
            os.close(nul)
        except OSError:
            pass
        data = (frame + "}").encode("utf-8", "replace")  # lone surrogates become "?"
        while data:
            data = data[os.write(ctl, data):]
        os.close(ctl)
        # The worker has the whole job and ends the sandbox now: the
        # interpreter's teardown (every module dict cleared, every object
        # freed) would only cost CPU, and in a zygote's child copy the pages
        # it touches. Nothing it does could still be seen.
        os._exit(state["status"])

    atexit.register(finish)
    try:
        exec(compile(code, "<code>", "exec", dont_inherit=True), glb)
    except SystemExit as e:
        c = e.code
        if c is None or isinstance(c, int):
            state["status"] = (c or 0) & 0xFF
        else:  # like the interpreter: print the object, exit 1
            print(c, file=sys.stderr)
            state["status"] = 1
    except BaseException as e:
        # Drop this function's frame: the traceback starts in the user's code.
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
        sys.stderr.write(tb)
        state["status"] = 1
        state["error"] = {"type": type(e).__name__, "message": str(e), "traceback": tb}
    # Now, not in finish(): pyplot's own atexit handler destroys every figure.
    outputs.figures()
    # The interpreter's exit would join the code's threads, run its atexit
    # handlers, then finish(). With neither, finish() now skips unwinding
    # SystemExit into the interpreter's finalization (~0.1 ms on a calm core).
    threading = sys.modules.get("threading")
    if getattr(atexit, "_ncallbacks", lambda: 0)() == 1 and (
            threading is None or threading.active_count() == 1):
        finish()
    sys.exit(state["status"])


if __name__ == "__main__":
    _kiln_main()
