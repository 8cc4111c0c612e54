"""Cutting an API key out of what a server sends back, in every form a server might echo it.

A server can echo the key raw, JSON-escaped, URL-encoded or inside base64 (a Basic auth header, `user:key`).
`redact` removes all of these and any bearer token; `clip` redacts first and only then shortens, and masks a
leading part of the key (or of one of its forms) that the cut leaves at the end.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from urllib.parse import quote, quote_plus

MASK = "[redacted]"
PARTIAL = 6  # the shortest leading part of a key, left at a cut, that is masked
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s\"',;]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{8,}={0,2}")


def _b64(data: bytes) -> list[str]:
    std = base64.b64encode(data).decode()
    return [std, std.rstrip("="), base64.urlsafe_b64encode(data).decode().rstrip("=")]


def forms(api_key: str) -> list[str]:
    """The texts a server may echo for `api_key`, longest first."""
    raw = api_key.encode("utf-8")
    found = {api_key, json.dumps(api_key)[1:-1], json.dumps(api_key, ensure_ascii=False)[1:-1],
             quote(api_key, safe=""), quote_plus(api_key), quote(api_key)}
    for data in (raw, b":" + raw):
        found.update(_b64(data))
    return sorted((f for f in found if f), key=len, reverse=True)


def _decoded(run: str) -> bytes:
    run = run.rstrip("=")
    run = run[: len(run) - len(run) % 4] if len(run) % 4 == 1 else run
    try:
        return base64.urlsafe_b64decode((run.replace("+", "-").replace("/", "_")) + "=" * (-len(run) % 4))
    except (binascii.Error, ValueError):
        return b""


def _hides(data: bytes, raw: bytes, partial_end: bool) -> bool:
    if raw in data:
        return True
    if partial_end:  # a run cut short: its decoded end may hold the key's first bytes
        return any(data.endswith(raw[:n]) for n in range(min(len(raw) - 1, len(data)), PARTIAL - 1, -1))
    return False


def redact(text: object, api_key: str | None) -> str:
    """`text` without the API key (in any form in `forms`, or inside base64) and without any bearer token."""
    text = str(text)
    if api_key:
        for form in forms(api_key):
            text = text.replace(form, MASK)
        raw = api_key.encode("utf-8")
        text = _BASE64.sub(lambda m: MASK if _hides(_decoded(m.group()), raw, False) else m.group(), text)
    return _BEARER.sub(r"\1 " + MASK, text)


def _masked_end(text: str, api_key: str) -> str:
    """`text` with a leading part (PARTIAL characters or more) of the key or of one of its forms at its end masked."""
    for form in forms(api_key):
        for n in range(min(len(form) - 1, len(text)), PARTIAL - 1, -1):
            if text.endswith(form[:n]):
                return text[:-n] + MASK
    last = re.search(r"[A-Za-z0-9+/_-]{8,}$", text)
    if last and _hides(_decoded(last.group()), api_key.encode("utf-8"), True):
        return text[: last.start()] + MASK
    return text


def clip(text: object, api_key: str | None, limit: int, more: str = "") -> str:
    """The first `limit` characters of `text` once redacted (`more` added when it was longer), key-free: a leading
    part of the key at the end is masked, whether this cut left it there or the server sent the echo already cut."""
    text = redact(text, api_key)
    cut = len(text) > limit
    text = text[:limit]
    if api_key:
        text = _masked_end(text, api_key)
    return text + more if cut else text
