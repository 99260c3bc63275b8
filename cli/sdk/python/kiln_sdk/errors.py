"""Exceptions for API answers that are errors.

Every error the API sends is `{"error": {"code", "message", "retryable"}}`;
it becomes the `KilnError` subclass named for its code, so callers can catch
`NotFound` or test `err.code`. A job that ran and failed is NOT an error:
it is an `Execution` whose `status` says how it ended.
"""

from typing import Any, Dict, Optional, Type


class KilnError(Exception):
    """An error answered by the API, or a network failure (`Unavailable`)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "INTERNAL",
        status: Optional[int] = None,
        retryable: bool = False,
        execution_id: Optional[str] = None,
        retry_after: Optional[float] = None,
        body: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code
        self.message = message
        self.status = status  # HTTP status; None for a network failure
        self.retryable = retryable
        self.execution_id = execution_id  # e.g. a submit with outcome "unknown"
        self.retry_after = retry_after  # seconds, from the Retry-After header
        self.body = body  # the whole answer, for extras such as "rule"


class InvalidRequest(KilnError): pass
class LimitExceeded(KilnError): pass
class SecurityBlocked(KilnError): pass
class Unauthorized(KilnError): pass
class Forbidden(KilnError): pass
class CodeExecutionDisabled(Forbidden): pass
class NetworkNotAllowed(Forbidden): pass
class NotFound(KilnError): pass
class SessionNotFound(NotFound): pass
class SessionLanguageMismatch(KilnError): pass
class SessionBusyLimit(KilnError): pass
class SessionLost(KilnError): pass
class ToolCallClosed(KilnError):
    """409: the tool call no longer takes an answer (answered already,
    timed out, or its execution is no longer running)."""
class PayloadTooLarge(KilnError): pass
class RateLimited(KilnError): pass
class QueueFull(KilnError): pass
class Internal(KilnError): pass
class Unavailable(KilnError): pass
class RuntimeUnavailable(Unavailable): pass


ERRORS_BY_CODE: Dict[str, Type[KilnError]] = {
    "INVALID_REQUEST": InvalidRequest,
    "LIMIT_EXCEEDED": LimitExceeded,
    "SECURITY_BLOCKED": SecurityBlocked,
    "UNAUTHORIZED": Unauthorized,
    "FORBIDDEN": Forbidden,
    "CODE_EXECUTION_DISABLED": CodeExecutionDisabled,
    "NETWORK_NOT_ALLOWED": NetworkNotAllowed,
    "NOT_FOUND": NotFound,
    "SESSION_NOT_FOUND": SessionNotFound,
    "SESSION_LANGUAGE_MISMATCH": SessionLanguageMismatch,
    "SESSION_BUSY_LIMIT": SessionBusyLimit,
    "SESSION_LOST": SessionLost,
    "TOOL_CALL_CLOSED": ToolCallClosed,
    "PAYLOAD_TOO_LARGE": PayloadTooLarge,
    "RATE_LIMITED": RateLimited,
    "QUEUE_FULL": QueueFull,
    "INTERNAL": Internal,
    "UNAVAILABLE": Unavailable,
    "RUNTIME_UNAVAILABLE": RuntimeUnavailable,
}

# What a status without an error object means (a proxy's page, health's 503).
_CODE_BY_STATUS = {400: "INVALID_REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN",
                   404: "NOT_FOUND", 413: "PAYLOAD_TOO_LARGE", 429: "RATE_LIMITED",
                   503: "UNAVAILABLE"}


def error_for(code: str, message: str, **kwargs: Any) -> KilnError:
    """The exception for `code`; codes this SDK does not know give KilnError."""
    return ERRORS_BY_CODE.get(code, KilnError)(message, code=code, **kwargs)


def from_answer(status: int, body: Any, retry_after: Optional[float]) -> KilnError:
    """The exception for an HTTP error answer (`body`: its JSON, or None)."""
    obj = body.get("error") if isinstance(body, dict) else None
    if isinstance(obj, dict) and isinstance(obj.get("code"), str):
        return error_for(
            obj["code"], str(obj.get("message", "")), status=status,
            retryable=bool(obj.get("retryable", False)),
            execution_id=body.get("id") if isinstance(body.get("id"), str) else None,
            retry_after=retry_after, body=body)
    # No error object: 429 and 503 are the overload answers, worth retrying.
    code = _CODE_BY_STATUS.get(status, "INTERNAL")
    return error_for(code, f"HTTP {status} without an error object", status=status,
                     retryable=status in (429, 503), retry_after=retry_after,
                     body=body if isinstance(body, dict) else None)
