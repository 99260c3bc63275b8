#!/usr/bin/env python3
"""The floor Kiln's one-shot figures are compared against: how long a bare
interpreter takes to start and exit, and how many such starts the machine
manages with one loop per core (no sandbox, no Kiln).

    tests/bench/interpreter_starts.py [--runs 55] [--seconds 5] [--loops N]

Prints, for `python3 -c pass`, `node -e 0` and `python3 -c 'import pandas'`
(when pandas is installed): the p50 of `--runs` starts
(subprocess.run, one at a time) and the starts per second of `--loops`
concurrent loops (default: one per CPU) over `--seconds`.
"""
import argparse
import os
import statistics
import subprocess
import threading
import time

PROGRAMS = {"python3 -c pass": ["/usr/bin/python3", "-c", "pass"],
            "node -e 0": ["/usr/bin/node", "-e", "0"],
            # issue 17's target: a one-shot pandas job against this start
            "python3 -c 'import pandas'": ["/usr/bin/python3", "-c", "import pandas"]}


def one(argv):
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return (time.perf_counter() - t) * 1e3


def rate(argv, loops, seconds):
    count = [0] * loops
    end = time.perf_counter() + seconds

    def loop(i):
        while time.perf_counter() < end:
            subprocess.run(argv, check=True)
            count[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(loops)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(count) / seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=55)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--loops", type=int, default=os.cpu_count())
    args = ap.parse_args()
    for name, argv in PROGRAMS.items():
        if not os.access(argv[0], os.X_OK):
            continue
        if subprocess.run(argv, stderr=subprocess.DEVNULL).returncode != 0:
            continue  # e.g. no pandas here
        one(argv)  # page cache
        p50 = statistics.median(one(argv) for _ in range(args.runs))
        per_s = rate(argv, args.loops, args.seconds)
        print(f"{name:27s} start p50 {p50:6.2f} ms   {per_s:6.1f} starts/s with {args.loops} loops")


if __name__ == "__main__":
    main()
