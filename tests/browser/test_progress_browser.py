"""The progress line never looks hung: during a long warm-up run (no event for 20 s) the line on the comparison tab
and on the Workloads tab changes at least every 5 s (the time so far, how long the step has been running), and its
runs done never go back."""

from __future__ import annotations

import re
import threading
import time

import pytest
from browsing import CHROMIUM, choose, opened

from assistlab.engines.transformers import timing

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

LONG_RUN_S = 20.0  # one warm-up run as long as a large model's on a CPU, with nothing reported during it
MOST_QUIET_S = 5.0  # the longest the line may stay the same


class SlowNext:
    """timed_generate, but the next run after `arm()` first waits LONG_RUN_S (the warm-up of a large model)."""

    def __init__(self, real):
        self.real, self.armed = real, threading.Event()

    def arm(self) -> None:
        self.armed.set()

    def __call__(self, *args, **kwargs):
        if self.armed.is_set():
            self.armed.clear()
            time.sleep(LONG_RUN_S)
        return self.real(*args, **kwargs)


@pytest.fixture(scope="module")
def slow():
    with pytest.MonkeyPatch.context() as mp:
        wrapper = SlowNext(timing.timed_generate)
        mp.setattr(timing, "timed_generate", wrapper)
        yield wrapper


@pytest.fixture(scope="module")
def app_url(models_dir, store, launch_app, slow):
    with launch_app(models_dir, store) as url:
        yield url


def _watch(page, progress: str, within_s: float = 300.0) -> list[tuple[float, str]]:
    """The progress line's text, read every 0.25 s until it says the run is over: (seconds, text) at each change."""
    seen: list[tuple[float, str]] = []
    began = time.monotonic()
    while time.monotonic() - began < within_s:
        text = page.inner_text(progress).strip()
        if not seen or text != seen[-1][1]:
            seen.append((time.monotonic() - began, text))
        if text.startswith(("Complete", "Stopped", "Failed")):
            return seen
        page.wait_for_timeout(250)
    raise AssertionError(f"not finished within {within_s:g} s; last line: {seen[-1][1] if seen else None!r}")


_DONE = re.compile(r"(\d+) of (?:about )?(\d+) runs done")


def _check(seen: list[tuple[float, str]], where: str) -> None:
    """Through the warm-up (LONG_RUN_S of it without an event) the line never stays the same over MOST_QUIET_S and
    says how long its step has been running; over the whole run the runs done never go back. (The redraw of the
    charts after a repetition is not timed here: on a machine others keep busy it alone can take seconds.)"""
    texts = [text for _, text in seen]
    warming = [(t, text) for t, text in seen if _DONE.search(text) and "Warm-up" in text]
    assert any("running for" in text for _, text in warming), f"{where}: the long step never said how long it ran: {texts}"
    gaps = [(b[0] - a[0], a[1]) for a, b in zip(warming, warming[1:])]
    assert gaps and max(gaps)[0] <= MOST_QUIET_S, f"{where}: the line stayed the same for {max(gaps)[0]:.1f} s: {max(gaps)[1]!r}"
    span = warming[-1][0] - warming[0][0]
    assert span >= LONG_RUN_S - 2, f"{where}: the long run was not watched ({span:.0f} s)"
    done = [int(_DONE.search(text).group(1)) for text in texts if _DONE.search(text)]
    assert done == sorted(done), f"{where}: runs done went back: {done}"


def test_the_comparisons_line_moves_during_a_long_warm_up(browser, app_url, slow):
    with opened(browser, app_url, 1440, 900) as page:
        choose(page, "target", "assistant-other", tokens=4, repeats=1)
        slow.arm()
        page.click("#al-run")
        seen = _watch(page, "#al-progress")
    _check(seen, "Compare")


def test_the_workloads_line_moves_during_a_long_warm_up(browser, app_url, slow, tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("the quick brown fox\n\nwrite me a long essay")
    with opened(browser, app_url, 1440, 900) as page:
        choose(page, "target", "assistant-other", tokens=4, repeats=1)
        page.get_by_role("tab", name="Workloads").click()
        page.get_by_text("My prompts (a file)").click()
        page.locator("#al-suite-file input[type=file]").set_input_files(str(path))
        page.wait_for_timeout(500)
        slow.arm()
        page.click("#al-suite-run")
        seen = _watch(page, "#al-suite-progress")
    _check(seen, "Workloads")
