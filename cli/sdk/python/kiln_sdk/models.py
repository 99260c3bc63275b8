"""The execution record as a Python object.

`Execution` keeps the fields most callers read as attributes, decodes
collected files from base64, and keeps the whole JSON in `raw` for the rest
(usage, outputs, warnings, timestamps, ...).
"""

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

# A job in one of these has ended; its record will not change.
TERMINAL_STATUSES = frozenset(
    {"succeeded", "failed", "timed_out", "memory_exceeded", "cancelled", "rejected", "error"})


@dataclass
class Execution:
    id: str
    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None
    result: Any = None
    error: Optional[Dict[str, Any]] = None
    duration_ms: Optional[float] = None
    session_id: Optional[str] = None
    session_epoch: Optional[int] = None
    truncated: bool = False
    files: Dict[str, bytes] = field(default_factory=dict)
    files_truncated: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Execution":
        files = {f["path"]: base64.b64decode(f.get("content_base64", ""))
                 for f in d.get("files") or [] if isinstance(f, dict) and "path" in f}
        return cls(
            id=d.get("id", ""), status=d.get("status", ""),
            stdout=d.get("stdout") or "", stderr=d.get("stderr") or "",
            exit_code=d.get("exit_code"), result=d.get("result"), error=d.get("error"),
            duration_ms=d.get("duration_ms"), session_id=d.get("session_id"),
            session_epoch=d.get("session_epoch"), truncated=bool(d.get("truncated")),
            files=files, files_truncated=bool(d.get("files_truncated")), raw=d)
