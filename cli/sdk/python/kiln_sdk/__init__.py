"""Kiln's Python SDK: run untrusted code in Kiln's sandboxes over its HTTP API.

    from kiln_sdk import Client
    with Client() as kiln:                      # KILN_URL, KILN_TOKEN
        print(kiln.run("print(6 * 7)").stdout)  # "42\\n"

`Client` is synchronous, `AsyncClient` (kiln_sdk.aio) the asyncio twin.
`verify_webhook` checks the signature of a job's webhook (kiln_sdk.webhooks).
Tool callbacks (code mode): `run(code, tools=[...], tool_handlers={...})`,
`submit_tool_result` (docs/sdk.md, "Tool callbacks").
"""

__version__ = "0.1.0"

from .aio import AsyncClient, AsyncSession
from .client import Client, Session
from .errors import (ERRORS_BY_CODE, CodeExecutionDisabled, Forbidden, Internal,
                     InvalidRequest, KilnError, LimitExceeded, NetworkNotAllowed, NotFound,
                     PayloadTooLarge, QueueFull, RateLimited, RuntimeUnavailable,
                     SecurityBlocked, SessionBusyLimit, SessionLanguageMismatch, SessionLost,
                     SessionNotFound, ToolCallClosed, Unauthorized, Unavailable)
from .models import TERMINAL_STATUSES, Execution
from .webhooks import WebhookVerificationError, sign_webhook, verify_webhook

__all__ = [
    "AsyncClient", "AsyncSession", "Client", "Session", "Execution", "TERMINAL_STATUSES",
    "ERRORS_BY_CODE", "KilnError", "InvalidRequest", "LimitExceeded", "SecurityBlocked",
    "Unauthorized", "Forbidden", "CodeExecutionDisabled", "NetworkNotAllowed", "NotFound",
    "SessionNotFound", "SessionLanguageMismatch", "SessionBusyLimit", "SessionLost",
    "PayloadTooLarge", "RateLimited", "QueueFull", "Internal", "Unavailable",
    "RuntimeUnavailable", "ToolCallClosed", "verify_webhook", "sign_webhook",
    "WebhookVerificationError",
]
