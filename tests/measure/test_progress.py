"""Progress a person can follow: the step under way, runs done, time so far and time left, for every step."""

from __future__ import annotations

import re
import time

import pytest

from assistlab.config import WARMUP_TOKENS, BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure import runner
from assistlab.engines import base
from assistlab.engines.transformers import bundled
from assistlab.engines.transformers import engine as tengine
from assistlab.measure.runner import Event, Pace
from assistlab.views import progress

PROMPT = "write me a long essay on deep learning"


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pace_estimates_the_time_left_from_each_arms_later_runs():
    clock = FakeClock()
    pace = Pace(clock)
    assert pace.left(10) is None  # nothing timed yet: no basis for an estimate
    clock.now += 30.0
    assert pace.elapsed() == 30.0
    pace.record(0, 9.0)  # plain's first run carries start-up costs...
    pace.record(0, 3.0)  # ...so its later runs set its pace, which moves towards them by at most 1.4x a run
    assert pace.per_run(0) == pytest.approx(9.0 / 1.4)
    for _ in range(3):
        pace.record(0, 3.0)
    assert pace.per_run(0) == pytest.approx(3.0)
    pace.record(0, 60.0)  # one run caught by a burst of others' work: the median of the later runs stays 3 s
    assert pace.per_run(0) == pytest.approx(3.0)
    pace.record(1, 5.0)  # an assisted arm's first run starts from the other arms' pace: 3 s x 1.4 at most
    assert pace.per_run(1) == pytest.approx(4.2)
    pace.record(1, 5.0)  # its later runs: 5 s
    # 4 runs left spread over the arms at (3 + 5) / 2 s each, and 2 drafting-cost runs at the assisted arm's 5 s.
    assert pace.left(4, probes_left=2, assisted=(1,)) == pytest.approx(4 * 4.0 + 2 * 5.0)
    assert pace.left(0) == 0.0


def test_durations_read_as_a_person_says_them():
    assert [progress.duration(s) for s in (0, 44.6, 65, 600, 3725)] == ["0 s", "45 s", "1 min 05 s", "10 min 00 s",
                                                                    "1 h 02 min"]


def _label(html: str) -> str:
    return re.search(r'<div class="al-label">(.*?)</div>', html).group(1)


def test_the_progress_label_names_the_step_the_runs_and_the_times():
    warming = Event("status", "Warming up x...", 3, 12, None, True, step="Warm-up of universal: s (not counted)",
                    elapsed_s=125.0, eta_s=400.0)
    assert _label(progress.event_progress(warming)) == (
        "Warm-up of universal: s (not counted) · 3 of 12 runs done · 2 min 05 s so far, about 6 min 40 s left"
    )
    converting = Event("status", "Preparing...", 0, 0, step="Converting the bundled target (first use only)",
                       elapsed_s=12.0, eta_s=58.0)
    label = _label(progress.event_progress(converting))
    assert label == "Converting the bundled target (first use only) · 12 s so far, about 58 s left for this step"
    assert "al-busy" in progress.event_progress(converting)  # no run count yet: a moving bar
    first = Event("status", "Warming up plain...", 0, 12, step="Warm-up of plain (not counted)", elapsed_s=4.0)
    assert "time left known after the first run" in _label(progress.event_progress(first))


@pytest.fixture(scope="module")
def events(models_dir, store) -> list[Event]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
        request = BenchRequest(target="target", arms=(ArmSpec("auto", "assistant-other"), ArmSpec("prompt-lookup")),
                               prompt=PROMPT, max_new_tokens=4, repeats=2, warmup=1)
        return list(runner.run_benchmark(request, store))


def test_every_step_is_announced_before_it_starts_naming_its_arm(events):
    starts = [e for e in events if e.kind == "status" and e.total]
    arms = [arm.name for arm in events[-1].report.arms]
    assert arms[0] == "plain" and arms[1].startswith("universal: assistant-other") and arms[2].startswith("prompt-lookup")
    # Announcements of runs; the answer's own status line (before the drafting-cost runs) names no run.
    runs_of = [e for e in starts if "drafting cost" not in e.step and e.step != "The answer"]
    announced = [e.step for e in runs_of]
    # Each round runs every arm in runner.rotation's order: repetition r starts at arm r - 1.
    assert announced == [f"Warm-up of {a} (not counted)" for a in arms] + [
        f"Repetition {r} of 2: {arms[i]}" for r in (1, 2) for i in runner.rotation(len(arms), r - 1)]
    # Each announcement comes right before the run it names, so the page never shows a finished step as current.
    for i, event in enumerate(events[:-1]):
        if event.kind == "status" and event.total and "drafting cost" not in event.step and event.step != "The answer":
            after = events[i + 1]
            assert after.kind == "run" and after.step == event.step
    probes = [e.step for e in starts if "drafting cost" in e.step]
    assert probes == [f"Measuring the drafting cost, 1 of 2: {arms[1]} (untimed)",
                      f"Measuring the drafting cost, 2 of 2: {arms[2]} (untimed)"]


def test_every_event_carries_the_time_so_far_and_an_estimate_once_a_run_was_timed(events):
    loading = [e for e in events if not e.total and e.kind == "status"]
    assert loading and all(e.step.startswith("Loading the") for e in loading)
    assert all(e.elapsed_s is not None and e.elapsed_s >= 0 for e in events)
    elapsed = [e.elapsed_s for e in events]
    assert elapsed == sorted(elapsed)
    first_run = next(i for i, e in enumerate(events) if e.kind == "run")
    assert all(e.eta_s is not None and e.eta_s >= 0 for e in events[first_run:])
    assert events[-1].kind == "done" and events[-1].eta_s == 0.0 and events[-1].step == "Complete"
    # The estimate shrinks as runs finish (allowing for noise on a shared machine: it ends lower than it began).
    etas = [e.eta_s for e in events[first_run:] if e.kind == "run"]
    assert etas[-1] < etas[0]


def test_a_slow_load_reports_its_time_while_it_waits_and_returns_the_model(monkeypatch):
    monkeypatch.setattr(base, "HEARTBEAT_S", 0.05)
    clock = FakeClock()

    def slow_load():
        time.sleep(0.4)
        return "the model"

    def beat() -> Event:
        clock.now += 1.0
        return Event("status", "Loading...", 0, 0, step="Loading the target", elapsed_s=clock.now - 100.0)

    waiting = base.while_loading(slow_load, beat)
    beats = []
    with pytest.raises(StopIteration) as stop:
        while True:
            beats.append(next(waiting))
    assert stop.value.value == "the model"
    assert len(beats) >= 2 and [b.elapsed_s for b in beats] == sorted(b.elapsed_s for b in beats)


def test_a_failed_load_raises_its_own_error_after_the_wait():
    def broken():
        raise ValueError("no such model")

    with pytest.raises(ValueError, match="no such model"):
        list(base.while_loading(broken, lambda: Event("status", "", 0, 0)))


def test_converting_a_bundled_model_is_a_named_step_with_a_measured_estimate(monkeypatch, tmp_path):
    monkeypatch.setenv("ASSISTLAB_CACHE_DIR", str(tmp_path))  # nothing converted here yet
    step, message, estimate = tengine.loading_step("target", "bundled:gemma-3-270m")
    assert step == "Converting the bundled target (first use only)"
    assert "first use" in message and estimate == bundled.lookup("bundled:gemma-3-270m").convert_seconds
    assert tengine.loading_step("assistant", "assistant-other") == (
        "Loading the assistant", "Loading the assistant assistant-other...", None)


def test_before_any_run_is_timed_the_time_left_is_a_labelled_rough_estimate(events):
    """A long first run used to show no time left at all; now the first warm-up says roughly how long, as an
    estimate from the prompt, the tokens, the runs and the models' sizes, until the runs themselves tell."""
    first_run = next(i for i, e in enumerate(events) if e.kind == "run")
    before = [e for e in events[:first_run] if e.total]
    assert before and all(e.eta_s is not None and e.eta_s > 0 and e.eta_rough for e in before)
    label = _label(progress.event_progress(before[0]))
    assert "roughly" in label and "an estimate from the prompt length, new tokens, repetitions and the sizes of the models" in label
    # The warm-up runs are shorter than a repetition (WARMUP_TOKENS), so only a timed run replaces the estimate.
    first_timed = next(i for i, e in enumerate(events) if e.kind == "run" and not e.warmup)
    assert not any(e.eta_rough for e in events[first_timed:])


def test_the_rough_estimate_grows_with_the_prompt_the_tokens_the_runs_and_the_model():
    from assistlab.results import estimate

    base = dict(device_type="cpu", target_parameters=270_000_000, assistant_parameters=[135_000_000, 0],
                prompt_tokens=40, new_tokens=64, warmup=1, repeats=5)
    seconds = estimate.comparison_seconds(**base)
    # The default CPU comparison took 70 s of timed runs plus warm-up and cost runs (README): within a factor 2.
    assert 50 < seconds < 200
    for change in ({"prompt_tokens": 8000}, {"new_tokens": 256}, {"repeats": 20}, {"target_parameters": 10**9}):
        assert estimate.comparison_seconds(**{**base, **change}) > 1.5 * seconds, change
    assert estimate.comparison_seconds(**base, max_time_s=10) < seconds


def test_a_finished_run_reads_in_the_same_form_as_the_step_before_it():
    """The page used to switch between 'Repetition 1 of 5: plain' and 'prompt-lookup (k=10): repetition 1/5,
    8.92 s'; now a finished run is its step, its time, the runs done and the times, like every other line."""
    before = Event("status", "Timing prompt-lookup (k=10), repetition 1 of 5...", 3, 18,
                   step="Repetition 1 of 5: prompt-lookup (k=10)", elapsed_s=65.0, eta_s=130.0)
    after = Event("run", "prompt-lookup (k=10): repetition 1/5, 8.92 s", 4, 18,
                  step="Repetition 1 of 5: prompt-lookup (k=10)", elapsed_s=74.0, eta_s=120.0, took_s=8.92)
    assert _label(progress.event_progress(before)) == (
        "Repetition 1 of 5: prompt-lookup (k=10) · 3 of 18 runs done · 1 min 05 s so far, about 2 min 10 s left")
    assert _label(progress.event_progress(after)) == (
        "Repetition 1 of 5: prompt-lookup (k=10), took 8.92 s · 4 of 18 runs done · 1 min 14 s so far, "
        "about 2 min 00 s left")
    assert progress.progress_text(after) == _label(progress.event_progress(after))  # the command line's line


def test_every_line_of_a_real_comparison_has_one_form(events):
    """Each line with a run count starts with the step it names (a finished run adds its time), then the runs
    done, the time so far and the time left: rough before the first timed run, measured after."""
    for event in events:
        if not event.total or event.kind == "done":
            continue
        label = progress.progress_text(event)
        step, runs, timing = label.split(" · ")
        assert step == event.step or step == f"{event.step}, took {event.took_s:.2f} s", label
        assert runs == f"{event.done} of {event.total} runs done"
        # On a busy machine (others' work seen by the watch) the time left is said to be uncertain instead.
        assert "so far, " in timing and timing.endswith(
            ("left", "until a run has been timed)", "uncertain: the machine is busy")), label
    runs = [e for e in events if e.kind == "run"]
    assert runs and all(e.took_s is not None and e.took_s > 0 for e in runs)
    assert all("repetition 1/" not in progress.progress_text(e) for e in events)
    assert progress.progress_text(events[-1]).startswith("Complete (")


def test_the_rough_estimate_of_a_workload_counts_every_prompt_and_one_warm_up():
    from assistlab.results import estimate

    one = estimate.suite_seconds("cpu", 270_000_000, [135_000_000], [40], 32, 1, 3)
    five = estimate.suite_seconds("cpu", 270_000_000, [135_000_000], [40] * 5, 32, 1, 3)
    arms = estimate._arm_seconds("cpu", 270_000_000, [135_000_000], 40, 32)
    # The one warm-up runs only WARMUP_TOKENS new tokens per arm, on the first prompt.
    warm = estimate._arm_seconds("cpu", 270_000_000, [135_000_000], 40, min(32, WARMUP_TOKENS))
    assert sum(warm) < sum(arms)
    assert one == pytest.approx(sum(warm) + 3 * sum(arms)) and five == pytest.approx(sum(warm) + 15 * sum(arms))
    assert estimate.suite_seconds("cpu", 270_000_000, [0], [40, 8000], 32, 1, 3) > five / 4
    assert estimate.suite_seconds("cpu", 1, [], [], 32, 1, 3) == 0.0
    assert estimate.prompt_tokens_guess(("a" * 400, "b" * 40)) == 110 and estimate.prompt_tokens_guess(("",)) == 1
