"""Who may do what here: logins, with failed attempts throttled per name, per client address and (as a last
resort) overall, and which servers visitors may have timed.

A wrong password costs time, and repeated ones lock the name. No gradio here; the UI wraps
`LoginThrottle.check` in the callable Gradio's `auth=` accepts, and checks each listed server with
`check_allowed_server`.
"""

from __future__ import annotations

import hmac
import math
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from .errors import InputError

# A lock lasts FIRST_LOCK_S once a record reaches its free failures, doubling with each further one, up to the cap.
FIRST_LOCK_S = 1.0
MAX_LOCK_S = 60.0
# Each record forgets one failure every FORGET_S: a typo an hour, or one wrong login a minute from anyone, never
# adds up to a lock.
FORGET_S = 60.0
# Failures allowed before a lock, per kind of record:
FREE_FAILURES = 3  # one name from one client address (a person mistyping their own password)
FREE_FAILURES_CLIENT = 5  # one client address, any names (someone trying many names)
FREE_FAILURES_NAME = 10  # one name, from any address (guessing one person's password from many places)
FREE_FAILURES_ALL = 100  # every login together: the last resort against guessing from many places at once
# The name's and the overall lock never refuse a client that has logged in as that name before: wrong passwords
# sent from elsewhere cannot keep a person out of their own account from where they use it.
# How many records (and remembered logins) are kept; unknown names share one record, so guessing cannot grow it.
MAX_TRACKED = 1024
UNKNOWN = "\x00unknown"
ALL = ("all",)
NO_ADDRESS = "\x00none"  # a client whose address the server does not know: all such share one record

# What each kind of lock says, in "Too many failed logins {...}; try again in N s."
_WHOSE = {"pair": "for this name from your address", "client": "from your address", "name": "for this name",
          "all": "on this server"}


@dataclass
class _Record:
    failures: int = 0  # forgets one every FORGET_S
    seen: float = 0.0  # when the last failure was taken off (or the first one came)
    locked_until: float = 0.0


@dataclass(frozen=True)
class Refusal:
    """Why a login is refused now: which lock, and for how many more seconds."""

    kind: str
    wait_s: float

    def message(self) -> str:
        return f"Too many failed logins {_WHOSE[self.kind]}; try again in {max(1, math.ceil(self.wait_s))} s."


class LoginThrottle:
    """Checks user/password pairs from client addresses. Four records count failures, each forgetting one every
    FORGET_S: the name from that address (FREE_FAILURES), the address (FREE_FAILURES_CLIENT), the name
    (FREE_FAILURES_NAME) and every login (FREE_FAILURES_ALL). Once one reaches its free failures, every attempt it
    covers is refused, right password or not, for FIRST_LOCK_S doubling per further failure, up to MAX_LOCK_S; a
    refused attempt is not counted. The name's and the overall lock spare an address that logged in as that name
    before. A success clears the record of the name from that address."""

    def __init__(
        self,
        accounts: dict[str, str],
        clock: Callable[[], float] = time.monotonic,
        free: int = FREE_FAILURES,
        free_client: int = FREE_FAILURES_CLIENT,
        free_name: int = FREE_FAILURES_NAME,
        free_all: int = FREE_FAILURES_ALL,
        forget_s: float = FORGET_S,
    ) -> None:
        self.accounts = dict(accounts)
        self.clock, self.forget_s = clock, forget_s
        self._free = {"pair": free, "client": free_client, "name": free_name, "all": free_all}
        self._records: OrderedDict[tuple, _Record] = OrderedDict()
        self._trusted: OrderedDict[tuple[str, str], None] = OrderedDict()  # (name, address) that logged in
        self._lock = threading.Lock()

    def _name(self, username: str) -> str:
        return username if username in self.accounts else UNKNOWN

    def _keys(self, username: str, client: str | None) -> dict[str, tuple]:
        """The records an attempt is counted in, by kind; the name's and the overall one only when they apply."""
        name, address = self._name(username), client or NO_ADDRESS
        keys = {"pair": ("pair", name, address), "client": ("client", address)}
        if (name, address) not in self._trusted:
            keys.update(name=("name", name), all=ALL)
        return keys

    def _forgetting(self, record: _Record, now: float) -> None:
        """Take off one failure per whole FORGET_S since the last was taken off (or the first came)."""
        if self.forget_s <= 0 or record.failures == 0:
            record.seen = now
            return
        periods = int(max(0.0, now - record.seen) // self.forget_s)
        record.failures = max(0, record.failures - periods)
        record.seen = now if record.failures == 0 else record.seen + periods * self.forget_s

    def refusal(self, username: str, client: str | None = None) -> Refusal | None:
        """The lock that refuses `username` from `client` now (the longest, if several), or None."""
        with self._lock:
            now = self.clock()
            waits = [Refusal(kind, self._records[key].locked_until - now)
                     for kind, key in self._keys(username, client).items() if key in self._records]
        waits = [w for w in waits if w.wait_s > 0]
        return max(waits, key=lambda w: w.wait_s) if waits else None

    def locked_for(self, username: str, client: str | None = None) -> float:
        """Seconds until `username` may try again from `client` (0 when it may now)."""
        refusal = self.refusal(username, client)
        return refusal.wait_s if refusal is not None else 0.0

    def _fail(self, kind: str, key: tuple, now: float) -> None:
        record = self._records.setdefault(key, _Record(seen=now))
        self._records.move_to_end(key)
        self._forgetting(record, now)
        record.failures += 1
        free = self._free[kind]
        if record.failures >= free:
            record.locked_until = now + min(MAX_LOCK_S, FIRST_LOCK_S * 2 ** (record.failures - free))
        while len(self._records) > MAX_TRACKED:
            self._records.popitem(last=False)

    def check(self, username: object, password: object, client: str | None = None) -> bool:
        """True for a right pair outside any lock; a refusal during a lock is not counted as a new failure."""
        if not isinstance(username, str) or not isinstance(password, str):
            return False
        if self.refusal(username, client) is not None:
            return False
        expected = self.accounts.get(username)
        # Compare even for an unknown name, so the answer takes the same time either way.
        given, wanted = (text.encode("utf-8", "surrogatepass") for text in (password, expected or "\x00"))
        right = hmac.compare_digest(given, wanted)
        with self._lock:
            now = self.clock()
            keys = self._keys(username, client)
            if right and expected is not None:
                self._records.pop(keys["pair"], None)
                if client:  # an unknown address is anyone's: it earns no exemption
                    self._trusted[(username, client)] = None
                    self._trusted.move_to_end((username, client))
                    while len(self._trusted) > MAX_TRACKED:
                        self._trusted.popitem(last=False)
                return True
            for kind, key in keys.items():
                self._fail(kind, key, now)
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
