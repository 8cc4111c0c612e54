"""The count a person watches: runs done never go backwards, the total counts what will most likely run (the
likely stop of a run that stops once its answer is clear, with the most it may run beside it), and grows by a
repetition at a time past it; for a comparison and for a workload (tiny models, fake latencies, fake clocks)."""

from __future__ import annotations

import itertools

import pytest

from assistlab.config import CLEAR_MAX_REPEATS, BenchRequest
from assistlab.engines.transformers import timing
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure import runner, suite_runner
from assistlab.measure.progress import Progress, likely_repetitions
from assistlab.results import sequential
from assistlab.results.suite_inputs import SuiteRequest, parse_prompts, select
from assistlab.views import progress as progress_view
from fake_runs import FakeRuns

PROMPT = "write me a long essay on deep learning"
TWO_ARMS = (ArmSpec("prompt-lookup", prompt_lookup_num_tokens=2), ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3))


def _compare(store, monkeypatch, slow: dict[int, float], noise: float, warmup: int = 1) -> list:
    fake = FakeRuns(slow, noise)
    monkeypatch.setattr(timing, "timed_generate", fake.timed_generate)
    monkeypatch.setattr(timing, "probe_arm", lambda *a, **k: {"error": "not probed in this test"})
    request = BenchRequest(target="target", arms=TWO_ARMS, prompt=PROMPT, max_new_tokens=4, warmup=warmup)
    return list(runner.run_benchmark(request, store, clock=fake.clock))


def _counted(events: list) -> list:
    return [e for e in events if e.total]


def _never_back(events: list) -> None:
    counted = _counted(events)
    assert counted
    done = [e.done for e in counted]
    assert done == sorted(done), f"runs done went back: {done}"
    for e in counted:
        assert e.done <= e.total, progress_view.progress_text(e)
        if e.most:
            assert e.total <= e.most, progress_view.progress_text(e)
    going = [e.total for e in counted if e.kind != "done"]
    assert going == sorted(going), f"the total shrank while the run went on: {going}"


def test_a_run_that_stops_once_clear_counts_its_likely_stop_and_says_at_most(allowed_models, store, monkeypatch):
    events = _compare(store, monkeypatch, {2: 1.85, 3: 1.4}, noise=0.01)  # both clearly slower: stops at its floor
    fewest = sequential.fewest_for_verdict(sequential.arm_alpha(0.95, 2))
    assert fewest == likely_repetitions(BenchRequest(target="t", arms=TWO_ARMS, prompt="p").resolved("cpu"), 2) == 7
    _never_back(events)
    first = _counted(events)[0]
    assert (first.total, first.most) == ((1 + fewest) * 3, (1 + CLEAR_MAX_REPEATS) * 3)  # 24 likely, at most 93
    line = progress_view.progress_text(first)
    assert f"{first.done} of about 24 runs done (at most 93)" in line, line
    done = events[-1]
    assert done.kind == "done" and done.done == done.total == 24
    assert "(24 of 24 runs done" in progress_view.progress_text(done)


def test_a_run_past_its_likely_stop_owes_one_more_repetition_at_a_time(allowed_models, store, monkeypatch):
    # One arm clearly slower, the other close to plain with wide noise: the answer needs more than the floor.
    events = _compare(store, monkeypatch, {2: 1.85, 3: 1.02}, noise=0.25)
    _never_back(events)
    report = events[-1].report.to_dict()
    repetitions = report["stopping"]["repetitions"]
    assert repetitions > 7, report["stopping"]  # this noise does need more
    totals = sorted({e.total for e in _counted(events) if e.kind != "done"})
    assert totals == [(1 + n) * 3 for n in range(7, repetitions + 1)], totals  # one repetition more each time
    assert events[-1].done == events[-1].total == (1 + repetitions) * 3


def test_a_fixed_count_is_the_count_and_says_no_at_most(allowed_models, store, monkeypatch):
    fake = FakeRuns({}, 0.01)
    monkeypatch.setattr(timing, "timed_generate", fake.timed_generate)
    monkeypatch.setattr(timing, "probe_arm", lambda *a, **k: {"error": "not probed in this test"})
    request = BenchRequest(target="target", arms=TWO_ARMS, prompt=PROMPT, max_new_tokens=4, warmup=1, repeats=3)
    events = list(runner.run_benchmark(request, store, clock=fake.clock))
    _never_back(events)
    assert {e.total for e in _counted(events)} == {12}
    assert not any("at most" in progress_view.progress_text(e) for e in _counted(events))


def _suite(store, **kw) -> list:
    prompts = b"the cat sat on the mat\n\nthe dog sat on the log"
    selection = select(SuiteRequest(suite="file", file="x.txt"), parse_prompts(prompts, "x.txt"))
    bench = BenchRequest(target="target", arms=(ArmSpec("assistant", "target-copy"),), max_new_tokens=4, **kw)
    ticks = itertools.count()
    return list(suite_runner.run_suite(bench, selection, store, clock=lambda: float(next(ticks))))


def test_a_workloads_count_never_goes_back_after_its_warm_up(allowed_models, store):
    """The Workloads tab went from '2 of 21 runs done' (the warm-up) to '0 of 18': the warm-up's runs stay done."""
    events = _suite(store, warmup=1, repeats=2)
    _never_back(events)
    warm = [e for e in events if e.warmup and e.kind == "run"]
    assert warm and warm[-1].done == 2
    assert {e.total for e in _counted(events)} == {2 + 2 * 2 * 2}  # the warm-up, then 2 prompts x 2 reps x 2 arms
    assert events[-1].done == events[-1].total == 10


def test_a_workload_until_clear_counts_each_prompts_likely_stop(allowed_models, store):
    events = _suite(store, warmup=1, stop_rule="clear")
    _never_back([e for e in events])
    fewest = sequential.fewest_for_verdict(0.05)  # one assisted arm
    first = _counted(events)[0]
    assert (first.total, first.most) == (2 + 2 * fewest * 2, 2 + 2 * CLEAR_MAX_REPEATS * 2)
    assert events[-1].done == events[-1].total == 2 + 2 * fewest * 2


def test_the_time_left_shown_moves_by_at_most_a_factor_of_two_a_run():
    now = [0.0]
    progress = Progress(total=10)
    progress.pace.clock, progress.pace.start = (lambda: now[0]), 0.0
    assert progress.smoothed(540.0) == 540.0  # the first figure stands: 9 min
    assert progress.smoothed(5000.0, settle=False) == 1080.0  # 1 h 23 min measured next: shown 18 min...
    assert progress.smoothed(5000.0, settle=False) == 1080.0  # ...and no more on the lines before the next run
    assert progress.smoothed(5000.0) == 1080.0  # a run ends: the next may double again
    assert progress.smoothed(5000.0) == 2160.0
    now[0] = 2000.0
    assert progress.smoothed(100.0) == 160.0  # run down by the time since, it may fall as far as that
    assert progress.smoothed(100.0) == 100.0
    progress.expect(4)
    assert progress.total == 10  # the total never shrinks while the run goes on
    progress.most = 12
    progress.expect(30)
    assert progress.total == 12  # nor grows past the most that may run
