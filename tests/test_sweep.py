"""Draft-length sweeps: which arms a sweep builds, how its summary names the best, and a real run."""

import pytest

from assistlab import sweep
from assistlab.config import ArmSpec, BenchRequest
from assistlab.errors import InputError

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


def fake_report(medians_and_intervals):
    arms = [{"name": "plain", "strategy": "plain", "spec": None, "error": None}]
    comparison = []
    for k, schedule, median, low, high in medians_and_intervals:
        name = "assistant: x"  # names may repeat; arms pair with comparison entries by position
        arms.append({"name": name, "strategy": "assistant", "error": None,
                     "spec": {"num_assistant_tokens": k, "num_assistant_tokens_schedule": schedule}})
        comparison.append({"arm": name, "acceptance_rate": 0.5,
                           "speedup": {"median": median, "ci_low": low, "ci_high": high, "n": 3}})
    return {"arms": arms, "comparison": comparison}


def test_summary_names_a_clear_winner():
    summary = sweep.summarize_sweep(fake_report([
        (1, "constant", 1.2, 1.1, 1.3),
        (3, "constant", 1.8, 1.7, 1.9),
        (5, "heuristic", 1.5, 1.4, 1.6),
    ]))
    assert [p["label"] for p in summary["points"]] == ["k=1", "k=3", "heuristic (from k=5)"]
    assert summary["best"]["value"] == 3 and summary["best"]["schedule"] == "constant"
    assert summary["best"]["clear"] is True
    assert summary["best_text"] == "Best: k=3 at 1.80x (95% interval 1.70-1.90x), clearly ahead of every other setting."


def test_summary_says_when_the_winner_is_within_noise():
    summary = sweep.summarize_sweep(fake_report([
        (2, "constant", 1.5, 1.3, 1.75),
        (3, "constant", 1.6, 1.45, 1.8),
        (5, "constant", None, None, None),  # a setting that failed
    ]))
    assert summary["best"]["value"] == 3 and summary["best"]["clear"] is False
    assert "overlaps k=2" in summary["best_text"]
    assert len(summary["points"]) == 3


def test_summary_of_nothing_measured():
    summary = sweep.summarize_sweep(fake_report([(2, "constant", None, None, None)]))
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
