"""The command line: exit codes, the table, and the JSON/CSV it writes."""

import csv
import json
import re

import pytest
from commandline import cli
from transformers import GenerationConfig


@pytest.mark.slow
def test_bench_writes_a_complete_report(models_dir, tmp_path):
    out_json, out_csv = tmp_path / "r.json", tmp_path / "r.csv"
    result = cli(
        "bench", "--target", "target", "--assistant", "assistant-other", "--max-new-tokens", "8",
        "--repeats", "2", "--warmup", "1", "--json", str(out_json), "--csv", str(out_csv),
        models_dir=models_dir,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    table = result.stdout
    assert "plain" in table and "universal: assistant-other (transformers defaults)" in table
    assert "prompt-lookup (k=10)" in table
    assert "num_assistant_tokens 20 (transformers default)" in table  # the settings line, with their sources
    assert "Repetitions: a fixed 2 asked for; 2 in " in table
    assert "×" in table and "outputs identical" in table
    # The table's abbreviations are spelled out under it, and progress names each step with its times.
    assert "TTFT: time to the first new token" in table and "tok/fwd: new tokens per target forward pass" in table
    # The page's progress lines, word for word (one form for every line: step · runs done · times).
    assert "Warm-up of universal: assistant-other (transformers defaults) (not counted) · " in result.stderr
    assert ("Measuring the drafting cost, 1 of 2: universal: assistant-other (transformers defaults) (untimed) · "
            in result.stderr)
    assert re.search(r"Repetition 1 of 2: plain, took \d+\.\d\d s · \d+ of 9 runs done · ", result.stderr)
    assert "so far, about" in result.stderr
    report = json.loads(out_json.read_text())
    assert report["schema"] == 1
    assert set(report) >= {"request", "environment", "arms", "comparison"}
    assert set(report["environment"]) >= {"device", "dtype", "torch", "transformers", "assistlab", "python", "cpu_model"}
    assert [a["strategy"] for a in report["arms"]] == ["plain", "universal", "prompt-lookup"]
    for arm in report["arms"]:
        assert set(arm) >= {"name", "strategy", "latencies_s", "new_tokens", "tokens_per_s", "ttft_s", "text", "token_ids"}
        assert len(arm["latencies_s"]) == 2 and arm["new_tokens"] == [8, 8]
    for arm in report["arms"][1:]:
        assert len(arm["drafted_tokens"]) == 2 and len(arm["accepted_tokens"]) == 2
    for entry in report["comparison"]:
        assert set(entry["speedup"]) >= {"median", "ci_low", "ci_high", "level", "n", "interval"}
        # Two repetitions: a range of 2 runs at its true 50%, never a verdict.
        assert (entry["speedup"]["level"], entry["speedup"]["interval"]) == (0.5, "range")
        assert set(entry) >= {"acceptance_rate", "outputs_identical", "first_difference"}
    assert table.count("range of 2 runs") == 2 and "95%" not in table and "bootstrap" not in table
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 6 and {r["arm"] for r in rows} == {a["name"] for a in report["arms"]}


@pytest.mark.slow  # a `python -m assistlab` process per case: seconds each
@pytest.mark.parametrize(
    "args, words",
    [
        (["bench", "--repeats", "0"], "repeats must be between 1"),
        (["bench", "--max-new-tokens", "lots"], "max_new_tokens must be a whole number"),
        (["bench", "--max-new-tokens", "999999"], "max_new_tokens must be between"),
        (["bench", "--prompt", "  "], "prompt is empty"),
        (["bench", "--target", "/etc"], "outside the allowed models folder"),
        (["bench", "--target", "../../etc"], "outside the allowed models folder"),
        (["bench", "--target", "not a model"], "is not a hub id"),
        (["bench", "--strategy", "early-exit", "--target", "target"], "early_exit_layer is required"),
        (["bench", "--prompt-file", "/nonexistent/prompt.txt"], "Cannot read the prompt file"),
        (["bench", "--strategy", "medusa"], "invalid choice"),
        (["bench", "--bogus"], "unrecognized arguments"),
        (["nothing"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words, models_dir):
    result = cli(*args, models_dir=models_dir)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error:") and words in lines[-1], result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_presets_lists_the_reference_pair():
    result = cli("presets")
    assert result.returncode == 0
    assert "google/gemma-3-27b-it" in result.stdout and "Qwen/Qwen2.5-0.5B-Instruct" in result.stdout
    # each preset says whether it fits this machine, memory of what, and what HF_TOKEN is where it is needed
    assert result.stdout.count(" [runs here") + result.stdout.count(" [too big for this machine]") == 10
    assert "GB of RAM" in result.stdout and "huggingface.co/settings/tokens" in result.stdout


@pytest.mark.slow
def test_sweep_and_cost_model_on_the_command_line(models_dir, tmp_path):
    out_json = tmp_path / "sweep.json"
    result = cli(
        "bench", "--target", "target", "--assistant", "target-copy", "--max-new-tokens", "8", "--repeats", "2",
        "--warmup", "0", "--sweep", "num_assistant_tokens", "--sweep-values", "2,4", "--json", str(out_json),
        "--quiet", models_dir=models_dir,
    )
    assert result.returncode == 0, result.stderr
    assert "why: alpha 1.00" in result.stdout  # a copy of the target is always accepted
    report = json.loads(out_json.read_text())
    beat_plain = report["sweep"]["best"]["speedup"]["median"] >= 1.0  # tiny models on a CPU: either may happen
    assert ("Sweep of num_assistant_tokens: " + ("Best:" if beat_plain else "No setting beat plain. Least slow:")
            in result.stdout)
    # the adaptive point starts from transformers' default draft length, the base arm having set none
    default_k = GenerationConfig._get_default_generation_params()["num_assistant_tokens"]
    assert [p["value"] for p in report["sweep"]["points"]] == [2, 4, default_k]
    assert [p["schedule"] for p in report["sweep"]["points"]] == ["constant", "constant", "heuristic"]
    assert {r["arm"] for r in report["ranking"] if not r["plain"]} == {c["arm"] for c in report["comparison"]}
    assert [r["arm"] for r in report["ranking"] if r["plain"]] == ["plain"]


def test_stop_names_each_rule_by_what_it_promises():
    """--stop likely|sure|careful are the request's rules 'likely', 'clear' and 'precision', in the same words as
    the page and the API; a rule that cannot go with another option is refused in one sentence naming both."""
    from assistlab.cli.parser import build_parser, request_from_args
    from assistlab.config import CAREFUL_PRECISION, RULE_WORDS
    from assistlab.errors import InputError

    parser = build_parser()

    def request(*args):
        return request_from_args(parser.parse_args(["bench", *args]))

    for name, rule, _words in RULE_WORDS:
        assert request("--stop", name).stopping_rule == rule
    assert request("--stop", "careful").precision == CAREFUL_PRECISION
    assert request("--stop", "careful", "--precision", "0.1").precision == 0.1
    capped = request("--stop", "likely", "--repeats", "9")
    assert (capped.stopping_rule, capped.repeats) == ("likely", 9)  # the count is its most
    assert request("--repeats", "9").stopping_rule == "fixed"  # without --stop a count runs exactly
    assert request().stopping_rule == "clear"  # sure stays the default
    with pytest.raises(InputError, match="--stop likely .* --precision"):
        request("--stop", "likely", "--precision", "0.1")
    with pytest.raises(InputError, match="--stop likely times one prompt"):
        request("--stop", "likely", "--suite", "spec-bench")
    help_text = " ".join(parser._subparsers._group_actions[0].choices["bench"].format_help().split())
    for _name, _rule, words in RULE_WORDS:
        assert " ".join(words.split()) in help_text
