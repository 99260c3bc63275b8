// Drives `kiln mcp` with the official MCP TypeScript SDK client, against a real
// cluster that tests/mcp/mcp_test.cpp started. Environment:
//   KILN_BIN    path of the kiln binary
//   KILN_URL    the broker
//   KILN_TOKEN  a tenant token
// `node mcp_test.mjs --disabled` instead checks a tenant whose code execution
// is disabled: execute_code must not be offered.
// Every check runs even after one fails; prints "ok - ..." / "not ok - ..." per
// check and a closing "N passed, N failed" line; exits 1 if any failed, 77 when
// the SDK is not installed (tests/run.sh installs it into tests/mcp/node_modules).
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import assert from 'node:assert/strict';

let sdk;
try {
  sdk = {
    ...(await import('@modelcontextprotocol/sdk/client/index.js')),
    ...(await import('@modelcontextprotocol/sdk/client/stdio.js')),
    ...(await import('@modelcontextprotocol/sdk/types.js')),
  };
} catch (e) {
  console.log(`SKIP: @modelcontextprotocol/sdk is not installed (${e.code ?? e.message}); ` +
              'run tests/run.sh or `npm ci` in tests/mcp');
  process.exit(77);
}
const { Client, StdioClientTransport, McpError } = sdk;

const KILN_BIN = process.env.KILN_BIN;
const env = { ...process.env, KILN_URL: process.env.KILN_URL, KILN_TOKEN: process.env.KILN_TOKEN };
for (const k of ['KILN_BIN', 'KILN_URL', 'KILN_TOKEN']) {
  if (!process.env[k]) {
    console.log(`${k} is not set`);
    process.exit(2);
  }
}

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}\n  ${String(e?.stack ?? e).replaceAll('\n', '\n  ')}`);
  }
}

// The JSON-RPC error a rejected request carries.
async function rpcError(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  throw new Error('expected a JSON-RPC error, got a result');
}

function report() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

if (process.argv.includes('--disabled')) {
  const transport = new StdioClientTransport({ command: KILN_BIN, args: ['mcp'], env, stderr: 'inherit' });
  const client = new Client({ name: 'kiln-mcp-test', version: '1.0.0' });
  await check('with code execution disabled, execute_code is not offered', async () => {
    await client.connect(transport);
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ['kill_session', 'list_sessions']);
    assert.match(client.getInstructions(), /disabled/);
  });
  await check('with code execution disabled, calling execute_code is -32602', async () => {
    const e = await rpcError(client.callTool({ name: 'execute_code',
                                               arguments: { runtime: 'python', code: 'print(1)' } }));
    assert.equal(e.code, -32602);
  });
  await check('with code execution disabled, list_sessions still works', async () => {
    const r = await client.callTool({ name: 'list_sessions', arguments: {} });
    assert.ok(!r.isError, JSON.stringify(r.structuredContent));
    assert.deepEqual(r.structuredContent.sessions, []);
  });
  await client.close();
  report();
}

// --- through the SDK --------------------------------------------------------------
const transport = new StdioClientTransport({ command: KILN_BIN, args: ['mcp'], env, stderr: 'inherit' });
const client = new Client({ name: 'kiln-mcp-test', version: '1.0.0' });

await check('initialize', async () => {
  await client.connect(transport);
  const info = client.getServerVersion();
  assert.equal(info.name, 'kiln');
  assert.ok(client.getServerCapabilities().tools, 'the server offers tools');
  assert.equal(typeof client.getInstructions(), 'string');
});

let tools = [];
await check('tools/list offers the three tools with their schemas', async () => {
  ({ tools } = await client.listTools());
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), ['execute_code', 'kill_session', 'list_sessions']);
  const exec = byName.execute_code;
  assert.equal(exec.inputSchema.type, 'object');
  assert.deepEqual([...exec.inputSchema.properties.runtime.enum].sort(),
                   ['javascript', 'python', 'shell']);
  assert.deepEqual([...exec.inputSchema.required].sort(), ['code', 'runtime']);
  for (const p of ['code', 'sessionId', 'conversationId', 'timeoutMs', 'packages', 'input', 'files',
                   'collect']) {
    assert.ok(exec.inputSchema.properties[p], `execute_code input has ${p}`);
  }
  assert.equal(exec.outputSchema.type, 'object');
  for (const p of ['stdout', 'stderr', 'exitCode', 'timedOut', 'truncated', 'durationMs', 'result',
                   'status', 'sessionId', 'sessionEpoch', 'files', 'filesTruncated']) {
    assert.ok(exec.outputSchema.properties[p], `execute_code output has ${p}`);
    assert.ok(exec.outputSchema.required.includes(p), `execute_code output requires ${p}`);
  }
  // The limits the test cluster configures (tests/support/cluster.cpp), and
  // the idle TTL of sessions (the default, 600 s).
  assert.match(exec.description,
               /Limits per call: timeoutMs 10 s by default, at most 60 s \(wall clock\); memory 256 MiB; stdout and stderr 64 KiB together/);
  assert.match(exec.description, /A session unused for 10 min ends/);
  assert.equal(exec.inputSchema.properties.timeoutMs.maximum, 60000);
  assert.ok(byName.list_sessions.inputSchema.properties.conversationId);
  assert.equal(byName.list_sessions.inputSchema.required ?? undefined, undefined);
  assert.deepEqual(byName.kill_session.inputSchema.required, ['sessionId']);
});

await check('execute_code runs python', async () => {
  const r = await client.callTool({ name: 'execute_code',
                                    arguments: { runtime: 'python', code: 'print(1+1)' } });
  assert.ok(!r.isError, JSON.stringify(r));
  assert.equal(r.structuredContent.stdout, '2\n');
  assert.equal(r.structuredContent.exitCode, 0);
  assert.equal(r.structuredContent.status, 'succeeded');
  assert.equal(r.structuredContent.timedOut, false);
  assert.equal(typeof r.structuredContent.durationMs, 'number');
  assert.equal(r.content[0].type, 'text');
  assert.deepEqual(JSON.parse(r.content[0].text), r.structuredContent);
});

await check('execute_code reports result, exit codes and timeouts', async () => {
  let r = await client.callTool({ name: 'execute_code', arguments: {
    runtime: 'javascript', code: 'console.error("e"); result = {sum: 2 + 3};' } });
  assert.equal(r.structuredContent.stderr, 'e\n');
  assert.deepEqual(r.structuredContent.result, { sum: 5 });
  r = await client.callTool({ name: 'execute_code',
                              arguments: { runtime: 'shell', code: 'echo out; exit 3' } });
  assert.ok(!r.isError, 'the code ran: its failure is not a tool error');
  assert.equal(r.structuredContent.exitCode, 3);
  assert.equal(r.structuredContent.status, 'failed');
  r = await client.callTool({ name: 'execute_code', arguments: {
    runtime: 'python', code: 'import time; time.sleep(5)', timeoutMs: 500 } });
  assert.equal(r.structuredContent.timedOut, true);
  assert.equal(r.structuredContent.status, 'timed_out');
});

// A 1x1 PNG.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
await check('execute_code takes input and files, and collects the files the code writes', async () => {
  const r = await client.callTool({ name: 'execute_code', arguments: {
    runtime: 'python',
    code: [
      'import base64, os',
      'rows = open("data/in.csv").read().split()',
      'blob = open("raw.bin", "rb").read()',
      'os.makedirs("out", exist_ok=True)',
      'open("out/sum.txt", "w").write(str(n + len(rows) + len(blob)))',
      'open("out/dot.png", "wb").write(base64.b64decode(png))',
    ].join('\n'),
    input: { n: 37, png: PNG },
    files: [{ path: 'data/in.csv', content: 'a\nb\n' },
            { path: 'raw.bin', contentBase64: Buffer.from([0, 255, 7]).toString('base64') }],
    collect: ['out/*'] } });
  assert.ok(!r.isError, JSON.stringify(r.structuredContent));
  assert.equal(r.structuredContent.status, 'succeeded', JSON.stringify(r.structuredContent));
  const files = r.structuredContent.files;
  assert.deepEqual(files.map((f) => f.path), ['out/dot.png', 'out/sum.txt']);
  assert.deepEqual(files[1], { path: 'out/sum.txt', size: 2, text: '42' });
  assert.equal(files[0].contentBase64, PNG);
  assert.equal(r.structuredContent.filesTruncated, false);
  const image = r.content.find((c) => c.type === 'image');
  assert.ok(image, 'the PNG comes back as image content too');
  assert.equal(image.mimeType, 'image/png');
  assert.equal(image.data, PNG);
});

await check('API errors are tool errors carrying the API code', async () => {
  const r = await client.callTool({ name: 'execute_code', arguments: {
    runtime: 'python', code: 'print(1)', timeoutMs: 99999999 } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'LIMIT_EXCEEDED');
  assert.equal(r.structuredContent.status, 'request_failed');
  assert.match(r.content[0].text, /LIMIT_EXCEEDED/);
});

// Sessions: needs the broker's sessions (state kept between runs, GET/DELETE /v1/sessions).
const session = `mcp-s-${process.pid}`;
const conversation = `mcp-conv-${process.pid}`;
await check('execute_code keeps state in a session', async () => {
  let r = await client.callTool({ name: 'execute_code', arguments: {
    runtime: 'python', code: 'x = 41', sessionId: session, conversationId: conversation } });
  assert.ok(!r.isError, JSON.stringify(r.structuredContent));
  assert.equal(r.structuredContent.sessionId, session);
  const epoch = r.structuredContent.sessionEpoch;
  r = await client.callTool({ name: 'execute_code', arguments: {
    runtime: 'python', code: 'print(x + 1)', sessionId: session, conversationId: conversation } });
  assert.ok(!r.isError, JSON.stringify(r.structuredContent));
  assert.equal(r.structuredContent.stdout, '42\n', JSON.stringify(r.structuredContent));
  assert.equal(r.structuredContent.sessionEpoch, epoch, 'the interpreter was not recreated');
});

await check('a cancelled call (AbortSignal: notifications/cancelled) stops its execution', async () => {
  const s = `${session}-cancel`;
  let r = await client.callTool({ name: 'execute_code',
                                  arguments: { runtime: 'python', code: 'x = 1', sessionId: s } });
  assert.ok(!r.isError, JSON.stringify(r.structuredContent));
  const abort = new AbortController();
  const started = Date.now();
  const sleeping = client.callTool({ name: 'execute_code', arguments: {
    runtime: 'python', code: 'import time\ntime.sleep(50)', sessionId: s, timeoutMs: 60000 } },
  undefined, { signal: abort.signal, timeout: 120000 });
  setTimeout(() => abort.abort('the user changed their mind'), 1500);
  await assert.rejects(sleeping);
  // A session runs one execution at a time: this one starts only once the
  // sleep has ended, so it comes back early only if the sleep was cancelled.
  r = await client.callTool({ name: 'execute_code',
                              arguments: { runtime: 'python', code: 'print(x)', sessionId: s } },
  undefined, { timeout: 120000 });
  const took = Date.now() - started;
  assert.ok(took < 20000, `the next call came back after ${took} ms: the sleep ran on`);
  // The cancellation interrupted the code; the session and its state live on.
  assert.equal(r.structuredContent.stdout, '1\n', JSON.stringify(r.structuredContent));
  await client.callTool({ name: 'kill_session', arguments: { sessionId: s } });
});

await check('list_sessions lists the conversation\'s session', async () => {
  const r = await client.callTool({ name: 'list_sessions',
                                    arguments: { conversationId: conversation } });
  assert.ok(!r.isError, JSON.stringify(r.structuredContent));
  const ids = r.structuredContent.sessions.map((s) => s.sessionId);
  assert.deepEqual(ids, [session]);
  assert.equal(r.structuredContent.sessions[0].runtime, 'python');
  assert.equal(r.structuredContent.sessions[0].conversationId, conversation);
  const other = await client.callTool({ name: 'list_sessions',
                                        arguments: { conversationId: `${conversation}-other` } });
  assert.deepEqual(other.structuredContent.sessions, []);
});

await check('kill_session ends the session', async () => {
  let r = await client.callTool({ name: 'kill_session', arguments: { sessionId: session } });
  assert.ok(!r.isError, JSON.stringify(r.structuredContent));
  assert.equal(r.structuredContent.deleted, true);
  r = await client.callTool({ name: 'list_sessions', arguments: { conversationId: conversation } });
  assert.deepEqual(r.structuredContent.sessions, []);
  r = await client.callTool({ name: 'kill_session', arguments: { sessionId: session } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'SESSION_NOT_FOUND');
  assert.match(r.content[0].text, /SESSION_NOT_FOUND/);
});

await check('an unknown tool is a JSON-RPC error -32602', async () => {
  const e = await rpcError(client.callTool({ name: 'no_such_tool', arguments: {} }));
  assert.ok(e instanceof McpError, String(e));
  assert.equal(e.code, -32602);
  assert.match(e.message, /no_such_tool/);
});

await check('arguments that break the input schema are -32602', async () => {
  let e = await rpcError(client.callTool({ name: 'execute_code',
                                           arguments: { runtime: 'ruby', code: '1' } }));
  assert.equal(e.code, -32602);
  e = await rpcError(client.callTool({ name: 'execute_code', arguments: { runtime: 'python' } }));
  assert.equal(e.code, -32602);
  e = await rpcError(client.callTool({ name: 'kill_session', arguments: { sessionId: 'a/b' } }));
  assert.equal(e.code, -32602);
  e = await rpcError(client.callTool({ name: 'execute_code', arguments: {
    runtime: 'python', code: '1', files: [{ path: 'a', content: 'x', contentBase64: 'eA==' }] } }));
  assert.equal(e.code, -32602);
  assert.match(e.message, /files\[0\]/);
});

await check('a file path the broker refuses is a tool error naming it', async () => {
  const r = await client.callTool({ name: 'execute_code', arguments: {
    runtime: 'python', code: '1', files: [{ path: '../escape', content: 'x' }] } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'INVALID_REQUEST');
  assert.match(r.structuredContent.error.message, /files\[0\]\.path/);
});

await check('ping', async () => {
  assert.deepEqual(await client.ping(), {});
});

await client.close();

// --- raw JSON-RPC lines on the server's stdin ----------------------------------------
// Spawns `kiln mcp` itself to send what no SDK would: malformed JSON and the like.
async function rawSession(lines) {
  const child = spawn(KILN_BIN, ['mcp'], { env, stdio: ['pipe', 'pipe', 'inherit'] });
  const replies = [];
  const rl = createInterface({ input: child.stdout });
  rl.on('line', (l) => replies.push(l));
  for (const l of lines) child.stdin.write(l + '\n');
  child.stdin.end();
  const code = await new Promise((resolve) => child.on('close', resolve));
  return { code, replies: replies.map((l) => JSON.parse(l)) };
}

const init = (id, version) => JSON.stringify({ jsonrpc: '2.0', id, method: 'initialize', params: {
  protocolVersion: version, capabilities: {}, clientInfo: { name: 'raw', version: '0' } } });

await check('malformed JSON gets -32700, and the server keeps serving', async () => {
  const { code, replies } = await rawSession([
    init(1, '2025-06-18'),
    '{"jsonrpc": "2.0", "id": 2, "method": "ping"',   // cut off
    'not json at all',
    JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'ping' }),
  ]);
  assert.equal(code, 0, 'kiln mcp exits 0 at the end of its input');
  const byId = (id) => replies.find((r) => r.id === id);
  assert.equal(byId(1).result.protocolVersion, '2025-06-18');
  const parseErrors = replies.filter((r) => r.id === null);
  assert.equal(parseErrors.length, 2, JSON.stringify(replies));
  for (const r of parseErrors) {
    assert.equal(r.jsonrpc, '2.0');
    assert.equal(r.error.code, -32700);
  }
  assert.deepEqual(byId(3).result, {});
});

await check('invalid requests, unknown methods and version negotiation', async () => {
  const { replies } = await rawSession([
    JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),        // before initialize
    init(2, '1999-01-01'),                                                   // unsupported version
    JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'no/such/method' }),
    JSON.stringify({ jsonrpc: '1.0', id: 4, method: 'ping' }),
    JSON.stringify([{ jsonrpc: '2.0', id: 5, method: 'ping' }]),             // a batch
    JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { arguments: {} } }),
    JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), // never answered
    JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' }),
  ]);
  const byId = (id) => replies.find((r) => r.id === id);
  assert.equal(byId(1).error.code, -32600);
  assert.equal(byId(2).result.protocolVersion, '2025-06-18');
  assert.equal(byId(3).error.code, -32601);
  assert.equal(byId(4).error.code, -32600);
  assert.equal(replies.find((r) => r.id === null).error.code, -32600);  // the batch
  assert.equal(byId(6).error.code, -32602);
  assert.equal(byId(7).result.tools.length, 3);
  assert.equal(replies.length, 7, JSON.stringify(replies));
});

await check('an older supported protocol version is kept', async () => {
  const { replies } = await rawSession([init(1, '2025-03-26')]);
  assert.equal(replies[0].result.protocolVersion, '2025-03-26');
});

report();
