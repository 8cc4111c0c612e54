"""The load phase through run_benchmark and run_suite: a toy serving engine registered in vLLM's place (its arms
load, sleeping per token) beside the tiny transformers models; the report ends with its load figures, a stop in
the load phase keeps whole levels, and a workload's rounds take its prompts in turn."""

from __future__ import annotations

import time

from assistlab.config import BenchRequest
from assistlab.engines import registry
from assistlab.engines.base import Arm, ArmInfo, Engine, LoadResult, RequestRecord, RunFailure, RunResult, Status
from assistlab.engines.vllm import arms as vllm_arms
from assistlab.measure import runner, suite_runner
from assistlab.results.suite_inputs import SuiteRequest, parse_prompts, select

PER_TOKEN = {"plain": 0.004, "ngram": 0.002}


class ToyServerArm(Arm):
    loads = True

    def __init__(self, info: ArmInfo, tokens: int, sent: list):
        self.info, self.tokens, self.sent = info, tokens, sent

    def run(self, prompt_ids, round_index, clock, should_stop, watch):
        wall, start = time.time(), clock()
        with watch():
            time.sleep(PER_TOKEN[self.info.strategy] * self.tokens)
        return RunResult(latency=clock() - start, times=[clock() - start], tokens=[self.tokens], origins=False,
                         token_ids=[prompt_ids[-1]] * self.tokens, memory=None, wall_window=(wall, time.time()))

    def run_load(self, prompts, round_index, clock, should_stop, watch):
        if should_stop():
            return RunFailure("stopped", stopped=True)
        self.sent.append((self.info.name, [hash(tuple(p)) for p in prompts]))
        start = clock()
        with watch():  # the server batches: a round of C requests takes a little more than one
            time.sleep(PER_TOKEN[self.info.strategy] * self.tokens * (1 + 0.1 * len(prompts)))
        took = clock() - start
        requests = [RequestRecord(i, 0.0, took, took / self.tokens, [took / self.tokens] * (self.tokens - 1),
                                  self.tokens, 0.0005) for i in range(len(prompts))]
        return LoadResult(len(prompts), took, requests, counts_source=None)


def toy_engine(sent: list) -> type[Engine]:
    class ToyServer(Engine):
        name = "vllm"  # in vLLM's place: a request with levels needs a serving engine's arm

        @classmethod
        def wanted(cls, request) -> bool:
            return True

        def prepare(self):
            yield Status("Starting the toy server...", "Starting the toy server")

        def arms(self):
            n = self.preparation.request.max_new_tokens
            return [ToyServerArm(ArmInfo("toy plain", "plain", engine=self.name), n, sent),
                    ToyServerArm(ArmInfo("toy ngram", "ngram", engine=self.name), n, sent)]

    return ToyServer


def bench(**changes) -> BenchRequest:
    settings = dict(target="target", arms=vllm_arms.vllm_arms(["ngram"]), engines=("transformers", "vllm"),
                    prompt="the quick brown fox jumps over the lazy dog", max_new_tokens=8, repeats=2, warmup=1,
                    device="cpu", concurrency="1,4", load_rounds=5)
    settings.update(changes)
    return BenchRequest(**settings)


def test_a_comparison_ends_with_its_load_phase(allowed_models, store, monkeypatch):
    sent: list = []
    monkeypatch.setitem(registry.ENGINES, "vllm", toy_engine(sent))
    events = list(runner.run_benchmark(bench(), store))
    final = events[-1]
    assert final.kind == "done" and final.report.status == "complete", final.message
    assert final.done == final.total  # the load runs are on the progress bar too
    steps = [e.step for e in events if e.kind == "status"]
    assert "Under load: 4 requests at once, round 2 of 5, toy ngram" in steps
    assert steps.index("Under load: 1 request at once, warm-up (not counted), toy plain") > max(
        i for i, s in enumerate(steps) if s.startswith("Repetition"))
    data = final.report.to_dict()
    assert [(e["arm"], e["concurrency"]) for e in data["load"]] == [
        ("toy plain", 1), ("toy ngram", 1), ("toy plain", 4), ("toy ngram", 4)]
    ngram = data["load"][1]
    assert ngram["rounds"] == 5 and ngram["requests"] == 5 and ngram["speedup"]["median"] > 1.2
    assert data["load"][3]["requests"] == 20 and data["load"][3]["acceptance"]["source"] is None
    assert data["load_summary"]["levels"] == [1, 4] and data["load_summary"]["arms"][0]["arm"] == "toy ngram"
    assert any("transformers arms" in note for note in data["load_summary"]["notes"])
    assert "load_contention" in data["environment"]
    assert all(len(prompts) in (1, 4) for _name, prompts in sent)


def test_a_stop_in_the_load_phase_says_which_levels_were_kept(allowed_models, store, monkeypatch):
    sent: list = []
    monkeypatch.setitem(registry.ENGINES, "vllm", toy_engine(sent))
    asked = {"stop": False}
    final = None
    for event in runner.run_benchmark(bench(), store, should_stop=lambda: asked["stop"]):
        if event.step == "Under load: 4 requests at once, round 1 of 5, toy ngram":
            asked["stop"] = True
        final = event
    assert final.report.status == "stopped"
    assert final.message == ("Stopped during the load phase, after all 2 repetitions were measured; kept load "
                             "level 1 of 1, 4.")
    data = final.report.to_dict()
    assert [e["concurrency"] for e in data["load"]] == [1, 1] and data["counted_repetitions"] == 2


def test_a_workload_runs_its_load_phase_once_over_its_prompts_in_turn(allowed_models, store, monkeypatch):
    sent: list = []
    monkeypatch.setitem(registry.ENGINES, "vllm", toy_engine(sent))
    text = b"the quick brown fox\n\njumps over the lazy dog\n\nand runs away"
    selection = select(SuiteRequest(suite="file", file="p.txt"), parse_prompts(text, "p.txt"))
    final = list(suite_runner.run_suite(bench(concurrency="4", load_rounds=1, repeats=1), selection, store))[-1]
    assert final.report.status == "complete", final.message
    data = final.report.to_dict()
    assert [(e["arm"], e["concurrency"], e["requests"]) for e in data["load"]] == [
        ("toy plain", 4, 4), ("toy ngram", 4, 4)]
    rounds = {tuple(prompts) for _name, prompts in sent}  # warm-up and the timed round, both arms: one pattern
    assert len(rounds) == 1
    (pattern,) = rounds
    assert len(set(pattern[:3])) == 3 and pattern[3] == pattern[0]  # three prompts in turn, then the first again
    assert all("load" not in r.report.to_dict() for r in final.report.results)  # the suite's phase, not a prompt's
    from assistlab.cli.tables import format_suite_table

    assert "Under load: 1 round per level" in format_suite_table(data)
    rows = final.report.to_csv().splitlines()
    assert rows[0].endswith(",concurrency,request") and sum(r.startswith("load,") for r in rows) == 8
