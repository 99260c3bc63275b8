# Kiln one-shot Python wrapper (docs/runtimes.md). Started warm, before the
# job is known, as:  python3 -I -c <this text>
# or loaded by the python zygote (python_zygote.py), which calls _kiln_main()
# in each sandbox it forks.
# fd 0: the job frame  <JSON {"input": {...}, "env": {...}}> "\n" <code bytes>
# fd 3: control pipe; at exit it gets one JSON object
#       {"exit_code": n, "result": <json>?, "error": {"type","message","traceback"}?}
import atexit, builtins, io, json, os, sys, linecache, traceback

# A process's first compile() sets the compiler up (~1 ms, most of a trivial
# job's time): do it now, while the sandbox (or the zygote) is warm.
compile("", "<warm>", "exec")


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

    # The user's code runs as a fresh __main__ module (pickle, dataclasses and
    # `if __name__ == "__main__"` behave as in `python3 main.py`), importing from cwd.
    main = type(sys)("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.path.insert(0, os.getcwd())
    glb = main.__dict__
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
        # Flush what the code wrote, including files it left open in its
        # globals, then let go of stdout/stderr: once fds 1, 2 and 3 reach EOF
        # the worker has the whole job and need not wait for the interpreter's
        # shutdown (its late output, if any, goes to /dev/null).
        for s in [sys.stdout, sys.stderr] + [v for v in list(glb.values()) if isinstance(v, io.IOBase)]:
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
    sys.exit(state["status"])


if __name__ == "__main__":
    _kiln_main()
