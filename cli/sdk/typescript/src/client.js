// KilnClient: the SDK's entry point, one method per API operation
// (docs/api.md), and Session, a handle on one interpreter that keeps state
// between runs.
//
//   const kiln = new KilnClient({ url, token });
//   const ex = await kiln.run('print(6 * 7)');   // ex.ok, ex.stdout === '42\n'
//
// A client holds no connection or state of its own besides its options: use
// one per token, from any number of concurrent calls.

import { randomUUID } from 'node:crypto';
import { errorFromObject, SessionNotFoundError } from './errors.js';
import { Transport } from './http.js';
import { followEvents } from './follow.js';
import {
  answerBody, checkDeclared, checkHandlers, toolResultsPath, ToolRunner,
} from './tools.js';
import {
  Execution, executionSummary, isTerminal, sessionInfo, submitBody,
} from './execution.js';

export class KilnClient {
  constructor({ url, token, timeoutMs = 30000, maxRetries = 3 } = {}) {
    if (!(Number.isFinite(timeoutMs) && timeoutMs > 0)) throw new TypeError('timeoutMs: expected a positive number');
    if (!(Number.isInteger(maxRetries) && maxRetries >= 0)) throw new TypeError('maxRetries: expected an integer >= 0');
    this.url = url ?? process.env.KILN_URL ?? 'http://127.0.0.1:8080';
    this.timeoutMs = timeoutMs;
    this.maxRetries = maxRetries;
    this._t = new Transport({ url: this.url, token: token ?? process.env.KILN_TOKEN, timeoutMs, maxRetries });
  }

  /**
   * Runs code and resolves with its record once it ended. Without callbacks,
   * tool handlers or a signal it is one `wait: true` request; with them the
   * job is submitted and its events followed, and an abort cancels it.
   * `toolHandlers` ({name: (args) => result}) answer the calls the code makes
   * to the tools declared in `tools`.
   */
  async run(code, opts = {}) {
    const body = submitBody(code, opts);
    const key = opts.idempotencyKey ?? randomUUID();
    const handlers = checkHandlers(opts.toolHandlers);
    checkDeclared(handlers, opts.tools);
    if (opts.onStdout || opts.onStderr || opts.onEvent || opts.signal || handlers) {
      const id = await this._submit(body, key, opts.signal);
      try {
        return await this.wait(id, opts);
      } catch (e) {
        if (opts.signal?.aborted) await this.cancel(id).catch(() => {});
        throw e;
      }
    }
    let answer = null;
    try {
      // The broker answers within the job's timeout plus its grace; past our
      // own deadline (the job's timeout unknown here) follow its events instead.
      const res = await this._t.request('POST', '/v1/executions', {
        body: { ...body, wait: true },
        headers: { 'Idempotency-Key': key },
        timeoutMs: this.timeoutMs + (body.limits?.timeout_ms ?? 0),
        retryTimeouts: false,
      });
      answer = res.body;
    } catch (e) {
      if (!e?.timedOut) throw e;
    }
    if (answer && isTerminal(answer.status)) return new Execution(answer);
    // Still running (approval, a long queue) or our deadline passed: the same
    // key answers with the same job, at once.
    return this.wait(answer?.id ?? await this._submit(body, key));
  }

  /** Submits without waiting; resolves with the job's id. */
  async submit(code, opts = {}) {
    return this._submit(submitBody(code, opts), opts.idempotencyKey ?? randomUUID(), opts.signal);
  }

  async _submit(body, key, signal) {
    const res = await this._t.request('POST', '/v1/executions', {
      body: { ...body, wait: false }, headers: { 'Idempotency-Key': key }, signal,
    });
    return res.body.id;
  }

  /** The record of job `id`, as it is now. */
  async get(id, { signal } = {}) {
    const res = await this._t.request('GET', `/v1/executions/${encodeURIComponent(id)}`, { signal });
    return new Execution(res.body);
  }

  /** Cancels job `id`; resolves with its record (still `running` if the worker has not confirmed). */
  async cancel(id, { signal } = {}) {
    const res = await this._t.request('POST', `/v1/executions/${encodeURIComponent(id)}/cancel`, { signal });
    if (res.status === 200) return new Execution(res.body); // 202: not confirmed within 5 s
    return this.get(id, { signal });
  }

  /**
   * Follows job `id` until it ends, handing output to the callbacks; resolves
   * with its record. With `toolHandlers`, each `tool_call` event is answered
   * by the handler of its tool (concurrently), and wait resolves once the job
   * ended and every handler it started has settled.
   */
  async wait(id, { onStdout, onStderr, onEvent, toolHandlers, signal } = {}) {
    const handlers = checkHandlers(toolHandlers);
    const tools = handlers ? new ToolRunner(this._t, id, handlers, signal) : null;
    const raw = await followEvents(this._t, id, {
      onStdout, onStderr, onEvent, signal, tools,
      reconnects: Math.max(3, this.maxRetries),
      getRecord: async () => (await this._t.request('GET', `/v1/executions/${encodeURIComponent(id)}`, { signal })).body,
    });
    if (tools) await tools.finish();
    return new Execution(raw);
  }

  /**
   * Answers tool call `callId` (a `tool_call` event's `call_id`) of running job
   * `id` with `{ result }` (any JSON value) or `{ error }` (a message), exactly
   * one. Resolves with {callId, accepted}. A 503 (the job's worker is not
   * connected to this broker) is retried; ToolCallClosedError (409) when the
   * call takes no answer any more: answered already (also by an earlier try
   * of this request), timed out, or the job is no longer running.
   */
  async submitToolResult(id, callId, answer, { signal } = {}) {
    const res = await this._t.request('POST', toolResultsPath(id), { body: answerBody(callId, answer), signal });
    return { callId: res.body?.call_id ?? callId, accepted: res.body?.accepted === true };
  }

  /** A handle on a session; nothing is created until its first run. */
  session(opts = {}) {
    return new Session(this, opts);
  }

  /** Runs fn with a new session and always deletes the session afterwards. */
  async withSession(opts, fn) {
    const s = this.session(opts);
    try {
      return await fn(s);
    } finally {
      await s.close();
    }
  }

  /** The tenant's executions, newest first, following `next_cursor` page by page. */
  async *listExecutions({ status, sessionId, since, until, pageSize, tenant, signal } = {}) {
    let cursor;
    do {
      const res = await this._t.request('GET', '/v1/executions', {
        query: {
          status: Array.isArray(status) ? status.join(',') : status,
          session_id: sessionId,
          since: since instanceof Date ? since.getTime() : since,
          until: until instanceof Date ? until.getTime() : until,
          limit: pageSize,
          tenant,
          cursor,
        },
        signal,
      });
      for (const e of res.body.executions ?? []) yield executionSummary(e);
      cursor = res.body.next_cursor ?? null;
    } while (cursor);
  }

  /**
   * Submits up to 100 jobs ({code, language, ...run options}) in one request.
   * Resolves with one result per item, in order: {id, status, replay, error}
   * where error is a KilnError or null.
   */
  async submitBatch(items, { idempotencyKey, signal } = {}) {
    const executions = items.map(({ code, ...opts }) => submitBody(code, opts));
    const res = await this._t.request('POST', '/v1/executions/batch', {
      body: { executions },
      headers: { 'Idempotency-Key': idempotencyKey ?? randomUUID() },
      signal,
    });
    return (res.body.results ?? []).map((r) => ({
      id: r.id ?? null,
      status: r.status ?? null,
      replay: r.replay === true,
      error: r.error ? errorFromObject(r.error, { executionId: r.id ?? null, body: r }) : null,
    }));
  }

  async listSessions({ conversationId, tenant, signal } = {}) {
    const res = await this._t.request('GET', '/v1/sessions', {
      query: { conversation_id: conversationId, tenant }, signal,
    });
    return (res.body.sessions ?? []).map(sessionInfo);
  }

  /** Deletes session `id`: {id, state: 'deleted', cancelled: [job ids]}. */
  async deleteSession(id, { signal } = {}) {
    const res = await this._t.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}`, { signal });
    return { id: res.body.id, state: res.body.state, cancelled: res.body.cancelled ?? [] };
  }

  /** GET /v1/capabilities, as the API sends it. */
  async capabilities({ signal } = {}) {
    return (await this._t.request('GET', '/v1/capabilities', { signal })).body;
  }

  /** The `runtimes` list of GET /v1/runtimes, as the API sends it. */
  async runtimes({ signal } = {}) {
    return (await this._t.request('GET', '/v1/runtimes', { signal })).body.runtimes ?? [];
  }

  /** GET /v1/health: its body, also when the broker answers 503 (then `status` is not 'ok'). */
  async health({ signal } = {}) {
    return (await this._t.request('GET', '/v1/health', { okStatuses: [503], signal })).body;
  }

  /** GET /v1/usage (admin token): per-day use, as the API sends it. */
  async usage({ tenant, from, to, signal } = {}) {
    const day = (d) => (d instanceof Date ? d.toISOString().slice(0, 10) : d);
    return (await this._t.request('GET', '/v1/usage', {
      query: { tenant, from: day(from), to: day(to) }, signal,
    })).body;
  }
}

/** One interpreter kept between runs: the session `id`, created on first use. */
export class Session {
  constructor(client, { language = 'python', sessionId, conversationId } = {}) {
    this.client = client;
    this.language = language;
    this.id = sessionId ?? `sdk-${randomUUID()}`;
    this.conversationId = conversationId ?? null;
  }

  run(code, opts = {}) {
    return this.client.run(code, {
      ...opts,
      language: this.language,
      sessionId: this.id,
      conversationId: this.conversationId ?? undefined,
    });
  }

  /** Deletes the session; one that does not exist (never used, expired) is fine. */
  async close() {
    try {
      return await this.client.deleteSession(this.id);
    } catch (e) {
      if (e instanceof SessionNotFoundError) return null;
      throw e;
    }
  }
}

// `await using s = kiln.session()` where the runtime has it (Node 18.18+ has the symbol).
if (typeof Symbol.asyncDispose === 'symbol') {
  Session.prototype[Symbol.asyncDispose] = async function asyncDispose() {
    await this.close();
  };
}
