"""A workload whose prompts each run until their answer is clear: the comparison's rule per prompt, the workload's
budget of timed runs shared among the prompts left, what ended each prompt in the report, and the ways to ask."""

from __future__ import annotations

import itertools

import pytest

from assistlab.cli.parser import build_parser, request_from_args
from assistlab.config import CLEAR_MAX_REPEATS, SUITE_CLEAR_MAX_TIME_S, BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import InputError
from assistlab.measure import suite_runner
from assistlab.results import sequential
from assistlab.results.suite_inputs import SuiteRequest, parse_prompts, select
from assistlab.ui.api_parameters import COMPARE_API, COMPARE_SUITE_API
from assistlab.ui.suite_tab import bench_from_form

TWO_PROMPTS = b"the cat sat on the mat\n\nthe dog sat on the log"


def _selection():
    return select(SuiteRequest(suite="file", file="x.txt"), parse_prompts(TWO_PROMPTS, "x.txt"))


def _run(store, **kw) -> tuple[list, dict]:
    # The assistant is a copy of the target: every draft is kept, so on a clock that ticks once per reading the
    # assisted run takes fewer readings than plain's, every repetition alike: a clear "faster" per prompt.
    bench = BenchRequest(target="target", arms=(ArmSpec("assistant", "target-copy"),), max_new_tokens=4, warmup=0,
                         stop_rule="clear", **kw)
    ticks = itertools.count()
    events = list(suite_runner.run_suite(bench, _selection(), store, clock=lambda: float(next(ticks))))
    return events, events[-1].report.to_dict()


def test_each_prompt_stops_once_its_answer_is_clear(models_dir, store, monkeypatch):
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    events, data = _run(store)
    fewest = sequential.fewest_for_verdict(0.05)  # one assisted arm: the whole 5% is its own
    assert data["status"] == "complete"
    rows = data["suite"]["prompts"]
    assert [r["repetitions"] for r in rows] == [fewest, fewest]
    for row in rows:
        stop = row["stopping"]
        assert stop["rule"] == "clear" and stop["ended_by"] == "clear" and stop["repetitions"] == fewest
        assert list(stop["arms"].values())[0]["settled"] == sequential.FASTER
        assert len(list(stop["arms"].values())[0]["looks"]) == fewest  # the interval after every look, kept
    kept = data["stopping"]
    assert (kept["rule"], kept["max_repetitions"], kept["max_time_s"]) == ("clear", CLEAR_MAX_REPEATS,
                                                                         SUITE_CLEAR_MAX_TIME_S)
    assert [p["ended_by"] for p in kept["prompts"].values()] == ["clear", "clear"]
    assert kept["spent_s"] > 0
    assert "Each ran until its answer was clear: 2 of 2 prompts reached a clear answer" in data["message"]
    # The bar's total shrank with each prompt that settled early: it ends full, not at 12 of 120 runs.
    assert events[-1].done == events[-1].total == 2 * fewest * 2
    measured = [e.message for e in events if e.prompt_done]
    assert all(f"clear after {fewest} repetitions" in m for m in measured), measured


def test_the_workloads_budget_is_shared_among_the_prompts_left(models_dir, store, monkeypatch):
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    _, data = _run(store, max_time_s=1)  # far less than one repetition's ticks: one repetition each, then out
    kept = data["stopping"]
    assert [p["ended_by"] for p in kept["prompts"].values()] == ["time budget", "time budget"]
    assert [r["repetitions"] for r in data["suite"]["prompts"]] == [1, 1]
    first, second = kept["prompts"].values()
    assert first["max_time_s"] == pytest.approx(0.5)  # half the budget: two prompts were left
    assert second["max_time_s"] < first["max_time_s"]  # the first spent more than its share
    assert "0 of 2 prompts reached a clear answer; 2 ran out of their share of the 1 s budget" in data["message"]


def test_a_fixed_count_stays_the_default_of_a_workload():
    bench = suite_runner.suite_bench(BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),)), "cpu")
    assert bench.resolved("cpu").stopping_rule == "fixed" and not suite_runner.until_clear(bench)
    clear = suite_runner.suite_bench(BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),),
                                                  stop_rule="clear", repeats=8), "cpu")
    assert (clear.repeats, clear.max_time_s, clear.resolved("cpu").stopping_rule) == (8, SUITE_CLEAR_MAX_TIME_S,
                                                                                      "clear")


def test_the_estimate_says_at_most_and_names_the_budget(tmp_path):
    bench = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), stop_rule="clear", max_time_s=600)
    estimate = suite_runner.estimate_runs(bench, _selection())
    words = suite_runner.describe_estimate(estimate, seconds_per_run=1.0)
    assert f"at most {CLEAR_MAX_REPEATS} repetitions" in words and "within 10 min of timed runs" in words


def test_the_command_line_asks_with_until_clear_and_refuses_it_beside_precision():
    parser = build_parser()
    args = parser.parse_args(["bench", "--suite", "spec-bench", "--until-clear", "--repeats", "12"])
    request = request_from_args(args)
    assert request.stop_rule == "clear" and request.repeats == 12
    assert request_from_args(parser.parse_args(["bench", "--suite", "spec-bench"])).stop_rule is None
    with pytest.raises(InputError, match="--until-clear stops once the answer is clear, --precision"):
        request_from_args(parser.parse_args(["bench", "--until-clear", "--precision", "0.05"]))


def test_the_api_and_the_tab_ask_with_until_clear():
    assert COMPARE_SUITE_API[-1].name == "until_clear" and COMPARE_SUITE_API[-1].default is False
    assert "until_clear" not in [p.name for p in COMPARE_API]
    values = dict(target="target", assistant="assistant-same", strategy="prompt-lookup", also_prompt_lookup=False)
    assert bench_from_form(values, True).stop_rule == "clear"
    assert bench_from_form(values, False).stop_rule is None
    with pytest.raises(InputError, match="until_clear must be true or false"):
        bench_from_form(values, "yes")
    with pytest.raises(InputError, match="choose Sure, or switch the per-prompt rule off"):
        bench_from_form({**values, "measure": "careful"}, True)
