"""Before each timed run AssistLab waits for the servers it started to go quiet: a vLLM CPU server keeps a core
busy for about a second after each request, which the next run on another server would otherwise share."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from assistlab.measure import contention

pytestmark = pytest.mark.fast


class FakeCpu:
    """A process busy (a whole core) for `busy_s`, then idle; time moves only when the wait sleeps."""

    def __init__(self, busy_s: float):
        self.now, self.busy_s = 0.0, busy_s

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s

    def read(self, _pids) -> float:
        return min(self.now, self.busy_s)


def _wait(cpu: FakeCpu, **kw):
    return contention.wait_quiet((1,), read=cpu.read, clock=cpu.clock, sleep=cpu.sleep, **kw)


def test_it_waits_until_the_server_stops_polling():
    waited, quiet = _wait(FakeCpu(busy_s=1.0))
    assert quiet and 1.0 <= waited <= 1.0 + 2 * contention.QUIET_STEP_S


def test_a_server_that_never_goes_quiet_costs_at_most_the_cap():
    waited, quiet = _wait(FakeCpu(busy_s=100.0))
    assert not quiet and contention.QUIET_MOST_S <= waited < contention.QUIET_MOST_S + 0.2


def test_nothing_to_wait_for_and_a_stop_end_it_at_once():
    assert contention.wait_quiet(()) == (0.0, True)
    waited, quiet = _wait(FakeCpu(busy_s=100.0), should_stop=lambda: True)
    assert waited == 0.0 and not quiet


def test_the_record_counts_the_waits():
    answers = iter([(1.0, True), (3.0, False)])
    quiet = contention.Quiet(lambda: [1, 2], wait=lambda pids, stop: next(answers))
    quiet(lambda: False)
    quiet(lambda: False)
    assert quiet.record | {"rule": ""} == {"rule": "", "waits": 2, "waited_s": 4.0, "longest_s": 3.0, "not_quiet": 1}


def test_a_real_busy_process_is_waited_out():
    burner = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 0.8\nwhile time.time() < end: pass\n"
                               "time.sleep(30)"])
    try:
        time.sleep(0.1)
        began = time.monotonic()
        waited, quiet = contention.wait_quiet((burner.pid,))
        assert quiet and 0.3 <= waited <= 2.5 and time.monotonic() - began >= 0.3
    finally:
        burner.kill()
        burner.wait()
