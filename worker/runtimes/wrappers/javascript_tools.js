// Kiln's javascript wrappers, tool callbacks (docs/runtimes.md, "Tool
// callbacks: the `kiln` helpers"): embedded at configure time
// (worker/runtimes/sources.cmake) into javascript_oneshot.js and
// javascript_session.js where they say `// kiln-include: javascript_tools.js`,
// inside their closure, with `fs` and `proc` in scope. Defines `kiln`, which
// the wrapper makes the global `kiln`: kiln.tool(name, args) over fd 6, a
// SOCK_STREAM unix socket to the worker; one JSON line per request and per
// reply, the replies in any order (docs/api.md, "Tool callbacks").
  const kiln = (() => {
    const net = require('net'), Buf = Buffer, {parse, stringify} = JSON;
    const FD = 6, MAX_ARGUMENT_BYTES = 65536, NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/;
    const TYPES = ['ToolError', 'ToolTimeout', 'ToolRefused', 'ToolUnavailable'];
    // Ids unique across the processes that share fd 6 (children may call
    // too): the pid above 2^31 calls, all within 2^53.
    const base = proc.pid * 2 ** 31;
    const pending = new Map();  // id -> [resolve, fail]
    let sock = null, closed = null, count = 0, partial = [];

    const settle = (line) => {
      let reply;
      try {
        reply = parse(line);
      } catch (_) {
        return;
      }
      const call = reply !== null && typeof reply === 'object' ? pending.get(reply.id) : undefined;
      if (call === undefined) return;  // an id of null (a line the worker could not read), or not ours
      pending.delete(reply.id);
      if (pending.size === 0) sock.unref();
      if (reply.error !== undefined) {
        const {type, message} = reply.error || {};
        call[1](TYPES.includes(type) ? type : 'ToolError', String(message));
      } else {
        call[0](reply.result);
      }
    };
    // The socket reads only while calls wait: an idle channel neither keeps
    // the process alive nor takes the replies of another process sharing
    // fd 6. With onread, pause() (or the callback's false) stops reading at
    // once, where a paused stream would still read ahead into its buffer.
    const onread = (n, buf) => {
      const data = buf.subarray(0, n);
      let at = 0;
      for (let nl; (nl = data.indexOf(10, at)) >= 0; at = nl + 1) {
        partial.push(data.subarray(at, nl));
        const line = Buf.concat(partial).toString();
        partial = [];
        settle(line);
      }
      if (at < n) partial.push(Buf.from(data.subarray(at)));  // a copy: the buffer is reused
      return pending.size > 0;
    };
    const shut = (why) => {  // EOF or an error (node then closes fd 6): every call fails, now and later
      closed = why;
      for (const call of pending.values()) call[1]('ToolUnavailable', why);
      pending.clear();
    };
    // The socket on fd 6, made by the first call; a message when there is none.
    const channel = () => {
      if (closed !== null) return closed;
      if (sock !== null) return null;
      let st;
      try {
        st = fs.fstatSync(FD);
      } catch (e) {
        return `no tool channel (fd 6: ${e.code})`;
      }
      if (!st.isSocket()) return 'no tool channel (fd 6 is not a socket)';
      try {
        sock = new net.Socket({fd: FD, readable: true, writable: true,
                               onread: {buffer: Buf.allocUnsafe(1 << 16), callback: onread}});
      } catch (e) {  // not a stream socket
        return 'no tool channel (fd 6: ' + e.message + ')';
      }
      sock.on('error', (e) => shut('the tool channel failed: ' + e.message));
      sock.on('end', () => shut('the tool channel closed'));
      return null;
    };
    const tool = (name, args = {}) => {
      const err = new Error();  // the caller's stack, should the call fail
      Error.captureStackTrace(err, tool);
      return new Promise((resolve, reject) => {
        const fail = (type, message) => {
          err.name = type;
          err.message = message;
          reject(err);
        };
        if (typeof name !== 'string' || !NAME.test(name)) {
          return fail('ToolRefused', 'invalid tool name ' +
                      (typeof name === 'string' ? stringify(name) : typeof name));
        }
        let json;
        try {
          json = stringify(args);
        } catch (e) {
          return fail('ToolRefused', 'arguments are not JSON: ' + e.message);
        }
        if (typeof json !== 'string' || json[0] !== '{') {
          return fail('ToolRefused', 'arguments must be an object');
        }
        // A lone surrogate is escaped as \udxxx (paired ones are not), which
        // the worker cannot read: U+FFFD instead, as in the frames.
        json = json.replace(/\\(?:\\|ud[89a-f][0-9a-f]{2})/g, (m) => (m === '\\\\' ? m : '\\ufffd'));
        const size = Buf.byteLength(json);
        if (size > MAX_ARGUMENT_BYTES) {
          return fail('ToolRefused', `arguments of ${size} bytes, above the maximum of ${MAX_ARGUMENT_BYTES}`);
        }
        const why = channel();
        if (why !== null) return fail('ToolUnavailable', why);
        const id = base + ++count;
        pending.set(id, [resolve, fail]);
        if (pending.size === 1) {
          sock.ref();
          sock.resume();
        }
        sock.write(`{"id":${id},"name":"${name}","arguments":${json}}\n`);
      });
    };
    return {tool};
  })();
