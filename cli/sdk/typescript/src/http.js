// Transport: one HTTP request to the broker with the token, a per-attempt
// deadline, the caller's AbortSignal, the mapping of error answers to
// KilnError and the retries of retryable failures (exponential backoff,
// Retry-After honoured, capped at 5 s). Every submit carries an
// Idempotency-Key chosen before the first attempt, so a retry never creates
// a second job. Used by KilnClient only.

import { errorFromResponse, KilnError, UnavailableError } from './errors.js';

const kMaxBackoffMs = 5000;
const kUserAgent = 'kiln-sdk-typescript/0.1.0';

/** Resolves after ms, or rejects with the signal's reason when it aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal));
    const onAbort = () => { clearTimeout(timer); reject(abortReason(signal)); };
    const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve(); }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export function abortReason(signal) {
  return signal?.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/** Backoff before retry number `attempt` (1-based): Retry-After when given. */
export function backoffMs(attempt, retryAfter) {
  if (retryAfter) {
    const secs = Number(retryAfter);
    const ms = Number.isFinite(secs) ? secs * 1000 : Date.parse(retryAfter) - Date.now();
    if (Number.isFinite(ms)) return Math.min(kMaxBackoffMs, Math.max(0, ms));
  }
  const base = Math.min(kMaxBackoffMs, 200 * 2 ** (attempt - 1));
  return base / 2 + Math.random() * (base / 2); // jitter: clients retrying together spread out
}

// An AbortController aborted by the caller's signal or by a deadline.
function deadlineController(signal, timeoutMs) {
  const ac = new AbortController();
  const state = { timedOut: false };
  const onAbort = () => ac.abort(abortReason(signal));
  if (signal?.aborted) ac.abort(abortReason(signal));
  else signal?.addEventListener('abort', onAbort, { once: true });
  const timer = timeoutMs > 0
    ? setTimeout(() => { state.timedOut = true; ac.abort(new Error('deadline')); }, timeoutMs)
    : null;
  return {
    signal: ac.signal,
    state,
    clearDeadline() { clearTimeout(timer); },
    done() { clearTimeout(timer); signal?.removeEventListener('abort', onAbort); },
    close() { this.done(); ac.abort(new Error('closed')); },
  };
}

export class Transport {
  constructor({ url, token, timeoutMs, maxRetries }) {
    this.url = String(url).replace(/\/+$/, '');
    this.token = token;
    this.timeoutMs = timeoutMs;
    this.maxRetries = maxRetries;
  }

  /**
   * Sends one request, retrying retryable failures.
   * opts: body (JSON), query (object; undefined/null values dropped), headers,
   * token (overrides the client's), signal, timeoutMs (per attempt; 0: none),
   * retryTimeouts (default true: a deadline counts as a retryable failure),
   * stream (resolve with {response, close} once the head arrived, the body
   * unread and the deadline off), okStatuses (non-2xx statuses to hand back).
   * Resolves with {status, headers, body} (body: parsed JSON or null).
   */
  async request(method, path, opts = {}) {
    const url = this.url + path + queryString(opts.query);
    const headers = { 'User-Agent': kUserAgent, Accept: 'application/json', ...opts.headers };
    const token = opts.token ?? this.token;
    if (token) headers.Authorization = `Bearer ${token}`;
    let payload;
    if (opts.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      payload = JSON.stringify(opts.body);
    }
    const timeoutMs = opts.timeoutMs ?? this.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      let err;
      let retryAfter = null;
      try {
        return await this._attempt(method, url, headers, payload, timeoutMs, opts);
      } catch (e) {
        if (opts.signal?.aborted) throw abortReason(opts.signal);
        if (!(e instanceof UnavailableError || e?.retryable)) throw e;
        if (e.timedOut && opts.retryTimeouts === false) throw e;
        err = e;
        retryAfter = e.retryAfter ?? null;
      }
      if (attempt >= this.maxRetries) throw err;
      await sleep(backoffMs(attempt + 1, retryAfter), opts.signal);
    }
  }

  async _attempt(method, url, headers, payload, timeoutMs, opts) {
    const dc = deadlineController(opts.signal, timeoutMs);
    let streaming = false;
    try {
      const res = await fetch(url, { method, headers, body: payload, signal: dc.signal });
      if (opts.stream && res.ok) {
        // A stream has no deadline (its reader watches for silence) but still
        // follows the caller's signal until the reader closes it.
        dc.clearDeadline();
        streaming = true;
        return { status: res.status, headers: res.headers, response: res, close: () => dc.close() };
      }
      const text = await res.text();
      let body = null;
      if (text) {
        try { body = JSON.parse(text); } catch { body = null; }
      }
      if (res.ok && text && body === null) {
        throw new KilnError(`INVALID_RESPONSE: ${method} ${url} answered ${res.status} with a body that is not JSON`, {
          code: 'INVALID_RESPONSE', status: res.status,
        });
      }
      if (res.ok || opts.okStatuses?.includes(res.status)) {
        return { status: res.status, headers: res.headers, body };
      }
      const err = errorFromResponse(res.status, body, text);
      err.retryAfter = res.headers.get('retry-after');
      throw err;
    } catch (e) {
      if (e instanceof KilnError) throw e;
      if (opts.signal?.aborted) throw abortReason(opts.signal);
      if (dc.state.timedOut) {
        const t = new UnavailableError(`UNAVAILABLE: no answer from ${url} within ${timeoutMs} ms`, {
          code: 'UNAVAILABLE', retryable: true, cause: e,
        });
        t.timedOut = true;
        throw t;
      }
      throw new UnavailableError(`UNAVAILABLE: ${method} ${url} failed: ${e?.cause?.message ?? e?.message ?? e}`, {
        code: 'UNAVAILABLE', retryable: true, cause: e,
      });
    } finally {
      if (!streaming) dc.done();
    }
  }
}

function queryString(query) {
  if (!query) return '';
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue;
    params.append(k, String(v));
  }
  const s = params.toString();
  return s ? `?${s}` : '';
}
