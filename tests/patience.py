"""How long a test waits for work to happen: long enough to hold on a busy 2-core machine (issue 36 item 11).

A wait for work (a process to answer, a thread to finish, an event to be set) ends as soon as the work is done,
so a generous limit costs nothing when the test passes; it only decides how long a broken run hangs before it
fails. `patient(s)` is `s` seconds times ASSISTLAB_TEST_PATIENCE (default 4): a limit written for an idle machine
holds when others use most of the CPU (the fast tier once failed at a 60 s limit whose file passes alone in 24 s).
Never used for a limit that is the behaviour under test (a deadline the code must keep, a run that must end
before the slow path would), which stays as written.
"""

from __future__ import annotations

import os

PATIENCE_ENV = "ASSISTLAB_TEST_PATIENCE"


def factor() -> float:
    """ASSISTLAB_TEST_PATIENCE as a number of at least 1 (default 4)."""
    try:
        return max(1.0, float(os.environ.get(PATIENCE_ENV) or 4))
    except ValueError:
        return 4.0


def patient(seconds: float) -> float:
    """`seconds`, written for an idle machine, as a wait that holds on a busy one."""
    return seconds * factor()
