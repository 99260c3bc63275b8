# Kiln's python zygote (worker/sandbox/zygote.hpp). Started by the worker,
# outside any sandbox, as:
#   python3 -I -c <this text> <one-shot wrapper text> <preload> <libkiln-zygote.so path>
# fd 3: a SOCK_SEQPACKET socket to the worker. It never runs a job's code:
# it imports the preloaded modules (<preload>: comma-separated names from the
# worker's packages.preload.python, trusted installed packages; one that fails
# to import is skipped), loads the one-shot wrapper (imports, compiler
# warm-up), then answers
# each request (a plan plus descriptors, zygote_plan.hpp) by calling
# kiln_zygote_spawn (zygote_child.cpp), which clones the sandbox; only the
# clone's own child returns here, contained, and runs the wrapper's job.
# Reply per request: struct "<ii" (pid, 0) with the sandbox's pidfd, or
# (-1, errno).
import array, ctypes, gc, os, select, socket, struct, sys

gc.disable()  # nothing collected (written to) here that every child then copies
# BLAS and OpenMP thread pools would be started by the imports below, and a
# clone keeps only the calling thread: a child's first matrix product would
# wait forever for pool threads it does not have. One thread, no pool.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
_preloaded = []
for _name in filter(None, sys.argv[2].split(",")):
    try:
        __import__(_name)
        _preloaded.append(_name)
    except Exception:  # missing or broken: jobs import it themselves (and see why)
        pass
_wrapper = {"__name__": "kiln_oneshot"}
exec(compile(sys.argv[1], "<string>", "exec"), _wrapper)
_lib = ctypes.PyDLL(sys.argv[3])  # PyDLL: the global lock stays held during the call
_spawn = _lib.kiln_zygote_spawn
_spawn.restype = ctypes.c_int
_spawn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int,
                   ctypes.POINTER(ctypes.c_int)]
_api = ctypes.pythonapi
_MAX_FDS = 16


def _rehearse():
    # The job's path once, on nothing, while the sandbox is warm: the pages
    # it writes (reference counts of the objects a job uses) are copied from
    # the zygote now rather than during the job.
    g = {"__builtins__": __builtins__, "__name__": "__main__"}
    exec(compile("x = [1, 'a', {'b': 2.5}]\nprint\n", "<rehearsal>", "exec", dont_inherit=True), g)
    json = sys.modules["json"]
    json.dumps(json.loads('{"input": {"a": 1}, "env": {"A": "b"}, "x": [1.5, null, true]}'),
               ensure_ascii=False)
    sys.stdout.flush()


def _make_private():
    # Every page this process could write, copied from the zygote now
    # (MADV_POPULATE_WRITE, Linux 5.14+; elsewhere a no-op): a few ms of
    # CPU while the sandbox waits, instead of copy-on-write faults in the job.
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/self/maps") as maps:
        for line in maps:
            f = line.split()
            if f[1].startswith("rw") and f[1][3] == "p" and not (len(f) > 5 and f[5] == "[vvar]"):
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), 23)


def _run_job(sock, env):
    # In the sandbox, every layer in force. The socket's descriptor was
    # closed by the contain steps: forget it without closing a reused number.
    sock.detach()
    gc.enable()  # the job's own objects; the zygote's are frozen (below)
    os.environ.clear()
    for entry in env:
        k, _, v = entry.partition("=")
        os.environ[k] = v
    sys.argv[:] = ["-c"]
    _rehearse()
    # A sandbox that waits for its job (a warm stock on a calm worker) makes
    # its memory its own meanwhile; one whose job is already there (a busy
    # worker) skips that: the copies would cost more CPU than the faults.
    # With preloaded modules the copy would be tens of MB per sandbox, most
    # of which a job never touches (docs/performance.md, "Package sets").
    if not _preloaded and not select.select([0], [], [], 0.02)[0]:
        _make_private()
    _wrapper["_kiln_main"]()  # exits (sys.exit / os._exit)
    os._exit(0)


def _serve():
    sock = socket.socket(fileno=3)
    buf = bytearray(1 << 20)
    view = (ctypes.c_char * len(buf)).from_buffer(buf)
    pidfd = ctypes.c_int(-1)
    # Everything loaded so far goes to the collector's permanent generation:
    # a child's collections never touch those objects, so their pages stay
    # shared with the zygote instead of being copied into every job.
    gc.freeze()
    while True:
        n, anc, flags, _ = sock.recvmsg_into([buf], socket.CMSG_SPACE(_MAX_FDS * 4))
        if n == 0:
            os._exit(0)  # the worker closed its end
        fds = array.array("i")
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            pid = -90  # EMSGSIZE
        else:
            env_len = int.from_bytes(buf[0:4], "little")
            env = [e.decode(errors="surrogateescape")
                   for e in bytes(buf[4:4 + env_len]).split(b"\0")[:-1]]
            fd_array = (ctypes.c_int * max(len(fds), 1))(*fds)
            _api.PyOS_BeforeFork()
            pid = _spawn(ctypes.addressof(view), n, ctypes.addressof(fd_array), len(fds),
                         ctypes.byref(pidfd))
            if pid == 0:
                _api.PyOS_AfterFork_Child()
                _run_job(sock, env)
            _api.PyOS_AfterFork_Parent()
        for fd in fds:
            os.close(fd)
        buf[:n] = bytes(n)  # the next child does not find this sandbox's plan here
        if pid > 0:
            sock.sendmsg([struct.pack("<ii", pid, 0)],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pidfd.value]))])
            os.close(pidfd.value)
        else:
            sock.send(struct.pack("<ii", -1, -pid))


_serve()
