#!/usr/bin/env python3
"""Mixed load for tests/soak/soak.sh: ordinary jobs, sessions, event streams
and hostile clients against one local Kiln broker, for a fixed time.

    soak_load.py --url http://127.0.0.1:PORT --native 127.0.0.1:PORT \
        --token T --other-token T2 --seconds 600 --report FILE

Python's standard library only (the machine has no pip). Every client loop
counts what it saw; the counts are written as JSON to --report. A loop never
stops on an error: an error is a count (the soak judges memory and
descriptors, and the counts say whether service went on).
"""
import argparse
import http.client
import json
import os
import random
import socket
import threading
import time
import urllib.parse
from collections import Counter

COUNTS = Counter()
LOCK = threading.Lock()


def count(name, n=1):
    with LOCK:
        COUNTS[name] += n


def conn(host, port, timeout=30):
    return http.client.HTTPConnection(host, port, timeout=timeout)


def request(host, port, method, path, body=None, token=None, headers=None, timeout=30):
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    c = conn(host, port, timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, data
    finally:
        c.close()


def ordinary_jobs(a, stop):
    """One-shot jobs of the other tenant, waiting for each: the service the
    hostile clients must not take away."""
    langs = [("python", "print(sum(range(1000)))"), ("javascript", "console.log(6*7)"),
             ("shell", "echo $((6*7))")]
    while not stop.is_set():
        lang, code = random.choice(langs)
        try:
            st, data = request(a.host, a.port, "POST", "/v1/executions",
                               json.dumps({"language": lang, "code": code}), a.other_token)
            ok = st == 200 and json.loads(data).get("status") == "succeeded"
            count("job_ok" if ok else "job_bad_%d" % st)
        except Exception as e:  # noqa: BLE001 - counted, the loop goes on
            count("job_exc_" + type(e).__name__)


def sessions(a, stop):
    """A few sessions used in turn, deleted and created again now and then."""
    i = 0
    while not stop.is_set():
        sid = "soak-%d-%d" % (os.getpid(), i % 4)
        try:
            st, data = request(a.host, a.port, "POST", "/v1/executions", json.dumps(
                {"language": "python", "code": "x = globals().get('x', 0) + 1\nprint(x)",
                 "session_id": sid}), a.token)
            count("session_ok" if st == 200 else "session_bad_%d" % st)
            if i % 25 == 24:
                request(a.host, a.port, "DELETE", "/v1/sessions/" + sid, token=a.token)
                count("session_deleted")
        except Exception as e:  # noqa: BLE001
            count("session_exc_" + type(e).__name__)
        i += 1


def streams(a, stop):
    """Submit without waiting, then read the job's event stream to its end."""
    while not stop.is_set():
        try:
            st, data = request(a.host, a.port, "POST", "/v1/executions", json.dumps(
                {"language": "python", "wait": False,
                 "code": "import sys\nfor i in range(200): print('line', i)"}), a.token)
            if st != 202:
                count("stream_submit_bad_%d" % st)
                time.sleep(0.2)
                continue
            jid = json.loads(data)["id"]
            c = conn(a.host, a.port, 60)
            c.request("GET", "/v1/executions/%s/events" % jid,
                      headers={"Authorization": "Bearer " + a.token})
            r = c.getresponse()
            body = r.read().decode("utf-8", "replace")
            c.close()
            ok = r.status == 200 and "event: execution_end" in body and body.count(
                "event: output_chunk") >= 1
            count("stream_ok" if ok else "stream_bad")
        except Exception as e:  # noqa: BLE001
            count("stream_exc_" + type(e).__name__)


def slow_readers(a, stop):
    """Event streams of a chatty job that are never read, held a while."""
    while not stop.is_set():
        socks = []
        try:
            st, data = request(a.host, a.port, "POST", "/v1/executions", json.dumps(
                {"language": "python", "wait": False, "limits": {"max_output_bytes": 4194304},
                 "code": "s='y'*1000\nfor i in range(4000): print(s)"}), a.token)
            if st == 202:
                jid = json.loads(data)["id"]
                for _ in range(5):
                    s = socket.create_connection((a.host, a.port), timeout=10)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.sendall(("GET /v1/executions/%s/events HTTP/1.1\r\nHost: x\r\n"
                               "Authorization: Bearer %s\r\n\r\n" % (jid, a.token)).encode())
                    socks.append(s)
                count("slow_reader_rounds")
            stop.wait(8)
        except Exception as e:  # noqa: BLE001
            count("slow_reader_exc_" + type(e).__name__)
        finally:
            for s in socks:
                s.close()


def slowloris(a, stop):
    """Connections that trickle a request head, a byte at a time."""
    while not stop.is_set():
        socks = []
        try:
            for _ in range(20):
                s = socket.create_connection((a.host, a.port), timeout=10)
                s.sendall(b"GET /v1/health HTTP/1.1\r\n")
                socks.append(s)
            for _ in range(15):
                if stop.is_set():
                    break
                for s in socks:
                    try:
                        s.sendall(b"X")
                    except OSError:
                        pass
                time.sleep(1)
            count("slowloris_rounds")
        except Exception as e:  # noqa: BLE001
            count("slowloris_exc_" + type(e).__name__)
        finally:
            for s in socks:
                s.close()


def junk_http(a, stop):
    """Requests a client should not send: deep JSON, oversized chunked
    bodies without a token, bad heads, wrong methods, junk Last-Event-IDs."""
    deep = '{"language":"python","code":"1","input":{"a":' + "[" * 100000 + "]" * 100000 + "}}"
    while not stop.is_set():
        try:
            st, _ = request(a.host, a.port, "POST", "/v1/executions", deep, a.token)
            count("deep_%d" % st)
            s = socket.create_connection((a.host, a.port), timeout=10)
            s.sendall(b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"100000\r\n" + b"x" * 0x100000 + b"\r\n"
            try:
                for _ in range(64):  # 64 MiB, more than the body limit
                    s.sendall(chunk)
            except OSError:
                pass
            s.settimeout(5)
            try:
                head = s.recv(64)
                count("chunked_" + head[9:12].decode("ascii", "replace"))
            except OSError:
                count("chunked_closed")
            s.close()
            s = socket.create_connection((a.host, a.port), timeout=10)
            s.sendall(b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
            count("badlen_" + s.recv(64)[9:12].decode("ascii", "replace"))
            s.close()
            st, _ = request(a.host, a.port, "PUT", "/v1/health")
            count("method_%d" % st)
            st, _ = request(a.host, a.port, "GET", "/v1/executions/ex_nope/events", token=a.token,
                            headers={"Last-Event-ID": "junk"})
            count("lastid_%d" % st)
        except Exception as e:  # noqa: BLE001
            count("junk_exc_" + type(e).__name__)
        stop.wait(1)


def native_flood(a, stop):
    """Connections to the native endpoint that never authenticate, and
    bytes that are not ZeroMQ at all."""
    host, port = a.native.rsplit(":", 1)
    while not stop.is_set():
        socks = []
        try:
            for i in range(50):
                s = socket.create_connection((host, int(port)), timeout=10)
                if i % 2:
                    s.sendall(os.urandom(64))
                socks.append(s)
            count("native_flood_rounds")
            stop.wait(3)
        except Exception as e:  # noqa: BLE001
            count("native_flood_exc_" + type(e).__name__)
        finally:
            for s in socks:
                s.close()


def health(a, stop):
    """Health and metrics must answer fast all along."""
    worst = 0.0
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            st, _ = request(a.host, a.port, "GET", "/v1/health", timeout=5)
            count("health_%d" % st)
            st, _ = request(a.host, a.port, "GET", "/metrics", timeout=5)
            count("metrics_%d" % st)
        except Exception as e:  # noqa: BLE001
            count("health_exc_" + type(e).__name__)
        worst = max(worst, time.monotonic() - t0)
        with LOCK:
            COUNTS["health_worst_ms"] = int(worst * 1000)
        stop.wait(0.5)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--native", required=True, help="host:port of the native endpoint")
    p.add_argument("--token", required=True)
    p.add_argument("--other-token", required=True)
    p.add_argument("--seconds", type=int, default=600)
    p.add_argument("--report", required=True)
    a = p.parse_args()
    u = urllib.parse.urlparse(a.url)
    a.host, a.port = u.hostname, u.port
    stop = threading.Event()
    loops = ([ordinary_jobs] * 2 + [sessions, streams, streams, slow_readers, slowloris,
                                     junk_http, native_flood, health])
    threads = [threading.Thread(target=f, args=(a, stop), daemon=True) for f in loops]
    for t in threads:
        t.start()
    deadline = time.monotonic() + a.seconds
    while time.monotonic() < deadline:
        time.sleep(min(10, max(0.1, deadline - time.monotonic())))
    stop.set()
    for t in threads:
        t.join(timeout=60)
    with open(a.report, "w") as f:
        json.dump(dict(COUNTS), f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
