"""Database trouble in words: the database named for a message, damage and busy reasons, the SQLite file's header."""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa


MASK = "***"
# Query keys that carry a secret in a database URL (libpq takes `password` and `sslpassword` there too).
SECRET_KEYS = ("password", "sslpassword")


def secrets_of(url: str) -> list[str]:
    """The secrets in a database URL: its password (`user:pw@`) and any `?password=` or `?sslpassword=` value."""
    try:
        parsed = sa.engine.make_url(url)
    except Exception:  # noqa: BLE001 - nothing parsed, nothing to hide but what a message cannot name anyway
        return []
    found = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if key.lower() in SECRET_KEYS:
            found += [value] if isinstance(value, str) else list(value)
    return sorted({str(v) for v in found if v}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` with every secret of the database URL `url` masked (a driver's message may quote them)."""
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text


def describe(url: str) -> str:
    """The database for a message: the SQLite path, or the server without its password, in `user:pw@` or in its
    query."""
    try:
        parsed = sa.engine.make_url(url)
    except Exception:  # noqa: BLE001 - a URL we cannot parse is still worth naming
        return "the configured database"
    if parsed.get_backend_name() == "sqlite":
        return f"the history file {parsed.database}"
    query = {k: (MASK if k.lower() in SECRET_KEYS else v) for k, v in parsed.query.items()}
    shown = parsed.set(query=query).render_as_string(hide_password=True).replace("%2A%2A%2A", MASK)
    return f"the history database {scrub(shown, url)}"


def is_damaged(reason: str) -> bool:
    lower = reason.lower()
    return "not a database" in lower or "malformed" in lower


def is_busy(reason: str) -> bool:
    lower = reason.lower()
    return any(word in lower for word in ("locked", "busy", "statement timeout", "timed out", "timeout expired"))


def file_problem(path: Path, held_data: bool) -> str | None:
    """What is wrong with the SQLite file at `path` as its header and size tell (None: nothing seen, or no file).

    Checked before each use: a file cut short in place (same inode) would otherwise take saves SQLite cannot
    read back after a restart. `held_data` says it was seen holding a database before, so empty is not new.
    """
    try:
        with open(path, "rb") as f:
            head, size = f.read(100), os.fstat(f.fileno()).st_size
    except OSError:  # missing (a new one is made) or unreadable (SQLite says so in its own words)
        return None
    if size == 0:
        return "it has been emptied" if held_data else None
    if size < 100 or not head.startswith(b"SQLite format 3\x00"):
        return "file is not a database"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return "file is not a database"
    if size % page:
        return f"it was cut short: {size} bytes are not a whole number of {page}-byte pages"
    pages = int.from_bytes(head[28:32], "big")
    if pages and head[24:28] == head[92:96] and pages * page > size:  # the count is valid when those two agree
        return f"it was cut short: {size // page} of its {pages} pages are there"
    return None


def reason_of(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]
