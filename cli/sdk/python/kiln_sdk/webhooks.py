"""Webhook signatures: check that a POST to your `callback_url` came from Kiln.

When a job submitted with `callback_url` ends, the broker POSTs its final
record (the JSON of `GET /v1/executions/{id}`) there, with

    Kiln-Signature: t=<unix seconds>,v1=<hex>

where <hex> is HMAC-SHA256, keyed with the tenant's webhook secret, of
`"<t>." + <body exactly as sent>`. During a secret rotation the header
carries several `v1=` entries; one matching is enough.

    record = verify_webhook(secret, raw_body, headers["Kiln-Signature"])

`sign_webhook` makes the header value (to test a receiver). Standard library
only and no Client needed, so it fits any web framework.
"""

import hashlib
import hmac
import json
import re
import time
from typing import Any, Dict, List, Optional, Tuple, Union

DEFAULT_TOLERANCE_S = 300

_DIGITS = re.compile(r"[0-9]+")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


class WebhookVerificationError(ValueError):
    """A webhook that cannot be trusted: answer it with a 400 and drop it.

    A ValueError, not a KilnError: it is about a request you received, not
    an answer of the API."""


def sign_webhook(secret: Union[str, bytes], body: Union[bytes, str],
                 timestamp: Optional[float] = None) -> str:
    """The `Kiln-Signature` value the broker would send for `body` at
    `timestamp` (unix seconds, default now)."""
    t = str(int(time.time() if timestamp is None else timestamp))
    return f"t={t},v1={_digest(_key(secret), t, _raw(body))}"


def verify_webhook(secret: Union[str, bytes], body: Union[bytes, str],
                   signature: Optional[Union[str, bytes]], *,
                   tolerance_s: Optional[float] = DEFAULT_TOLERANCE_S,
                   now: Optional[float] = None) -> Dict[str, Any]:
    """Checks a webhook and returns its record (the body parsed as JSON).

    `body` must be the raw bytes received: JSON parsed and dumped again is
    not the text that was signed. `signature` is the `Kiln-Signature` header
    (None when it is missing). The timestamp may be `tolerance_s` seconds
    off `now` (default `time.time()`) either way; None disables that check.
    Raises WebhookVerificationError when the header is missing or malformed,
    no signature matches, the timestamp is out of tolerance, or the body is
    not a JSON object.
    """
    if tolerance_s is not None and not tolerance_s > 0:
        raise ValueError("tolerance_s must be > 0 (None disables the age check)")
    key, raw = _key(secret), _raw(body)
    t, candidates = _parse(signature)
    expected = _digest(key, t, raw)
    # Every candidate is compared, in constant time each, so the time taken
    # says nothing about which entry, or how much of it, matched.
    matched = False
    for candidate in candidates:
        matched |= hmac.compare_digest(candidate.lower(), expected)
    if not matched:
        raise WebhookVerificationError(
            "no v1 signature matches the body (wrong secret, or the body was "
            "changed, e.g. parsed and re-serialised, before verifying)")
    # Checked after the signature, so it speaks only of genuine deliveries:
    # an old one is a replay or a clock that is off.
    if tolerance_s is not None:
        age = (time.time() if now is None else now) - int(t)
        if age > tolerance_s:
            raise WebhookVerificationError(
                f"timestamp t={t} is {age:.0f} s old, over the {tolerance_s} s tolerance")
        if -age > tolerance_s:
            raise WebhookVerificationError(
                f"timestamp t={t} is {-age:.0f} s in the future, over the "
                f"{tolerance_s} s tolerance (is a clock off?)")
    try:
        record = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError alike
        raise WebhookVerificationError(f"body is not UTF-8 JSON: {e}") from None
    if not isinstance(record, dict):
        raise WebhookVerificationError("body is JSON but not an object (an execution record)")
    return record


def _key(secret: Union[str, bytes]) -> bytes:
    key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    # An unset secret (an empty environment variable) would make every
    # check pass against anyone's empty-key signature.
    if not key:
        raise ValueError("the webhook secret is empty")
    return key


def _raw(body: Union[bytes, str]) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"body must be the raw bytes (or str) received, not {type(body).__name__}")


def _digest(key: bytes, t: str, body: bytes) -> str:
    return hmac.new(key, t.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()


def _parse(header: Optional[Union[str, bytes]]) -> Tuple[str, List[str]]:
    """(t as sent, the well-formed v1 values) of a Kiln-Signature value."""
    if header is None:
        raise WebhookVerificationError("no Kiln-Signature header")
    if isinstance(header, (bytes, bytearray)):  # ASGI and some servers give bytes
        header = bytes(header).decode("latin-1")
    t: Optional[str] = None
    candidates: List[str] = []
    # Parts split on "," with spaces trimmed: a proxy that merged two headers
    # joined them with ", ". Unknown keys are for later schemes: skipped.
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            if t is not None:
                raise WebhookVerificationError("malformed Kiln-Signature: more than one t=")
            t = value
        elif name == "v1" and _HEX64.fullmatch(value):
            candidates.append(value)
    # `t` is signed as sent, so it must be plain digits (int() would also
    # take "+1", " 1" or "1_0", which the broker never sends).
    if t is None or not _DIGITS.fullmatch(t):
        raise WebhookVerificationError(
            f"malformed Kiln-Signature: no integer t= in {header[:200]!r}")
    if not candidates:
        raise WebhookVerificationError(
            f"malformed Kiln-Signature: no v1= of 64 hex digits in {header[:200]!r}")
    return t, candidates
