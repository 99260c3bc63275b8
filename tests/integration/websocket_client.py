#!/usr/bin/python3
"""Drives the WebSocket channel (docs/api.md, "WebSocket channel: GET /v1/ws")
of a running cluster; websocket_test.cpp starts the cluster and runs each
scenario.

Usage: websocket_client.py SCENARIO, one of code_mode,
answer_error_and_resume, hostile, limits, follows_and_idle. Environment: KILN_URLS (the
brokers' base URLs, comma-separated), KILN_TOKEN (tenant-a),
KILN_OTHER_TOKEN (tenant-b), KILN_ADMIN_TOKEN. The limits scenarios expect
`broker.http.websocket: {max_message_bytes: 65536, messages_per_second: 20,
message_burst: 20, max_follows: 4, idle_timeout_ms: 4000}` and tenant-a's
`max_websockets: 3`.

Exits 0 when every check of the scenario passed; otherwise 1, with what
failed and the last messages received on stderr. Needs the `websockets`
(10.x, asyncio API) and `httpx` libraries.
"""
import asyncio
import collections
import json
import os
import sys
import time
import traceback

import httpx
import websockets

URLS = os.environ["KILN_URLS"].split(",")
TOKEN = os.environ["KILN_TOKEN"]
OTHER_TOKEN = os.environ["KILN_OTHER_TOKEN"]
ADMIN_TOKEN = os.environ["KILN_ADMIN_TOKEN"]
SCENARIO_TIMEOUT_S = 90
# Well formed (ex_ and 20 characters, as the broker makes them), never issued.
UNKNOWN_ID = "ex_" + "0" * 20
ADD_TOOL = {
    "name": "add",
    "description": "a + b",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}
END_EVENTS = ("execution_end", "execution_error")

# The last messages every connection received, for failure reports.
RECEIVED = collections.deque(maxlen=40)


class Failure(Exception):
    pass


def brief(value, limit=600):
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return text if len(text) <= limit else text[:limit] + "...(%d bytes)" % len(text)


def check(condition, what, *received):
    """Fails the scenario with `what` and the values it was decided on."""
    if not condition:
        raise Failure(what + "".join("\n  got: " + brief(r) for r in received))


def auth(token):
    return {"Authorization": "Bearer " + token} if token else {}


def ws_url(base):
    check(base.startswith("http://"), "KILN_URLS: expected http:// URLs", base)
    return "ws://" + base[len("http://"):].rstrip("/") + "/v1/ws"


def connect(base, token, **options):
    """`async with connect(...) as ws` or `ws = await connect(...)`."""
    # No compression: the broker offers none (docs/api.md), so ask for none.
    return websockets.connect(
        ws_url(base), extra_headers=auth(token), max_size=1 << 24, compression=None,
        open_timeout=10, close_timeout=2, **options)


async def refused_handshake(base, token):
    """The InvalidStatusCode of a handshake the broker must refuse."""
    try:
        ws = await connect(base, token)
    except websockets.exceptions.InvalidStatusCode as e:
        return e
    await ws.close()
    raise Failure("the broker accepted a WebSocket it should have refused (token %r)" % token)


async def open_within(base, token, seconds):
    """Opens a connection, retrying 429 for `seconds`: the broker counts a
    closed connection out asynchronously."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await connect(base, token)
        except websockets.exceptions.InvalidStatusCode as e:
            check(e.status_code == 429 and time.monotonic() < deadline,
                  "handshake refused with HTTP %d (429 retried for %g s)"
                  % (e.status_code, seconds))
        await asyncio.sleep(0.1)


class Channel:
    """One WebSocket connection: events are filed per execution, every other
    message is handed to whoever waits for it."""

    def __init__(self, ws, name):
        self.ws = ws
        self.name = name
        self.events = {}  # execution id -> the event messages of its current follow
        self.stash = []  # answers nobody has taken yet

    async def send(self, message):
        await self.ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))

    async def read(self, timeout):
        raw = await asyncio.wait_for(self.ws.recv(), timeout)
        check(isinstance(raw, str), "the broker sent a binary frame", raw)
        RECEIVED.append((self.name, brief(raw, 300)))
        try:
            message = json.loads(raw)
        except ValueError:
            raise Failure("the broker sent a message that is not JSON: " + brief(raw)) from None
        check(isinstance(message, dict) and isinstance(message.get("type"), str),
              "a message that is not an object with a type", raw)
        if message["type"] == "error":
            err = message.get("error")
            check(isinstance(err, dict) and isinstance(err.get("code"), str)
                  and isinstance(err.get("message"), str)
                  and isinstance(err.get("retryable"), bool),
                  "an error without {code, message, retryable}", message)
        if message["type"] == "event":
            check(all(k in message for k in ("execution_id", "event", "id", "data")),
                  "an event without execution_id, event, id and data", message)
            events = self.events.setdefault(message["execution_id"], [])
            check(not events or events[-1]["event"] not in END_EVENTS,
                  "an event after the follow's end", events[-1:], message)
            events.append(message)
        return message

    def follow_reset(self, execution_id):
        """Forgets the events of an earlier follow of `execution_id`."""
        self.events.pop(execution_id, None)

    async def read_until(self, done, what, timeout):
        """Reads (events filed, other messages stashed) until `done()` gives
        something, which it returns; `what` names the wait when it times out.
        `what` None: returns None once `timeout` passed."""
        deadline = time.monotonic() + timeout
        while True:
            found = done()
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0 and what is None:
                return None
            check(left > 0, "%s: nothing within %g s" % (what, timeout), self.stash[-5:])
            try:
                m = await self.read(left)
            except asyncio.TimeoutError:
                continue
            if m["type"] != "event":
                self.stash.append(m)

    async def answer(self, match, what, timeout=20):
        """The first non-event message `match` accepts, waiting up to `timeout`."""
        def take():
            for i, m in enumerate(self.stash):
                if match(m):
                    return self.stash.pop(i)
            return None
        return await self.read_until(take, what + ": no answer", timeout)

    async def reply_to(self, ref, what, timeout=20):
        return await self.answer(lambda m: m.get("ref") == ref, what, timeout)

    async def error_for(self, ref, code, what, ref_optional=False):
        """Waits for the answer to the message of `ref` and checks it is an
        error of `code` (a str or a tuple of accepted codes). With
        `ref_optional`, an error without any ref also counts (the broker could
        not read the message's)."""
        def match(m):
            if ref_optional and "ref" not in m:
                return m["type"] == "error"
            return m.get("ref") == ref

        m = await self.answer(match, what)
        codes = code if isinstance(code, tuple) else (code,)
        check(m["type"] == "error" and m["error"]["code"] in codes,
              "%s: expected an error %s" % (what, " or ".join(codes)), m)
        check(m["error"]["retryable"] is (m["error"]["code"] == "RATE_LIMITED"),
              "%s: retryable as the code says (docs/api.md, Errors)" % what, m)
        return m

    async def until_end(self, execution_id, timeout=60):
        """The events of the execution's follow, through its end."""
        def ended():
            events = self.events.get(execution_id, [])
            return events if events and events[-1]["event"] in END_EVENTS else None
        return await self.read_until(ended, execution_id + ": no end", timeout)

    async def drain(self, seconds):
        """Reads for `seconds`, keeping what comes."""
        await self.read_until(lambda: None, None, seconds)


async def submit(http, request, token=TOKEN, base=None):
    """Submits through broker 0 (or `base`): the record with wait true, the id otherwise."""
    r = await http.post((base or URLS[0]) + "/v1/executions", json=request,
                        headers=auth(token))
    wait = request.get("wait", True)
    check(r.status_code == (200 if wait else 202), "submit: HTTP %d" % r.status_code, r.text)
    return r.json() if wait else r.json()["id"]


def stdout_of(events):
    chunks = [e["data"] for e in events if e["event"] == "output_chunk"]
    seqs = [c["seq"] for c in chunks]
    check(seqs == sorted(set(seqs)), "chunk seq must count up", seqs)
    return "".join(c["data"] for c in chunks if c["stream"] == "stdout")


def names(events):
    return [e["event"] for e in events]


def check_whole_run(execution_id, events, status="succeeded"):
    """Checks a follow from the beginning; returns the record."""
    check(events[0]["event"] == "execution_start" and events[0]["id"] == "start"
          and events[0]["data"]["id"] == execution_id,
          "%s: the first event must be execution_start, id start" % execution_id, events[0])
    end = events[-1]
    check(end["event"] == "execution_end" and end["id"] == "end",
          "%s: the last event must be execution_end, id end" % execution_id, end)
    check(names(events).count("execution_start") == 1,
          "%s: one execution_start" % execution_id, names(events))
    record = end["data"]
    check(record["id"] == execution_id and record["status"] == status,
          "%s: expected a %s record" % (execution_id, status), record)
    check(stdout_of(events) == record["stdout"],
          "%s: the stdout chunks must add up to the record's stdout" % execution_id,
          stdout_of(events), record["stdout"])
    return record


# code_mode: one connection follows three jobs at once and answers all
# their tool calls; the jobs were submitted through another broker.
async def code_mode():
    jobs = {
        "python": ("total = 0\nfor i in range(5):\n"
                   "    total += kiln.tool('add', {'a': i, 'b': 1})\nprint('total', total)\n",
                   5, "total 15\n"),
        "javascript": ("let t = 0; for (let i = 0; i < 3; i++) "
                       "t += await kiln.tool('add', {a: i, b: 2}); console.log('total', t);",
                       3, "total 9\n"),
        "shell": ("r=$(kiln-tool add '{\"a\": 2, \"b\": 3}'); echo \"got $r\"", 1, "got 5\n"),
    }
    async with httpx.AsyncClient(timeout=30) as http:
        ids = {}
        for language, (code, _, _) in jobs.items():
            ids[language] = await submit(http, {"language": language, "code": code,
                                                "wait": False, "tools": [ADD_TOOL]})
        async with connect(URLS[-1], TOKEN) as ws:
            chan = Channel(ws, "code_mode")
            for language, execution_id in ids.items():
                await chan.send({"type": "follow", "execution_id": execution_id,
                                 "ref": "follow-" + language})
            unconfirmed = {}  # ref -> (execution id, call id)
            confirmed = {execution_id: [] for execution_id in ids.values()}

            def ended():
                return all(chan.events.get(i) and chan.events[i][-1]["event"] in END_EVENTS
                           for i in ids.values())

            deadline = time.monotonic() + 60
            while not ended() or unconfirmed:
                left = deadline - time.monotonic()
                check(left > 0, "code_mode: not every job ended and every answer was taken "
                      "within 60 s", unconfirmed, {k: names(v) for k, v in chan.events.items()})
                try:
                    m = await chan.read(left)
                except asyncio.TimeoutError:
                    continue
                if m["type"] == "event":
                    check(m["execution_id"] in confirmed, "an event of a job not followed", m)
                    if m["event"] == "tool_call":
                        call = m["data"]
                        check(call["name"] == "add", "a call of another tool", m)
                        args = call["arguments"]
                        ref = "%s/%s" % (m["execution_id"], call["call_id"])
                        unconfirmed[ref] = (m["execution_id"], call["call_id"])
                        await chan.send({"type": "tool_result", "execution_id": m["execution_id"],
                                         "call_id": call["call_id"], "ref": ref,
                                         "result": args["a"] + args["b"]})
                elif m["type"] == "tool_result_accepted":
                    ref = m.get("ref")
                    check(ref in unconfirmed, "an acceptance of no answer of ours", m)
                    check((m.get("execution_id"), m.get("call_id")) == unconfirmed[ref],
                          "the acceptance names another call than its ref", m)
                    del unconfirmed[ref]
                    confirmed[m["execution_id"]].append(m["call_id"])
                else:
                    raise Failure("code_mode: unexpected message: " + brief(m))

        for language, (_, calls, stdout) in jobs.items():
            execution_id = ids[language]
            events = chan.events[execution_id]
            record = check_whole_run(execution_id, events)
            check(record["stdout"] == stdout, "%s: stdout" % language, record)
            call_ids = [e["data"]["call_id"] for e in events if e["event"] == "tool_call"]
            results = [e["data"] for e in events if e["event"] == "tool_result"]
            check(len(call_ids) == calls and len(results) == calls,
                  "%s: expected %d tool_call and tool_result events" % (language, calls),
                  names(events))
            check(all(r["ok"] is True for r in results), "%s: every answer was a result"
                  % language, results)
            check(sorted(confirmed[execution_id]) == sorted(call_ids),
                  "%s: one tool_result_accepted per call" % language,
                  confirmed[execution_id], call_ids)

        # The audit trail has each call, answered (through another broker).
        want = {ids[lang]: calls for lang, (_, calls, _) in jobs.items()}
        tools = {}
        deadline = time.monotonic() + 20
        while len(tools) < len(want) and time.monotonic() < deadline:
            r = await http.get(URLS[0] + "/v1/audit?count=10000", headers=auth(ADMIN_TOKEN))
            check(r.status_code == 200, "GET /v1/audit: HTTP %d" % r.status_code, r.text)
            for e in r.json()["entries"]:
                if e["entry"].get("job_id") in want and "tools" in e["entry"]:
                    tools[e["entry"]["job_id"]] = e["entry"]["tools"]
            if len(tools) < len(want):
                await asyncio.sleep(0.2)
        for execution_id, calls in want.items():
            check(execution_id in tools, "%s: no audit entry with tools in 20 s" % execution_id)
            entries = tools[execution_id]
            check(len(entries) == calls, "%s: one audit tools entry per call" % execution_id,
                  entries)
            check([t["call_id"] for t in entries] == ["c%d" % (i + 1) for i in range(calls)]
                  and all(t["state"] == "answered" and t["name"] == "add" for t in entries),
                  "%s: every call audited, answered" % execution_id, entries)


# answer_error_and_resume: an error answer raises ToolError in the code; a
# second connection resumes the ended job's events from a chunk, from start
# and from end.
async def answer_error_and_resume():
    code = ("import time\n"
            "try:\n"
            "    kiln.tool('add', {'a': 1, 'b': 1})\n"
            "except kiln.ToolError as e:\n"
            "    print('refused:', e, flush=True)\n"
            "time.sleep(0.3)  # a second chunk, so resuming after the first leaves one\n"
            "print('x' * 10)\n")
    async with httpx.AsyncClient(timeout=30) as http:
        execution_id = await submit(http, {"language": "python", "code": code, "wait": False,
                                           "tools": [ADD_TOOL]})
    async with connect(URLS[-1], TOKEN) as ws:
        chan = Channel(ws, "first")
        await chan.send({"type": "follow", "execution_id": execution_id, "ref": "f"})
        deadline = time.monotonic() + 60
        while not any(e["event"] == "tool_call" for e in chan.events.get(execution_id, [])):
            check(time.monotonic() < deadline, "no tool_call within 60 s",
                  chan.events.get(execution_id))
            try:
                m = await chan.read(deadline - time.monotonic())
            except asyncio.TimeoutError:
                continue
            check(m["type"] == "event", "unexpected message", m)
        call = [e for e in chan.events[execution_id] if e["event"] == "tool_call"][0]["data"]
        await chan.send({"type": "tool_result", "execution_id": execution_id,
                         "call_id": call["call_id"], "error": "no adding today", "ref": 7})
        m = await chan.reply_to(7, "the error answer")
        check(m["type"] == "tool_result_accepted" and m.get("execution_id") == execution_id
              and m.get("call_id") == call["call_id"], "the error answer must be taken", m)
        first = await chan.until_end(execution_id)
    record = check_whole_run(execution_id, first)
    check("no adding today" in record["stdout"] and record["stdout"].startswith("refused: ")
          and record["stdout"].endswith("x" * 10 + "\n"),
          "the client's error text must reach the code as ToolError", record["stdout"])
    check(names(first).count("tool_result") == 1, "one tool_result event", names(first))
    chunks = [i for i, e in enumerate(first) if e["event"] == "output_chunk"]
    check(chunks, "no output_chunk event", names(first))

    def same(resumed, expected, what):
        # Stream entries match exactly; the end carries the same record.
        def key(events):
            end = events[-1]
            return ([(e["event"], e["id"], e["data"]) for e in events[:-1]]
                    + [(end["event"], end["id"], end["data"]["id"], end["data"]["status"],
                        end["data"]["stdout"])])
        check(key(resumed) == key(expected), what, resumed, expected)

    async with connect(URLS[0], TOKEN) as ws:
        chan = Channel(ws, "resume")
        after = first[chunks[0]]["id"]
        await chan.send({"type": "follow", "execution_id": execution_id,
                         "last_event_id": after, "ref": "from-chunk"})
        same(await chan.until_end(execution_id), first[chunks[0] + 1:],
             "last_event_id %s: the events after that chunk, then the end" % after)

        # The follow is over with its end, so the same execution may be followed again.
        chan.follow_reset(execution_id)
        await chan.send({"type": "follow", "execution_id": execution_id,
                         "last_event_id": "start", "ref": "from-start"})
        same(await chan.until_end(execution_id), first[1:],
             "last_event_id start: every event but execution_start")

        chan.follow_reset(execution_id)
        await chan.send({"type": "follow", "execution_id": execution_id,
                         "last_event_id": "end", "ref": "from-end"})
        m = await chan.reply_to("from-end", "follow from end")
        check(m == {"type": "unfollowed", "execution_id": execution_id, "ref": "from-end"},
              "last_event_id end: answered unfollowed", m)
        await chan.drain(1)
        check(execution_id not in chan.events, "events after unfollowed",
              chan.events.get(execution_id))
        check(not chan.stash, "unexpected messages", chan.stash)


# hostile: refused messages get the API's error codes, echo their ref and
# change nothing; the connection serves on. Refused handshakes, a plain GET
# and an admin's answer.
async def hostile():
    async with httpx.AsyncClient(timeout=30) as http:
        async with connect(URLS[0], TOKEN) as ws:
            chan = Channel(ws, "hostile")
            # A second follow of a followed execution is refused; the first
            # goes on (the job runs 3 s: its follow cannot have ended yet).
            running = await submit(http, {"language": "python",
                                          "code": "import time; time.sleep(3)", "wait": False})
            await chan.send({"type": "follow", "execution_id": running, "ref": "once"})
            await chan.send({"type": "follow", "execution_id": running, "ref": "twice"})
            await chan.error_for("twice", "INVALID_REQUEST", "a second follow")

            ended = (await submit(http, {"language": "python", "code": "print('done')",
                                         "tools": [ADD_TOOL]}))["id"]
            theirs = (await submit(http, {"language": "python", "code": "print('b')",
                                          "tools": [ADD_TOOL]}, token=OTHER_TOKEN))["id"]

            await chan.send("{nope")
            await chan.error_for(None, "INVALID_REQUEST", "not JSON", ref_optional=True)
            await chan.send(json.dumps(["follow", running]))
            await chan.error_for(None, "INVALID_REQUEST", "a JSON array", ref_optional=True)
            await chan.send({"type": "dance", "ref": "dance"})
            await chan.error_for("dance", "INVALID_REQUEST", "an unknown type")
            await chan.send({"type": "follow", "execution_id": ended, "ref": "field",
                             "colour": "red"})
            await chan.error_for("field", "INVALID_REQUEST", "an unknown field")
            await chan.send(json.dumps({"type": "follow", "execution_id": ended,
                                        "ref": "binary"}).encode())
            await chan.error_for("binary", "INVALID_REQUEST", "a binary frame", ref_optional=True)
            await chan.send({"type": "follow", "execution_id": UNKNOWN_ID, "ref": "unknown"})
            await chan.error_for("unknown", "NOT_FOUND", "follow of an unknown id")
            await chan.send({"type": "follow", "execution_id": ended,
                             "last_event_id": "garbage", "ref": "garbage"})
            await chan.error_for("garbage", "INVALID_REQUEST", "a bad last_event_id")
            await chan.send({"type": "follow", "execution_id": theirs, "ref": "theirs"})
            await chan.error_for("theirs", "NOT_FOUND", "follow of another tenant's job")
            await chan.send({"type": "tool_result", "execution_id": theirs, "call_id": "c1",
                             "result": 1, "ref": "their-call"})
            await chan.error_for("their-call", "NOT_FOUND", "answer to another tenant's job")
            await chan.send({"type": "tool_result", "execution_id": ended, "call_id": "c99",
                             "result": 1, "ref": "c99"})
            await chan.error_for("c99", ("NOT_FOUND", "TOOL_CALL_CLOSED"),
                                 "answer to no call of an ended job")

            # Still serving: the first follow runs to the end, once.
            events = await chan.until_end(running)
            check_whole_run(running, events)
            await chan.drain(0.5)
            check(set(chan.events) == {running}, "events of executions never followed",
                  list(chan.events))
            check(not chan.stash, "unexpected messages", chan.stash)

        e = await refused_handshake(URLS[0], None)
        check(e.status_code == 401, "a handshake without a token: 401", e.status_code)
        e = await refused_handshake(URLS[0], "not-a-token-of-anyone")
        check(e.status_code in (401, 403), "a handshake with a bad token: 401 or 403",
              e.status_code)

        r = await http.get(URLS[0] + "/v1/ws", headers=auth(TOKEN))
        check(r.status_code == 426, "GET /v1/ws without an upgrade: 426", r.status_code, r.text)
        check(r.headers.get("upgrade", "").lower() == "websocket",
              "the 426 names the upgrade (Upgrade: websocket)", dict(r.headers))
        check(r.json()["error"]["code"] == "INVALID_REQUEST", "the 426's error code", r.text)

    # Admin tokens may connect but not answer calls.
    async with connect(URLS[0], ADMIN_TOKEN) as ws:
        chan = Channel(ws, "admin")
        await chan.send({"type": "tool_result", "execution_id": ended, "call_id": "c1",
                         "result": 1, "ref": "admin"})
        await chan.error_for("admin", "FORBIDDEN", "an admin's answer")


# limits: an oversized message closes with 1009, a flood of messages is
# rate limited, and a tenant holds at most max_websockets connections on a
# broker.
async def limits():
    async with httpx.AsyncClient(timeout=30) as http:
        ended = (await submit(http, {"language": "python", "code": "print('hi')"}))["id"]

    async def follow_works(chan, ref):
        chan.follow_reset(ended)
        await chan.send({"type": "follow", "execution_id": ended, "ref": ref})
        record = check_whole_run(ended, await chan.until_end(ended, timeout=20))
        check(record["stdout"] == "hi\n", "the followed record's stdout", record)

    # (a) Over max_message_bytes (65536): closed with 1009.
    async with connect(URLS[0], TOKEN) as ws:
        big = json.dumps({"type": "follow", "execution_id": ended, "ref": "big",
                          "padding": "x" * 100000})
        check(len(big) > 100000, "the big message's size", len(big))
        try:
            await ws.send(big)
            while True:
                raw = await asyncio.wait_for(ws.recv(), 10)
                RECEIVED.append(("big", brief(raw, 300)))
        except websockets.exceptions.ConnectionClosed as e:
            check(e.rcvd is not None and e.rcvd.code == 1009,
                  "a message over max_message_bytes must close with 1009", str(e))
        except asyncio.TimeoutError:
            raise Failure("a message over max_message_bytes: the connection stayed open 10 s"
                          ) from None
    async with connect(URLS[0], TOKEN) as ws:
        await follow_works(Channel(ws, "after-big"), "after-big")

    # (b) 60 messages at once, 20 a second with bursts of 20: some refused.
    async with connect(URLS[0], TOKEN) as ws:
        chan = Channel(ws, "flood")
        for i in range(60):
            await chan.send({"type": "unfollow", "execution_id": UNKNOWN_ID, "ref": i})
        answers = {}
        for i in range(60):
            m = await chan.answer(lambda m: isinstance(m.get("ref"), int), "answer %d of 60" % i)
            check(0 <= m["ref"] < 60 and m["ref"] not in answers, "a ref sent once, echoed once",
                  m)
            answers[m["ref"]] = m
        limited = [m for m in answers.values()
                   if m["type"] == "error" and m["error"]["code"] == "RATE_LIMITED"]
        handled = [m for m in answers.values()
                   if m["type"] == "unfollowed" or (m["type"] == "error"
                                                    and m["error"]["code"] == "NOT_FOUND")]
        check(len(limited) + len(handled) == 60,
              "each answer is unfollowed, NOT_FOUND or RATE_LIMITED",
              [m for m in answers.values() if m not in limited and m not in handled])
        check(all(m["error"]["retryable"] is True for m in limited), "RATE_LIMITED is retryable",
              limited[:3])
        check(limited, "60 messages at once, none RATE_LIMITED (burst 20)", len(handled))
        check(len(handled) >= 15, "at least the burst must be served",
              len(handled), len(limited))
        # The bucket refills: the connection serves again.
        await asyncio.sleep(1.5)
        await follow_works(chan, "after-flood")

    # (c) At most 3 of tenant-a's connections on one broker.
    held = []
    try:
        for _ in range(3):
            held.append(await open_within(URLS[0], TOKEN, 5))
        e = await refused_handshake(URLS[0], TOKEN)
        check(e.status_code == 429, "a 4th connection of the tenant: 429", e.status_code)
        check("retry-after" in e.headers, "a 429 carries Retry-After", dict(e.headers))
        # Other tenants, and other brokers, are not counted with it.
        held.append(await open_within(URLS[0], OTHER_TOKEN, 5))
        if len(URLS) > 1:
            held.append(await open_within(URLS[1], TOKEN, 5))
        await held.pop(0).close()
        held.append(await open_within(URLS[0], TOKEN, 5))
    finally:
        await asyncio.gather(*(ws.close() for ws in held))


async def follows_and_idle():
    # (a) At most max_follows (4) executions followed on one connection.
    async with httpx.AsyncClient(timeout=30) as http:
        ids = [await submit(http, {"language": "shell", "code": "sleep 60", "wait": False})
               for _ in range(5)]
        try:
            async with connect(URLS[0], TOKEN) as ws:
                chan = Channel(ws, "follows")
                for i, eid in enumerate(ids[:4]):
                    await chan.send({"type": "follow", "execution_id": eid, "ref": "f%d" % i})
                # A follow is answered by its execution_start event.
                await chan.read_until(
                    lambda: all(chan.events.get(e) for e in ids[:4]) or None,
                    "four follows started", 20)
                await chan.send({"type": "follow", "execution_id": ids[4], "ref": "f4"})
                await chan.error_for("f4", "LIMIT_EXCEEDED", "a 5th follow (max_follows 4)")
                check(ids[4] not in chan.events, "a refused follow sends no event",
                      chan.events.get(ids[4]))
                await chan.send({"type": "unfollow", "execution_id": ids[0], "ref": "u0"})
                m = await chan.reply_to("u0", "unfollow")
                check(m["type"] == "unfollowed", "unfollow: unfollowed", m)
                await chan.send({"type": "follow", "execution_id": ids[4], "ref": "f4b"})
                await chan.read_until(lambda: chan.events.get(ids[4]) or None,
                                      "a follow once one was given up", 20)
        finally:
            for eid in ids:
                r = await http.post(URLS[0] + "/v1/executions/%s/cancel" % eid,
                                    headers=auth(TOKEN))
                check(r.status_code == 200, "cancel %s: HTTP %d" % (eid, r.status_code), r.text)

    # (b) idle_timeout_ms (4000): a peer that answers no ping is closed; one
    # that answers (the websockets library does) stays, though it sends
    # nothing itself (its own pings are off).
    async with connect(URLS[0], TOKEN, ping_interval=None) as live:
        host, port = URLS[0][len("http://"):].rstrip("/").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(("GET /v1/ws HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer %s\r\n\r\n"
                      % (host, port, TOKEN)).encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        check(head.startswith(b"HTTP/1.1 101"), "the raw handshake", head.decode(errors="replace"))
        start = time.monotonic()
        opcodes = []
        try:
            while True:
                b0, b1 = await asyncio.wait_for(reader.readexactly(2), 20)
                size = b1 & 0x7F
                if size >= 126:
                    size = int.from_bytes(await reader.readexactly(2 if size == 126 else 8), "big")
                await reader.readexactly(size)
                opcodes.append(b0 & 0x0F)
        except (asyncio.IncompleteReadError, ConnectionResetError):
            closed_after = time.monotonic() - start
        except asyncio.TimeoutError:
            raise Failure("a peer that answers no ping: still open after 20 s (idle_timeout_ms "
                          "4000)") from None
        finally:
            writer.close()
        check(0x9 in opcodes, "the broker pings a quiet peer before closing it", opcodes)
        check(closed_after >= 3.5, "closed at idle_timeout_ms (4000), not before", closed_after)
        chan = Channel(live, "live")
        await chan.send({"type": "unfollow", "execution_id": UNKNOWN_ID, "ref": "alive"})
        m = await chan.reply_to("alive", "the connection that answers pings, after %.1f s quiet"
                                % closed_after)
        check(m["type"] == "unfollowed", "unfollow on the live connection", m)


SCENARIOS = {
    "code_mode": code_mode,
    "answer_error_and_resume": answer_error_and_resume,
    "hostile": hostile,
    "limits": limits,
    "follows_and_idle": follows_and_idle,
}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in SCENARIOS:
        print("usage: websocket_client.py " + "|".join(SCENARIOS), file=sys.stderr)
        return 2
    name = sys.argv[1]
    try:
        asyncio.run(asyncio.wait_for(SCENARIOS[name](), SCENARIO_TIMEOUT_S))
    except Exception as e:  # noqa: BLE001 (every failure is reported the same way)
        if isinstance(e, Failure):
            print("FAIL %s: %s" % (name, e), file=sys.stderr)
        elif isinstance(e, asyncio.TimeoutError):
            print("FAIL %s: not done within %d s" % (name, SCENARIO_TIMEOUT_S), file=sys.stderr)
        else:
            print("FAIL %s:" % name, file=sys.stderr)
            traceback.print_exc()
        print("last messages received:", file=sys.stderr)
        for channel, text in RECEIVED:
            print("  [%s] %s" % (channel, text), file=sys.stderr)
        return 1
    print("ok " + name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
