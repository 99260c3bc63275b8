"""What the sync and async clients share: request bodies, answers, retry waits.

Pure functions without I/O, so `client.py` and `aio.py` differ only in how
they send and sleep.
"""

import base64
import json
import os
import random
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import errors

Files = Mapping[str, Union[bytes, str]]

MAX_BACKOFF_S = 5.0
# Margin over a job's timeout for a `wait: true` answer: the broker answers at
# the latest timeout + wait_grace_ms (5 s by default), plus queueing we cannot
# know. A read that still times out is retried with the same Idempotency-Key,
# which waits for the same job again.
WAIT_MARGIN_S = 30.0
# Unknown job timeout (the tenant's default applies): a guess, see above.
DEFAULT_JOB_TIMEOUT_S = 60.0
# Events streams send a keepalive every 15 s; a longer silence is a dead one.
STREAM_READ_TIMEOUT_S = 45.0


def encode_files(files: Files) -> List[Dict[str, str]]:
    """dict path -> bytes|str (str is UTF-8 text) as the API's `files` list."""
    out = []
    for path, content in files.items():
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        out.append({"path": path, "content_base64": base64.b64encode(data).decode("ascii")})
    return out


def submit_body(code: str, language: str, *, wait: bool, session_id: Optional[str] = None,
                conversation_id: Optional[str] = None, input: Optional[Dict[str, Any]] = None,
                files: Optional[Files] = None, collect: Optional[List[str]] = None,
                env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None,
                packages: Optional[List[str]] = None, network: Any = None,
                limits: Optional[Dict[str, int]] = None, timeout_ms: Optional[int] = None,
                priority: Optional[int] = None,
                callback_url: Optional[str] = None,
                tools: Optional[Sequence[Mapping[str, Any]]] = None,
                tool_timeout_ms: Optional[int] = None) -> Dict[str, Any]:
    """The POST /v1/executions body; fields left None are not sent (the
    broker refuses nulls it does not expect and applies its own defaults)."""
    body: Dict[str, Any] = {"language": language, "code": code, "wait": wait}
    optional = {"session_id": session_id, "conversation_id": conversation_id, "input": input,
                "collect": collect, "env": env, "stdin": stdin, "packages": packages,
                "network": network, "priority": priority, "callback_url": callback_url,
                "tool_timeout_ms": tool_timeout_ms}
    body.update({k: v for k, v in optional.items() if v is not None})
    if tools is not None:
        body["tools"] = list(tools)
    if files:
        body["files"] = encode_files(files)
    if limits is not None or timeout_ms is not None:
        body["limits"] = dict(limits or {})
        if timeout_ms is not None:
            body["limits"]["timeout_ms"] = timeout_ms
    return body


def wait_read_timeout(body: Dict[str, Any], client_timeout: float) -> float:
    """Seconds to wait for the answer to a `wait: true` submit."""
    ms = (body.get("limits") or {}).get("timeout_ms")
    job_s = ms / 1000.0 if isinstance(ms, (int, float)) else DEFAULT_JOB_TIMEOUT_S
    return max(client_timeout, job_s + WAIT_MARGIN_S)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Retry-After in seconds (the broker sends seconds; dates are ignored)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def answer_error(status: int, body: Any, retry_after: Optional[str]) -> Optional[errors.KilnError]:
    """The error an answer carries, None for a success."""
    if status < 400:
        return None
    return errors.from_answer(status, body, parse_retry_after(retry_after))


def backoff_s(attempt: int, err: errors.KilnError) -> float:
    """How long to wait before retry number `attempt` (0-based)."""
    if err.retry_after is not None:
        return min(err.retry_after, MAX_BACKOFF_S)
    # Exponential with jitter so clients refused together do not return together.
    return min(0.25 * (2 ** attempt) * random.uniform(0.75, 1.25), MAX_BACKOFF_S)


def network_error(method: str, path: str, exc: Exception) -> errors.KilnError:
    return errors.Unavailable(f"{method} {path}: {type(exc).__name__}: {exc}", code="UNAVAILABLE",
                              retryable=True)


def list_params(status: Union[str, List[str], None], session_id: Optional[str],
                since: Optional[int], until: Optional[int], page_size: int) -> Dict[str, Any]:
    if isinstance(status, (list, tuple)):
        status = ",".join(status)
    params = {"status": status, "session_id": session_id, "since": since, "until": until,
              "limit": page_size}
    return {k: v for k, v in params.items() if v is not None}


def usage_params(tenant: Optional[str], from_date: Any, to_date: Any) -> Dict[str, str]:
    # str() of a datetime.date is already YYYY-MM-DD.
    params = {"tenant": tenant, "from": from_date, "to": to_date}
    return {k: str(v) for k, v in params.items() if v is not None}


def end_of_stream(name: str, data: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
    """Whether event `name` ends the stream, and the final record it carries.

    `execution_error` carries the record of a job that ended error/rejected,
    or an error object when the broker lost Redis: then there is no record
    (the caller reconnects or reads the record)."""
    if name not in ("execution_end", "execution_error"):
        return False, None
    if isinstance(data, dict) and "status" in data and "id" in data:
        return True, data
    return True, None


def connection(url: Optional[str], token: Optional[str],
               user_agent: str) -> Tuple[str, Dict[str, str]]:
    """The base URL and headers of a client; url/token default to the
    environment (KILN_URL, KILN_TOKEN) as the `kiln` CLI's do."""
    url = url or os.environ.get("KILN_URL")
    if not url:
        raise ValueError("no Kiln URL: pass url= or set KILN_URL")
    token = token if token is not None else os.environ.get("KILN_TOKEN")
    headers = {"User-Agent": user_agent}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return url.rstrip("/"), headers


def new_key() -> str:
    """A fresh Idempotency-Key (also used for generated session ids)."""
    return uuid.uuid4().hex


def event_data(text: str) -> Any:
    """An event's data: JSON for every event the broker sends."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def json_or_none(content: bytes) -> Any:
    try:
        return json.loads(content) if content else None
    except ValueError:
        return None


class Follow:
    """Following one job's events across reconnects: the Last-Event-ID to
    resume from and the failed attempts since the last event."""

    def __init__(self) -> None:
        self.last_id: Optional[str] = None
        self.failures = 0

    def headers(self) -> Dict[str, str]:
        return {"Last-Event-ID": self.last_id} if self.last_id else {}

    def take(self, name: str, event_id: Optional[str],
             text: str) -> Tuple[Any, bool, Optional[Dict[str, Any]]]:
        """One event: its data, whether it ends the stream, the final record."""
        self.failures = 0
        data = event_data(text)
        ended, record = end_of_stream(name, data)
        if not ended:
            self.last_id = event_id or self.last_id
        return data, ended, record
