# Kiln Python session driver (docs/runtimes.md, "Session drivers"). Started as
#   python3 -I -c <this text>
# and kept alive: one process runs every execution of a session, in one
# persistent __main__ module.
# fd 0: execution frames, one after another:  <N> "\n" <N bytes>, the bytes being
#       <JSON {"input": {...}, "env": {...}, "stdin": "..."?}> "\n" <code bytes>. EOF: exit 0.
#       ("stdin", when given, is the execution's fd 0: a memfd, rewound; /dev/null after)
# fd 3: one control frame per execution, written once its output is flushed:
#       <N> "\n" <N bytes of {"exit_code": n, "result": <json>?, "error": {...}?,
#                              "outputs": [{"mime", "text" | "base64"}]?, "outputs_truncated": true?}>
# fd 6: the tool channel, when the session has one: a unix stream socket to
#       the worker for the `kiln` module's calls (python_tools.py); left
#       inheritable, unlike fds 0 and 3: os.system() and the like pass it on,
#       subprocess only with pass_fds=(6,).
# A final expression statement is echoed as a notebook does (docs/runtimes.md).
import _io, _signal, ast, binascii, builtins, fcntl, importlib, io, json, linecache, os, signal, sys, traceback

# kiln-include: python_tools.py

_KILN_MAX_OUTPUTS, _KILN_MAX_OUTPUT_BYTES = 16, 4 << 20  # protocol::kMaxRichOutputs, ...Bytes
_KILN_MAX_ECHO_RESULT = 1 << 20  # an echoed value bigger than this as JSON is no `result`


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

    def figure(self, fig):
        if self.full():
            self.truncated = True
            return
        try:
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            self.add("image/png", buf.getvalue())
        except Exception:
            pass

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
                self.figure(plt.figure(n))
            except Exception:
                pass
        try:
            plt.close("all")
        except Exception:
            pass

    def echo(self, value):
        """The notebook display of a final expression's value: text/plain (its
        repr), image/png for a matplotlib Figure or _repr_png_, text/html for
        _repr_html_."""
        try:
            self.add("text/plain", repr(value))
        except Exception:
            pass
        mpl_figure = sys.modules.get("matplotlib.figure")
        if mpl_figure is not None and isinstance(value, mpl_figure.Figure):
            self.figure(value)
            plt = sys.modules.get("matplotlib.pyplot")
            try:
                if plt is not None:
                    plt.close(value)  # not again with the open figures
            except Exception:
                pass
            return
        for method, mime, kind in (("_repr_png_", "image/png", bytes),
                                   ("_repr_html_", "text/html", str)):
            try:
                data = getattr(value, method)()
                if isinstance(data, kind):
                    self.add(mime, data)
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
    # Bound once: the code (or an input named kiln) may rebind the name;
    # `import kiln` still gives the module.
    sys.modules["kiln"] = glb["kiln"] = _kiln_tools_module()

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

    def set_stdin(text):
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

    NOTHING = object()

    def run(code, name, echo):
        # A final expression statement is evaluated apart, and its value
        # (unless None) is echoed; `echo` gets it.
        status, error = 0, None
        try:
            running[0] = True
            tree = compile(code, name, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            if last is None:
                exec(compile(tree, name, "exec", dont_inherit=True), glb)
            else:
                del tree.body[-1]
                exec(compile(tree, name, "exec", dont_inherit=True), glb)
                value = eval(compile(ast.Expression(last.value), name, "eval", dont_inherit=True),
                             glb)
                if value is not None:
                    echo[0] = value
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
        # _io._IOBase: every file object's C base. io.IOBase is an ABC over
        # it whose isinstance costs ~0.3 us for each global, every statement.
        for s in [sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__] + [
                v for v in list(glb.values()) if isinstance(v, _io._IOBase)]:
            try:
                s.flush()
            except Exception:
                pass

    # The running execution's outputs; plt.show() adds to them.
    outputs = [_KilnOutputs()]
    sys.meta_path.insert(0, _KilnPyplotHook(lambda: outputs[0]))

    # Packages on request: before an execution the worker may have mounted a
    # new set at /packages (every package the session asked for so far).
    mounted = [None]

    def use_packages():
        try:
            st = os.stat("/packages")
        except OSError:
            return
        if (st.st_dev, st.st_ino) == mounted[0]:
            return
        mounted[0] = (st.st_dev, st.st_ino)
        if "/packages" not in sys.path and os.listdir("/packages"):
            sys.path.insert(1 if sys.path and sys.path[0] == os.getcwd() else 0, "/packages")
        importlib.invalidate_caches()

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
            job = json.loads(head.decode())  # str: json skips guessing the encoding
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
        use_packages()
        if env:
            os.environ.update(env)
        glb.pop("result", None)
        glb.update(inp)
        given_stdin = bool(job.get("stdin"))
        if given_stdin:
            try:
                set_stdin(job["stdin"])
            except OSError as e:  # the code finds stdin empty and is told why
                sys.stderr.write("kiln: stdin could not be set up: %s\n" % e)
        outputs[0] = _KilnOutputs()
        echo = [NOTHING]
        try:
            status, error = run(code, name, echo)
        except KeyboardInterrupt:  # the interrupt landed as run() was unwinding
            status, error = 130, {"type": "KeyboardInterrupt", "message": "", "traceback": ""}
        # The code may have replaced it. _signal: signal.signal's enum
        # conversions cost more than the rest of a short statement's way.
        if _signal.getsignal(signal.SIGINT) is not on_sigint:
            _signal.signal(signal.SIGINT, on_sigint)
        if given_stdin:  # the next execution's code gets an empty stdin again
            empty_stdin()
            sys.stdin = open(0, closefd=False)
        elif sys.stdin is None or sys.stdin.closed:  # exit() and quit() close it
            try:
                os.fstat(0)
            except OSError:
                empty_stdin()
            sys.stdin = open(0, closefd=False)
        outs = outputs[0]
        if echo[0] is not NOTHING:
            outs.echo(echo[0])
        outs.figures()

        frame = '{"exit_code": %d' % status
        if "result" in glb:
            try:
                frame += ', "result": ' + json.dumps(glb["result"], ensure_ascii=False,
                                                     default=default, allow_nan=False)
            except Exception as e:  # keep the exit code; say why there is no result
                error = error or {"type": "ResultNotSerializable", "message": str(e),
                                  "traceback": ""}
        elif echo[0] is not NOTHING:
            # The echoed value is the result when it has a JSON form (a small
            # enough one); otherwise it is only an output, without an error.
            try:
                text = json.dumps(echo[0], ensure_ascii=False, default=default, allow_nan=False)
                if len(text) <= _KILN_MAX_ECHO_RESULT:
                    frame += ', "result": ' + text
            except Exception:
                pass
        echo[0] = NOTHING  # the session keeps no reference to it
        if error:
            frame += ', "error": ' + json.dumps(error, ensure_ascii=False)
        frame += outs.frame()
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
