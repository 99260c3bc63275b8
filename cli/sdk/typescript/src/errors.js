// The errors the SDK throws: one class per API error code a caller may want to
// catch (docs/api.md, "Errors"), built from the `{"error": {...}}` object the
// broker answers with. A job that ran and failed is not an error: it is an
// Execution whose `ok` is false.

export class KilnError extends Error {
  /**
   * @param {string} message
   * @param {{code?: string, status?: number, retryable?: boolean,
   *          executionId?: string|null, body?: unknown, cause?: unknown}} [info]
   */
  constructor(message, info = {}) {
    super(message, info.cause === undefined ? undefined : { cause: info.cause });
    this.name = new.target.name;
    this.code = info.code ?? 'UNKNOWN';
    this.status = info.status ?? 0; // 0: no HTTP answer (network failure)
    this.retryable = Boolean(info.retryable);
    this.executionId = info.executionId ?? null;
    this.body = info.body ?? null; // the parsed answer, for fields such as `rule`
  }
}

export class InvalidRequestError extends KilnError {}
export class LimitExceededError extends KilnError {}
export class SecurityBlockedError extends KilnError {}
export class UnauthorizedError extends KilnError {}
export class ForbiddenError extends KilnError {}
export class CodeExecutionDisabledError extends ForbiddenError {}
export class NotFoundError extends KilnError {}
export class SessionNotFoundError extends NotFoundError {}
/** 409 TOOL_CALL_CLOSED: the tool call takes no answer any more (answered, timed out, or its job ended). */
export class ToolCallClosedError extends KilnError {}
export class RateLimitedError extends KilnError {}
export class QueueFullError extends KilnError {}
export class UnavailableError extends KilnError {}
export class RuntimeUnavailableError extends UnavailableError {}

const kClassByCode = {
  INVALID_REQUEST: InvalidRequestError,
  LIMIT_EXCEEDED: LimitExceededError,
  PAYLOAD_TOO_LARGE: LimitExceededError,
  SECURITY_BLOCKED: SecurityBlockedError,
  UNAUTHORIZED: UnauthorizedError,
  FORBIDDEN: ForbiddenError,
  SESSION_FORBIDDEN: ForbiddenError,
  NETWORK_NOT_ALLOWED: ForbiddenError,
  CODE_EXECUTION_DISABLED: CodeExecutionDisabledError,
  NOT_FOUND: NotFoundError,
  SESSION_NOT_FOUND: SessionNotFoundError,
  TOOL_CALL_CLOSED: ToolCallClosedError,
  RATE_LIMITED: RateLimitedError,
  QUEUE_FULL: QueueFullError,
  UNAVAILABLE: UnavailableError,
  RUNTIME_UNAVAILABLE: RuntimeUnavailableError,
};

// What an answer without an error object (a proxy's page, an empty 431)
// most likely meant.
const kCodeByStatus = {
  400: 'INVALID_REQUEST', 401: 'UNAUTHORIZED', 403: 'FORBIDDEN', 404: 'NOT_FOUND',
  408: 'REQUEST_TIMEOUT', 413: 'PAYLOAD_TOO_LARGE', 429: 'RATE_LIMITED', 503: 'UNAVAILABLE',
};

/** The KilnError subclass for an API error object `{code, message, retryable}`. */
export function errorFromObject(obj, { status = 0, executionId = null, body = null } = {}) {
  const code = typeof obj?.code === 'string' ? obj.code : 'UNKNOWN';
  const Cls = kClassByCode[code] ?? KilnError;
  const message = typeof obj?.message === 'string' && obj.message ? obj.message : code;
  return new Cls(`${code}: ${message}`, {
    code, status, retryable: obj?.retryable === true, executionId, body,
  });
}

/** The error an HTTP answer with a status >= 400 stands for. */
export function errorFromResponse(status, body, text) {
  if (body && typeof body === 'object' && body.error && typeof body.error === 'object') {
    const id = typeof body.id === 'string' ? body.id : null;
    const err = errorFromObject(body.error, { status, executionId: id, body });
    // The broker marks 429/503 retryable; a proxy in between may not say.
    if (status === 429 || status === 503) err.retryable = true;
    return err;
  }
  const code = kCodeByStatus[status] ?? `HTTP_${status}`;
  const snippet = (text ?? '').slice(0, 200).trim();
  return errorFromObject(
    { code, message: snippet || `HTTP ${status}`, retryable: [429, 502, 503, 504].includes(status) },
    { status, body },
  );
}
