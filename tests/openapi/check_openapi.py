#!/usr/bin/env python3
"""Checks docs/openapi.yaml against the broker that serves it.

1. Routes: `kiln-broker --routes` (the broker's own route table) and the
   paths and methods of the document must be the same set.
2. Answers: requests that exercise every route against a running cluster
   (KILN_URL, KILN_TOKEN: a tenant's token, KILN_ADMIN_TOKEN), each answer
   validated against the document's schema for its route and status (or the
   route's `default`) with jsonschema (Draft 2020-12, OpenAPI 3.1's dialect).

Usage: check_openapi.py BROKER_BINARY. Prints a line per check; exits 1 if
any failed, 77 when python3-yaml or python3-jsonschema is missing.
"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

try:
    import jsonschema
    import yaml
except ImportError as e:  # the test harness reports a skip
    print(f"SKIP: {e} (deploy/install-deps.sh installs python3-yaml and python3-jsonschema)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = yaml.safe_load(open(os.path.join(ROOT, "docs", "openapi.yaml")))
URL = os.environ["KILN_URL"].rstrip("/")
TOKEN = os.environ["KILN_TOKEN"]
ADMIN = os.environ["KILN_ADMIN_TOKEN"]
failures = []
checked = set()  # (METHOD, pattern) whose answers were validated


def fail(what):
    failures.append(what)
    print(f"not ok - {what}")


def request(method, path, body=None, token=TOKEN, headers=None):
    """(status, content type, body bytes) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def response_schema(pattern, method, status):
    """The document's (content type, schema) for an answer; None when it has none."""
    responses = DOC["paths"][pattern][method.lower()]["responses"]
    r = responses.get(str(status)) or responses.get("default")
    if r is None:
        return None
    if "$ref" in r:  # '#/components/responses/Error'
        r = DOC["components"]["responses"][r["$ref"].rsplit("/", 1)[1]]
    content = r.get("content")
    if not content:
        return ("", None)
    ctype, media = next(iter(content.items()))
    return (ctype, media.get("schema"))


def validate(value, schema, what):
    root = dict(schema)
    root["components"] = DOC["components"]  # where every $ref points
    errors = sorted(jsonschema.Draft202012Validator(root).iter_errors(value), key=str)
    for e in errors[:3]:
        fail(f"{what}: {e.message} at {list(e.absolute_path)}")
    return not errors


def call(method, pattern, path=None, body=None, token=TOKEN, headers=None, expect=None):
    """Sends one request to `pattern` (filled as `path`) and validates the
    answer; returns (status, parsed JSON or raw bytes)."""
    status, ctype, raw = request(method, path or pattern, body, token, headers)
    what = f"{method} {pattern} -> {status}"
    if expect is not None and status != expect:
        fail(f"{what}: expected {expect}: {raw[:300]!r}")
    found = response_schema(pattern, method, status)
    if found is None:
        fail(f"{what}: the document has no answer for status {status}")
        return status, raw
    want_type, schema = found
    if want_type and not ctype.startswith(want_type):
        fail(f"{what}: content type {ctype!r}, the document says {want_type}")
    value = raw
    if want_type == "application/json":
        value = json.loads(raw)
        if schema is not None and validate(value, schema, what):
            print(f"ok - {what}")
    else:
        print(f"ok - {what} ({ctype})")
    checked.add((method, pattern))
    return status, value


def check_routes(broker):
    served = set()
    for line in subprocess.run([broker, "--routes"], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        method, pattern = line.split()
        served.add((method, pattern))
    documented = {(m.upper(), p) for p, ops in DOC["paths"].items() for m in ops}
    for r in sorted(served - documented):
        fail(f"route {r[0]} {r[1]} is served but not in docs/openapi.yaml")
    for r in sorted(documented - served):
        fail(f"route {r[0]} {r[1]} is in docs/openapi.yaml but not served")
    if served == documented:
        print(f"ok - the {len(served)} routes served are the ones documented")
    return served


def check_answers():
    E = "/v1/executions"
    job = {"language": "python",
           "code": "import sys\nprint('out'); print('err', file=sys.stderr)\n"
                   "open('o.txt', 'w').write('x')\nresult = {'n': n}",
           "input": {"n": 3}, "collect": ["*.txt"],
           "files": [{"path": "in.txt", "content_base64": "aGk="}]}
    _, rec = call("POST", E, body=job, expect=200)
    ended = rec["id"]
    call("POST", E, body={"language": "ruby", "code": "1"}, expect=400)
    call("POST", E, body={"language": "python", "code": "1"}, token="not-a-token", expect=401)
    _, acc = call("POST", E, body={"language": "python", "code": "import time\ntime.sleep(20)",
                                   "wait": False}, expect=202)
    running = acc["id"]
    for _ in range(100):  # until it runs
        _, live = call("GET", E + "/{id}", f"{E}/{running}", expect=200)
        if live["status"] == "running":
            break
        time.sleep(0.1)
    call("GET", E + "/{id}", f"{E}/ex_nope", expect=404)
    call("POST", E + "/{id}/cancel", f"{E}/{running}/cancel")
    call("POST", E + "/{id}/cancel", f"{E}/{ended}/cancel", expect=200)
    # A tool call, answered once (its id is c1: the job's first call).
    _, acc = call("POST", E, body={"language": "python", "wait": False,
                                   "tools": [{"name": "add", "parameters": {"type": "object"}}],
                                   "code": "print(kiln.tool('add', {'a': 1}))"}, expect=202)
    T = E + "/{id}/tool-results"
    for _ in range(100):  # until the call is open
        status, _ = call("POST", T, f"{E}/{acc['id']}/tool-results",
                         body={"call_id": "c1", "result": 2})
        if status != 404:
            break
        time.sleep(0.1)
    if status != 200:
        fail(f"answering a tool call: {status}")
    call("POST", T, f"{E}/{acc['id']}/tool-results", body={"call_id": "c1", "result": 3},
         expect=409)
    call("POST", T, f"{E}/ex_nope/tool-results", body={"call_id": "c1", "error": "x"},
         expect=404)
    call("POST", T, f"{E}/{ended}/tool-results", body={"call_id": "c1"}, expect=400)
    # The channel itself (101 and its messages) is websocket_test's; a plain
    # GET is the answer an HTTP client can meet.
    call("GET", "/v1/ws", expect=426)
    call("POST", E + "/batch", body={"executions": [{"language": "shell", "code": "true"},
                                                    {"language": "ruby", "code": "1"}]},
         expect=200)
    call("POST", E + "/batch", body={"executions": []}, expect=400)
    call("GET", E, f"{E}?limit=3", expect=200)
    call("GET", E, f"{E}?limit=0", expect=400)
    # The event stream: its end event carries a record of the document's shape.
    status, stream = call("GET", E + "/{id}/events", f"{E}/{ended}/events", expect=200)
    if status == 200:
        events = [ln[6:] for ln in stream.decode().splitlines() if ln.startswith("data: ")]
        if events:
            validate(json.loads(events[-1]), {"$ref": "#/components/schemas/Record"},
                     "the execution_end event's record")
        else:
            fail("the event stream had no data")
    call("GET", E + "/{id}/events", f"{E}/{ended}/events", headers={"Last-Event-ID": "end"},
         expect=204)
    # Sessions.
    sid = f"oa-{os.getpid()}"
    call("POST", E, body={"language": "python", "code": "x = 1", "session_id": sid,
                          "conversation_id": "oa"}, expect=200)
    call("GET", "/v1/sessions", "/v1/sessions?conversation_id=oa", expect=200)
    call("DELETE", "/v1/sessions/{id}", f"/v1/sessions/{sid}", expect=200)
    call("DELETE", "/v1/sessions/{id}", f"/v1/sessions/{sid}", expect=404)
    # The cluster.
    call("GET", "/v1/capabilities", expect=200)
    call("GET", "/v1/runtimes", expect=200)
    call("GET", "/v1/health", token=None, expect=200)
    call("GET", "/metrics", token=None, expect=200)
    # Admin routes (no job waits for approval here: their errors are checked).
    call("GET", "/v1/workers", token=ADMIN, expect=200)
    call("GET", "/v1/workers", expect=403)
    call("GET", "/v1/usage", token=ADMIN, expect=200)
    call("GET", "/v1/usage", "/v1/usage?from=2026-13-01", token=ADMIN, expect=400)
    call("GET", "/v1/approvals", token=ADMIN, expect=200)
    call("POST", E + "/{id}/approve", f"{E}/{ended}/approve", body={}, token=ADMIN, expect=400)
    call("POST", E + "/{id}/deny", f"{E}/ex_nope/deny", token=ADMIN, expect=404)
    call("GET", "/v1/audit", "/v1/audit?count=2", token=ADMIN, expect=200)
    call("GET", "/v1/audit/verify", token=ADMIN, expect=200)


def main():
    served = check_routes(sys.argv[1])
    check_answers()
    for method, pattern in sorted(served - checked):
        fail(f"no answer of {method} {pattern} was checked")
    print(f"{len(checked)} routes' answers checked, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
