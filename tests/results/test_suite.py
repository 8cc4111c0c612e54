"""Workloads: Spec-Bench's data, prompts files, the selection, per-category statistics, a suite on tiny models."""

from __future__ import annotations

import csv
import html
import io
import json
import math
import statistics

import pytest

from assistlab.config import LIMITS, BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import InputError
from assistlab.results import suite, suite_inputs
from assistlab.results.suite_inputs import SuiteRequest, parse_prompts, select

# ---------------------------------------------------------------- data and selection


def test_spec_bench_copy_is_complete():
    prompts = suite_inputs.load_spec_bench()
    assert len(prompts) == 480
    counts = {c: sum(p.category == c for p in prompts) for c in suite_inputs.SPEC_BENCH_CATEGORIES}
    assert counts == {**{c: 10 for c in suite_inputs.MT_BENCH_CATEGORIES}, **{c: 80 for c in suite_inputs.SINGLE_TURN_CATEGORIES}}
    assert all(len(p.turns) == 2 for p in prompts if p.category in suite_inputs.MT_BENCH_CATEGORIES)
    assert all(len(p.turns) == 1 for p in prompts if p.category in suite_inputs.SINGLE_TURN_CATEGORIES)
    assert (suite_inputs.DATA_DIR / "LICENSE").read_text().startswith("Apache License")
    assert "hemingkx/Spec-Bench" in (suite_inputs.DATA_DIR / "README.md").read_text()


def test_default_selection_is_one_prompt_per_single_turn_category():
    selection = select(SuiteRequest())
    assert selection.categories == suite_inputs.SINGLE_TURN_CATEGORIES
    assert [i.id for i in selection.items] == ["161", "241", "321", "401", "481"]
    assert "the first 1 per category" in selection.rule


def test_sample_is_reproducible_and_recorded():
    request = SuiteRequest(categories=("qa", "rag"), per_category=3, selection="sample", seed=7)
    first, again = select(request), select(request)
    assert [i.id for i in first.items] == [i.id for i in again.items]
    assert first.to_dict()["seed"] == 7 and first.to_dict()["prompt_ids"] == [i.id for i in first.items]
    other = select(SuiteRequest(categories=("qa", "rag"), per_category=3, selection="sample", seed=8))
    assert [i.id for i in other.items] != [i.id for i in first.items]
    # A category's sample does not depend on which other categories are chosen.
    qa_only = select(SuiteRequest(categories=("qa",), per_category=3, selection="sample", seed=7))
    assert [i.id for i in qa_only.items] == [i.id for i in first.items if i.category == "qa"]
    assert len({i.id for i in first.items}) == 6


def test_both_turns_ask_the_second_after_the_first():
    selection = select(SuiteRequest(categories=("writing", "qa"), per_category=1, turns="both"))
    assert [(i.id, i.turn, len(i.turns)) for i in selection.items] == [("81", 1, 1), ("81.2", 2, 2), ("321", 1, 1)]
    assert "every turn" in selection.rule


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(categories=("poetry",)), "categories: Spec-Bench has no category 'poetry'"),
        (dict(per_category=0), "per_category must be between 1"),
        (dict(per_category="two"), "per_category must be a whole number"),
        (dict(selection="random"), "selection must be one of first, sample"),
        (dict(turns="all"), "turns must be one of first, both"),
        (dict(suite="file"), "file: choose a prompts file"),
        (dict(suite="mmlu"), "suite must be one of"),
    ],
)
def test_suite_request_names_the_field(kwargs, words):
    with pytest.raises(InputError, match=words):
        SuiteRequest(**kwargs)


# ---------------------------------------------------------------- prompts files


def test_each_file_format_loads():
    jsonl = b'{"category": "chat", "prompt": "Hello there"}\n\n{"turns": ["First", "Second"]}\n'
    got = parse_prompts(jsonl, "mine.jsonl")
    assert [(p.category, p.turns, p.line) for p in got] == [
        ("chat", ("Hello there",), 1), (suite_inputs.UNCATEGORIZED, ("First", "Second"), 3)
    ]
    table = 'category,prompt\ncode,"Write a loop\nin Python"\n,Say hi\n'.encode()
    got = parse_prompts(table, "mine.csv")
    assert [(p.category, p.turns, p.line) for p in got] == [
        ("code", ("Write a loop\nin Python",), 2), (suite_inputs.UNCATEGORIZED, ("Say hi",), 4)
    ]
    text = "\ufeffOne prompt\nover two lines\n\n\n\nAnother one\n".encode()
    got = parse_prompts(text, "mine.txt")
    assert [(p.turns, p.line) for p in got] == [(("One prompt\nover two lines",), 1), (("Another one",), 6)]
    # No extension: JSON lines when it starts with '{', else plain text.
    assert parse_prompts(b'{"prompt": "x"}', "upload")[0].turns == ("x",)
    assert parse_prompts(b"just text", "upload")[0].turns == ("just text",)


def test_a_file_selects_every_prompt_by_default(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps({"category": c, "prompt": f"{c} {i}"}) for c in "ab" for i in range(3)))
    selection = select(SuiteRequest(suite="file", file=str(path)))
    assert selection.categories == ("a", "b") and len(selection.items) == 6
    assert selection.name == "p.jsonl" and "every prompt" in selection.rule
    two = select(SuiteRequest(suite="file", file=str(path), categories="b", per_category=2))
    assert [i.text for i in two.items] == ["b 0", "b 1"]
    with pytest.raises(InputError, match="categories: p.jsonl has no category 'c'; it has a, b"):
        select(SuiteRequest(suite="file", file=str(path), categories="c"))


def _many(n: int) -> bytes:
    return "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(n)).encode()


@pytest.mark.parametrize(
    "name, data, words",
    [
        ("a.txt", b"", "The prompts file is empty"),
        ("a.txt", b"  \n\n ", "The prompts file is empty"),
        ("a.txt", b"PK\x03\x04\x00\x00binary", "is not text"),
        ("a.txt", b"ok\n\xff\xfe bad", r"not UTF-8 text \(line 2"),
        ("a.jsonl", b'{"prompt": "fine"}\n{"prompt": oops}\n', "Line 2 of the prompts file is not valid JSON"),
        ("a.jsonl", b'{"prompt": "fine"}\n\n{"category": "qa"}\n', "Line 3 of the prompts file has no prompt"),
        ("a.jsonl", b'["a list"]\n', "Line 1 of the prompts file must be a JSON object"),
        ("a.jsonl", b'{"prompt": "  "}\n', "Line 1 of the prompts file has an empty prompt"),
        ("a.jsonl", b'{"turns": []}\n', 'Line 1 of the prompts file: "turns" must be a non-empty list'),
        ("a.jsonl", _many(suite_inputs.SUITE_LIMITS["prompts"] + 1), "has 501 prompts; the limit is 500"),
        ("a.jsonl", json.dumps({"prompt": "x" * (LIMITS["prompt_chars"] + 1)}).encode(),
         "The prompt on line 1 of the prompts file has 32,001 characters; the limit is 32,000"),
        ("a.csv", b"question,category\nhi,qa\n", "has no 'prompt' column"),
        ("a.csv", b"prompt,category\nhi,qa\n,qa\n", "Line 3 of the prompts file has no prompt"),
    ],
)
def test_each_bad_file_gets_one_sentence(name, data, words):
    with pytest.raises(InputError, match=words) as caught:
        parse_prompts(data, name)
    message = str(caught.value)
    assert message.endswith(".") and "\n" not in message and "Traceback" not in message


def test_a_file_over_the_size_limit_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setitem(suite_inputs.SUITE_LIMITS, "file_bytes", 100)
    path = tmp_path / "big.txt"
    path.write_text("x" * 200)
    with pytest.raises(InputError, match="the limit is 0 MB|the limit is"):
        suite_inputs.read_prompts_file(path)
    with pytest.raises(InputError, match="Cannot read the prompts file 'missing.txt'"):
        suite_inputs.read_prompts_file(tmp_path / "missing.txt")


# ---------------------------------------------------------------- statistics over prompts


def test_geomean_interval_by_hand():
    s = suite.geomean_interval([1.0, 2.0, 4.0])
    assert s["geomean"] == pytest.approx(2.0) and s["median"] == 2.0 and s["n"] == 3 and s["level"] == 0.95
    # logs 0, ln2, 2 ln2: mean ln2, sd ln2; t(0.975, 2) = 4.303.
    half = 4.303 * math.log(2) / math.sqrt(3)
    assert s["ci_low"] == pytest.approx(2 * math.exp(-half)) and s["ci_high"] == pytest.approx(2 * math.exp(half))
    one = suite.geomean_interval([1.5])
    assert one["geomean"] == pytest.approx(1.5) and one["ci_low"] is None and one["n"] == 1
    assert suite.geomean_interval([])["geomean"] is None


def test_a_workload_runs_a_fixed_count_even_when_careful_was_chosen():
    from assistlab.measure.suite_runner import suite_bench

    careful = BenchRequest(target="t", precision=0.05, max_time_s=300)
    bench = suite_bench(careful, "cpu").resolved("cpu")
    assert (bench.precision, bench.max_time_s, bench.stopping_rule) == (None, None, "fixed")
    assert bench.repeats == suite_inputs.CPU_SUITE_DEFAULTS["repeats"]


def test_t_quantiles_match_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 10, 30, 31, 40, 60, 120, 499):
        assert suite.t_quantile(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), abs=2e-3)


def _entry(*arms):
    return {"prompts": 4, "arms": [
        {"arm": name, "speedup": {"geomean": g, "ci_low": lo, "ci_high": hi, "level": 0.95, "n": 4}}
        for name, g, lo, hi in arms
    ]}


def test_best_sentence_never_calls_a_winner_from_an_interval_holding_one():
    unclear = suite.best_sentence("qa", _entry(("A", 1.3, 0.9, 1.8), ("B", 1.1, 1.02, 1.2)))
    assert "no arm was clearly faster than plain" in unclear and "A at 1.30×" in unclear
    clear = suite.best_sentence("qa", _entry(("A", 1.5, 1.2, 1.8), ("B", 1.1, 0.9, 1.3)))
    assert clear.startswith("qa (4 prompts): A was fastest, 1.50×") and "not clearly ahead of B" in clear
    alone = suite.best_sentence("qa", _entry(("A", 1.5, 1.3, 1.8), ("B", 1.1, 1.0, 1.2)))
    assert "not clearly ahead" not in alone
    slower = suite.best_sentence("qa", _entry(("A", 0.8, 0.7, 0.9), ("B", 0.5, 0.4, 0.6)))
    assert slower.startswith("qa (4 prompts): plain was fastest; every assisted arm was clearly slower")
    assert "the least slow A, 0.80×" in slower
    single = suite.best_sentence("qa", {"prompts": 1, "arms": [
        {"arm": "A", "speedup": {"geomean": 1.4, "ci_low": None, "ci_high": None, "level": 0.95, "n": 1}}]})
    assert "too few prompts to call it clearly faster" in single and "one prompt, so no interval" in single
    # One prompt where every arm was slower: plain is named the fastest, not the least slow arm.
    behind = suite.best_sentence("qa", {"prompts": 1, "arms": [
        {"arm": "A", "speedup": {"geomean": 0.86, "ci_low": None, "ci_high": None, "level": 0.95, "n": 1}}]})
    assert behind.startswith("qa (1 prompt): plain was fastest; every assisted arm was slower, the least slow A at 0.86×")
    assert "A was fastest" not in behind


# ---------------------------------------------------------------- a suite on tiny models


@pytest.fixture(scope="module")
def tiny_suite(models_dir, store, tmp_path_factory):
    """Two categories of two prompts, one too long for the tiny target's 512-token context."""
    from assistlab.measure import suite_runner

    path = tmp_path_factory.mktemp("suite") / "mine.jsonl"
    long_prompt = " ".join(["speculative decoding lets a small model draft tokens"] * 120)
    rows = [
        {"category": "short", "prompt": "the quick brown fox"},
        {"category": "short", "prompt": "deep learning is a field"},
        {"category": "chat", "turns": ["write me a long essay", "and now a short one"]},
        {"category": "chat", "prompt": long_prompt},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    selection = select(SuiteRequest(suite="file", file=str(path), turns="both"))
    bench = BenchRequest(
        target="target", arms=(ArmSpec("assistant", "target-copy"),), max_new_tokens=6, repeats=2, warmup=1
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
        events = list(suite_runner.run_suite(bench, selection, store))
    return events


def test_suite_warms_up_once_and_measures_every_prompt_that_fits(tiny_suite):
    warmups = [e for e in tiny_suite if e.message.startswith("Warm-up")]
    assert len(warmups) == 2  # one per arm for the whole suite, not per prompt
    final = tiny_suite[-1]
    assert final.kind == "done" and final.report.status == "complete"
    statuses = {r.item.id: r.status for r in final.report.results}
    assert statuses == {"1": "measured", "2": "measured", "3": "measured", "3.2": "measured", "4": "skipped"}
    data = final.report.to_dict()
    skipped = data["suite"]["skipped"]
    assert len(skipped) == 1 and skipped[0]["id"] == "4"
    assert "reads at most 512 tokens" in skipped[0]["reason"] and "target" in skipped[0]["reason"]
    progress = [e for e in tiny_suite if e.kind == "run" and "Prompt" in e.message]
    assert progress[0].message.startswith("Prompt 1 of 5 (1, short)") and progress[-1].prompt == 4
    assert all(e.eta_s is not None and e.eta_s >= 0 for e in progress)
    # The 16 counted runs and the one warm-up's 2 runs: a workload's runs done never go back (issue 36).
    assert final.done == final.total == 4 * 2 * 2 + 2


def test_every_workload_line_has_the_form_of_a_comparison_line_and_a_time_left(tiny_suite):
    """Most workload progress lines used to show no time left, and in another form than a comparison's: now every
    line with a run count names the prompt, the run (in the comparison's words), the runs done, the time so far
    and the time left, a labelled rough estimate until the first run has been timed."""
    from assistlab.views.progress import progress_text

    counted = [e for e in tiny_suite if e.total and e.kind != "done"]
    assert counted and all(e.eta_s is not None and e.elapsed_s is not None for e in counted)
    first_run = next(i for i, e in enumerate(tiny_suite) if e.kind == "run")
    assert all(e.eta_rough for e in tiny_suite[:first_run] if e.total)
    assert not any(e.eta_rough for e in tiny_suite[first_run:])
    for event in counted:
        label = progress_text(event)
        assert "so far, " in label and ("left" in label or "until a run has been timed" in label), label
        if event.step:
            where, step, runs, _timing = label.split(" · ")
            assert where.startswith(f"Prompt {event.prompt} of 5 (") and where == event.where
            took = f"{event.step}, took {event.took_s:.2f} s" if event.took_s is not None else None
            assert step in (event.step, took), (label, event.kind, event.message)
            assert step.startswith(("Warm-up of ", "Repetition "))
            assert runs == f"{event.done} of {event.total} runs done"
    assert progress_text(tiny_suite[-1]).startswith("Complete: 4 of 5 prompts measured")


def test_each_measured_prompt_is_marked_done_after_its_last_run(tiny_suite):
    """The page redraws a workload on these events only: once per prompt, not after every run."""
    done = [(i, e) for i, e in enumerate(tiny_suite) if e.prompt_done]
    assert [e.prompt for _, e in done] == [1, 2, 3, 4]  # the fifth prompt was skipped
    for i, event in done:
        runs = [e.prompt for e in tiny_suite if e.kind == "run" and not e.message.startswith("Warm-up")]
        assert event.prompt in runs
        assert all(e.prompt > event.prompt for e in tiny_suite[i + 1:] if e.kind == "run")
        assert any(e.kind == "run" and e.prompt == event.prompt for e in tiny_suite[:i])


def test_second_turn_follows_the_targets_own_first_answer(tiny_suite):
    results = {r.item.id: r for r in tiny_suite[-1].report.results}
    first, second = results["3"], results["3.2"]
    assert second.item.turns == ("write me a long essay", "and now a short one")
    # The second conversation holds the first prompt, the plain answer (6 tokens) and the new turn.
    assert second.prompt_tokens > first.prompt_tokens + 6


def test_per_category_figures_equal_those_computed_from_the_runs(tiny_suite):
    report = tiny_suite[-1].report
    data = report.to_dict()
    arm = data["arms"][0]
    by_category: dict[str, list] = {}
    for result in report.results:
        if result.status == "measured":
            by_category.setdefault(result.item.category, []).append(result.report)
    for entry in data["suite"]["categories"]:
        reports = by_category[entry["category"]]
        speedups, drafted, accepted, steps = [], 0, 0, 0
        for r in reports:
            plain = {run.repetition: run.latency_s for run in r.runs if run.arm == 0}
            ratios = [plain[run.repetition] / run.latency_s for run in r.runs if run.arm == 1]
            speedups.append(statistics.median(ratios))
            for run in r.runs:
                if run.arm == 1:
                    drafted += sum(run.drafted)
                    accepted += sum(run.accepted)
                    steps += len(run.drafted)
        figures = entry["arms"][0]
        assert figures["arm"] == arm and entry["prompts"] == figures["prompts"] == len(reports)
        geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        assert figures["speedup"]["geomean"] == pytest.approx(geomean)
        assert figures["acceptance_rate"] == pytest.approx(accepted / drafted)
        assert figures["mean_accepted_tokens"] == pytest.approx(1 + accepted / steps)
        assert figures["identical"] == len(reports)  # greedy: assisted text equals plain
        assert figures["acceptance_rate"] == pytest.approx(1.0)  # the assistant is a copy of the target
    assert [e["category"] for e in data["suite"]["categories"]] == ["short", "chat"]
    assert data["suite"]["overall"]["prompts"] == 4
    for entry in data["suite"]["categories"]:
        assert set(entry["arms"][0]["speedup"]) >= {"median", "ci_low", "ci_high", "level"}


def test_suite_report_json_and_csv(tiny_suite):
    report = tiny_suite[-1].report
    data = json.loads(report.to_json())
    suite_data = data["suite"]
    assert set(suite_data) >= {"name", "source", "rule", "selection", "categories", "overall", "prompts"}
    assert suite_data["name"] == "mine.jsonl" and suite_data["turns"] == "both"
    row = next(p for p in suite_data["prompts"] if p["id"] == "1")
    assert set(row["arms"][0]) >= {"speedup", "acceptance_rate", "tokens_per_forward", "identical"}
    assert [r["name"] for r in row["runs"]] == ["plain", data["arms"][0]]
    assisted = row["runs"][1]
    assert len(assisted["token_origins"]) == 6 and "".join(t for t, _ in assisted["text_segments"]) == assisted["text"]
    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert len(rows) == 4 * 2 * 2
    assert {(r["prompt_id"], r["category"]) for r in rows} == {("1", "short"), ("2", "short"), ("3", "chat"), ("3.2", "chat")}


def test_stop_keeps_what_was_measured(models_dir, store, monkeypatch):
    from assistlab.measure import suite_runner

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    selection = select(SuiteRequest(suite="file", file="x.txt"), parse_prompts(b"one\n\ntwo\n\nthree", "x.txt"))
    bench = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), max_new_tokens=4, repeats=1, warmup=0)
    runs = []

    def stop() -> bool:
        return len(runs) >= 3  # after the first prompt and half of the second

    for event in suite_runner.run_suite(bench, selection, store, should_stop=stop):
        if event.kind == "run":
            runs.append(event)
    report = event.report
    # The half-measured prompt was started, not finished (issue 36 item 6): never "after 2 of 3 prompts".
    assert event.kind == "done" and report.status == "stopped"
    assert report.message.startswith("Stopped: 2 of 3 prompts started, 1 finished;"), report.message
    assert [r.status for r in report.results] == ["measured", "stopped", "not run"]
    data = report.to_dict()
    assert data["suite"]["overall"]["arms"][0]["prompts"] == 1  # the half-measured prompt has no pair yet
    # The counts the chart's labels and the sentences show agree: one prompt measured.
    assert data["suite"]["overall"]["prompts"] == 1 and data["suite"]["overall"]["best"].startswith("Overall (1 prompt)")
    from assistlab.views import charts
    labels = list(charts.suite_figure(data).layout.yaxis.categoryarray)
    assert labels and all(label.endswith(" (1)") for label in labels), labels
    assert data["answer"] == data["suite"]["overall"]["best"]


def test_a_stop_ends_a_suite_run_within_a_step_and_drops_the_cut_run(models_dir, store, monkeypatch):
    from assistlab.measure import suite_runner

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    selection = select(SuiteRequest(suite="file", file="x.txt"), parse_prompts(b"one\n\ntwo", "x.txt"))
    bench = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), max_new_tokens=200, repeats=2, warmup=0)
    calls = []

    def stop() -> bool:  # the per-step criterion asks too: true from the 10th question on, inside the first run
        calls.append(1)
        return len(calls) >= 10

    for event in suite_runner.run_suite(bench, selection, store, should_stop=stop):
        pass
    report = event.report
    assert event.kind == "done" and report.status == "stopped"
    # The stop came inside the first 200-token run: it ended there, and the cut run is not kept.
    assert [run for r in report.results if r.report is not None for run in r.report.runs] == []
    assert len(calls) < 40


def test_each_prompt_rotates_the_arms_as_a_comparison_does(tiny_suite):
    report = tiny_suite[-1].report
    measured = [r for r in report.results if r.status == "measured"]
    assert len(measured) == 4
    for result in measured:
        assert result.report.orders == [[0, 1], [1, 0]]  # plain first, then the assistant first
        runs = {(run.repetition, run.arm): run.position for run in result.report.runs}
        assert runs == {(0, 0): 0, (0, 1): 1, (1, 1): 0, (1, 0): 1}
    rows = {row["id"]: row for row in report.to_dict()["suite"]["prompts"]}
    assert rows["2"]["orders"] == [[0, 1], [1, 0]]
    assert measured[0].report.warmup_orders == [[0, 1]]  # the suite's one warm-up ran on the first prompt
    assert all(r.report.warmup_orders == [] for r in measured[1:])


def test_a_suite_watches_every_counted_run_for_others_use(tiny_suite):
    from assistlab.measure import contention

    data = tiny_suite[-1].report.to_dict()
    record = data["environment"]["contention"]
    assert record["windows"] == 4 * 2 * 2  # every counted run of every prompt; warm-up runs are not watched
    timed = sum(sum(run["latencies_s"]) for row in data["suite"]["prompts"] for run in row.get("runs", []))
    assert timed <= record["timed_seconds"] <= timed + 1.0
    assert data["warnings"] == contention.warnings(record)  # whatever this machine's load was meanwhile


def _watched(monkeypatch, others_cores: float) -> None:
    """Every contention.Monitor reads a machine where others use `others_cores` of its 2 cores all along."""
    import itertools

    from assistlab.measure import contention

    real = contention.Monitor

    def monitor(device=None):
        ticks = itertools.count()

        def read():
            t = float(next(ticks))  # one second between the reads around each run
            return contention.CpuReading(t, others_cores * t, 0.0, 0.0)

        return real(device, read_cpu=read, cpu_count=2)

    monkeypatch.setattr(contention, "Monitor", monitor)


def _three_prompts(models_dir, store, monkeypatch):
    from assistlab.measure import suite_runner

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    selection = select(SuiteRequest(suite="file", file="x.txt"), parse_prompts(b"one\n\ntwo\n\nthree", "x.txt"))
    bench = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), max_new_tokens=4, repeats=1, warmup=1)
    return suite_runner.run_suite_to_report(bench, selection, store)


def test_an_idle_machine_gives_a_suite_no_warning(models_dir, store, monkeypatch):
    from assistlab.cli import format_suite_table
    from assistlab.ui import suite_tab

    _watched(monkeypatch, 0.0)
    report = _three_prompts(models_dir, store, monkeypatch)
    # One repetition per prompt: the order rotates over the suite, not within each prompt only.
    assert [r.report.orders for r in report.results] == [[[0, 1]], [[1, 0]], [[0, 1]]]
    data = report.to_dict()
    assert data["environment"]["contention"]["windows"] == 3 * 2
    assert data["environment"]["contention"]["other_cpu_cores"] == 0.0 and data["warnings"] == []
    assert "al-warning" not in suite_tab.summary_html(data) and "Warning" not in format_suite_table(data)
    assert suite.summary_sentences(data)[-1] == data["suite"]["overall"]["best"]


def test_a_busy_machine_is_named_in_a_suite_where_a_comparison_names_it(models_dir, store, monkeypatch):
    from assistlab.cli import format_suite_table
    from assistlab.ui import suite_tab

    _watched(monkeypatch, 1.5)
    data = _three_prompts(models_dir, store, monkeypatch).to_dict()
    assert data["environment"]["contention"]["other_cpu_cores"] == pytest.approx(1.5)
    [warning] = data["warnings"]
    assert warning["code"] == "busy-machine" and "1.50 CPU cores" in warning["message"]
    assert "may not hold" in warning["message"]
    shown = suite_tab.summary_html(data)  # one line, the warning's own sentence one click away
    assert '<p class="al-warning" role="alert">⚠ Measured on a busy machine (others used ' in shown
    assert f"<p>{html.escape(warning['message'])}</p></details>" in shown
    assert f"Warning (busy-machine): {warning['message']}" in format_suite_table(data)
    assert suite.summary_sentences(data)[-1] == warning["message"]


def _failing(monkeypatch, fail: dict) -> list:
    """timing.timed_generate raising on the calls numbered in `fail` (1-based, warm-up included): {call: exc}."""
    from assistlab.engines.transformers import timing

    real, calls = timing.timed_generate, []

    def timed_generate(target, inputs, kwargs, clock, assisted, monitor=None):
        calls.append(assisted)
        if len(calls) in fail:
            raise fail[len(calls)]
        return real(target, inputs, kwargs, clock, assisted, monitor)

    monkeypatch.setattr(timing, "timed_generate", timed_generate)
    return calls


def test_a_failure_is_marked_on_its_own_prompt_and_the_suite_goes_on(models_dir, store, monkeypatch):
    from assistlab.measure import suite_runner

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    # Runs in order: prompt 1 plain, assisted; prompt 2 assisted, plain (rotated); prompt 3 plain, assisted.
    calls = _failing(monkeypatch, {2: RuntimeError("drafter broke"), 4: MemoryError()})
    selection = select(SuiteRequest(suite="file", file="x.txt"), parse_prompts(b"one\n\ntwo\n\nthree", "x.txt"))
    bench = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), max_new_tokens=4, repeats=1, warmup=0)
    events = list(suite_runner.run_suite(bench, selection, store))
    assert calls == [False, True, True, False, False, True]
    report = events[-1].report
    assert [r.status for r in report.results] == ["measured", "failed", "measured"]
    first, second, third = (r.report for r in report.results)
    assert first.arms[1].error == "failed: RuntimeError: drafter broke"
    assert second.arms[1].error is None and third.arms[1].error is None  # not carried to later prompts
    assert report.results[1].reason.startswith("The plain (unassisted) run ran out of memory")
    assert len(third.runs) == 2 and report.status == "complete"
    assert report.message == "Complete: 2 of 3 prompts measured, 1 failed (see the reasons)."
    assert events[-1].done == events[-1].total == 3 * 2  # the failed prompt's two runs were both attempted


def test_a_failed_warm_up_fails_its_prompt_and_the_next_prompt_warms_up(models_dir, store, monkeypatch):
    from assistlab.cli import format_suite_table
    from assistlab.measure import suite_runner

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    calls = _failing(monkeypatch, {1: MemoryError(), 3: RuntimeError("drafter broke")})
    selection = select(SuiteRequest(suite="file", file="x.txt"), parse_prompts(b"one\n\ntwo\n\nthree", "x.txt"))
    bench = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), max_new_tokens=4, repeats=1, warmup=1)
    events = list(suite_runner.run_suite(bench, selection, store))
    # Prompt 1: its plain warm-up fails. Prompt 2: warm-up (plain, assisted fails), then plain only.
    assert calls == [False, False, True, False, False]
    report = events[-1].report
    assert [r.status for r in report.results] == ["failed", "measured", "measured"]
    assert [r.report.warmup_orders for r in report.results] == [[[0, 1]], [[0, 1]], []]
    # An arm that failed its warm-up is left out of every later prompt, as before.
    assert [r.report.arms[1].error for r in report.results[1:]] == ["failed: RuntimeError: drafter broke"] * 2
    # The counted run slots of prompts 2 and 3 (the failed arm's too) and the 3 warm-up runs that ran (prompt 1's
    # failed plain one, prompt 2's two): a workload's runs done never go back, a failed warm-up's either (issue 36).
    assert events[-1].done == events[-1].total == 2 * 2 + 3
    table = format_suite_table(report.to_dict())
    assert "failed 1 (uncategorized): The plain (unassisted) run ran out of memory" in table


def test_a_suite_waits_for_a_bundled_conversion_before_its_first_run(models_dir, store, monkeypatch):
    """The app's background conversion of a bundled model would take CPU from every timed run: a suite waits
    for it, saying so with its time left, as a single comparison does."""
    from assistlab.engines import base
    from assistlab.engines.transformers import bundled
    from assistlab.measure import suite_runner

    class Converting:
        model = bundled.lookup("bundled:smollm2-135m-instruct")
        step = "Writing safetensors..."

        def left(self):
            return 12.0

    checks = []

    def under_way(root=None):
        checks.append(len(runs))
        return [Converting()] if len(checks) <= 2 else []

    monkeypatch.setattr(bundled, "conversions_under_way", under_way)
    monkeypatch.setattr(base, "HEARTBEAT_S", 0.01)
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    selection = select(SuiteRequest(suite="file", file="x.txt"), parse_prompts(b"one\n\ntwo", "x.txt"))
    bench = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), max_new_tokens=4, repeats=1, warmup=0)
    runs, waits = [], []
    for event in suite_runner.run_suite(bench, selection, store):
        if event.kind == "run":
            runs.append(event)
        elif "Waiting for the conversion" in event.message:
            waits.append(event)
    assert len(waits) == 2 and not any(checks[:2]), "the waiting came before the first timed run"
    assert "SmolLM2" in waits[0].message and waits[0].eta_s == 12.0
    assert event.kind == "done" and event.report.status != "stopped" and len(runs) == 4


def test_a_prompt_with_no_speedup_yet_is_not_counted_in_its_category():
    """Issue 36 item 6: a label 'summary (1)' beside 'summary: nothing measured yet' disagreed: a prompt whose
    runs gave no speedup yet (plain ran, the assistant not) is not counted among a category's prompts."""
    from assistlab.results.suite import aggregate, best_sentence

    figures = {"drafted": 0, "accepted": 0, "steps": 0, "identical": None}
    ran = {"arms": [{"arm": "a", "speedup": 1.3, **figures}]}
    waiting = {"arms": [{"arm": "a", "speedup": None, **figures}]}
    assert aggregate([waiting], ["a"])["prompts"] == 0
    assert best_sentence("summary", aggregate([waiting], ["a"])) == "summary (0 prompts): nothing measured yet."
    both = aggregate([ran, waiting], ["a"])
    assert both["prompts"] == 1 and both["arms"][0]["prompts"] == 1
    assert best_sentence("overall", both).startswith("overall (1 prompt): ")
