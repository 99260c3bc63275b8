// Following a job's events (GET /v1/executions/{id}/events) until its end:
// hands output chunks to the caller's callbacks and resolves with the final
// record. A stream that drops or goes silent (the broker sends a keepalive
// every 15 s) is reopened with Last-Event-ID, so no chunk is seen twice or
// missed. Every event also goes to the ToolRunner (opts.tools) when the
// caller gave tool handlers. Used by KilnClient.wait.

import { errorFromObject, UnavailableError } from './errors.js';
import { abortReason, backoffMs, sleep } from './http.js';
import { isTerminal } from './execution.js';
import { SseParser } from './sse.js';

const kIdleMs = 45000; // three missed keepalives

/**
 * Resolves with the raw final record of job `id`.
 * opts: onStdout, onStderr, onEvent, signal, reconnects (drops in a row
 * without an event before giving up), getRecord (() => raw record), tools (a
 * ToolRunner, or null: a failure to answer a call rejects with its error).
 */
export async function followEvents(transport, id, opts) {
  const path = `/v1/executions/${encodeURIComponent(id)}/events`;
  let lastId = '';
  let failures = 0;
  for (;;) {
    if (opts.tools?.failure) throw opts.tools.failure;
    const headers = { Accept: 'text/event-stream' };
    if (lastId) headers['Last-Event-ID'] = lastId;
    const open = await transport.request('GET', path, { stream: true, headers, signal: opts.signal });
    if (open.status === 204) { // the broker says we saw the end already
      open.close();
      return opts.getRecord();
    }
    const r = await readStream(open, opts, (eventId) => { lastId = eventId; });
    if (r.record) return r.record;
    if (opts.tools?.failure) throw opts.tools.failure;
    failures = r.progressed ? 1 : failures + 1;
    if (failures > opts.reconnects) {
      const raw = await opts.getRecord();
      if (isTerminal(raw.status)) return raw;
      throw r.error ?? new UnavailableError(`UNAVAILABLE: the event stream of ${id} kept dropping`, {
        code: 'UNAVAILABLE', retryable: true, executionId: id,
      });
    }
    await sleep(backoffMs(failures), opts.signal);
  }
}

// Reads one connection. Resolves {record} at the end event, else
// {progressed, error?} when the connection drops or goes silent.
async function readStream(open, opts, onEventId) {
  const reader = open.response.body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  let progressed = false;
  let idle = null;
  const resetIdle = () => {
    clearTimeout(idle);
    idle = setTimeout(() => open.close(), kIdleMs);
  };
  // An answer that could not be sent ends this connection; the caller throws.
  if (opts.tools) opts.tools.onFailure = () => open.close();
  try {
    for (;;) {
      resetIdle();
      let chunk;
      try {
        chunk = await reader.read();
      } catch {
        // The connection dropped or went silent; the caller's abort is not a drop.
        if (opts.signal?.aborted) throw abortReason(opts.signal);
        return { progressed };
      }
      if (chunk.done) return { progressed };
      // Errors from here on (a callback's, a final error event's) are the caller's.
      for (const ev of parser.push(decoder.decode(chunk.value, { stream: true }))) {
        progressed = true;
        const r = dispatch(ev, opts);
        if (ev.id) onEventId(ev.id);
        if (r) return r;
      }
    }
  } finally {
    clearTimeout(idle);
    if (opts.tools) opts.tools.onFailure = null;
    open.close();
  }
}

// Hands one event to the callbacks; returns {record} or {error} when it ends the stream.
function dispatch(ev, opts) {
  let data;
  try {
    data = JSON.parse(ev.data);
  } catch {
    data = ev.data;
  }
  if (ev.event === 'output_chunk' && data && typeof data.data === 'string') {
    if (data.stream === 'stderr') opts.onStderr?.(data.data);
    else opts.onStdout?.(data.data);
  }
  opts.onEvent?.(ev.event, data);
  opts.tools?.event(ev.event, data); // tool_call: answered by a handler; tool_result: noted
  if (ev.event !== 'execution_end' && ev.event !== 'execution_error') return null;
  if (data && typeof data === 'object' && typeof data.status === 'string') return { record: data };
  // execution_error carrying an error object: the broker lost Redis.
  const err = errorFromObject(data?.error ?? data, { status: 0 });
  if (!err.retryable) throw err;
  return { progressed: true, error: err };
}
