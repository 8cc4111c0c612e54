"""A client that keeps asking a running app for its root URL on a thread, to show the server stays answerable
while something else (a save behind a locked database) waits."""

from __future__ import annotations

import threading
import time
import urllib.request
from patience import patient


class Pinger:
    """GETs `url` every `every` seconds, keeping (began, took) of each answer.

    On a busy 2-core machine this thread itself can be starved and ask less often than `every`; each answer
    still times the server, so tests ask for a few answers inside a window, not for a rate."""

    def __init__(self, url: str, every: float = 0.2) -> None:
        self.url, self.every, self.times, self._stop = url, every, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            with urllib.request.urlopen(self.url, timeout=patient(60)) as answer:
                answer.read()
            self.times.append((began, time.monotonic() - began))
            self._stop.wait(self.every)

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(patient(70))

    def slowest(self, since: float, until: float, overlapping: bool = False) -> tuple[float, int]:
        """The longest answer to a GET begun between `since` and `until` (with `overlapping`, under way at some
        time between them), and how many there were."""
        inside = [took for began, took in self.times
                  if (began <= until and began + took >= since if overlapping else since <= began <= until)]
        return max(inside, default=float("inf")), len(inside)
