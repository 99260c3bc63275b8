# Kiln Python session driver (docs/runtimes.md, "Session drivers"). Started as
#   python3 -I -c <this text>
# and kept alive: one process runs every execution of a session, in one
# persistent __main__ module.
# fd 0: execution frames, one after another:  <N> "\n" <N bytes>, the bytes being
#       <JSON {"input": {...}, "env": {...}}> "\n" <code bytes>. EOF: exit 0.
# fd 3: one control frame per execution, written once its output is flushed:
#       <N> "\n" <N bytes of {"exit_code": n, "result": <json>?, "error": {...}?}>
import builtins, fcntl, io, json, linecache, os, signal, sys, traceback


def _kiln_session():
    def high(fd):  # a close-on-exec copy above the fds user code tends to use
        for lo in (64, 10):
            try:
                return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lo)
            except OSError:
                pass
        return os.dup(fd)  # also close-on-exec

    def fail(message):  # the worker broke the framing: the session cannot go on
        os.write(2, b"kiln session driver: " + message.encode() + b"\n")
        os._exit(2)

    # The frames and the control pipe move to private fds; user code gets an
    # empty stdin (/dev/null) and no fd 3.
    src = io.open(high(0), "rb", buffering=1 << 16)
    ctl = high(3)
    os.close(3)

    def empty_stdin():
        try:
            nul = os.open("/dev/null", os.O_RDONLY)
        except OSError:  # no /dev/null: a pipe at EOF does as well
            nul, w = os.pipe()
            os.close(w)
        if nul != 0:
            os.dup2(nul, 0)
            os.close(nul)

    empty_stdin()

    main = type(sys)("__main__")  # pickle & co. see the code's module as __main__
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.path.insert(0, os.getcwd())
    glb = main.__dict__

    # SIGINT (the worker's timeout, sent to the whole process group) raises
    # KeyboardInterrupt only while an execution runs, and only once: when the
    # handler fires outside the code (idle, or in the instant it ends) nothing
    # happens, and the driver's own code never sees a second one.
    running = [False]

    def on_sigint(signum, frame):
        if running[0]:
            running[0] = False
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    # Line-buffered as on a terminal, so print() streams without flush=True.
    sys.stdout.reconfigure(line_buffering=True)

    def default(o):  # numpy arrays/scalars and sets; everything else is an error
        if hasattr(o, "tolist"):
            return o.tolist()
        if isinstance(o, (set, frozenset)):
            return list(o)
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    def describe(e, tb):
        # Drop on_sigint's frame from the end of a KeyboardInterrupt's traceback.
        node = tb
        while node is not None and node.tb_next is not None:
            if node.tb_next.tb_next is None and node.tb_next.tb_frame.f_code is on_sigint.__code__:
                node.tb_next = None
            node = node.tb_next
        text = "".join(traceback.format_exception(type(e), e, tb))
        try:
            sys.stderr.write(text)
        except Exception:
            pass
        return {"type": type(e).__name__, "message": str(e), "traceback": text}

    def run(code, name):
        status, error = 0, None
        try:
            running[0] = True
            exec(compile(code, name, "exec", dont_inherit=True), glb)
        except SystemExit as e:  # the session survives; the code's exit code is reported
            c = e.code
            if c is None or isinstance(c, int):
                status = (c or 0) & 0xFF
            else:  # like the interpreter: print the object, exit code 1
                try:
                    print(c, file=sys.stderr)
                except Exception:
                    pass
                status = 1
        except BaseException as e:
            # Drop this function's frame: the traceback starts in the user's code.
            status = 130 if isinstance(e, KeyboardInterrupt) else 1
            error = describe(e, e.__traceback__.tb_next)
        finally:
            running[0] = False
        return status, error

    def flush_all():
        for s in [sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__] + [
                v for v in list(glb.values()) if isinstance(v, io.IOBase)]:
            try:
                s.flush()
            except Exception:
                pass

    count, sources, kept = 0, [], 0
    while True:
        line = src.readline(24)
        if not line:  # stdin closed: the session is over
            flush_all()
            os._exit(0)
        if not line.endswith(b"\n") or not line[:-1].isdigit():
            fail("malformed frame length %r" % line[:24])
        data = src.read(int(line))
        if len(data) != int(line):
            fail("malformed frame (truncated)")
        head, _, code = data.partition(b"\n")
        try:
            job = json.loads(head)
            env, inp = dict(job["env"]), dict(job["input"])
        except Exception:
            fail("malformed frame header")

        # One file name per execution: a traceback through a function defined
        # by an earlier execution shows that execution's lines. The newest
        # sources are kept, up to 8 MiB (older frames then show no source line).
        count += 1
        name = "<code-%d>" % count
        text = code.decode("utf-8", "replace")
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
        sources.append((name, len(text)))
        kept += len(text)
        while kept > (8 << 20) and len(sources) > 1:
            old, size = sources.pop(0)
            linecache.cache.pop(old, None)
            kept -= size
        os.environ.update(env)
        glb.pop("result", None)
        glb.update(inp)
        try:
            status, error = run(code, name)
        except KeyboardInterrupt:  # the interrupt landed as run() was unwinding
            status, error = 130, {"type": "KeyboardInterrupt", "message": "", "traceback": ""}
        signal.signal(signal.SIGINT, on_sigint)  # the code may have replaced it
        if sys.stdin is None or sys.stdin.closed:  # exit() and quit() close it
            try:
                os.fstat(0)
            except OSError:
                empty_stdin()
            sys.stdin = open(0, closefd=False)

        frame = '{"exit_code": %d' % status
        if "result" in glb:
            try:
                frame += ', "result": ' + json.dumps(glb["result"], ensure_ascii=False,
                                                     default=default, allow_nan=False)
            except Exception as e:  # keep the exit code; say why there is no result
                error = error or {"type": "ResultNotSerializable", "message": str(e),
                                  "traceback": ""}
        if error:
            frame += ', "error": ' + json.dumps(error, ensure_ascii=False)
        body = (frame + "}").encode("utf-8", "replace")  # lone surrogates become "?"
        # Everything the code printed is in the pipes before its frame is.
        flush_all()
        out = b"%d\n%s" % (len(body), body)
        try:
            while out:
                out = out[os.write(ctl, out):]
        except OSError:  # the worker is gone
            os._exit(1)


_kiln_session()
