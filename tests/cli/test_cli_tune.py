"""`python -m assistlab tune` on the tiny models: the sentence first, every candidate, the deploy snippet and the
bench command, the report's tune block; and one-sentence refusals of a --candidates that names nothing real."""

import json
import re

import pytest
from commandline import cli


@pytest.mark.slow
def test_tune_prints_its_sentence_first_and_writes_the_tune_block(models_dir, tmp_path):
    out = tmp_path / "tune.json"
    result = cli("tune", "--target", "target", "--assistant", "assistant-same", "--candidates",
                 "prompt-lookup:prompt_lookup_num_tokens=2,4; auto:num_assistant_tokens=default,3",
                 "--prompt", "the quick brown fox jumps over the lazy dog", "--max-new-tokens", "6",
                 "--repeats", "4", "--warmup", "0", "--device", "cpu", "--json", str(out), models_dir=models_dir)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(("Use ", "Not settled within the budget; best so far: ")), first
    assert re.search(r"\d\.\d\d× (faster than plain|the speed of plain)", first), first
    assert "Searching 4 candidates: " in result.stderr
    assert "still in: " in result.stderr  # the progress line names the candidates still in
    report = json.loads(out.read_text())
    tune = report["tune"]
    assert [c["arm"] for c in tune["candidates"]] == [
        "assistant: assistant-same (transformers defaults)", "assistant: assistant-same (k=3)",
        "prompt-lookup (k=2)", "prompt-lookup (k=4)"]
    assert tune["sentence"] == first and tune["assumption"].startswith("candidates leave on the likely rule")
    rec = tune["recommendation"]
    assert rec["arm"] in {c["arm"] for c in tune["candidates"]}
    assert rec["bench_command"] in result.stdout and tune["deploy"]["snippet"] in result.stdout
    # What to deploy, said before its code: the pick only when clearly faster than plain, else plain generation.
    assert tune["deploy"]["sentence"] in result.stdout
    assert tune["deploy"]["plain"] is not (rec["interval"]["ci_low"] is not None and rec["interval"]["ci_low"] > 1.0)
    if tune["deploy"]["plain"]:
        assert "Deploy it" not in result.stdout and "Deploy plain generation: " in result.stdout
    # The pick's interval with its level, as its page and the leaderboard show it.
    assert not rec["interval"]["text"] or rec["interval"]["text"] in first
    assert tune["runs_used"] <= tune["runs_without_elimination"] == 5 * tune["repetitions"]
    # Four repetitions: the budget ends at the search's first and only look, so no confirmation is tried.
    assert tune["confirmed"] is None and tune["confirmed_against"] is None
    assert tune["looks"] == [4] and tune["repetitions"] == 4


@pytest.mark.parametrize("candidates, words", [
    ("prompt-lookup:lookup=3", "prompt-lookup has no setting 'lookup'; its settings: prompt_lookup_num_tokens"),
    ("speculate:k=3", "no family 'speculate'"),
    ("prompt-lookup:prompt_lookup_num_tokens=three", "prompt_lookup_num_tokens takes a whole number, got 'three'"),
    ("prompt-lookup:prompt_lookup_num_tokens=1,2,3,4,5,6,7,8,9", "The search has 9 candidates; at most 8"),
])
def test_a_bad_candidates_text_is_one_sentence_naming_the_field(candidates, words):
    result = cli("tune", "--no-assistants", "--candidates", candidates)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: --candidates") or result.stderr.startswith("error: The search")
    assert words in result.stderr, result.stderr


def test_the_summary_says_to_deploy_plain_and_that_the_budget_was_passed():
    from assistlab.cli.tune import format_summary

    interval = {"median": 0.89, "ci_low": 0.48, "ci_high": 1.76, "level": 0.9916, "interval": "time-uniform",
                "n": 8, "assumption": "", "text": "0.48–1.76×, 99.1% at every look"}
    summary = {
        "sentence": "Not settled within the budget; best so far: prompt lookup with 3 tokens: 0.89× the speed of "
                    "plain, no clear difference (0.48–1.76×, 99.1% at every look).",
        "candidates": [{"arm": "prompt-lookup (k=3)", "speedup": {"median": 0.89}, "interval": interval, "runs": 8,
                        "why": None}],
        "confirmed": None, "settled": False, "outcome": "not settled", "repetitions": 8, "runs_used": 16,
        "runs_without_elimination": 16, "level": 0.95, "assumption": "candidates leave on the likely rule",
        "recommendation": {"bench_command": "python -m assistlab bench --target t"},
        "deploy": {"plain": True, "snippet": "output = target.generate(**inputs, do_sample=False, max_new_tokens=64)",
                   "sentence": "Deploy plain generation: no setting was clearly faster than plain here (best: prompt "
                               "lookup with 3 tokens, 0.89×, 0.48–1.76×, 99.1% at every look)."},
        "budget": {"over": True, "sentence": "The timed runs took 716 s, past the 600 s budget: a repetition "
                                             "already started is finished."},
    }
    text = format_summary(summary)
    lines = text.splitlines()
    assert "Deploy it" not in text and summary["deploy"]["sentence"] in lines
    assert lines[lines.index(summary["deploy"]["sentence"]) + 1] == summary["deploy"]["snippet"]
    assert summary["budget"]["sentence"] in lines
    assert "0.48–1.76×, 99.1% at every look" in lines[3]  # the candidate's row: its one interval with its level
    assert "Re-time the best candidate:" in lines
