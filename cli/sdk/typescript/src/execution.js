// The shapes the SDK exchanges with the API: the submit body built from
// camelCase options (files as base64), and the records that come back
// (Execution, listing summaries, sessions) turned into camelCase objects
// that keep the JSON as `raw`.

import { Buffer } from 'node:buffer';

export const kTerminalStatuses = new Set([
  'succeeded', 'failed', 'timed_out', 'memory_exceeded', 'cancelled', 'rejected', 'error',
]);

export function isTerminal(status) {
  return kTerminalStatuses.has(status);
}

/** An execution record (GET /v1/executions/{id}) with camelCase fields. */
export class Execution {
  constructor(raw) {
    this.raw = raw;
    this.id = raw.id;
    this.status = raw.status;
    this.language = raw.language ?? null;
    this.stdout = raw.stdout ?? '';
    this.stderr = raw.stderr ?? '';
    this.exitCode = raw.exit_code ?? null;
    this.signal = raw.signal ?? null;
    this.result = raw.result ?? null;
    this.error = raw.error ?? null;
    this.durationMs = raw.duration_ms ?? null;
    this.queuedMs = raw.queued_ms ?? null;
    this.sessionId = raw.session_id || null; // execution_start says "" for none
    this.sessionEpoch = raw.session_epoch ?? null;
    this.truncated = raw.truncated === true;
    this.files = decodeFiles(raw.files);
    this.filesTruncated = raw.files_truncated === true;
    this.filesOmitted = raw.files_omitted ?? 0;
    this.outputs = Array.isArray(raw.outputs) ? raw.outputs : [];
    this.outputsTruncated = raw.outputs_truncated === true;
    this.endReason = raw.end_reason ?? null;
    this.usage = raw.usage ?? null;
    this.worker = raw.worker ?? null;
    this.warnings = Array.isArray(raw.warnings) ? raw.warnings : [];
    this.queuePosition = raw.queue_position ?? null;
    this.waitReason = raw.wait_reason ?? null;
    this.createdAtMs = raw.created_at_ms ?? null;
    this.startedAtMs = raw.started_at_ms ?? null;
    this.finishedAtMs = raw.finished_at_ms ?? null;
  }

  /** The job exited 0. */
  get ok() {
    return this.status === 'succeeded';
  }

  /** The job has ended (whatever the outcome). */
  get done() {
    return isTerminal(this.status);
  }
}

function decodeFiles(files) {
  const out = {};
  if (!Array.isArray(files)) return out;
  for (const f of files) {
    if (f && typeof f.path === 'string') out[f.path] = Buffer.from(f.content_base64 ?? '', 'base64');
  }
  return out;
}

function encodeFiles(files) {
  if (files === undefined || files === null) return undefined;
  return Object.entries(files).map(([path, content]) => {
    let bytes;
    if (typeof content === 'string') bytes = Buffer.from(content, 'utf8');
    else if (content instanceof Uint8Array) bytes = Buffer.from(content.buffer, content.byteOffset, content.byteLength);
    else if (content instanceof ArrayBuffer) bytes = Buffer.from(content);
    else throw new TypeError(`files[${JSON.stringify(path)}]: expected a string or a Uint8Array`);
    return { path, content_base64: bytes.toString('base64') };
  });
}

// limits may be given camelCase (timeoutMs) or as the API spells them (timeout_ms).
function snakeLimits(limits) {
  if (!limits) return undefined;
  const out = {};
  for (const [k, v] of Object.entries(limits)) out[k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)] = v;
  return out;
}

/** The POST /v1/executions body for `code` and run options (without `wait`). */
export function submitBody(code, opts = {}) {
  if (typeof code !== 'string') throw new TypeError('code: expected a string');
  const limits = snakeLimits(opts.limits) ?? {};
  if (opts.timeoutMs !== undefined) limits.timeout_ms = opts.timeoutMs;
  const body = {
    language: opts.language ?? 'python',
    code,
    session_id: opts.sessionId,
    conversation_id: opts.conversationId,
    priority: opts.priority,
    input: opts.input,
    files: encodeFiles(opts.files),
    collect: opts.collect,
    env: opts.env,
    stdin: opts.stdin,
    packages: opts.packages,
    network: opts.network,
    callback_url: opts.callbackUrl,
    tools: opts.tools,
    tool_timeout_ms: opts.toolTimeoutMs,
    limits: Object.keys(limits).length > 0 ? limits : undefined,
  };
  for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
  return body;
}

/** An entry of GET /v1/executions. */
export function executionSummary(raw) {
  return {
    id: raw.id,
    status: raw.status,
    language: raw.language ?? null,
    sessionId: raw.session_id ?? null,
    createdAtMs: raw.created_at_ms ?? null,
    startedAtMs: raw.started_at_ms ?? null,
    finishedAtMs: raw.finished_at_ms ?? null,
    raw,
  };
}

/** An entry of GET /v1/sessions. */
export function sessionInfo(raw) {
  return {
    id: raw.id,
    language: raw.language ?? null,
    worker: raw.worker ?? null,
    state: raw.state ?? null,
    epoch: raw.epoch ?? null,
    createdAt: raw.created_at ?? null,
    lastUsedAt: raw.last_used_at ?? null,
    executionCount: raw.execution_count ?? 0,
    conversationId: raw.conversation_id ?? null,
    raw,
  };
}
