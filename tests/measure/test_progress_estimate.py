"""The time left does not leap from line to line on a busy machine, and still gives a figure while others work,
saying which way their work would move it."""

from __future__ import annotations

import re

from assistlab.measure.runner import Progress, rotation
from assistlab.views import progress as progress_view

# One default comparison (3 arms, 1 warm-up and 5 counted rounds) on a machine where others' work came in bursts:
# most runs took about 8 s, four were caught by a burst and took 30 to 60 s (the warm-up of the second arm too).
RUN_SECONDS = [12.0, 45.0, 8.5, 8.0, 8.2, 9.1, 60.0, 8.3, 7.9, 8.1, 30.0, 8.4, 8.0, 52.0, 8.2, 8.0, 8.6, 38.0]
ARMS, ROUNDS = 3, 6  # the first round is the warm-up


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _seconds(text: str) -> float:
    """'about 2 min 10 s left' -> 130.0 (the form views.progress.duration writes)."""
    found = re.search(r"about ((?:\d+ h )?(?:\d+ min )?(?:\d+ s)?)\s*left", text)
    assert found, text
    total = 0.0
    for number, unit in re.findall(r"(\d+) (h|min|s)\b", found.group(1)):
        total += int(number) * {"h": 3600, "min": 60, "s": 1}[unit]
    return total


def _lines(contention: dict | None = None) -> list[str]:
    """The progress lines a person reads over the recorded runs: one before each run starts, one after it."""
    clock = FakeClock()
    progress = Progress(total=ARMS * ROUNDS, assisted=(1, 2), contention=contention)
    progress.pace.clock, progress.pace.start = clock, 0.0
    lines, runs = [], iter(RUN_SECONDS)
    for round_index in range(ROUNDS):
        for arm in rotation(ARMS, round_index):
            lines.append(progress_view.progress_text(progress.event("status", "Running...", step=f"Run of arm {arm}")))
            took = next(runs)
            clock.now += took
            progress.done += 1
            progress.pace.record(arm, took)
            lines.append(progress_view.progress_text(progress.event("run", "Ran.", step=f"Run of arm {arm}", took_s=took)))
    return lines


def test_the_time_left_never_jumps_by_more_than_a_factor_of_two_between_lines():
    lines = [line for line in _lines() if "left" in line]
    shown = [_seconds(line) for line in lines if "about" in line]
    assert len(shown) == len(RUN_SECONDS) * 2 - 1  # every line after the first run gives a figure
    for before, after, line in zip(shown, shown[1:], lines[1:]):
        assert after <= 2 * before and before <= 2 * after, f"{before} s then {after} s: {line}"
    assert shown[-1] < shown[0]


def test_a_busy_machine_keeps_a_figure_and_says_it_may_take_longer():
    """It used to say 'time left uncertain: the machine is busy' for the rest of a run once the watch had seen others'
    work; each arm's pace is the median of its runs, which a burst does not move, so the figure stands."""
    busy = {"other_cpu_cores": 1.42, "other_cpu_percent": 71.0, "cpu_count": 2, "windows": 3}
    lines = _lines(busy)
    timed = [line for line in lines if "so far" in line and "first run" not in line]
    assert timed and all(line.endswith("left, longer while the machine is busy") for line in timed), timed[:3]
    assert not any("uncertain" in line for line in lines)
    assert [_seconds(line) for line in timed] == [_seconds(line) for line in _lines() if "about" in line]
    idle = {"other_cpu_cores": 0.02, "other_cpu_percent": 1.0, "cpu_count": 2, "windows": 3}
    assert not any("busy" in line for line in _lines(idle))
