"""Draft-length sweeps: which arms a sweep builds, how its summary names the best, and a real run."""

import pytest

from assistlab.config import BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import InputError
from assistlab.measure import sweep
from assistlab.results import stats

PROMPT = "write me a long essay on deep learning"


def request(*arms, **kwargs):
    return BenchRequest(target="target", arms=arms, prompt=PROMPT, **kwargs)


def test_sweep_varies_the_first_drafting_arm():
    base = ArmSpec("assistant", "assistant-same", num_assistant_tokens=4)
    arms = sweep.sweep_arms(request(ArmSpec("prompt-lookup"), base), values=(3, 1, 3, 2), schedules=("heuristic",))
    assert [(a.num_assistant_tokens, a.num_assistant_tokens_schedule) for a in arms] == [
        (1, "constant"), (2, "constant"), (3, "constant"), (4, "heuristic")
    ]
    assert {(a.strategy, a.assistant) for a in arms} == {("assistant", "assistant-same")}


def test_prompt_lookup_sweep_needs_no_arm_and_has_no_schedules():
    arms = sweep.sweep_arms(request(), param="prompt_lookup_num_tokens", values=(2, 4))
    assert [(a.strategy, a.prompt_lookup_num_tokens) for a in arms] == [("prompt-lookup", 2), ("prompt-lookup", 4)]


def test_sweep_request_keeps_everything_else():
    original = request(ArmSpec("auto", "target-copy"), max_new_tokens=7, repeats=3)
    swept = sweep.sweep_request(original, values=(1, 2), schedules=())
    assert len(swept.arms) == 2 and swept.max_new_tokens == 7 and swept.repeats == 3


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(values=range(1, 8), schedules=("heuristic", "heuristic_transient")), "at most 8"),
        (dict(values=(0, 2)), "num_assistant_tokens"),
        (dict(values=(), schedules=()), "at least one"),
        (dict(schedules=("constant",)), "heuristic"),
        (dict(param="temperature"), "must be one of"),
    ],
)
def test_bad_sweeps_are_refused_with_a_reason(kwargs, words):
    with pytest.raises(InputError, match=words):
        sweep.sweep_arms(request(ArmSpec("auto", "target-copy")), **kwargs)


def test_a_length_sweep_needs_a_drafting_arm():
    with pytest.raises(InputError, match="assistant model or early exit"):
        sweep.sweep_arms(request(ArmSpec("prompt-lookup")))


PLAIN = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0, 1.02, 0.98]


def fake_report(settings, plain=PLAIN):
    """A sweep's report dict from per-setting latencies, numbers derived as the report derives them."""
    arms = [{"name": "plain", "strategy": "plain", "spec": None, "error": None, "latencies_s": list(plain)}]
    comparison = []
    for k, schedule, latencies in settings:
        name = "assistant: x"  # names may repeat; arms pair with comparison entries by position
        arms.append({"name": name, "strategy": "assistant", "error": None, "latencies_s": list(latencies),
                     "spec": {"num_assistant_tokens": k, "num_assistant_tokens_schedule": schedule}})
        comparison.append({"arm": name, "acceptance_rate": 0.5, "speedup": stats.speedup(plain, latencies)})
    return {"arms": arms, "comparison": comparison}


def scaled(factor, jitter=(1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.02)):
    return [factor * p * j for p, j in zip(PLAIN, jitter)]


def test_summary_names_a_clear_winner():
    summary = sweep.summarize_sweep(fake_report([
        (1, "constant", scaled(1 / 1.2)),
        (3, "constant", scaled(1 / 1.8)),
        (5, "heuristic", scaled(1 / 1.5)),
    ]))
    assert [p["label"] for p in summary["points"]] == ["k=1", "k=3", "heuristic (from k=5)"]
    best = summary["best"]
    assert best["value"] == 3 and best["schedule"] == "constant" and best["clear"] is True
    # Two rivals: each run-by-run comparison at >= 97.5%; at 10 runs that is the 2nd and 9th of the ratios,
    # 1002/1024 each, so 1 - 2 * 22/1024 = 95.7% together.
    assert best["family_level"] == 1 - 44 / 1024
    assert [v["label"] for v in best["versus"]] == ["k=1", "heuristic (from k=5)"]
    assert best["versus"][0]["speedup"]["median"] == pytest.approx(1.8 / 1.2)
    s = best["speedup"]
    assert summary["best_text"] == (
        f"Best: k=3 at {s['median']:.2f}× over plain (97.8% sure the speedup lies between {s['ci_low']:.2f}× and "
        f"{s['ci_high']:.2f}×), clearly ahead of every other setting (95.7% sure of all 2 run-by-run comparisons "
        "together)."
    )


def test_summary_says_when_the_winner_is_within_noise():
    k2 = scaled(1 / 1.5)
    k3 = [lat * f for lat, f in zip(scaled(1 / 1.6), (1.0, 1.2, 0.9, 1.1, 0.95, 1.15, 0.9, 1.1, 1.0, 0.9))]
    summary = sweep.summarize_sweep(fake_report([
        (2, "constant", k2),
        (3, "constant", k3),
        (5, "constant", []),  # a setting that failed
    ]))
    assert summary["best"]["value"] == 3 and summary["best"]["clear"] is False
    assert summary["best"]["family_level"] == 1002 / 1024  # one rival with runs: its own 97.85%
    assert "; it is not clearly faster than k=2 (97.8% sure of the one run-by-run comparison)." in (
        summary["best_text"])
    assert len(summary["points"]) == 3


def test_a_sweep_that_stopped_when_clear_calls_a_winner_only_at_every_look():
    # The winner trailed k=2 in the first repetition and led in the 9 after: a fixed count of 10 calls it clearly
    # ahead; a sweep whose count followed the data (stop when clear) rests the call on time-uniform comparisons.
    k2 = scaled(1 / 1.5)
    k3 = [k2[0] / 0.9] + [lat / 1.2 for lat in k2[1:]]
    report = fake_report([(2, "constant", k2), (3, "constant", k3)])
    assert sweep.summarize_sweep(report)["best"]["clear"] is True
    peeked = sweep.summarize_sweep({**report, "stopping": {"rule": "clear"}})
    best = peeked["best"]
    assert best["value"] == 3 and best["clear"] is False and best["family_level"] == stats.TARGET_LEVEL
    assert best["versus"][0]["speedup"]["interval"] == "time-uniform"
    assert "; it is not clearly faster than k=2 (95% sure of the one run-by-run comparison)." in peeked["best_text"]


@pytest.mark.parametrize("runs", [1, 3])
def test_a_sweep_of_few_runs_is_never_clearly_ahead(runs):
    # The case: 1.21× against 1.20× with one run each used to be "clearly ahead".
    plain = PLAIN[:runs]
    summary = sweep.summarize_sweep(fake_report([
        (2, "constant", [p / 1.20 for p in plain]),
        (3, "constant", [p / 1.21 for p in plain]),
    ], plain=plain))
    assert summary["best"]["value"] == 3 and summary["best"]["clear"] is False
    text = summary["best_text"]
    assert "clearly ahead" not in text and "95%" not in text
    few = "one run of each setting is" if runs == 1 else "3 runs of each setting are"
    assert text.endswith(f"; {few} too few to tell the settings apart.")
    assert ("one repetition, so no interval" if runs == 1 else "range of 3 runs") in text


def test_summary_of_nothing_measured():
    summary = sweep.summarize_sweep(fake_report([(2, "constant", [])]))
    assert summary["best"] is None and summary["best_text"]


def test_sweep_on_tiny_models_gives_one_result_per_setting(allowed_models, store):
    base = request(ArmSpec("auto", "target-copy", num_assistant_tokens=5), max_new_tokens=16, repeats=2, warmup=0,
                   device="cpu")
    events = list(sweep.sweep(base, store, values=(1, 5), schedules=("heuristic", "heuristic_transient")))
    final = events[-1]
    assert final.kind == "done" and final.report.status == "complete"
    summary = final.report.sweep
    # Three arms are labelled 'k=5' here, so points must be matched to arms by position, not by name.
    assert [(p["value"], p["schedule"]) for p in summary["points"]] == [
        (1, "constant"), (5, "constant"), (5, "heuristic"), (5, "heuristic_transient")
    ]
    for point in summary["points"]:
        assert point["speedup"]["n"] == 2 and point["speedup"]["median"] > 0
        assert point["acceptance_rate"] == 1.0  # the target's copy drafts what the target says
    # One shared plain baseline: one plain arm, then the four variants.
    assert [a.name for a in final.report.arms][0] == "plain" and len(final.report.arms) == 5
    assert summary["best"]["label"] in [p["label"] for p in summary["points"]]


def test_prompt_lookup_sweep_on_tiny_models(allowed_models, store):
    report, summary = sweep.run_sweep(
        request(max_new_tokens=16, repeats=2, warmup=0, device="cpu"), store,
        param="prompt_lookup_num_tokens", values=(2, 4),
    )
    assert report.status == "complete"
    assert [p["value"] for p in summary["points"]] == [2, 4]
    assert all(p["speedup"]["n"] == 2 for p in summary["points"])
    assert summary is report.sweep


def test_a_sweep_where_nothing_beat_plain_never_calls_a_slowdown_the_best_speedup():
    summary = sweep.summarize_sweep(fake_report([
        (1, "constant", scaled(1 / 0.8)),
        (3, "constant", scaled(1 / 0.6)),
    ]))
    s = summary["best"]["speedup"]
    assert summary["best"]["value"] == 1 and s["median"] < 1
    text = summary["best_text"]
    assert text.startswith(f"No setting beat plain. Least slow: k=1, at {s['median']:.2f}× the speed of "
                           "plain (") and "over plain" not in text and "Best" not in text
    # One way to say a slower setting (issue 36 item 4): its speedup below 1×, never the time it took.
    assert f"between {s['ci_low']:.2f}× and {s['ci_high']:.2f}× the speed of plain" in text and "as long" not in text
