// Kiln JavaScript session driver (docs/runtimes.md, "Session drivers"). Started as
//   node -e <this text>
// and kept alive: one process runs every execution of a session as a classic
// script in its one global context.
// fd 0: execution frames, one after another:  <N> "\n" <N bytes>, the bytes being
//       <JSON {"input": {...}, "env": {...}, "stdin": "..."?}> "\n" <code, UTF-8>. EOF: exit 0.
//       ("stdin", when given, is the execution's fd 0: a file in /tmp, unlinked
//       once open; /dev/null again after the execution)
// fd 3: one control frame per execution, written once its output is written:
//       <N> "\n" <N bytes of {"exit_code": n, "result": <json>?, "error": {...}?}>
// fd 6: the tool channel, when the session has one: a unix stream socket to
//       the worker for the global `kiln`'s calls (javascript_tools.js). Node
//       marks every fd it inherits close-on-exec: a child gets fd 6 only
//       through spawn's stdio (index 6).
(() => {
  'use strict';
  // Keep our own references: input keys and user code may overwrite globals.
  const fs = require('fs'), vm = require('vm'), util = require('util'), net = require('net');
  // kiln-include: javascript_packages.js
  const proc = process, realExit = process.exit.bind(process), Buf = Buffer;
  const stdout = proc.stdout, stderr = proc.stderr;
  // kiln-include: javascript_tools.js
  // Bound once: the code (or an input named kiln) may rebind it.
  globalThis.kiln = kiln;
  const readResult = () => {
    try {  // sees `globalThis.result` and a top-level `let/const result` alike
      return vm.runInThisContext('typeof result === "undefined" ? undefined : result');
    } catch (e) {  // `let result` still in its temporal dead zone
      return undefined;
    }
  };
  const clearResult = () => {
    try {
      delete globalThis.result;
    } catch (_) {}
    try {  // a top-level `let`/`var result` cannot be deleted; a `const` stays as it is
      vm.runInThisContext('if (typeof result !== "undefined") result = undefined;');
    } catch (_) {}
  };
  const isThenable = (v) =>
    v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';
  // Lone UTF-16 surrogates are not valid JSON text for the worker: replace them.
  const fixStrings = (k, v) => typeof v === 'string'
    ? v.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd')
    : v;
  const die = (message) => {  // the worker broke the framing: the session cannot go on
    try {
      fs.writeSync(2, 'kiln session driver: ' + message + '\n');
    } catch (_) {}
    realExit(2);
  };

  // The control pipe and the frames move to private close-on-exec fds (node
  // opens everything close-on-exec); user code gets /dev/null as fd 0 and no
  // fd 3. Without /proc or /dev/null the driver keeps using fds 3 and 0.
  let ctl = 3, src = 0;
  try {
    ctl = fs.openSync('/proc/self/fd/3', fs.constants.O_WRONLY);
    fs.closeSync(3);
  } catch (e) {
    ctl = 3;
  }
  try {
    const r = fs.openSync('/proc/self/fd/0', fs.constants.O_RDONLY);
    try {
      const nul = fs.openSync('/dev/null', fs.constants.O_RDONLY);
      fs.closeSync(0);
      fs.openSync('/dev/null', fs.constants.O_RDONLY);  // the lowest free fd: 0
      fs.closeSync(nul);
      src = r;
    } catch (e) {
      fs.closeSync(r);
    }
  } catch (e) {}

  // An execution's stdin on fd 0 itself, so children started with stdio
  // 'inherit' read it too: a file in /tmp, unlinked once open. Node has no
  // dup2, but a closed 0 is the lowest free fd, which the next open takes.
  // Only when the frames moved off fd 0 (src !== 0).
  const reopenStdin = (path) => {
    fs.closeSync(0);
    const fd = fs.openSync(path, fs.constants.O_RDONLY);
    if (fd !== 0) {
      fs.closeSync(fd);
      throw new Error('fd 0 was taken');
    }
  };
  const setStdin = (text) => {
    const path = '/tmp/.kiln-stdin-' + proc.pid + '-' + Date.now();
    fs.writeFileSync(path, text, {mode: 0o600, flag: 'wx'});
    try {
      reopenStdin(path);
    } finally {
      fs.unlinkSync(path);
    }
  };

  // process.exit(n) in an execution ends that execution, not the session.
  class ExitRequest {
    constructor(code) {
      this.code = code;
    }
  }
  let current = null;  // the running execution: {done}
  let writing = false;  // a frame waits for the output before it
  proc.exit = function exit(code) {
    if (current) throw new ExitRequest(code === undefined ? proc.exitCode : code);
    return realExit(code);
  };

  const finish = (cur, status, error, value) => {
    if (cur.done) return;
    cur.done = true;
    current = null;
    proc.exitCode = undefined;
    if (cur.stdin) {  // the next execution's code gets an empty stdin again
      try {
        reopenStdin('/dev/null');
      } catch (_) {}
    }
    let frame = '{"exit_code":' + (status & 0xFF);
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
    const body = Buf.from(frame + '}');
    const buf = Buf.concat([Buf.from(body.length + '\n'), body]);
    if (!proc.listeners('SIGINT').includes(onSigint)) proc.on('SIGINT', onSigint);
    // process.stdout/stderr queue what a full pipe does not take: the frame
    // goes out once the execution's output is in the pipes.
    writing = true;
    whenFlushed(() => {
      for (let off = 0; off < buf.length;) {
        try {
          off += fs.writeSync(ctl, buf, off);
        } catch (e) {
          if (e.code !== 'EAGAIN') realExit(1);  // the worker is gone
        }
      }
      writing = false;
      setImmediate(pump);
    });
  };
  const whenFlushed = (done) => {
    let left = 2;
    const one = () => {
      if (--left === 0) done();
    };
    for (const s of [stdout, stderr]) {
      try {
        if (s.writableLength > 0 && !s.destroyed) {
          s.write('', one);  // called once everything queued before it is written
        } else {
          one();
        }
      } catch (_) {
        one();
      }
    }
  };

  // Ends `cur` with an exception (or process.exit); outside an execution it is
  // only printed, and the session goes on.
  const fail = (cur, e) => {
    if (e instanceof ExitRequest) {
      if (cur && !cur.done) finish(cur, Number(e.code) | 0, null, readResult());
      return;
    }
    let text, error;
    if (e instanceof Error || (e !== null && typeof e === 'object' && typeof e.stack === 'string')) {
      // Cut the stack where the driver (vm.runInThisContext from [eval]) starts.
      const lines = String(e.stack).split('\n');
      const cut = lines.findIndex((l) => /^\s+at .*(\[eval\]|node:vm:)/.test(l));
      text = (cut < 0 ? lines : lines.slice(0, cut)).join('\n');
      error = {type: String(e.name || 'Error'), message: String(e.message), traceback: text};
      if (e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') error.type = 'Interrupted';
    } else {
      const message = typeof e === 'object' || typeof e === 'function' ? util.inspect(e) : String(e);
      text = 'Uncaught ' + util.inspect(e);
      error = {type: 'ThrownValue', message, traceback: ''};
    }
    try {
      fs.writeSync(2, text + '\n');
    } catch (_) {}
    if (cur && !cur.done) {
      finish(cur, error.type === 'Interrupted' ? 130 : 1, error, readResult());
    }
  };
  proc.on('uncaughtException', (e) => fail(current, e));
  proc.on('unhandledRejection', (e) => fail(current, e));

  // SIGINT (the worker's timeout, sent to the whole process group): while the
  // script runs, breakOnSigint ends it; while the execution waits for a
  // promise, this listener ends it; between executions it does nothing.
  const interrupted = () => {
    const e = new Error('Script execution interrupted.');
    e.code = 'ERR_SCRIPT_EXECUTION_INTERRUPTED';
    e.stack = 'Error: Script execution interrupted.';
    return e;
  };
  const onSigint = () => {
    if (current) fail(current, interrupted());
  };
  proc.on('SIGINT', onSigint);

  // The value of `result` (awaited once if it is a thenable) ends the execution.
  const settle = (cur, value) => {
    if (cur.done) return;
    if (isThenable(value)) {
      value.then((v) => finish(cur, proc.exitCode | 0, null, v), (e) => fail(cur, e));
    } else {
      finish(cur, proc.exitCode | 0, null, value);
    }
  };

  let count = 0;
  const run = (payload) => {
    const nl = payload.indexOf(10);
    let job;
    try {
      job = JSON.parse(payload.toString('utf8', 0, nl));
      if (nl < 0 || typeof job.env !== 'object' || typeof job.input !== 'object') throw 0;
    } catch (_) {
      die('malformed frame header');
    }
    const code = payload.toString('utf8', nl + 1);
    // One file name per execution: stacks through functions defined by an
    // earlier execution name that execution.
    const file = `<code-${++count}>`;
    usePackages();
    for (const k of Object.keys(job.env)) proc.env[k] = job.env[k];
    useProxy();
    clearResult();
    for (const k of Object.keys(job.input)) globalThis[k] = job.input[k];
    proc.exitCode = undefined;
    const cur = current = {done: false, stdin: false};
    if (typeof job.stdin === 'string' && job.stdin.length > 0 && src !== 0) {
      try {
        cur.stdin = true;
        setStdin(job.stdin);
      } catch (e) {  // the code finds stdin empty and is told why
        fs.writeSync(2, 'kiln: stdin could not be set up: ' + e.message + '\n');
      }
    }

    let script, wrapped = false;
    try {
      script = new vm.Script(code, {filename: file, importModuleDynamically: dynamicImport});
    } catch (e) {
      // Top-level await in a script: run the code as the body of an async function.
      // Its declarations are then local; its final `result` becomes the result.
      const head = '(async () => {';
      try {
        if (!/\bawait\b/.test(code)) throw e;
        script = new vm.Script(head + code + '\n;return typeof result === "undefined" ? undefined : result;})()',
                               {filename: file, columnOffset: -head.length,
                                importModuleDynamically: dynamicImport});
        wrapped = true;
      } catch (_) {
        fail(cur, e);
        return;
      }
    }
    let ret;
    try {
      ret = script.runInThisContext({breakOnSigint: true});
    } catch (e) {
      fail(cur, e);
      return;
    }
    // setImmediate: promise jobs and unhandled rejections of the code come first.
    if (wrapped) {
      ret.then((v) => setImmediate(() => settle(cur, v !== undefined ? v : readResult())),
               (e) => fail(cur, e));
    } else {
      setImmediate(() => settle(cur, readResult()));
    }
  };

  // Frames: "<N>\n" then N bytes, assembled from the pipe's chunks.
  const queue = [];
  let head = '', body = null, got = 0;
  const pump = () => {
    if (!current && !writing && queue.length > 0) run(queue.shift());
  };
  const onData = (chunk) => {
    for (let i = 0; i < chunk.length;) {
      if (body === null) {
        const nl = chunk.indexOf(10, i);
        head += chunk.toString('latin1', i, nl < 0 ? chunk.length : nl);
        if (!/^\d{0,15}$/.test(head)) die('malformed frame length');
        if (nl < 0) break;
        if (head === '') die('malformed frame length');
        body = Buf.allocUnsafe(Number(head));
        head = '';
        got = 0;
        i = nl + 1;
      } else {
        const n = Math.min(body.length - got, chunk.length - i);
        chunk.copy(body, got, i, i + n);
        got += n;
        i += n;
      }
      if (body !== null && got === body.length) {
        queue.push(body);
        body = null;
      }
    }
    pump();
  };
  const input = new net.Socket({fd: src, readable: true, writable: false});
  input.on('data', onData);
  input.on('end', () => {  // stdin closed: the session is over
    if (head !== '' || body !== null) die('malformed frame (truncated)');
    realExit(0);
  });
  input.on('error', (e) => die('reading frames: ' + e.message));
})();
