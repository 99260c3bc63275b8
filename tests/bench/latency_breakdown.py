#!/usr/bin/python3
"""Where a session statement's round trip goes: broker submit path, the wire,
the worker, the wire back, the broker's result path.

Traces only the socket calls that bound each stage (`perf trace -e
sendto,recvfrom,sendmsg`, so the processes run almost unslowed) of one broker
and one worker while one kiln-bench client runs statements back to back, then
matches them per statement by their sizes and prints each stage's p50 and
mean. Needs perf (Debian: linux-perf) and root. Run against a cluster of one
broker and one worker that serves nothing else:

  sudo tests/bench/latency_breakdown.py BROKER_PID WORKER_PID [SECONDS] &
  kiln-bench --url ... --token ... --concurrency 1 --jobs 3000 --session lb

Stages (timestamps of the calls that mark them):
  broker in   HTTP request read -> Execute sent to the worker (ZeroMQ I/O thread)
  wire        Execute sent -> received by the worker
  worker      Execute received -> Result sent
  wire back   Result sent -> received by the broker
  broker out  Result received -> HTTP answer written
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

CALL = re.compile(r"\s*([\d.]+) \(\s*[\d.]*\s*ms\): (\S+?)/(\d+) (\w+)\(.*\)\s+= (-?\d+)")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    broker, worker = sys.argv[1], sys.argv[2]
    seconds = sys.argv[3] if len(sys.argv) > 3 else "5"
    broker_tids = set(os.listdir(f"/proc/{broker}/task"))  # its threads start with it
    with tempfile.NamedTemporaryFile(suffix=".trace") as out:
        subprocess.run(["perf", "trace", "-e", "sendto,recvfrom,sendmsg", "-p",
                        f"{broker},{worker}", "-o", out.name, "--", "sleep", seconds],
                       check=True)
        events = []
        for line in open(out.name, errors="replace"):
            m = CALL.match(line)
            if m:
                who = "broker" if m.group(3) in broker_tids else "worker"
                events.append((float(m.group(1)), who, m.group(2).startswith("ZMQbg"),
                               m.group(4), int(m.group(5))))
    events.sort()
    # Heartbeats and acknowledgements are under 100 bytes; an Execute and a
    # Result are over.
    stages, cur = [], None
    for t, who, zmq, call, n in events:
        if who == "broker" and not zmq and call == "recvfrom" and n > 100:
            cur = {"http_in": t}
        elif cur is None or not zmq or n <= 100:
            if cur is not None and who == "broker" and call == "sendmsg" and "b_in" in cur:
                cur["http_out"] = t
                stages.append(cur)
                cur = None
        elif who == "broker" and call == "sendto" and "b_out" not in cur:
            cur["b_out"] = t
        elif who == "worker" and call == "recvfrom" and "b_out" in cur and "w_in" not in cur:
            cur["w_in"] = t
        elif who == "worker" and call == "sendto" and "w_in" in cur and "w_out" not in cur:
            cur["w_out"] = t
        elif who == "broker" and call == "recvfrom" and "w_out" in cur and "b_in" not in cur:
            cur["b_in"] = t
    if not stages:
        sys.exit("no complete statement traced: is kiln-bench running against these pids?")
    print(f"{len(stages)} statements")
    for name, a, b in [("broker in", "http_in", "b_out"), ("wire", "b_out", "w_in"),
                       ("worker", "w_in", "w_out"), ("wire back", "w_out", "b_in"),
                       ("broker out", "b_in", "http_out"), ("in all", "http_in", "http_out")]:
        v = sorted((s[b] - s[a]) * 1000 for s in stages)
        print(f"  {name:11s} p50 {v[len(v) // 2]:6.0f} us   mean {statistics.mean(v):6.0f} us")


if __name__ == "__main__":
    main()
