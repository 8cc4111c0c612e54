"""Who may do what here: logins, with failed attempts throttled, and which servers visitors may have timed.

A wrong password costs time, and repeated ones lock the name. No gradio here; the UI wraps
`LoginThrottle.check` in the callable Gradio's `auth=` accepts, and checks each listed server with
`check_allowed_server`.
"""

from __future__ import annotations

import hmac
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from .errors import InputError

# Failures allowed before a name is locked; the lock then doubles with each further failure, up to the cap.
FREE_FAILURES = 3
FIRST_LOCK_S = 1.0
MAX_LOCK_S = 60.0
# Failures under any name (a guess at many names) before every login is locked the same way.
FREE_FAILURES_ALL = 20
# How many names' records are kept; unknown names share one record, so guessing names cannot grow it.
MAX_TRACKED = 1024
UNKNOWN = "\x00unknown"
ALL = "\x00all"


@dataclass
class _Record:
    failures: int = 0
    locked_until: float = 0.0


class LoginThrottle:
    """Checks user/password pairs; after `free` failures for a name (or `free_all` overall) every attempt for it
    is refused, right password or not, until a lock of FIRST_LOCK_S, doubling per failure, up to MAX_LOCK_S,
    has passed. A success clears the name's record."""

    def __init__(
        self,
        accounts: dict[str, str],
        clock: Callable[[], float] = time.monotonic,
        free: int = FREE_FAILURES,
        free_all: int = FREE_FAILURES_ALL,
    ) -> None:
        self.accounts = dict(accounts)
        self.clock, self.free, self.free_all = clock, free, free_all
        self._records: OrderedDict[str, _Record] = OrderedDict()
        self._lock = threading.Lock()

    def locked_for(self, username: str) -> float:
        """Seconds until `username` may try again (0 when it may now)."""
        with self._lock:
            now = self.clock()
            keys = (self._key(username), ALL)
            return max([0.0, *(self._records[k].locked_until - now for k in keys if k in self._records)])

    def _key(self, username: str) -> str:
        return username if username in self.accounts else UNKNOWN

    def _fail(self, key: str, free: int, now: float) -> None:
        record = self._records.setdefault(key, _Record())
        self._records.move_to_end(key)
        record.failures += 1
        if record.failures >= free:
            record.locked_until = now + min(MAX_LOCK_S, FIRST_LOCK_S * 2 ** (record.failures - free))
        while len(self._records) > MAX_TRACKED:
            self._records.popitem(last=False)

    def check(self, username: object, password: object) -> bool:
        """True for a right pair outside any lock; a refusal during a lock is not counted as a new failure."""
        if not isinstance(username, str) or not isinstance(password, str):
            return False
        if self.locked_for(username) > 0:
            return False
        expected = self.accounts.get(username)
        # Compare even for an unknown name, so the answer takes the same time either way.
        given, wanted = (text.encode("utf-8", "surrogatepass") for text in (password, expected or "\x00"))
        right = hmac.compare_digest(given, wanted)
        with self._lock:
            now = self.clock()
            key = self._key(username)
            if right and expected is not None:
                self._records.pop(key, None)
                return True
            self._fail(key, self.free, now)
            self._fail(ALL, self.free_all, now)
            return False


# ---------------------------------------------------------------- which servers a visitor may have timed

SERVERS_ENV = "ASSISTLAB_VLLM_URLS"


def allowed_servers() -> tuple[str, ...]:
    """The servers the operator lets visitors of the page and the API time (ASSISTLAB_VLLM_URLS: base URLs,
    comma- or space-separated; one without a port allows every port of its host). None by default: a URL typed
    there makes this host send it requests."""
    return tuple(u.strip().rstrip("/") for u in re.split(r"[,\s]+", os.environ.get(SERVERS_ENV, "")) if u.strip())


def _allows(base: str, url: str) -> bool:
    b, u = urlsplit(base), urlsplit(url)
    try:
        ports_match = b.port is None or b.port == u.port
    except ValueError:  # an operator's entry with a bad port allows nothing
        return False
    # A server's URL is its root (arms.check_url cuts the path), so scheme, host and port decide.
    return b.scheme.lower() == u.scheme.lower() and b.hostname is not None and b.hostname == u.hostname and ports_match


def check_allowed_server(url: str, label: str) -> None:
    """Raise InputError, naming the box (`label`) the URL came from, unless the operator allowed `url`."""
    allowed = allowed_servers()
    if not any(_allows(base, url) for base in allowed):
        named = f" It allows: {', '.join(allowed)}." if allowed else " It allows none now."
        raise InputError(
            f"“{label}”: this server times only the servers its operator allowed, and {url} is not "
            f"one of them.{named} The operator lists them in {SERVERS_ENV} before starting the app "
            f"({SERVERS_ENV}=http://10.0.0.5:8000,http://10.0.0.6:8000); the command line's --server needs no such "
            "setting.")
