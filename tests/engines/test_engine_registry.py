"""A third engine is one class registered in the registry: a toy engine's arms beside transformers' arms run
end to end through run_benchmark, with the same statistics, charts and history as every other arm."""

from __future__ import annotations

import time


from assistlab import history
from assistlab.config import BenchRequest
from assistlab.engines import registry
from assistlab.engines.base import Arm, ArmInfo, Engine, RunResult, Status
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure import runner
from assistlab.views import charts



# The toy engine: it "generates" by sleeping a fixed time per token, and returns the tokens' times.
class SleepArm(Arm):
    def __init__(self, info: ArmInfo, per_token_s: float, tokens: int):
        self.info, self.per_token_s, self.tokens = info, per_token_s, tokens

    def run(self, prompt_ids, round_index, clock, should_stop, watch):
        wall, start, times = time.time(), clock(), []
        with watch():
            for _ in range(self.tokens):
                time.sleep(self.per_token_s)
                times.append(clock() - start)
        return RunResult(latency=clock() - start, times=times, tokens=[1] * self.tokens, origins=False,
                         token_ids=[prompt_ids[-1]] * self.tokens, memory=None, wall_window=(wall, time.time()))


class SleepEngine(Engine):
    name = "sleep"

    @classmethod
    def wanted(cls, request) -> bool:
        return True

    def prepare(self):
        yield Status("Starting the sleeping engine...", "Starting the sleeping engine")

    def arms(self):
        n = self.preparation.request.max_new_tokens
        return [SleepArm(ArmInfo("sleep plain", "plain", engine=self.name), 0.02, n),
                SleepArm(ArmInfo("sleep fast", "sleep-draft", engine=self.name), 0.01, n)]


def test_a_toy_engine_registered_in_the_registry_runs_beside_transformers(allowed_models, store, monkeypatch, tmp_path):
    monkeypatch.setitem(registry.ENGINES, SleepEngine.name, SleepEngine)  # the one place an engine is added
    request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup", prompt_lookup_num_tokens=2),),
                           prompt="the quick brown fox jumps over the lazy dog", max_new_tokens=8, repeats=3,
                           warmup=1, device="cpu")
    events = list(runner.run_benchmark(request, store))
    assert any(e.kind == "status" and e.step == "Starting the sleeping engine" for e in events)
    final = events[-1]
    assert final.kind == "done" and final.report.status == "complete", final.message
    data = final.report.to_dict()

    # Its arms come after transformers' own, each run in every round, rotated like the others.
    assert [a["name"] for a in data["arms"]][-2:] == ["sleep plain", "sleep fast"]
    assert [a["engine"] for a in data["arms"]] == ["transformers", "transformers", "sleep", "sleep"]
    assert all(len(a["latencies_s"]) == 3 and not a["error"] for a in data["arms"])
    assert len({tuple(order) for order in data["orders"]}) == 3  # four arms, three rotations
    assert data["environment"]["engines"]["sleep"] == {}

    # The same statistics: timed against its own plain arm, twice as fast by construction (sleep overshoots a
    # little on a busy machine, by about the same time per token on both arms).
    by_arm = {c["arm"]: c for c in data["comparison"]}
    toy = by_arm["sleep fast"]
    assert toy["baseline"] == "sleep plain" and toy["engine"] == "sleep"
    assert toy["speedup"]["n"] == 3 and 1.3 < toy["speedup"]["median"] < 2.2
    assert toy["outputs_identical"] is True and toy["lossless"] is True
    assert len(data["comparison"]) == 2 and by_arm[data["arms"][1]["name"]]["baseline"] == "plain"

    # The same charts.
    for build in (charts.latency_figure, charts.timeline_figure, charts.speedup_figure):
        names = {trace.name for trace in build(data).data}
        assert {"sleep plain", "sleep fast"} & names, f"{build.__name__}: {names}"
    # It counts no drafts, so it has no acceptance curve, as a server without counters has none.
    assert "sleep fast" not in {trace.name for trace in charts.acceptance_figure(data).data}
    assert charts.headline(data)

    # The same history.
    db = history.History(f"sqlite:///{tmp_path / 'history.db'}", max_entries=None)
    try:
        saved = db.save(data)
        assert saved.saved, saved.warning
        entry, stored = db.get(saved.id)
        assert [a["name"] for a in stored["arms"]] == [a["name"] for a in data["arms"]]
        assert {c["arm"] for c in stored["comparison"]} >= {"sleep fast"}
    finally:
        db.close()
