// End-to-end test of @kiln/sdk against a running cluster (KILN_URL,
// KILN_TOKEN, KILN_ADMIN_TOKEN), plus what needs no cluster: the SSE parser
// fed in pieces, the retry behaviour and the tool handlers against a local
// stub server and the webhook signatures (a local receiver).
// Run by run.sh from a project where the package is installed.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createHmac, randomUUID } from 'node:crypto';
import {
  KilnClient, KilnError, SseParser, InvalidRequestError, LimitExceededError, UnauthorizedError,
  NotFoundError, ForbiddenError, UnavailableError, ToolCallClosedError, Execution, verifyWebhook,
  signWebhook, WebhookVerificationError,
} from '@kiln/sdk';

const url = process.env.KILN_URL;
const token = process.env.KILN_TOKEN;
const adminToken = process.env.KILN_ADMIN_TOKEN;
const runId = `ts-${Date.now().toString(36)}-${randomUUID().slice(0, 8)}`;
const kiln = new KilnClient({ url, token });

test('SseParser: events come out whole however the text is split', () => {
  const text = 'event: execution_start\r\nid: start\r\ndata: {"a":1}\r\n\r\n'
    + ': keepalive\n\n'
    + 'event: output_chunk\rid: 17-0\rdata: line one\rdata:line two\r\r'
    + 'data: no name\n\n';
  const want = [
    { event: 'execution_start', id: 'start', data: '{"a":1}' },
    { event: 'output_chunk', id: '17-0', data: 'line one\nline two' },
    { event: 'message', id: '17-0', data: 'no name' },
  ];
  for (const size of [1, 2, 3, 7, text.length]) {
    const parser = new SseParser();
    const got = [];
    for (let i = 0; i < text.length; i += size) got.push(...parser.push(text.slice(i, i + size)));
    assert.deepEqual(got, want, `pieces of ${size}`);
  }
});

test('run: stdout, result and input variables', async () => {
  const ex = await kiln.run("print('hello')\nresult = {'sum': sum(numbers), 'name': name}", {
    input: { numbers: [1, 2, 3], name: 'kiln' },
  });
  assert.ok(ex instanceof Execution);
  assert.equal(ex.status, 'succeeded');
  assert.equal(ex.ok, true);
  assert.equal(ex.stdout, 'hello\n');
  assert.equal(ex.exitCode, 0);
  assert.deepEqual(ex.result, { sum: 6, name: 'kiln' });
  assert.match(ex.id, /^ex_/);
  assert.equal(ex.raw.id, ex.id);

  const js = await kiln.run('console.log(greeting + "!")', { language: 'javascript', input: { greeting: 'hi' } });
  assert.equal(js.stdout, 'hi!\n');
  const sh = await kiln.run('echo "$WHO" $(cat)', { language: 'shell', input: { WHO: 'shell' }, stdin: 'in' });
  assert.equal(sh.stdout, 'shell in\n');
});

test('a job that fails is a record, not a thrown error', async () => {
  const ex = await kiln.run("import sys\nprint('before')\nsys.stderr.write('oops\\n')\nraise ValueError('boom')");
  assert.equal(ex.status, 'failed');
  assert.equal(ex.ok, false);
  assert.equal(ex.exitCode, 1);
  assert.equal(ex.stdout, 'before\n');
  assert.match(ex.stderr, /^oops\n/);
  assert.equal(ex.error.code, 'EXECUTION_FAILED');
  assert.equal(ex.error.type, 'ValueError');
});

test('streaming: callbacks see the output as it comes, in order', async () => {
  const out = [];
  const err = [];
  const events = [];
  const ex = await kiln.run(
    'import sys, time\n'
    + 'for i in range(4):\n'
    + "    print(f'line {i}', flush=True)\n"
    + '    time.sleep(0.25)\n'
    + "sys.stderr.write('warn\\n')\n",
    {
      onStdout: (t) => out.push(t),
      onStderr: (t) => err.push(t),
      onEvent: (name) => events.push(name),
    },
  );
  assert.equal(ex.status, 'succeeded');
  assert.ok(out.length > 1, `onStdout called ${out.length} time(s)`);
  assert.equal(out.join(''), ex.stdout);
  assert.equal(ex.stdout, 'line 0\nline 1\nline 2\nline 3\n');
  assert.equal(err.join(''), 'warn\n');
  assert.equal(err.join(''), ex.stderr);
  assert.equal(events[0], 'execution_start');
  assert.equal(events.at(-1), 'execution_end');
  assert.ok(events.includes('output_chunk'));
});

test('files in, collected files out (binary round trip)', async () => {
  const bytes = new Uint8Array(256).map((_, i) => i);
  const ex = await kiln.run(
    'import os\n'
    + "data = open('in/data.bin', 'rb').read()\n"
    + "os.makedirs('out', exist_ok=True)\n"
    + "open('out/rev.bin', 'wb').write(data[::-1])\n"
    + "open('out/note.txt', 'w', encoding='utf-8').write(open('note.txt', encoding='utf-8').read().upper())\n",
    { files: { 'in/data.bin': bytes, 'note.txt': 'héllo' }, collect: ['out/*'] },
  );
  assert.equal(ex.status, 'succeeded', ex.stderr);
  assert.deepEqual(Object.keys(ex.files).sort(), ['out/note.txt', 'out/rev.bin']);
  assert.deepEqual([...ex.files['out/rev.bin']], [...bytes].reverse());
  assert.equal(new TextDecoder().decode(ex.files['out/note.txt']), 'HÉLLO');
  assert.equal(ex.filesTruncated, false);
});

test('session keeps state, and is gone once closed', async () => {
  const conversationId = `${runId}-conv`;
  const session = kiln.session({ conversationId });
  const first = await session.run('x = 41');
  assert.equal(first.status, 'succeeded');
  assert.equal(first.sessionId, session.id);
  assert.equal(first.sessionEpoch, 1);
  const second = await session.run('x += 1\nresult = x');
  assert.equal(second.result, 42);

  const listed = await kiln.listSessions({ conversationId });
  assert.deepEqual(listed.map((s) => s.id), [session.id]);
  assert.equal(listed[0].executionCount, 2);
  assert.equal(listed[0].language, 'python');

  const deleted = await session.close();
  assert.equal(deleted.state, 'deleted');
  assert.deepEqual(await kiln.listSessions({ conversationId }), []);
  assert.equal(await session.close(), null); // already gone: not an error
});

test('withSession closes the session even when the callback throws', async () => {
  const conversationId = `${runId}-with`;
  let id;
  await assert.rejects(kiln.withSession({ conversationId, language: 'javascript' }, async (s) => {
    id = s.id;
    const ex = await s.run('globalThis.n = 5; console.log(n)');
    assert.equal(ex.stdout, '5\n');
    throw new Error('callback failed');
  }), /callback failed/);
  assert.ok(id);
  assert.deepEqual(await kiln.listSessions({ conversationId }), []);
});

test('errors are typed', async () => {
  await assert.rejects(kiln.run('1', { language: 'ruby' }), (e) => {
    assert.ok(e instanceof InvalidRequestError);
    assert.ok(e instanceof KilnError);
    assert.equal(e.code, 'INVALID_REQUEST');
    assert.equal(e.status, 400);
    assert.equal(e.retryable, false);
    return true;
  });
  const stranger = new KilnClient({ url, token: `not-a-token-${runId}` });
  await assert.rejects(stranger.run('print(1)'), (e) => e instanceof UnauthorizedError && e.status === 401);
  await assert.rejects(kiln.get(`ex_nothing_${runId}`), (e) => e instanceof NotFoundError && e.code === 'NOT_FOUND');
  // An admin token may not submit.
  const admin = new KilnClient({ url, token: adminToken });
  await assert.rejects(admin.submit('print(1)'), (e) => e instanceof ForbiddenError && e.status === 403);
});

test('an idempotency key reused answers with the same job', async () => {
  const idempotencyKey = `${runId}-idem`;
  const a = await kiln.submit('print("once")', { idempotencyKey });
  const b = await kiln.submit('print("twice")', { idempotencyKey });
  assert.equal(b, a);
  const ex = await kiln.run('print("thrice")', { idempotencyKey });
  assert.equal(ex.id, a);
  assert.equal(ex.stdout, 'once\n');
});

test('submit, wait, get and cancel', async () => {
  const id = await kiln.submit('print(7 * 6)');
  const ex = await kiln.wait(id);
  assert.equal(ex.id, id);
  assert.equal(ex.stdout, '42\n');
  assert.equal((await kiln.get(id)).stdout, '42\n');

  const slow = await kiln.submit('import time\ntime.sleep(30)');
  const cancelled = await kiln.cancel(slow);
  assert.equal(cancelled.id, slow);
  assert.equal((await kiln.wait(slow)).status, 'cancelled');
});

test('an aborted run cancels its job', async () => {
  const ac = new AbortController();
  let id;
  const running = kiln.run("import time\nprint('started', flush=True)\ntime.sleep(30)", {
    signal: ac.signal,
    onEvent: (name, data) => { if (name === 'execution_start') id = data.id; },
    onStdout: () => ac.abort(),
  });
  await assert.rejects(running, (e) => e.name === 'AbortError');
  assert.ok(id, 'execution_start was seen');
  const ex = await kiln.wait(id);
  assert.equal(ex.status, 'cancelled');
});

test('listExecutions follows the cursor and filters by session', async () => {
  const session = kiln.session({ sessionId: `${runId}-list` });
  try {
    const ids = [];
    for (const code of ['print(1)', 'print(2)', 'print(3)']) ids.push((await session.run(code)).id);
    const seen = [];
    for await (const e of kiln.listExecutions({ sessionId: session.id, pageSize: 2 })) {
      assert.equal(e.sessionId, session.id);
      seen.push(e.id);
    }
    assert.deepEqual(seen, ids.reverse()); // newest first, over two pages
    const failedOnly = [];
    for await (const e of kiln.listExecutions({ sessionId: session.id, status: ['failed'] })) failedOnly.push(e);
    assert.deepEqual(failedOnly, []);
  } finally {
    await session.close();
  }
});

test('submitBatch answers per item', async () => {
  const results = await kiln.submitBatch([
    { code: 'print("batched")' },
    { code: '1', language: 'ruby' },
  ]);
  assert.equal(results.length, 2);
  assert.match(results[0].id, /^ex_/);
  assert.equal(results[0].error, null);
  assert.ok(results[1].error instanceof InvalidRequestError);
  assert.equal(results[1].error.code, 'INVALID_REQUEST');
  assert.equal(results[1].id, null);
  assert.equal((await kiln.wait(results[0].id)).stdout, 'batched\n');
});

test('capabilities, runtimes, health', async () => {
  const caps = await kiln.capabilities();
  assert.equal(caps.code_execution, true);
  assert.ok(caps.runtimes.includes('python'));
  assert.ok(caps.limits.max.timeout_ms >= caps.limits.default.timeout_ms);
  const runtimes = await kiln.runtimes();
  const python = runtimes.find((r) => r.language === 'python');
  assert.ok(python && python.versions.length > 0 && python.workers > 0);
  assert.equal((await kiln.health()).status, 'ok');
});

test('usage with the admin token', async () => {
  const { tenant } = await kiln.capabilities();
  const admin = new KilnClient({ url, token: adminToken });
  const today = new Date();
  const usage = await admin.usage({ tenant, from: new Date(today.getTime() - 86400000), to: today });
  assert.equal(usage.tenants.length, 1);
  assert.equal(usage.tenants[0].tenant, tenant);
  assert.equal(usage.tenants[0].days.length, 2);
  assert.ok(usage.tenants[0].total.executions > 0); // this test's jobs
  await assert.rejects(kiln.usage({ tenant }), (e) => e instanceof ForbiddenError);
});

// --- tool callbacks (code mode) against the cluster --------------------------

// A tool declared with a JSON Schema: calls whose arguments do not match are
// refused in the sandbox (ToolRefused) and never reach the handler.
const addTool = {
  name: 'add',
  description: 'Adds two integers.',
  parameters: {
    type: 'object',
    properties: { a: { type: 'integer' }, b: { type: 'integer' } },
    required: ['a', 'b'],
    additionalProperties: false,
  },
};

test('tools: python code calls a tool five times, the handler answers', async () => {
  const calls = [];
  const events = [];
  const ex = await kiln.run(
    'total = 0\n'
    + 'for i in range(5):\n'
    + "    total += kiln.tool('add', {'a': i, 'b': 1})\n"
    + 'print(total)\n',
    {
      tools: [addTool],
      toolHandlers: { add: ({ a, b }) => { calls.push({ a, b }); return a + b; } },
      onEvent: (name, data) => { if (name.startsWith('tool_')) events.push([name, data]); },
    },
  );
  assert.equal(ex.status, 'succeeded', ex.stderr);
  assert.equal(ex.stdout, '15\n');
  assert.deepEqual(calls, [0, 1, 2, 3, 4].map((i) => ({ a: i, b: 1 })));
  // Each call, then its answer; onEvent sees both.
  assert.deepEqual(events.map(([name]) => name), Array(5).fill(['tool_call', 'tool_result']).flat());
  assert.deepEqual(events.filter(([n]) => n === 'tool_call').map(([, d]) => [d.call_id, d.name, d.arguments]),
    [0, 1, 2, 3, 4].map((i) => [`c${i + 1}`, 'add', { a: i, b: 1 }]));
  assert.deepEqual(events.filter(([n]) => n === 'tool_result').map(([, d]) => [d.call_id, d.ok]),
    [1, 2, 3, 4, 5].map((i) => [`c${i}`, true]));
});

test('tools: javascript in the sandbox awaits kiln.tool, one by one and all at once', async () => {
  let active = 0;
  let peak = 0;
  const ex = await kiln.run(
    'let total = 0;\n'
    + 'for (let i = 0; i < 5; i++) total += await kiln.tool("add", { a: i, b: 1 });\n'
    + 'console.log(total);\n'
    + 'const all = await Promise.all([1, 2, 3].map((x) => kiln.tool("slow", { x })));\n'
    + 'console.log(JSON.stringify(all));\n',
    {
      language: 'javascript',
      tools: [addTool, { name: 'slow', description: 'Doubles x, slowly.' }],
      toolHandlers: {
        add: ({ a, b }) => a + b,
        slow: async ({ x }) => {
          active += 1;
          peak = Math.max(peak, active);
          await new Promise((r) => setTimeout(r, 300));
          active -= 1;
          return { doubled: 2 * x };
        },
      },
    },
  );
  assert.equal(ex.status, 'succeeded', ex.stderr);
  assert.equal(ex.stdout, '15\n[{"doubled":2},{"doubled":4},{"doubled":6}]\n');
  assert.ok(peak > 1, `the handlers ran one at a time (peak ${peak})`);
});

test('tools: a handler that throws is a ToolError in the sandbox, as is a tool without a handler', async () => {
  const ex = await kiln.run(
    'for (const name of ["search", "lookup"]) {\n'
    + '  try {\n'
    + '    await kiln.tool(name, { q: "kiln" });\n'
    + '  } catch (e) {\n'
    + '    console.log(`caught ${e.name}: ${e.message}`);\n'
    + '  }\n'
    + '}\n',
    {
      language: 'javascript',
      tools: [{ name: 'search' }, { name: 'lookup' }],
      toolHandlers: { search: async ({ q }) => { throw new Error(`the index is down (${q})`); } },
    },
  );
  assert.equal(ex.status, 'succeeded', ex.stderr);
  assert.equal(ex.stdout, 'caught ToolError: the index is down (kiln)\ncaught ToolError: no handler for tool lookup\n');

  // The same from python.
  const py = await kiln.run(
    "try:\n    kiln.tool('search', {'q': 'py'})\nexcept kiln.ToolError as e:\n    print(f'caught {type(e).__name__}: {e}')\n",
    { tools: [{ name: 'search' }], toolHandlers: { search: ({ q }) => { throw new Error(`the index is down (${q})`); } } },
  );
  assert.equal(py.stdout, 'caught ToolError: the index is down (py)\n');
});

test('tools: arguments that break the schema are refused in the sandbox; the handler is not called', async () => {
  const calls = [];
  const events = [];
  const ex = await kiln.run(
    'for (const [name, args] of [["add", { a: "one", b: 1 }], ["add", { a: 1 }], ["undeclared", {}]]) {\n'
    + '  try {\n'
    + '    await kiln.tool(name, args);\n'
    + '  } catch (e) {\n'
    + '    console.log(e.name, name);\n'
    + '  }\n'
    + '}\n',
    {
      language: 'javascript',
      tools: [addTool],
      toolHandlers: { add: (args) => { calls.push(args); return 0; } },
      onEvent: (name) => events.push(name),
    },
  );
  assert.equal(ex.status, 'succeeded', ex.stderr);
  assert.equal(ex.stdout, 'ToolRefused add\nToolRefused add\nToolRefused undeclared\n');
  assert.deepEqual(calls, []);
  assert.ok(!events.includes('tool_call'), events.join(','));
});

test('tools: answered by hand with submitToolResult; after the end it is ToolCallClosedError', async () => {
  // Answered from onEvent: the first answer is accepted, a second one is refused.
  const id = await kiln.submit('console.log(JSON.stringify(await kiln.tool("add", { a: 1, b: 2 })))',
    { language: 'javascript', tools: [addTool] });
  const accepted = [];
  const ex = await kiln.wait(id, {
    onEvent: (name, data) => {
      if (name !== 'tool_call') return;
      accepted.push(kiln.submitToolResult(id, data.call_id, { result: { sum: 3 } })
        .then(async (r) => {
          await assert.rejects(kiln.submitToolResult(id, data.call_id, { result: 4 }), ToolCallClosedError);
          return r;
        }));
    },
  });
  assert.equal(ex.stdout, '{"sum":3}\n');
  assert.deepEqual(await Promise.all(accepted), [{ callId: 'c1', accepted: true }]);

  // Nobody answers: the call times out in the sandbox, and its job ends.
  const late = await kiln.submit(
    'try {\n  await kiln.tool("add", { a: 1, b: 2 });\n} catch (e) {\n  console.log(e.name);\n}\n',
    { language: 'javascript', tools: [addTool], toolTimeoutMs: 1000 },
  );
  const callIds = [];
  const done = await kiln.wait(late, { onEvent: (name, data) => { if (name === 'tool_call') callIds.push(data.call_id); } });
  assert.equal(done.status, 'succeeded', done.stderr);
  assert.equal(done.stdout, 'ToolTimeout\n');
  assert.deepEqual(callIds, ['c1']);
  for (const answer of [{ result: 3 }, { error: 'too late' }]) {
    await assert.rejects(kiln.submitToolResult(late, 'c1', answer), (e) => {
      assert.ok(e instanceof ToolCallClosedError && e instanceof KilnError);
      assert.equal(e.code, 'TOOL_CALL_CLOSED');
      assert.equal(e.status, 409);
      return true;
    });
  }
  await assert.rejects(kiln.submitToolResult(late, 'c1', {}), TypeError);
});

test('tools: bad declarations are refused at submit', async () => {
  await assert.rejects(kiln.run('pass', { tools: [{ name: 'not a name' }] }),
    (e) => e instanceof InvalidRequestError && /tools\[0\]\.name/.test(e.message));
  await assert.rejects(kiln.run('pass', { tools: Array.from({ length: 33 }, (_, i) => ({ name: `t${i}` })) }),
    LimitExceededError);
});

// A stub broker on 127.0.0.1. `answer(req, n)` (n: 1 for the first request)
// writes the answer itself or returns [status, body] to send as JSON.
async function stubServer(answer) {
  const requests = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const r = { method: req.method, url: req.url, headers: req.headers, body: body ? JSON.parse(body) : null };
      requests.push(r);
      const reply = answer(r, requests.length, res);
      if (!reply) return;
      res.writeHead(reply[0], { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(reply[1]));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    requests,
    close: () => { server.closeAllConnections?.(); server.close(); },
  };
}

// Answers from a list, the last one repeated.
const inTurn = (answers) => (_req, n) => answers[Math.min(n, answers.length) - 1];

test('retries: a retryable error is retried with the same Idempotency-Key', async () => {
  const unavailable = [503, { error: { code: 'UNAVAILABLE', message: 'x', retryable: true } }];
  const stub = await stubServer(inTurn([unavailable, unavailable, [202, { id: 'ex_x', status: 'queued' }]]));
  try {
    const client = new KilnClient({ url: stub.url, token: 't', maxRetries: 3 });
    assert.equal(await client.submit('print(1)'), 'ex_x');
    assert.equal(stub.requests.length, 3);
    const keys = stub.requests.map((r) => r.headers['idempotency-key']);
    assert.ok(keys[0] && keys[0].length > 0);
    assert.deepEqual(keys, [keys[0], keys[0], keys[0]]);
    for (const r of stub.requests) {
      assert.equal(r.method, 'POST');
      assert.equal(r.url, '/v1/executions');
      assert.equal(r.headers.authorization, 'Bearer t');
      assert.equal(r.body.wait, false);
    }
  } finally {
    stub.close();
  }
});

test('retries: give up after maxRetries; a non-retryable error is not retried', async () => {
  const unavailable = [503, { error: { code: 'UNAVAILABLE', message: 'x', retryable: true } }];
  const down = await stubServer(inTurn([unavailable]));
  try {
    const client = new KilnClient({ url: down.url, token: 't', maxRetries: 1 });
    await assert.rejects(client.submit('1'), (e) => e instanceof UnavailableError && e.retryable);
    assert.equal(down.requests.length, 2);
  } finally {
    down.close();
  }
  const bad = await stubServer(inTurn([[400, { error: { code: 'INVALID_REQUEST', message: 'no', retryable: false } }]]));
  try {
    const client = new KilnClient({ url: bad.url, token: 't', maxRetries: 3 });
    await assert.rejects(client.submit('1'), InvalidRequestError);
    assert.equal(bad.requests.length, 1);
  } finally {
    bad.close();
  }
  // Nothing listening: a network failure is UnavailableError, retryable.
  const closed = await stubServer(inTurn([unavailable]));
  closed.close();
  const client = new KilnClient({ url: closed.url, token: 't', maxRetries: 1 });
  await assert.rejects(client.get('ex_x'), (e) => e instanceof UnavailableError && e.status === 0 && e.retryable);
});

test('wait: a dropped event stream resumes after the last event seen', async () => {
  const sse = (event, id, data) => `event: ${event}\nid: ${id}\ndata: ${JSON.stringify(data)}\n\n`;
  const chunk = (seq, data) => ({ stream: 'stdout', seq, data });
  const stub = await stubServer((req, n, res) => {
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    if (n === 1) {
      res.write(sse('execution_start', 'start', { id: 'ex_s', status: 'running' }));
      res.write(sse('output_chunk', '1-0', chunk(0, 'a')));
      res.write('event: output_chunk\nid: 2-0\nda'); // cut mid-event: must not count as seen
      setTimeout(() => res.destroy(), 50);
      return null;
    }
    res.write(sse('output_chunk', '2-0', chunk(1, 'b')));
    res.end(sse('execution_end', 'end', { id: 'ex_s', status: 'succeeded', stdout: 'ab', exit_code: 0 }));
    return null;
  });
  try {
    const client = new KilnClient({ url: stub.url, token: 't' });
    const parts = [];
    const ex = await client.wait('ex_s', { onStdout: (t) => parts.push(t) });
    assert.equal(ex.status, 'succeeded');
    assert.deepEqual(parts, ['a', 'b']);
    assert.deepEqual(stub.requests.map((r) => r.headers['last-event-id']), [undefined, '1-0']);
    assert.equal(stub.requests[0].url, '/v1/executions/ex_s/events');
  } finally {
    stub.close();
  }
});

// --- tool handlers against a stub broker ----------------------------------

const sseEvent = (event, id, data) => `event: ${event}\nid: ${id}\ndata: ${JSON.stringify(data)}\n\n`;
const toolCall = (callId, name, args = {}) => ({ call_id: callId, name, arguments: args });

// The events stream of ex_t sends `calls` as tool_call events (ids 1-0, 2-0,
// ...) and keepalives until each call has an answer that is not a 503, then a
// tool_result per accepted answer and execution_end. POST tool-results is
// answered by reply(n, body) -> [status, body] (n from 1; default 200).
// dropAfterCalls: the first connection breaks after the calls. replay: an
// ended job, each call followed by its tool_result at once.
async function toolBroker(calls, { reply, dropAfterCalls = false, replay = false } = {}) {
  const record = { id: 'ex_t', status: 'succeeded', stdout: '', exit_code: 0 };
  const posts = [];
  const settled = new Map();
  let onSettled = null;
  const allSettled = () => calls.every((c) => settled.has(c.call_id));
  const stub = await stubServer((req, n, res) => {
    if (req.method === 'POST') {
      assert.equal(req.url, '/v1/executions/ex_t/tool-results');
      posts.push(req.body);
      const [status, body] = reply?.(posts.length, req.body) ?? [200, null];
      if (status !== 503) settled.set(req.body.call_id, [status, req.body]);
      res.writeHead(status, { 'Content-Type': 'application/json', ...(status === 503 ? { 'Retry-After': '0' } : {}) });
      res.end(JSON.stringify(body ?? { call_id: req.body.call_id, accepted: true }));
      if (allSettled()) onSettled?.();
      return null;
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    if (req.headers['last-event-id'] === undefined) {
      let out = sseEvent('execution_start', 'start', { id: 'ex_t', status: 'running' });
      calls.forEach((c, i) => {
        out += sseEvent('tool_call', `${i + 1}-0`, c);
        if (replay) out += sseEvent('tool_result', `${i + 1}-1`, { call_id: c.call_id, ok: true });
      });
      if (replay) {
        res.end(out + sseEvent('execution_end', 'end', record));
        return null;
      }
      res.write(out);
      if (dropAfterCalls) {
        setTimeout(() => res.destroy(), 50);
        return null;
      }
    }
    const keepalive = setInterval(() => res.write(': keepalive\n\n'), 50);
    const giveUp = setTimeout(() => onSettled?.(), 10000);
    onSettled = () => {
      onSettled = null;
      clearInterval(keepalive);
      clearTimeout(giveUp);
      let out = '';
      [...settled].sort(([a], [b]) => a.localeCompare(b)).forEach(([callId, [status, body]], i) => {
        if (status === 200) out += sseEvent('tool_result', `${100 + i}-0`, { call_id: callId, ok: 'result' in body });
      });
      res.end(out + sseEvent('execution_end', 'end', record));
    };
    if (allSettled()) onSettled();
    return null;
  });
  // call_id -> the body of its last answer
  const answers = () => Object.fromEntries(posts.map((b) => [b.call_id, b]));
  return { ...stub, posts, answers };
}

test('toolHandlers: each call answered by its handler; onEvent sees the tool events', async () => {
  const calls = [
    toolCall('c1', 'add', { a: 2, b: 3 }), toolCall('c2', 'search', { q: 'x' }), toolCall('c3', 'nope'),
    toolCall('c4', 'nothing'), toolCall('c5', 'big'), toolCall('c6', 'thrown'), toolCall('c7', 'later', { x: 1 }),
  ];
  const broker = await toolBroker(calls);
  const events = [];
  try {
    const client = new KilnClient({ url: broker.url, token: 't' });
    const ex = await client.wait('ex_t', {
      toolHandlers: {
        add: ({ a, b }) => a + b,
        search: ({ q }) => { throw new Error(`the index is down (${q})`); },
        nothing: () => undefined,
        big: () => 10n, // a BigInt is not JSON
        thrown: () => { throw 'plain string'; }, // eslint-disable-line no-throw-literal
        later: async ({ x }) => { await new Promise((r) => setTimeout(r, 20)); return [x]; },
      },
      onEvent: (name, data) => events.push([name, data]),
    });
    assert.equal(ex.status, 'succeeded');
  } finally {
    broker.close();
  }
  const answers = broker.answers();
  assert.deepEqual(answers.c1, { call_id: 'c1', result: 5 });
  assert.deepEqual(answers.c2, { call_id: 'c2', error: 'the index is down (x)' });
  assert.deepEqual(answers.c3, { call_id: 'c3', error: 'no handler for tool nope' });
  assert.deepEqual(answers.c4, { call_id: 'c4', result: null });
  assert.match(answers.c5.error, /^the handler of tool big returned a value that is not JSON/);
  assert.deepEqual(answers.c6, { call_id: 'c6', error: 'plain string' });
  assert.deepEqual(answers.c7, { call_id: 'c7', result: [1] });
  assert.equal(broker.posts.length, 7);
  assert.deepEqual(events.filter(([n]) => n === 'tool_call').map(([, d]) => d), calls);
  assert.deepEqual(events.filter(([n]) => n === 'tool_result').map(([, d]) => d.call_id).sort(),
    ['c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7']);
});

test('toolHandlers: calls are handled concurrently', async () => {
  let release;
  const bothIn = new Promise((r) => { release = r; });
  let started = 0;
  const broker = await toolBroker([toolCall('c1', 'add', { a: 1, b: 1 }), toolCall('c2', 'add', { a: 2, b: 2 })]);
  try {
    const client = new KilnClient({ url: broker.url, token: 't' });
    await client.wait('ex_t', {
      toolHandlers: {
        add: async ({ a, b }) => { // both calls are in here at once, or this never returns
          if (++started === 2) release();
          await bothIn;
          return a + b;
        },
      },
    });
  } finally {
    broker.close();
  }
  assert.deepEqual(broker.answers(), { c1: { call_id: 'c1', result: 2 }, c2: { call_id: 'c2', result: 4 } });
});

test('toolHandlers: a 503 is retried, and a 409 after it counts as answered', async () => {
  const replies = {
    1: [503, { error: { code: 'UNAVAILABLE', message: 'worker not here', retryable: true } }],
    2: [409, { error: { code: 'TOOL_CALL_CLOSED', message: 'answered', retryable: false } }],
  };
  const broker = await toolBroker([toolCall('c1', 'add', { a: 1, b: 2 })], { reply: (n) => replies[n] });
  try {
    const client = new KilnClient({ url: broker.url, token: 't' });
    const ex = await client.wait('ex_t', { toolHandlers: { add: ({ a, b }) => a + b } });
    assert.equal(ex.status, 'succeeded');
  } finally {
    broker.close();
  }
  assert.deepEqual(broker.posts, [{ call_id: 'c1', result: 3 }, { call_id: 'c1', result: 3 }]);
});

test('toolHandlers: a result the broker refuses is replaced by an error', async () => {
  const tooBig = [400, { error: { code: 'LIMIT_EXCEEDED', message: 'result: over 1048576 bytes', retryable: false } }];
  const broker = await toolBroker([toolCall('c1', 'big')], { reply: (n, body) => ('result' in body ? tooBig : null) });
  try {
    const client = new KilnClient({ url: broker.url, token: 't' });
    await client.wait('ex_t', { toolHandlers: { big: () => 'x' } });
  } finally {
    broker.close();
  }
  assert.equal(broker.posts.length, 2);
  assert.deepEqual(broker.posts[1], {
    call_id: 'c1', error: 'the result of tool big was refused: LIMIT_EXCEEDED: result: over 1048576 bytes',
  });
});

test('toolHandlers: an answer that cannot be sent rejects the wait', async () => {
  const forbidden = [403, { error: { code: 'FORBIDDEN', message: 'admin', retryable: false } }];
  const broker = await toolBroker([toolCall('c1', 'add', { a: 1, b: 2 })], { reply: () => forbidden });
  try {
    const client = new KilnClient({ url: broker.url, token: 't' });
    await assert.rejects(client.wait('ex_t', { toolHandlers: { add: () => 3 } }),
      (e) => e instanceof ForbiddenError && e.executionId === 'ex_t');
  } finally {
    broker.close();
  }
});

test('toolHandlers: a resumed stream does not hand a call out twice', async () => {
  const seen = [];
  const broker = await toolBroker([toolCall('c1', 'add', { a: 1, b: 2 })], { dropAfterCalls: true });
  try {
    const client = new KilnClient({ url: broker.url, token: 't' });
    await client.wait('ex_t', { toolHandlers: { add: (args) => { seen.push(args); return 3; } } });
  } finally {
    broker.close();
  }
  assert.deepEqual(seen, [{ a: 1, b: 2 }]);
  assert.deepEqual(broker.requests.filter((r) => r.method === 'GET').map((r) => r.headers['last-event-id']),
    [undefined, '1-0']);
});

test('toolHandlers: a replayed call that was answered already is not handled', async () => {
  const seen = [];
  const broker = await toolBroker([toolCall('c1', 'add', { a: 1, b: 2 })], { replay: true });
  try {
    const client = new KilnClient({ url: broker.url, token: 't' });
    const ex = await client.wait('ex_t', { toolHandlers: { add: (args) => { seen.push(args); return 3; } } });
    assert.equal(ex.status, 'succeeded');
  } finally {
    broker.close();
  }
  assert.deepEqual([seen, broker.posts], [[], []]);
});

test('submitToolResult: one of result and error; 409 is ToolCallClosedError', async () => {
  const closed = [409, { error: { code: 'TOOL_CALL_CLOSED', message: 'timed out', retryable: false } }];
  const broker = await toolBroker([], { reply: (n) => (n === 4 ? closed : null) });
  try {
    const client = new KilnClient({ url: broker.url, token: 't' });
    assert.deepEqual(await client.submitToolResult('ex_t', 'c1', { result: null }), { callId: 'c1', accepted: true });
    await client.submitToolResult('ex_t', 'c2', { result: undefined }); // JSON has no undefined: null
    await client.submitToolResult('ex_t', 'c3', { error: 'no such user' });
    await assert.rejects(client.submitToolResult('ex_t', 'c4', { result: { rows: [1, 2] } }), (e) => {
      assert.ok(e instanceof ToolCallClosedError && e instanceof KilnError);
      assert.deepEqual([e.code, e.status, e.retryable], ['TOOL_CALL_CLOSED', 409, false]);
      return true;
    });
    for (const bad of [{}, { result: 1, error: 'x' }, { error: 42 }, null]) {
      await assert.rejects(client.submitToolResult('ex_t', 'c5', bad), TypeError);
    }
  } finally {
    broker.close();
  }
  assert.deepEqual(broker.posts, [
    { call_id: 'c1', result: null }, { call_id: 'c2', result: null }, { call_id: 'c3', error: 'no such user' },
    { call_id: 'c4', result: { rows: [1, 2] } },
  ]);
});

test('run: tool handlers are checked before anything is sent', async () => {
  const stub = await stubServer(inTurn([[500, {}]]));
  try {
    const client = new KilnClient({ url: stub.url, token: 't' });
    await assert.rejects(client.run('1', { toolHandlers: { add: () => 1 } }), TypeError); // no tools declared
    await assert.rejects(client.run('1', { tools: [{ name: 'add' }], toolHandlers: { add: 1 } }), TypeError);
    assert.equal(stub.requests.length, 0);
  } finally {
    stub.close();
  }
});

// The known answer, shared with tests/sdk/python/test_sdk.py: both SDKs must
// sign these bytes the same way (computed with createHmac, Python's hmac.new
// and `openssl dgst -sha256 -hmac`).
const whSecret = 'whsec_test_0123456789';
const whT = 1700000000;
const whBody = '{"id":"ex_1","status":"succeeded"}';
const whHex = '58cd265606efcc8d917df28b4b7a761d6a54f97c21bf1a87712e177333d22244';
const whHeader = `t=${whT},v1=${whHex}`;
const rejects = (pattern) => (e) => e instanceof WebhookVerificationError && pattern.test(e.message);

test('webhooks: known answer', () => {
  assert.equal(createHmac('sha256', whSecret).update(`${whT}.${whBody}`).digest('hex'), whHex);
  assert.equal(signWebhook(whSecret, whBody, whT), whHeader);
  // Strings and bytes, seconds and Dates are the same thing.
  assert.equal(signWebhook(new TextEncoder().encode(whSecret), Buffer.from(whBody), new Date(whT * 1000 + 999)), whHeader);
  const record = verifyWebhook(whSecret, new TextEncoder().encode(whBody), whHeader, { now: whT + 299 });
  assert.deepEqual(record, { id: 'ex_1', status: 'succeeded' });
  const err = new WebhookVerificationError('x');
  assert.ok(err instanceof Error && !(err instanceof KilnError));
  assert.equal(err.name, 'WebhookVerificationError');
});

test('webhooks: a fresh signature passes; a changed body or another secret does not', () => {
  const header = signWebhook(whSecret, whBody); // now
  assert.equal(verifyWebhook(whSecret, whBody, header).id, 'ex_1');
  const noMatch = rejects(/no v1 signature matches/);
  assert.throws(() => verifyWebhook(whSecret, whBody.replace('succeeded', 'failed'), header), noMatch);
  // Parsed and stringified again: same data, other bytes, so no match.
  assert.throws(() => verifyWebhook(whSecret, JSON.stringify(JSON.parse(whBody), null, 1), header), noMatch);
  assert.throws(() => verifyWebhook('whsec_other', whBody, header), noMatch);
  // A captured v1 with a fresh t: what a replay cannot do.
  assert.throws(() => verifyWebhook(whSecret, whBody, `${header.split(',')[0]},v1=${whHex}`), noMatch);
});

test('webhooks: the timestamp must be within the tolerance, either way', () => {
  assert.throws(() => verifyWebhook(whSecret, whBody, whHeader, { now: whT + 301 }), rejects(/301 s old/));
  assert.throws(() => verifyWebhook(whSecret, whBody, whHeader, { now: whT - 301 }), rejects(/in the future/));
  assert.equal(verifyWebhook(whSecret, whBody, whHeader, { now: whT - 300 }).id, 'ex_1');
  assert.equal(verifyWebhook(whSecret, whBody, whHeader, { now: new Date(whT * 1000) }).id, 'ex_1');
  assert.throws(() => verifyWebhook(whSecret, whBody, whHeader), rejects(/ s old/)); // 2023 by the real clock
  assert.throws(() => verifyWebhook(whSecret, whBody, whHeader, { toleranceSec: 30, now: whT + 31 }), rejects(/31 s old/));
  assert.equal(verifyWebhook(whSecret, whBody, whHeader, { toleranceSec: null }).id, 'ex_1');
  for (const toleranceSec of [0, -5, '300']) {
    assert.throws(() => verifyWebhook(whSecret, whBody, whHeader, { toleranceSec }), RangeError);
  }
});

test('webhooks: malformed headers are refused', () => {
  for (const header of ['v1=xyz', `t=${whT},v1=xyz`, `v1=${whHex}`, '', undefined,
    `t=soon,v1=${whHex}`, `t=1e9,v1=${whHex}`, `t=${whT},v1=${whHex.slice(1)}`,
    `t=${whT},t=${whT},v1=${whHex}`]) {
    assert.throws(() => verifyWebhook(whSecret, whBody, header, { now: whT }), rejects(/Kiln-Signature/), String(header));
  }
});

test('webhooks: secret rotation, unknown parts, bodies that are not a record', () => {
  const other = signWebhook('whsec_old_secret', whBody, whT).split(',')[1];
  for (const header of [
    `t=${whT},${other},v1=${whHex}`, // only the second v1 matches
    `v0=legacy, t=${whT}, v1=${whHex.toUpperCase()}, x=1`,
    [`t=${whT},v1=xyz`, `v1=${whHex}`], // node:http's array for a repeated header
  ]) {
    assert.equal(verifyWebhook(whSecret, whBody, header, { now: whT }).status, 'succeeded', String(header));
  }
  for (const [body, pattern] of [
    ['not json', /not UTF-8 JSON/], [Uint8Array.of(0xff, 0x7b, 0x7d), /not UTF-8 JSON/], ['[1]', /not an object/],
  ]) {
    assert.throws(() => verifyWebhook(whSecret, body, signWebhook(whSecret, body, whT), { now: whT }), rejects(pattern));
  }
  // The parsed record is not the signed bytes; an unset secret is a mistake.
  assert.throws(() => verifyWebhook(whSecret, { id: 'ex_1' }, whHeader), TypeError);
  assert.throws(() => verifyWebhook('', whBody, whHeader), RangeError);
});

test('webhooks: a node:http receiver verifies a signed POST', async () => {
  const received = [];
  // The receiver of EXAMPLES.md, "Verify a webhook".
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let record;
      try {
        record = verifyWebhook(whSecret, Buffer.concat(chunks), req.headers['kiln-signature']);
      } catch (e) {
        if (!(e instanceof WebhookVerificationError)) throw e;
        res.writeHead(400, { 'Content-Type': 'text/plain' }).end(e.message);
        return;
      }
      received.push([req.headers['kiln-webhook-id'], record]);
      res.writeHead(204).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}/hooks/kiln`;
  const body = JSON.stringify({ id: 'ex_rt', status: 'succeeded', stdout: 'hé\n' });
  // What the broker does: POST the bytes, signed.
  const deliver = (signature) => fetch(url, {
    method: 'POST',
    body,
    headers: {
      'Content-Type': 'application/json', 'Kiln-Webhook-Id': 'ex_rt', 'Kiln-Webhook-Attempt': '1',
      'Kiln-Signature': signature,
    },
  });
  try {
    assert.equal((await deliver(signWebhook(whSecret, body))).status, 204);
    const forged = await deliver(signWebhook('whsec_guess', body));
    assert.equal(forged.status, 400);
    assert.match(await forged.text(), /no v1 signature matches/);
  } finally {
    server.closeAllConnections?.();
    server.close();
  }
  assert.deepEqual(received, [['ex_rt', { id: 'ex_rt', status: 'succeeded', stdout: 'hé\n' }]]);
});

test('webhooks: a callbackUrl gets the signed record from the cluster',
  { skip: !process.env.KILN_WEBHOOK_SECRET && 'the cluster gives this tenant no webhooks (KILN_WEBHOOK_SECRET unset)' },
  async () => {
    const secret = process.env.KILN_WEBHOOK_SECRET;
    const received = [];
    const server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        try {
          received.push(verifyWebhook(secret, Buffer.concat(chunks), req.headers['kiln-signature']));
          res.writeHead(200).end();
        } catch {
          res.writeHead(400).end();
        }
      });
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const ex = await kiln.run("print('called back')",
        { callbackUrl: `http://127.0.0.1:${server.address().port}/kiln` });
      assert.ok(ex.ok, JSON.stringify(ex.raw));
      for (let i = 0; i < 300 && received.length === 0; i++) {
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(received.length, 1);
      assert.equal(received[0].id, ex.id);
      assert.equal(received[0].stdout, 'called back\n');
    } finally {
      server.close();
    }
  });
