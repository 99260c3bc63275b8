#!/usr/bin/env python3
"""The floor for a warm job's worker time: a one-shot wrapper outside any sandbox.

Starts the wrapper of worker/runtimes/wrappers/ the way Runtime::OneShotLaunch
does (same interpreter flags and base environment; fd 0 = job frame pipe,
1/2 = output pipes, 3 = control pipe), lets it get warm for --pause-ms, writes
a trivial job frame, closes stdin, and times until the control pipe and both
output pipes are at EOF: what RunJob measures as `duration_ms`, minus the
sandbox. Compare it with kiln-bench's paced "server duration" at the same
pause (docs/performance.md, "Warm-job cost").

  tests/bench/wrapper_floor.py --lang python --jobs 60 --pause-ms 100
  tests/bench/wrapper_floor.py --lang shell --concurrent-spawn   # next wrapper starts meanwhile

--concurrent-spawn starts another wrapper (from a separate spawner process)
right after the frame is written, as the worker's warm pool does when a job
takes a sandbox, so the job competes with an interpreter start for the CPUs.
"""
import argparse
import os
import select
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRAPPERS = os.path.join(ROOT, "worker", "runtimes", "wrappers")
# Runtime::OneShotLaunch: BaseEnv() and the launch argv of each language.
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}


def launch(lang):
    def text(name):
        with open(os.path.join(WRAPPERS, name)) as f:
            body = f.read()
        # As worker/runtimes/sources.cmake embeds it: with its shared parts.
        for line, part in (("  // kiln-include: javascript_packages.js\n", "javascript_packages.js"),
                           ("  // kiln-include: javascript_tools.js\n", "javascript_tools.js"),
                           ("# kiln-include: python_tools.py\n", "python_tools.py"),
                           ("# kiln-include: shell_tools.sh\n", "shell_tools.sh")):
            if line in body:
                with open(os.path.join(WRAPPERS, part)) as f:
                    body = body.replace(line, f.read())
        return body

    if lang == "python":
        return ["/usr/bin/python3", "-I", "-c", text("python_oneshot.py")], b'{"input":{},"env":{}}\nx = 1'
    if lang == "javascript":
        return ["/usr/bin/node", "-e", text("javascript_oneshot.js")], b'{"input":{},"env":{}}\nvar x = 1'
    # EncodeShellJob: an empty header line, the code, then ".".
    return ["/bin/bash", "--noprofile", "--norc", "-c", text("shell_oneshot.sh"), "bash"], b"\ntrue."


def start(argv):
    ctl_r, ctl_w = os.pipe()

    def control_on_fd3():
        os.dup2(ctl_w, 3)

    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV, cwd="/tmp",
                            preexec_fn=control_on_fd3, pass_fds=(3,))
    os.close(ctl_w)
    return proc, ctl_r


def start_spawner(argv):
    """A process that starts a throwaway wrapper (stdin empty: it exits once
    started) for every byte written to the returned pipe."""
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        while os.read(go_r, 1):
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=ENV, cwd="/tmp")
        os._exit(0)
    os.close(go_r)
    return pid, go_w


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", choices=["python", "javascript", "shell"], default="python")
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--pause-ms", type=int, default=100)
    ap.add_argument("--concurrent-spawn", action="store_true")
    opt = ap.parse_args()
    argv, frame = launch(opt.lang)

    spawner = start_spawner(argv) if opt.concurrent_spawn else None
    times = []
    nxt = start(argv)
    for _ in range(opt.jobs + 3):  # the first 3 are warm-up
        proc, ctl = nxt
        time.sleep(opt.pause_ms / 1000)
        t0 = time.perf_counter()
        proc.stdin.write(frame)
        proc.stdin.close()
        if spawner:
            os.write(spawner[1], b"x")
        open_fds = [ctl, proc.stdout.fileno(), proc.stderr.fileno()]
        while open_fds:
            ready, _, _ = select.select(open_fds, [], [])
            for fd in ready:
                if not os.read(fd, 65536):
                    open_fds.remove(fd)
        times.append((time.perf_counter() - t0) * 1e3)
        nxt = start(argv)
        proc.wait()
        os.close(ctl)
        proc.stdout.close()
        proc.stderr.close()
    proc, ctl = nxt
    proc.kill()
    proc.wait()
    os.close(ctl)
    if spawner:
        os.close(spawner[1])
        os.waitpid(spawner[0], 0)

    times = sorted(times[3:])
    print(f"{opt.lang} wrapper outside a sandbox, {opt.pause_ms} ms pause"
          f"{', another wrapper starting meanwhile' if opt.concurrent_spawn else ''}: "
          f"frame -> EOF p50 {statistics.median(times):.2f} ms, "
          f"p90 {times[int(len(times) * 0.9)]:.2f} ms ({len(times)} jobs; "
          f"load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
