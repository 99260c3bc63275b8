// Tool callbacks ("code mode"). Code in the sandbox calls a tool its
// submitter declared (`tools`); the call reaches the client as a `tool_call`
// event on the execution's stream, {call_id, name, arguments}, and is
// answered with POST /v1/executions/{id}/tool-results ({call_id, result} or
// {call_id, error}); the answer goes back into the sandbox.
//
// With `toolHandlers` the client answers by itself (ToolRunner): the handler
// of the call's tool gets the arguments, what it returns (or resolves with)
// is the result, what it throws (or rejects with) is the error (its message),
// and a tool without a handler is answered "no handler for tool NAME".
// Handlers run concurrently, while the stream is read on.

import { Buffer } from 'node:buffer';
import { InvalidRequestError, LimitExceededError, ToolCallClosedError } from './errors.js';

// The broker's fixed limits (GET /v1/capabilities, limits.tools).
const kMaxResultBytes = 1 << 20; // the compact JSON of a result
const kMaxErrorBytes = 4096; // an error's text, UTF-8

export function toolResultsPath(id) {
  return `/v1/executions/${encodeURIComponent(id)}/tool-results`;
}

/** `toolHandlers` checked: an object of tool name -> function, or null when not given. */
export function checkHandlers(handlers) {
  if (handlers === undefined || handlers === null) return null;
  if (typeof handlers !== 'object' || Array.isArray(handlers)) {
    throw new TypeError('toolHandlers: expected an object of tool name -> function');
  }
  for (const [name, fn] of Object.entries(handlers)) {
    if (typeof fn !== 'function') throw new TypeError(`toolHandlers[${JSON.stringify(name)}]: expected a function`);
  }
  return handlers;
}

/** run(): handlers without declared tools would never be called. */
export function checkDeclared(handlers, tools) {
  if (handlers && !(Array.isArray(tools) && tools.length > 0)) {
    throw new TypeError("toolHandlers without tools: declare the tools the code may call (tools: [{ name: 'add', ... }])");
  }
}

/** The body of POST /v1/executions/{id}/tool-results from {result} or {error}. */
export function answerBody(callId, answer) {
  if (typeof callId !== 'string' || callId === '') {
    throw new TypeError("callId: expected the call's id (a tool_call event's call_id)");
  }
  const hasResult = answer !== null && typeof answer === 'object' && Object.hasOwn(answer, 'result');
  const hasError = answer !== null && typeof answer === 'object' && Object.hasOwn(answer, 'error');
  if (hasResult === hasError) throw new TypeError('submitToolResult: pass exactly one of { result } and { error }');
  if (hasError) {
    if (typeof answer.error !== 'string') throw new TypeError('error: expected a string (the message the sandbox sees)');
    return { call_id: callId, error: answer.error };
  }
  // JSON has no undefined: an answer without a value is null.
  return { call_id: callId, result: answer.result === undefined ? null : answer.result };
}

/** `text` cut to at most `limit` bytes of UTF-8, on a character boundary. */
function truncateUtf8(text, limit) {
  const buf = Buffer.from(text, 'utf8'); // a lone surrogate becomes U+FFFD
  if (buf.length <= limit) return buf.toString('utf8');
  let end = limit;
  while (end > 0 && (buf[end] & 0xc0) === 0x80) end--; // not inside a character
  return buf.subarray(0, end).toString('utf8');
}

function errorAnswer(message) {
  return { error: truncateUtf8(message, kMaxErrorBytes) };
}

/** What a handler threw: its message (its name when it has none). */
function thrownAnswer(e) {
  if (e instanceof Error) return errorAnswer(e.message || e.name || 'Error');
  return errorAnswer(String(e));
}

/** A handler's value as the answer, or an error the sandbox can read when the broker would refuse it. */
function resultAnswer(name, value) {
  const result = value === undefined ? null : value;
  let text;
  try {
    text = JSON.stringify(result);
  } catch (e) {
    return errorAnswer(`the handler of tool ${name} returned a value that is not JSON: ${e?.message ?? e}`);
  }
  if (text === undefined) return errorAnswer(`the handler of tool ${name} returned a ${typeof value}, not JSON`);
  const size = Buffer.byteLength(text, 'utf8');
  if (size > kMaxResultBytes) {
    return errorAnswer(`the result of tool ${name} is ${size} bytes of JSON, over the limit of ${kMaxResultBytes}`);
  }
  return { result };
}

/**
 * Answers one execution's tool calls with the caller's handlers. `event` is
 * handed every event of the stream; each call is answered once, even if the
 * stream shows it again; a call whose `tool_result` was seen before its
 * handler started (a replay of an ended job) is skipped. The first failure to
 * send an answer (other than 409: the call is closed, which counts as done)
 * is kept in `failure` and reported through `onFailure`.
 */
export class ToolRunner {
  constructor(transport, executionId, handlers, signal) {
    this._t = transport;
    this._id = executionId;
    this._handlers = handlers;
    this._signal = signal;
    this._handed = new Set();
    this._answered = new Set();
    this._pending = new Set();
    this.failure = null;
    this.onFailure = null;
  }

  event(name, data) {
    if (!data || typeof data !== 'object' || typeof data.call_id !== 'string') return;
    if (name === 'tool_result') {
      this._answered.add(data.call_id);
      return;
    }
    if (name !== 'tool_call' || this._handed.has(data.call_id)) return;
    this._handed.add(data.call_id);
    const args = data.arguments;
    const call = {
      callId: data.call_id,
      name: String(data.name ?? ''),
      arguments: args && typeof args === 'object' && !Array.isArray(args) ? args : {},
    };
    // Started on the next turn of the event loop: the rest of this chunk's
    // events (a replay's tool_result for the call) are seen first.
    const p = new Promise((resolve) => { setImmediate(resolve); }).then(() => this._answer(call));
    this._pending.add(p);
    p.then(() => this._pending.delete(p));
  }

  // Never rejects: a failure is kept in `failure`.
  async _answer(call) {
    try {
      if (this._answered.has(call.callId)) return;
      let answer;
      if (!Object.hasOwn(this._handlers, call.name)) {
        answer = errorAnswer(`no handler for tool ${call.name}`);
      } else {
        try {
          answer = resultAnswer(call.name, await this._handlers[call.name](call.arguments));
        } catch (e) { // the handler's failure is the sandbox's ToolError
          answer = thrownAnswer(e);
        }
      }
      await this._send(call, answer);
    } catch (e) {
      if (this.failure === null) {
        if (e && typeof e === 'object' && 'executionId' in e && !e.executionId) e.executionId = this._id;
        this.failure = e;
        this.onFailure?.(e);
      }
    }
  }

  async _send(call, answer) {
    try {
      await this._t.request('POST', toolResultsPath(this._id), {
        body: { call_id: call.callId, ...answer }, signal: this._signal,
      });
    } catch (e) {
      // Answered (a retry after our accepted answer), timed out, or the job ended.
      if (e instanceof ToolCallClosedError) return;
      // The broker refused the result: say so to the sandbox rather than let the call time out.
      if ('result' in answer && (e instanceof InvalidRequestError || e instanceof LimitExceededError)) {
        await this._send(call, errorAnswer(`the result of tool ${call.name} was refused: ${e.message}`));
        return;
      }
      throw e;
    }
  }

  /** At the job's end: waits for the handlers still running, then throws a failure to send an answer. */
  async finish() {
    while (this._pending.size > 0) await Promise.all([...this._pending]);
    if (this.failure !== null) throw this.failure;
  }
}
