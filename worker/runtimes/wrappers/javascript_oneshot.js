// Kiln one-shot JavaScript wrapper (docs/runtimes.md). Started warm, before the
// job is known, as:  node -e <this text>
// fd 0: the job frame  <JSON {"input": {...}, "env": {...}, "stdin": "..."?}> "\n" <code, UTF-8>
//       ("stdin", when given, becomes fd 0 for the code: a file in /tmp, unlinked once open)
// fd 3: control pipe; at exit it gets one JSON object
//       {"exit_code": n, "result": <json>?, "error": {"type","message","traceback"}?}
// fd 6: the tool channel, when the execution has one: a unix stream socket to
//       the worker for the global `kiln`'s calls (javascript_tools.js). Node
//       marks every fd it inherits close-on-exec: a child gets fd 6 only
//       through spawn's stdio (index 6).
(() => {
  'use strict';
  // Keep our own references: input keys and user code may overwrite globals.
  const fs = require('fs'), vm = require('vm'), util = require('util'), proc = process;
  const FILE = '<code>';
  const readResult = () => {
    try {  // sees `globalThis.result` and a top-level `let/const result` alike
      return vm.runInThisContext('typeof result === "undefined" ? undefined : result');
    } catch (e) {  // `let result` still in its temporal dead zone
      return undefined;
    }
  };
  const isThenable = (v) =>
    v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';
  // Lone UTF-16 surrogates are not valid JSON text for the worker: replace them.
  const fixStrings = (k, v) => typeof v === 'string'
    ? v.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd')
    : v;

  // fd 0 itself becomes the job's stdin, so children started with stdio
  // 'inherit' read it too (libuv clears close-on-exec on inherited stdio):
  // a file in /tmp, unlinked once open. Node has no dup2, but a closed 0 is
  // the lowest free fd, which the next open takes.
  const setStdin = (text) => {
    const path = '/tmp/.kiln-stdin-' + proc.pid + '-' + Date.now();
    fs.writeFileSync(path, text, {mode: 0o600, flag: 'wx'});
    try {
      fs.closeSync(0);
      const fd = fs.openSync(path, 'r');
      if (fd !== 0) {
        fs.closeSync(fd);
        throw new Error('fd 0 was taken');
      }
    } finally {
      fs.unlinkSync(path);
    }
  };

  // kiln-include: javascript_packages.js
  // kiln-include: javascript_tools.js

  // Reopen the control pipe close-on-exec so child processes never inherit it.
  let ctl = 3;
  try {
    ctl = fs.openSync('/proc/self/fd/3', fs.constants.O_WRONLY);
    fs.closeSync(3);
  } catch (e) {
    ctl = 3;
  }

  let error = null, settled = false, settledValue, pending = null;
  const fail = (e) => {  // an uncaught exception or rejection ends the job like node does
    let text;
    if (e instanceof Error || (e !== null && typeof e === 'object' && typeof e.stack === 'string')) {
      // Cut the stack where the wrapper (vm.runInThisContext from [eval]) starts.
      const lines = String(e.stack).split('\n');
      const cut = lines.findIndex((l) => /^\s+at .*(\[eval\]|node:vm:)/.test(l));
      text = (cut < 0 ? lines : lines.slice(0, cut)).join('\n');
      error = {type: String(e.name || 'Error'), message: String(e.message), traceback: text};
    } else {
      const message = typeof e === 'object' || typeof e === 'function' ? util.inspect(e) : String(e);
      text = 'Uncaught ' + util.inspect(e);
      error = {type: 'ThrownValue', message, traceback: ''};
    }
    try {
      fs.writeSync(2, text + '\n');
    } catch (_) {}
    proc.exit(1);
  };
  proc.on('uncaughtException', fail);
  proc.on('unhandledRejection', fail);
  // The event loop is empty: if `result` is a promise, wait for it once more.
  proc.on('beforeExit', () => {
    if (settled) return;
    const r = readResult();
    if (isThenable(r) && r !== pending) {
      pending = r;
      r.then((v) => { settled = true; settledValue = v; }, fail);
      return;
    }
    if (r !== pending) { settled = true; settledValue = r; }
  });
  proc.on('exit', (code) => {
    if (ctl < 0) return;
    let frame = '{"exit_code":' + (code | 0);
    const value = settled ? settledValue : readResult();
    if (value !== undefined) {
      let json;
      try {
        json = isThenable(value) ? undefined : JSON.stringify(value, fixStrings);
        if (json === undefined) {
          throw new TypeError(isThenable(value) ? 'result is a Promise that did not settle'
                                                : `result of type ${typeof value} is not JSON serializable`);
        }
        frame += ',"result":' + json;
      } catch (e) {
        error = error || {type: 'ResultNotSerializable', message: String(e && e.message), traceback: ''};
      }
    }
    if (error) frame += ',"error":' + JSON.stringify(error, fixStrings);
    const buf = Buffer.from(frame + '}');
    for (let off = 0; off < buf.length;) {
      try {
        off += fs.writeSync(ctl, buf, off);
      } catch (e) {
        if (e.code !== 'EAGAIN') break;
      }
    }
    // Let go of the pipes (stdout/stderr writes to pipes are synchronous on
    // Linux, so nothing is pending): once fds 1, 2 and the control pipe reach
    // EOF the worker has the whole job and need not wait for node's teardown.
    for (const fd of [ctl, 1, 2]) {
      try {
        fs.closeSync(fd);
      } catch (_) {}
    }
  });

  // The first vm compile and run of a process set V8 up (~0.4 ms, half of a
  // trivial job's time): do both now, while the sandbox is warm. readResult()
  // is the very script the exit handler runs, so that one is cached too.
  new vm.Script('0', {filename: '<warm>'}).runInThisContext();
  readResult();

  // Everything above ran while the sandbox was warm; this blocks until the job arrives.
  // Afterwards fd 0 is a pipe at EOF, i.e. an empty stdin for the user's code.
  const data = fs.readFileSync(0);
  if (data.length === 0) {  // stdin closed without a job: the warm sandbox is being retired
    ctl = -1;
    proc.exit(0);
  }
  const nl = data.indexOf(10);
  const job = JSON.parse(data.toString('utf8', 0, nl));
  const code = data.toString('utf8', nl + 1);
  usePackages();
  for (const k of Object.keys(job.env)) proc.env[k] = job.env[k];
  useProxy();
  globalThis.kiln = kiln;  // an input named kiln replaces it
  for (const k of Object.keys(job.input)) globalThis[k] = job.input[k];
  if (typeof job.stdin === 'string' && job.stdin.length > 0) {
    try {
      setStdin(job.stdin);
    } catch (e) {  // the code finds stdin empty and is told why
      fs.writeSync(2, 'kiln: stdin could not be set up: ' + e.message + '\n');
    }
  }

  let script, wrapped = false;
  try {
    script = new vm.Script(code, {filename: FILE, importModuleDynamically: dynamicImport});
  } catch (e) {
    // Top-level await in a script: run the code as the body of an async function.
    // Its declarations are then local; its final `result` becomes the global one.
    const head = '(async () => {';
    try {
      if (!/\bawait\b/.test(code)) throw e;
      script = new vm.Script(head + code + '\n;return typeof result === "undefined" ? undefined : result;})()',
                             {filename: FILE, columnOffset: -head.length,
                              importModuleDynamically: dynamicImport});
      wrapped = true;
    } catch (_) {
      fail(e);
      return;
    }
  }
  let ret;
  try {
    ret = script.runInThisContext();
  } catch (e) {
    fail(e);
    return;
  }
  if (wrapped) {
    ret.then((v) => { if (v !== undefined) globalThis.result = v; }, fail);
  }
})();
