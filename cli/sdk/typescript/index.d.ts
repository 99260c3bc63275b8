// Type definitions of @kiln/sdk (hand-written; the package is plain ES modules).

// `await using session = kiln.session()` (TypeScript 5.2+); declared as
// lib.esnext.disposable and @types/node do, for projects with older libs.
declare global {
  interface SymbolConstructor {
    readonly asyncDispose: unique symbol;
  }
}

export type Language = 'python' | 'javascript' | 'shell';

export type ExecutionStatus =
  | 'queued' | 'awaiting_approval' | 'running'
  | 'succeeded' | 'failed' | 'timed_out' | 'memory_exceeded' | 'cancelled' | 'rejected' | 'error';

export interface ClientOptions {
  /** Broker URL; default `process.env.KILN_URL`, else http://127.0.0.1:8080. */
  url?: string;
  /** Bearer token; default `process.env.KILN_TOKEN`. */
  token?: string;
  /** Per-request deadline (a `wait: true` run gets the job's timeout on top). Default 30000. */
  timeoutMs?: number;
  /** Retries of retryable failures (429, 503, network). Default 3. */
  maxRetries?: number;
}

/** Limits as the API spells them (`timeout_ms`) or camelCase (`timeoutMs`). */
export interface Limits {
  timeoutMs?: number; memoryMb?: number; cpuMs?: number; maxOutputBytes?: number; maxPids?: number;
  timeout_ms?: number; memory_mb?: number; cpu_ms?: number; max_output_bytes?: number; max_pids?: number;
}

/**
 * A tool the code may call (`kiln.tool(name, args)` in the sandbox): docs/sdk.md, "Tool callbacks".
 * `name` matches `^[A-Za-z_][A-Za-z0-9_-]{0,63}$`; `parameters` is a JSON Schema (draft 7) of the
 * arguments object, checked before the call reaches you.
 */
export interface ToolDeclaration {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
}

/**
 * Answers one tool call: gets the call's arguments, returns (or resolves with) the result,
 * any JSON value (`undefined` is sent as null). What it throws is sent as the error (its
 * `message`), which the sandbox sees as a ToolError.
 */
export type ToolHandler = (args: Record<string, any>) => unknown;

/** The answer to a tool call: exactly one of `result` and `error`. */
export type ToolAnswer = { result: unknown; error?: never } | { error: string; result?: never };

/** The data of a `tool_call` event. */
export interface ToolCallEvent {
  call_id: string;
  name: string;
  arguments: Record<string, any>;
}

/** The data of a `tool_result` event: an answer to `call_id` was accepted. */
export interface ToolResultEvent {
  call_id: string;
  ok: boolean;
}

export interface SubmitOptions {
  language?: Language;
  sessionId?: string;
  conversationId?: string;
  priority?: number;
  /** Global variables (python, javascript) or environment variables (shell). */
  input?: Record<string, unknown>;
  /** Files written into the workspace: path -> UTF-8 text or bytes. */
  files?: Record<string, string | Uint8Array>;
  /** Glob patterns of workspace files to return in `Execution.files`. */
  collect?: string[];
  env?: Record<string, string>;
  stdin?: string;
  packages?: string[];
  network?: boolean | string[];
  /** Where the record is POSTed, signed, when the job ends (docs/api.md, "Webhooks"). */
  callbackUrl?: string;
  /** The tools the code may call (1-32). */
  tools?: ToolDeclaration[];
  /** How long one tool call waits for its answer, 1-300000 ms (default min(30000, the job's timeout)). */
  toolTimeoutMs?: number;
  limits?: Limits;
  /** The job's time limit (`limits.timeout_ms`). */
  timeoutMs?: number;
  /** Sent as `Idempotency-Key`; default a random UUID, kept across retries. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface FollowOptions {
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  /** Every event: execution_start, output_chunk, tool_call, tool_result, execution_end, execution_error. */
  onEvent?: (name: string, data: any) => void;
  /**
   * Answers the job's tool calls: tool name -> handler. Handlers run concurrently while the
   * stream is read; a call to a tool without one is answered "no handler for tool NAME".
   */
  toolHandlers?: Record<string, ToolHandler>;
  /** Aborts the wait (run: and cancels the job it submitted). */
  signal?: AbortSignal;
}

export interface RunOptions extends SubmitOptions, FollowOptions {}

export interface ExecutionError {
  code: string;
  message: string;
  retryable: boolean;
  type?: string;
  traceback?: string;
}

export interface Output {
  mime: string;
  size: number;
  text?: string;
  content_base64?: string;
}

export class Execution {
  constructor(raw: Record<string, any>);
  readonly id: string;
  readonly status: ExecutionStatus;
  readonly language: Language | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly exitCode: number | null;
  readonly signal: number | string | null;
  readonly result: any;
  readonly error: ExecutionError | null;
  readonly durationMs: number | null;
  readonly queuedMs: number | null;
  readonly sessionId: string | null;
  readonly sessionEpoch: number | null;
  readonly truncated: boolean;
  /** Collected files, decoded. */
  readonly files: Record<string, Uint8Array>;
  readonly filesTruncated: boolean;
  readonly filesOmitted: number;
  readonly outputs: Output[];
  readonly outputsTruncated: boolean;
  readonly endReason: string | null;
  readonly usage: { cpu_ms: number; max_rss_kb: number } | null;
  readonly worker: string | null;
  readonly warnings: unknown[];
  readonly queuePosition: number | null;
  readonly waitReason: string | null;
  readonly createdAtMs: number | null;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
  /** The record as the API sent it. */
  readonly raw: Record<string, any>;
  /** status === 'succeeded'. */
  readonly ok: boolean;
  /** The job has ended, whatever the outcome. */
  readonly done: boolean;
}

export interface ExecutionSummary {
  id: string;
  status: ExecutionStatus;
  language: Language | null;
  sessionId: string | null;
  createdAtMs: number | null;
  startedAtMs: number | null;
  finishedAtMs: number | null;
  raw: Record<string, any>;
}

export interface ListExecutionsOptions {
  status?: ExecutionStatus | ExecutionStatus[];
  sessionId?: string;
  since?: number | Date;
  until?: number | Date;
  /** Entries per request, 1-100. */
  pageSize?: number;
  /** Admin tokens only. */
  tenant?: string;
  signal?: AbortSignal;
}

export interface BatchItem extends Omit<SubmitOptions, 'idempotencyKey' | 'signal'> {
  code: string;
}

export interface BatchResult {
  id: string | null;
  status: string | null;
  replay: boolean;
  error: KilnError | null;
}

export interface SessionInfo {
  id: string;
  language: Language | null;
  worker: string | null;
  state: 'idle' | 'busy' | 'lost' | string | null;
  epoch: number | null;
  createdAt: number | null;
  lastUsedAt: number | null;
  executionCount: number;
  conversationId: string | null;
  raw: Record<string, any>;
}

export interface SessionOptions {
  language?: Language;
  /** Default: a fresh `sdk-<uuid>`. */
  sessionId?: string;
  conversationId?: string;
}

export interface DeletedSession {
  id: string;
  state: 'deleted';
  cancelled: string[];
}

export interface Signalable {
  signal?: AbortSignal;
}

export class Session {
  constructor(client: KilnClient, opts?: SessionOptions);
  readonly client: KilnClient;
  readonly id: string;
  readonly language: Language;
  readonly conversationId: string | null;
  run(code: string, opts?: Omit<RunOptions, 'language' | 'sessionId' | 'conversationId'>): Promise<Execution>;
  /** Deletes the session; resolves null when it did not exist. */
  close(): Promise<DeletedSession | null>;
  /** close(), for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
}

export class KilnClient {
  constructor(opts?: ClientOptions);
  readonly url: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  run(code: string, opts?: RunOptions): Promise<Execution>;
  submit(code: string, opts?: SubmitOptions): Promise<string>;
  get(id: string, opts?: Signalable): Promise<Execution>;
  cancel(id: string, opts?: Signalable): Promise<Execution>;
  wait(id: string, opts?: FollowOptions): Promise<Execution>;
  /** Answers tool call `callId` of running job `id`; ToolCallClosedError when it takes no answer any more. */
  submitToolResult(id: string, callId: string, answer: ToolAnswer, opts?: Signalable): Promise<{ callId: string; accepted: boolean }>;
  session(opts?: SessionOptions): Session;
  withSession<T>(opts: SessionOptions | undefined, fn: (session: Session) => Promise<T>): Promise<T>;
  listExecutions(opts?: ListExecutionsOptions): AsyncIterableIterator<ExecutionSummary>;
  submitBatch(items: BatchItem[], opts?: { idempotencyKey?: string; signal?: AbortSignal }): Promise<BatchResult[]>;
  listSessions(opts?: { conversationId?: string; tenant?: string; signal?: AbortSignal }): Promise<SessionInfo[]>;
  deleteSession(id: string, opts?: Signalable): Promise<DeletedSession>;
  capabilities(opts?: Signalable): Promise<Capabilities>;
  runtimes(opts?: Signalable): Promise<Runtime[]>;
  health(opts?: Signalable): Promise<Health>;
  usage(opts?: { tenant?: string; from?: string | Date; to?: string | Date; signal?: AbortSignal }): Promise<Usage>;
}

/** GET /v1/capabilities, as the API sends it. */
export interface Capabilities {
  tenant: string | null;
  code_execution: boolean;
  auto_approve: boolean;
  isolation: string | null;
  runtimes: Language[];
  isolation_levels: string[];
  packages: Record<string, string[]>;
  network: { allow: string[]; max_bytes: number; max_connections: number } | null;
  limits: {
    default: Record<'timeout_ms' | 'memory_mb' | 'cpu_ms' | 'max_output_bytes' | 'max_pids', number>;
    max: Record<'timeout_ms' | 'memory_mb' | 'cpu_ms' | 'max_output_bytes' | 'max_pids', number>;
    max_code_bytes: number;
    max_input_bytes: number;
    max_files_bytes: number;
    /** Tool callbacks' fixed limits (brokers with code mode). */
    tools?: {
      max_tools: number; max_calls: number; max_in_flight: number; max_argument_bytes: number;
      max_result_bytes: number; max_error_bytes: number; max_schema_bytes: number;
    };
  };
  session_ttl_s: number;
}

/** An entry of GET /v1/runtimes. */
export interface Runtime {
  language: Language;
  versions: string[];
  workers: number;
  packages: { name: string; version: string }[];
  partial: { name: string; versions: string[]; workers: number }[];
}

export interface Health {
  status: string;
  redis: string;
  workers?: number;
  queued?: number;
}

export interface UsageDay {
  date: string;
  executions: number;
  cpu_seconds: number;
  output_bytes: number;
}

export interface Usage {
  from: string;
  to: string;
  tenants: { tenant: string; days: UsageDay[]; total: Omit<UsageDay, 'date'> }[];
}

export interface SseEvent {
  event: string;
  id: string;
  data: string;
}

/** Incremental Server-Sent Events parser (used by `wait`; exported for tests and tools). */
export class SseParser {
  constructor(opts?: { maxLineChars?: number });
  lastEventId: string;
  push(text: string): SseEvent[];
}

export class KilnError extends Error {
  constructor(message: string, info?: {
    code?: string; status?: number; retryable?: boolean; executionId?: string | null; body?: unknown; cause?: unknown;
  });
  /** The API error code, e.g. 'INVALID_REQUEST'; 'UNAVAILABLE' for a network failure. */
  code: string;
  /** HTTP status; 0 when no answer came. */
  status: number;
  retryable: boolean;
  /** The job the answer named, if any (e.g. a 503 whose outcome is unknown). */
  executionId: string | null;
  /** The parsed answer. */
  body: unknown;
}
export class InvalidRequestError extends KilnError {}
export class LimitExceededError extends KilnError {}
export class SecurityBlockedError extends KilnError {}
export class UnauthorizedError extends KilnError {}
export class ForbiddenError extends KilnError {}
export class CodeExecutionDisabledError extends ForbiddenError {}
export class NotFoundError extends KilnError {}
export class SessionNotFoundError extends NotFoundError {}
/** 409 TOOL_CALL_CLOSED: the tool call was answered already, timed out, or its job is no longer running. */
export class ToolCallClosedError extends KilnError {}
export class RateLimitedError extends KilnError {}
export class QueueFullError extends KilnError {}
export class UnavailableError extends KilnError {}
export class RuntimeUnavailableError extends UnavailableError {}

/** The options of `verifyWebhook`. */
export interface VerifyWebhookOptions {
  /** How far (seconds, either way) `t` may be from `now`; default 300. null disables the check. */
  toleranceSec?: number | null;
  /** The time to check `t` against: unix seconds or a Date. Default the clock. */
  now?: number | Date;
}

/**
 * Checks the `Kiln-Signature` header of a webhook (a job's final record POSTed
 * to its `callback_url`) against the raw body, and returns the record.
 * `body` must be the bytes received, not JSON parsed and stringified again.
 * Throws WebhookVerificationError when the header is missing or malformed, no
 * `v1` signature matches, `t` is out of tolerance, or the body is not a JSON object.
 */
export function verifyWebhook(
  secret: string | Uint8Array,
  body: string | Uint8Array | ArrayBuffer,
  signature: string | string[] | undefined | null,
  opts?: VerifyWebhookOptions,
): Record<string, any>;

/**
 * The `Kiln-Signature` value (`t=<seconds>,v1=<hex>`) the broker would send for
 * `body` at `timestamp` (unix seconds or a Date; default now). For tests of a receiver.
 */
export function signWebhook(
  secret: string | Uint8Array,
  body: string | Uint8Array | ArrayBuffer,
  timestamp?: number | Date,
): string;

/** A webhook that cannot be trusted (not a KilnError: it is not an API answer). */
export class WebhookVerificationError extends Error {
  constructor(message: string);
}
