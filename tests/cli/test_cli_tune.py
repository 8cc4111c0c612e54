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
    assert rec["bench_command"] in result.stdout and rec["deploy"]["snippet"] in result.stdout
    assert tune["runs_used"] <= tune["runs_without_elimination"] == 5 * tune["repetitions"]
    assert tune["confirmed"] in (True, False, None)


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
