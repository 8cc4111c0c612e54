"""The load phase's schedule (measure/load.py) with fake arms on a fake clock: warm-up per level, rotated timed
rounds, a failure at one level, a stop that keeps whole levels; and its report through results/load.py."""

import contextlib

from assistlab.config import BenchRequest
from assistlab.engines.base import Arm, ArmInfo, LoadResult, RequestRecord, RunFailure, unwatched
from assistlab.engines.vllm import arms as vllm_arms
from assistlab.measure import load as load_phase
from assistlab.measure import runner
from assistlab.measure.progress import Pace, Progress
from assistlab.results.report import Report

TOKENS = 8


def bench(levels="1,2,4,8", rounds=5) -> BenchRequest:
    return BenchRequest(target="t", arms=vllm_arms.vllm_arms(["ngram"]), engines=("transformers", "vllm"),
                        concurrency=levels, load_rounds=rounds)


class FakeLoadArm(Arm):
    """A server arm whose round of C requests takes `base * C ** growth` seconds on the shared fake clock."""

    loads = True

    def __init__(self, info, base, growth, now, fail_at=None, stop_at=None):
        self.info, self.base, self.growth, self.now = info, base, growth, now
        self.fail_at, self.stop_at = fail_at, stop_at
        self.calls = []

    def run(self, *args):
        raise AssertionError("the load phase never calls run")

    def run_load(self, prompts, round_index, clock, should_stop, watch):
        level = len(prompts)
        self.calls.append((level, round_index, watch is unwatched))
        if (level, round_index) == self.stop_at:
            return RunFailure("stopped", stopped=True)
        if level == self.fail_at:
            return RunFailure("its server answered 503 Service Unavailable.")
        wall = self.base * level ** self.growth
        with watch():
            self.now[0] += wall
        counts = {"drafts": 2, "draft_tokens": 6, "accepted_tokens": 3, "accepted_per_position": [2, 1, 0]}
        requests = [RequestRecord(i, 0.0, wall, wall / TOKENS, [wall / TOKENS] * (TOKENS - 1), TOKENS, 0.002,
                                  counts if self.info.assisted else None) for i in range(level)]
        return LoadResult(level, wall, requests, "per-request" if self.info.assisted else None)


class OneRequestArm(Arm):
    def __init__(self, info):
        self.info = info

    def run(self, *args):
        raise AssertionError("not timed here")


class FakeMonitor:
    def __init__(self):
        self.windows = 0

    @contextlib.contextmanager
    def window(self, *_pids):
        self.windows += 1
        yield


def setup(**ngram):
    now = [0.0]
    arms = [OneRequestArm(ArmInfo("plain", "plain")),
            FakeLoadArm(ArmInfo("vllm plain", "plain", engine="vllm"), 1.0, 0.5, now),
            FakeLoadArm(ArmInfo("vllm ngram", "ngram", engine="vllm"), 0.7, 0.8, now, **ngram)]
    report = Report(request={"concurrency": [1, 2, 4, 8]}, environment={}, arms=[a.info for a in arms])
    progress = Progress(total=0, pace=Pace(clock=lambda: now[0]))
    return now, arms, report, progress


def drive(request, arms, report, progress, should_stop=lambda: False, monitor=None):
    phase = load_phase.run_load(request, load_phase.same_prompt([1, 2, 3]), arms, report, lambda: 0.0,
                                should_stop, progress, runner.rotation, monitor)
    events = []
    while True:
        try:
            events.append(next(phase))
        except StopIteration as end:
            return events, end.value


def test_each_level_warms_up_once_then_times_rotated_rounds_watched():
    _now, arms, report, progress = setup()
    progress.total = load_phase.runs_of_phase(bench(), arms)
    monitor = FakeMonitor()
    events, stopped = drive(bench(), arms, report, progress, monitor=monitor)
    assert stopped is False and report.load.done == [1, 2, 4, 8] and report.load.arms == [1, 2]
    for arm in arms[1:]:  # per level: one untimed warm-up, then 5 watched rounds
        assert [(c, watched) for c, _r, watched in arm.calls] == [
            (c, w) for c in (1, 2, 4, 8) for w in (True, False, False, False, False, False)]
    assert monitor.windows == 4 * 5 * 2
    assert report.load.orders[:3] == [[1, 2], [2, 1], [1, 2]]  # runner.rotation over the loading arms
    steps = [e.step for e in events if e.kind == "status"]
    assert "Under load: 4 requests at once, round 2 of 5, vllm ngram" in steps
    assert "Under load: 1 request at once, warm-up (not counted), vllm plain" in steps
    assert progress.done == progress.total == 4 * 6 * 2
    later = [e.eta_s for e in events if e.kind == "status"][1:]
    assert all(t is not None for t in later) and later[-1] < later[0]  # the time left, once a round was timed
    data = report.to_dict()
    assert [(e["arm"], e["concurrency"]) for e in data["load"][:3]] == [
        ("vllm plain", 1), ("vllm ngram", 1), ("vllm plain", 2)]
    ngram = {e["concurrency"]: e for e in data["load"] if e["arm"] == "vllm ngram"}
    # plain/ngram round walls: 1.0 * C**0.5 / (0.7 * C**0.8)
    assert abs(ngram[1]["speedup"]["median"] - 1 / 0.7) < 1e-9 and ngram[8]["speedup"]["median"] < 1
    summary = data["load_summary"]
    assert summary["arms"][0]["stops_paying_at"] == 4 and summary["arms"][0]["helps_at"] == [1, 2]
    assert summary["arms"][0]["costs_at"] == [4, 8]
    assert summary["sentence"] == ("vllm ngram helps up to 2 concurrent requests (1.16× at 2) and costs throughput "
                                   "from 4 on (0.94× at 4).")
    assert any("transformers arms (plain) stay at one request at a time" in n for n in summary["notes"])
    assert ngram[4]["acceptance"]["rate"] == 0.5 and ngram[4]["acceptance"]["source"] == "per-request"


def test_a_failure_at_one_level_keeps_the_lower_ones_and_skips_the_higher():
    _now, arms, report, progress = setup(fail_at=4)
    events, stopped = drive(bench(), arms, report, progress)
    assert stopped is False and report.load.done == [1, 2, 4, 8]
    assert {c for c, _r, _w in arms[2].calls} == {1, 2, 4}  # not sent at 8
    assert arms[2].calls.count((4, 0, True)) == 1  # its warm-up failed: no timed round at 4
    assert {c for c, _r, _w in arms[1].calls} == {1, 2, 4, 8}  # plain goes on
    assert any("vllm ngram at 4 at once: its server answered 503" in e.message for e in events)
    ngram = {e["concurrency"]: e for e in report.to_dict()["load"] if e["arm"] == "vllm ngram"}
    assert ngram[2]["failed"] is None and ngram[2]["rounds"] == 5
    assert ngram[4]["failed"] == "its server answered 503 Service Unavailable." and ngram[4]["rounds"] == 0
    assert ngram[8]["failed"] == "not tried: it failed at 4 concurrent requests."
    summary = report.to_dict()["load_summary"]["arms"][0]
    assert summary["stops_paying_at"] == 4
    assert "has no result at 4: its server answered 503 Service Unavailable" in summary["sentence"]


def test_a_failing_plain_arm_takes_its_assisted_arms_with_it():
    now, arms, report, progress = setup()
    arms[1].fail_at = 2
    drive(bench("1,2,4"), arms, report, progress)
    assert report.load.failures[(2, 2)] == "its baseline, vllm plain, its server answered 503 Service Unavailable."
    assert report.load.failures[(2, 4)] == "not tried: its baseline, vllm plain, failed at 2 concurrent requests."
    assert report.load.failures[(1, 4)] == "not tried: it failed at 2 concurrent requests."
    assert {c for c, _r, _w in arms[2].calls} == {1}


def test_a_stop_discards_the_level_under_way_and_keeps_whole_levels():
    _now, arms, report, progress = setup()
    asked = {"stop": False}
    events = []
    phase = load_phase.run_load(bench(), load_phase.same_prompt([1]), arms, report, lambda: 0.0,
                                lambda: asked["stop"], progress, runner.rotation)
    for event in phase:
        events.append(event)
        if event.step == "Under load: 4 requests at once, round 3 of 5, vllm plain":
            asked["stop"] = True
    assert report.load.done == [1, 2]
    assert {r.concurrency for r in report.load.rounds} == {1, 2}
    assert len(report.load.orders) == 10
    assert load_phase.kept_words(report.load) == "kept load levels 1, 2 of 1, 2, 4, 8"
    assert [e["concurrency"] for e in report.to_dict()["load"]] == [1, 1, 2, 2]


def test_a_run_cut_short_by_a_stop_is_discarded_too():
    _now, arms, report, progress = setup(stop_at=(1, 2))
    _events, stopped = drive(bench(), arms, report, progress)
    assert stopped is True and report.load.done == [] and report.load.rounds == []
    assert load_phase.kept_words(report.load) == "kept no load level of 1, 2, 4, 8"


def test_a_workload_sends_its_prompts_in_turn():
    assert load_phase.prompts_in_turn([[1], [2], [3]])(4) == [[1], [2], [3], [1]]
    assert load_phase.same_prompt([5, 6])(2) == [[5, 6], [5, 6]]
