"""The page speaks plainly: the answer first, plain ranked among the arms, every symbol explained where it appears."""

from __future__ import annotations

import re

import pytest

from assistlab.config import CONTINUATION_PROMPT, BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure.runner import run_to_report
from assistlab.views import charts, panels, texts


def _arm(name: str, strategy: str, speedup: float | None, low: float | None = None, high: float | None = None):
    n = 5
    arm = {"name": name, "strategy": strategy, "latencies_s": [1.0] * n, "error": None,
           "latency_summary": {"n": n, "median": 1.0, "iqr": 0.01}}
    # An order-statistic interval of 5 runs, as stats.speedup gives it: a real interval a verdict may rest on.
    interval = {"level": 0.9375, "interval": "order-statistic"} if low is not None else {}
    comp = {"arm": name, "speedup": {"median": speedup, "ci_low": low, "ci_high": high, "n": n, **interval},
            "acceptance_rate": 0.5, "outputs_identical": True, "first_difference": None}
    return arm, comp


def _report(*arms, status="complete") -> dict:
    plain = {"name": "plain", "strategy": "plain", "latencies_s": [1.0] * 5, "error": None,
             "latency_summary": {"n": 5, "median": 1.0, "iqr": 0.01}}
    ranking = sorted(({"arm": c["arm"], "speedup": c["speedup"]["median"], "ci_low": c["speedup"]["ci_low"],
                       "ci_high": c["speedup"]["ci_high"]} for _a, c in arms), key=lambda r: -r["speedup"])
    for rank, row in enumerate(ranking, start=1):
        row["rank"] = rank  # what ranking.rank_arms gives: assisted arms only, fastest first
    return {"status": status, "request": {"do_sample": False}, "counted_repetitions": 5, "planned_repetitions": 5,
            "arms": [plain, *[a for a, _c in arms]], "comparison": [c for _a, c in arms], "ranking": ranking}


SLOW = _arm("universal: small (k=5)", "universal", 0.62, 0.55, 0.70)
SLOWER = _arm("prompt-lookup (k=10)", "prompt-lookup", 0.91, 0.85, 0.97)
FAST = _arm("assistant: small (k=5)", "assistant", 1.25, 1.15, 1.40)
UNCLEAR = _arm("assistant: other (k=5)", "assistant", 1.04, 0.95, 1.12)


def test_when_nothing_beats_plain_the_page_says_so_first():
    report = _report(SLOW, SLOWER)
    assert charts.lead_sentence(report) == "Plain generation was fastest here: no assistant helped."
    headline = panels.headline_html(report)
    paragraphs = re.findall(r"<p[^>]*>(.*?)</p>", headline)
    assert paragraphs[0] == "Plain generation was fastest here: no assistant helped."


def test_the_fastest_arm_leads_in_plain_words_when_it_is_clearly_faster():
    lead = charts.lead_sentence(_report(FAST, SLOW))
    assert lead == ("assistant: small (k=5) was fastest: the same text took 20% less time than plain generation "
                    "(the target model on its own).")


def test_an_arm_ahead_only_within_the_noise_is_not_called_fastest():
    lead = charts.lead_sentence(_report(UNCLEAR, SLOW))
    assert lead.startswith("No assistant was clearly faster than plain generation here")
    assert charts.lead_sentence(_report(UNCLEAR, status="running")).startswith("So far: ")
    assert charts.lead_sentence({"arms": [], "comparison": []}) is None


def test_a_range_of_too_few_runs_names_no_arm_faster_or_slower():
    few = {"level": 0.75, "interval": "range", "n": 3}
    fast, slow = (({**a}, {**c, "speedup": {**c["speedup"], **few}}) for a, c in (FAST, SLOW))
    for arms in ((fast,), (slow,), (fast, slow)):
        lead = charts.lead_sentence(_report(*arms))
        assert lead == charts.TOO_FEW_TO_TELL, arms
        assert not any(word in lead for word in ("fastest", "faster", "slower"))
    # An arm clearly faster on a real interval still leads, whatever another arm's few runs show.
    assert charts.lead_sentence(_report(FAST, slow)).startswith("assistant: small (k=5) was fastest")
    assert charts.lead_sentence(_report(fast, status="running")) == "So far: " + charts.TOO_FEW_TO_TELL


def _ranking_rows(html: str) -> list[list[str]]:
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html.split("<tbody>")[1])
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row)] for row in rows]


def test_an_arm_slower_than_plain_is_never_ranked_first():
    rows = _ranking_rows(panels.ranking_html(_report(SLOW, SLOWER)))
    assert [(r[0], r[1]) for r in rows] == [("1", "plain (no assistant)"), ("2", "prompt-lookup (k=10)"),
                                            ("3", "universal: small (k=5)")]
    assert rows[0][2] == "1× (baseline)"
    rows = _ranking_rows(panels.ranking_html(_report(FAST, SLOW)))
    assert [r[1] for r in rows] == ["assistant: small (k=5)", "plain (no assistant)", "universal: small (k=5)"]
    assert [r[0] for r in rows] == ["1", "2", "3"]


def _titles(html: str) -> dict[str, str]:
    """Each explained word on a panel and its hover text."""
    return {re.sub(r"<[^>]+>", "", shown): title
            for title, shown in re.findall(r'<abbr class="al-term" title="([^"]+)">(.*?)</abbr>', html)}


def test_every_symbol_and_abbreviation_has_plain_words_where_it_appears(report_dict):
    numbers = panels.numbers_html(report_dict)
    titles = _titles(numbers)
    for shown in ("IQR", "First token", "Tokens per pass", "Accepted"):
        assert shown in titles and len(titles[shown]) > 40, shown
    assert "What do these words mean?" in numbers and "TTFT" in numbers and "tok/fwd" in numbers
    why = panels.why_html(report_dict)
    assert {"α", "c", "drafted per step"} <= set(_titles(why))  # "k" is the draft length in an arm's name
    for words in ("target forward pass", "bonus token", "α (alpha)"):
        assert f"<dt>{words}</dt>" in why
    ranking = _titles(panels.ranking_html(report_dict))
    assert {"c", "α", "Accepted"} <= set(ranking)
    assert "bonus token" in _titles(texts.origin_legend_html())


@pytest.fixture(scope="module")
def report_dict(models_dir, store) -> dict:
    """A real comparison on tiny models whose target has no chat template."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
        request = BenchRequest(target="assistant-other", arms=(ArmSpec("prompt-lookup", prompt_lookup_num_tokens=2),
                                                               ArmSpec("prompt-lookup")),
                               prompt="write me a long essay", max_new_tokens=6, repeats=2, warmup=0)
        return run_to_report(request, store).to_dict()


def test_a_target_without_a_chat_template_is_said_to_continue_the_text(report_dict):
    env = report_dict["environment"]
    assert env["chat_template"] is False
    assert "has no chat template" in env["prompt_note"] and "continues the prompt as text" in env["prompt_note"]
    assert CONTINUATION_PROMPT in env["prompt_note"]
    assert 'id="al-prompt-note"' in texts.texts_html(report_dict)


def test_a_chat_target_gets_no_note(models_dir, store, monkeypatch):
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), prompt="write me a long essay",
                           max_new_tokens=3, repeats=1, warmup=0)
    env = run_to_report(request, store).to_dict()["environment"]
    assert env["chat_template"] is True and env["prompt_note"] is None


def test_page_messages_name_the_boxes_by_their_labels():
    from assistlab.ui.fields import LABELS, in_page_words

    assert in_page_words("max_new_tokens must be between 1 and 2048, got 0.") == (
        "New tokens per run must be between 1 and 2048, got 0.")
    assert in_page_words("The prompt is 30 tokens; shorten the prompt or lower max_new_tokens.") == (
        "The prompt is 30 tokens; shorten the prompt or lower “New tokens per run”.")
    assert in_page_words("num_assistant_tokens_schedule must be one of constant; got 'x'.").startswith(
        LABELS["schedule"])
    assert in_page_words("The prompt is empty; type a prompt.") == "The prompt is empty; type a prompt."


def test_a_bad_model_or_a_long_prompt_names_its_box_by_the_label_on_the_page():
    from assistlab.config import LIMITS, BenchRequest
    from assistlab.engines import catalog
    from assistlab.engines.transformers.arms import ArmSpec
    from assistlab.errors import InputError
    from assistlab.ui.fields import in_page_words

    with pytest.raises(InputError) as bad_target:
        catalog.canonical_request(BenchRequest(target="not a model!!"))
    assert in_page_words(str(bad_target.value)).startswith("Target model: 'not a model!!' is not a hub id")
    with pytest.raises(InputError) as bad_assistant:
        catalog.canonical_request(BenchRequest(target="org/name", arms=(ArmSpec("assistant", "no good!!"),)))
    assert in_page_words(str(bad_assistant.value)).startswith("Assistant model: 'no good!!' is not a hub id")
    with pytest.raises(InputError) as long_prompt:
        BenchRequest(target="org/name", prompt="x" * 40_000)
    assert in_page_words(str(long_prompt.value)) == (
        f"Prompt: the text has 40,000 characters; the limit is {LIMITS['prompt_chars']:,}. Shorten it.")
    # inside a sentence, a plain word stays a word
    assert in_page_words("Choose a target model.") == "Choose a target model."
def _measured(latencies: dict[str, list[float] | None]) -> dict:
    """A report dict whose speedups come from the runs themselves (stats.speedup), ranked by ranking.rank_arms."""
    from assistlab.results import ranking, stats

    plain = [1.0, 1.01, 0.99, 1.02, 0.98]
    arms = [{"name": "plain", "strategy": "plain", "error": None, "latencies_s": plain}]
    comparison = []
    for name, lat in latencies.items():
        arms.append({"name": name, "strategy": "prompt-lookup", "error": None if lat else "ran out of memory",
                     "latencies_s": lat or []})
        comparison.append({"arm": name, "speedup": stats.speedup(plain[:len(lat or [])], lat or [])})
    report = {"status": "complete", "arms": arms, "comparison": comparison}
    report["ranking"] = ranking.rank_arms(report)
    return report


def test_the_ranking_note_never_puts_an_arm_slower_than_plain_ahead():
    # The run: plain first, prompt lookup at 0.72×, the other assistant failed.
    report = _measured({"prompt-lookup (k=10)": [1.39, 1.40, 1.38, 1.41, 1.37], "universal: small": None})
    assert [row["arm"] for row in report["ranking"]] == ["plain", "prompt-lookup (k=10)", "universal: small"]
    page = panels.ranking_html(report)
    note = re.search(r'id="al-ranking-note">(.*?)</p>', page).group(1)
    assert note == ("Plain generation is clearly the fastest here: no assistant helped (93.7% sure of the one "
                    "run-by-run comparison).")
    # A report saved before plain was ranked (assisted rows only) is ranked again, plain included.
    legacy = {**report, "ranking": [r for r in report["ranking"] if not r["plain"]]}
    legacy["ranking"][0].update(rank=1, clearly_first=False, family_level=None)
    assert panels.ranking_html(legacy) == page


def test_the_ranking_note_says_plain_is_first_without_claiming_more_than_it_knows():
    report = _measured({"a": [1.3, 1.2, 1.25, 1.35, 1.28], "b": [1.1, 1.12, 1.08, 1.11, 1.09]})
    # Two rivals at 5 runs each: 1 - 2 * (1 - 0.9375) = 87.5%, below the 90% a claim needs.
    assert panels.ranking_note(report["ranking"]) == (
        "Plain generation ranks first: no assistant's median beat it; too few runs to be sure of the order.")
    fast = _measured({"a": [0.5, 0.51, 0.49, 0.5, 0.52], "b": [1.1, 1.12, 1.08, 1.11, 1.09]})
    assert [row["arm"] for row in fast["ranking"]] == ["a", "plain", "b"]
    assert panels.ranking_note(fast["ranking"]) == "Ranked by median only: too few runs to be sure of this order."
    one = _measured({"a": [0.5, 0.51, 0.49, 0.5, 0.52], "b": None})  # one rival, plain: the arm's own interval
    assert panels.ranking_note(one["ranking"]) == (
        "a is clearly ahead of every other arm, plain included (93.7% sure of the one run-by-run comparison).")


def test_the_command_line_ranks_plain_too_and_says_the_same_note():
    from assistlab.cli.tables import ranking_lines

    report = _measured({"prompt-lookup (k=10)": [1.39, 1.40, 1.38, 1.41, 1.37], "universal: small": None})
    assert ranking_lines(report) == [
        "Ranking, fastest first: 1. plain (1×, no assistant), 2. prompt-lookup (k=10) (0.72×), universal: small "
        "(failed).",
        "  " + panels.ranking_note(report["ranking"]),
    ]


def test_a_short_run_says_how_many_repetitions_give_an_answer():
    from assistlab.results import stats

    assert stats.fewest_runs() == 5 and stats.order_statistic_level(4, 1) < stats.MIN_LEVEL
    assert "5 repetitions are the fewest that give an interval and an answer" in charts.TOO_FEW_TO_TELL
    # and 5 do: the README's quick look (16 tokens, 5 repetitions) ends in a verdict, not "too few"
    five = _report(_arm("prompt-lookup (k=10)", "prompt-lookup", 0.72, 0.70, 0.75))
    assert charts.lead_sentence(five) == charts.NOTHING_HELPED


def test_a_bad_model_in_the_also_compare_box_is_named_by_that_box():
    from assistlab.errors import InputError
    from assistlab.ui.fields import in_page_words, request_from_form

    with pytest.raises(InputError) as bad:
        request_from_form(target="org/name", assistant="org/small", strategy="assistant", prompt="Hi",
                          extra_assistants="org/fine, no good!!")
    assert in_page_words(str(bad.value)).startswith("Also compare these assistants: 'no good!!' is not a hub id")


# ---------------------------------------------------------------- does a preset fit this machine (issue 19)



def _machines():
    from assistlab.engines import catalog

    return catalog.Machine(24 * 10**9), catalog.Machine(64 * 10**9, (("NVIDIA A100-SXM4-80GB", 80 * 10**9),))


def test_every_preset_says_whether_it_fits_this_machine_and_memory_of_what():
    from assistlab.engines import catalog

    laptop, gpu = _machines()
    by_target = {p.target: p for p in catalog.PRESETS}
    bundled = catalog.fit(catalog.PRESETS[0], laptop)
    assert bundled.runs and bundled.tag == "runs here"
    assert bundled.sentence.startswith("Runs here: needs about ") and "GB of RAM" in bundled.sentence
    reference = catalog.fit(by_target["google/gemma-3-27b-it"], laptop)
    assert not reference.runs and reference.tag == "too big for this machine"
    # "55 GB of what": of a GPU's memory (or RAM on a CPU), beside what this machine has
    assert re.search(r"needs a GPU with about \d+ GB of memory \(bfloat16\), or about \d+ GB of RAM on a CPU; "
                     r"this machine has 24 GB of RAM and no GPU\.$", reference.sentence), reference.sentence
    on_gpu = catalog.fit(by_target["google/gemma-3-27b-it"], gpu)
    assert on_gpu.runs and "GB of GPU memory" in on_gpu.sentence and "NVIDIA A100-SXM4-80GB, 80 GB" in on_gpu.sentence
    assert not catalog.fit(by_target["zai-org/GLM-4.5"], gpu).runs  # 355B: several large GPUs
    for preset in catalog.PRESETS:  # every one says it, in the list and in the note under it
        assert catalog.fit(preset, laptop).tag in ("runs here", "too big for this machine")
        assert catalog.fit(preset, laptop).sentence in catalog.describe(preset, laptop, {})


def test_a_gated_preset_says_what_hf_token_is_and_how_to_get_one():
    from assistlab.engines import catalog

    laptop, _gpu = _machines()
    reference = next(p for p in catalog.PRESETS if p.target == "google/gemma-3-27b-it")
    assert reference.gated and "Needs ~55 GB" not in reference.note
    text = catalog.describe(reference, laptop, {})
    assert "Hugging Face access token (HF_TOKEN), which is not set on this server" in text
    assert "huggingface.co/settings/tokens" in text and "HF_TOKEN=hf_... python app.py" in text
    assert "of weights from the Hugging Face Hub to this machine's disk" in text  # the download, said apart
    assert "which is set on this server" in catalog.describe(reference, laptop, {"HF_TOKEN": "hf_x"})
    page = catalog.describe(reference, laptop, {}, markdown=True)
    assert "<details><summary>What is HF_TOKEN, and how do I get one?</summary>" in page  # one click away
    assert "HF\\_TOKEN" in page.split("<details>")[0]  # no Markdown emphasis from the underscore
    bundled = catalog.describe(catalog.PRESETS[0], laptop, {})
    assert "HF_TOKEN" not in bundled and "downloads" not in bundled  # ships with AssistLab


def test_the_preset_list_shows_the_fit_beside_each_label():
    from assistlab.engines import catalog
    from assistlab.ui.form import matching_preset, preset_choice

    laptop, _gpu = _machines()
    assert preset_choice(catalog.PRESETS[0], laptop) == f"{catalog.PRESETS[0].label} · runs here"
    # the value behind each shown choice is still the label, so a preset is still found by its pair
    assert matching_preset(None, catalog.BUNDLED_TARGET, catalog.BUNDLED_ASSISTANT) == catalog.PRESETS[0].label


def _sentences(text: str) -> list[str]:
    """A message's sentences: a full stop, question or exclamation mark before a space or the end closes one."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def test_a_model_missing_from_the_cache_says_so_in_one_sentence_with_the_docs_page(monkeypatch):
    from huggingface_hub import errors as hub_errors

    from assistlab.engines import catalog
    from assistlab.engines.transformers import models

    ref = catalog.ModelRef("Qwen/Qwen2.5-0.5B-Instruct", "hub", "Qwen/Qwen2.5-0.5B-Instruct")
    monkeypatch.delenv(catalog.MODELS_DIR_ENV, raising=False)
    text = str(models._hub_error(hub_errors.LocalEntryNotFoundError("not cached"), ref))
    assert text.startswith("Qwen/Qwen2.5-0.5B-Instruct is not in this machine's Hugging Face cache "), text
    assert "cannot be reached" in text and "docs/models.md#bringing-a-model" in text
    # One sentence; the how-to (hf download, the cache's folders, the models folder) is on the docs page.
    assert len(_sentences(text)) == 1 and text.endswith("."), text
    assert "hf download" not in text and "models--" not in text and "--local-dir" not in text
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, "/srv/models")
    text = str(models._hub_error(hub_errors.LocalEntryNotFoundError("not cached"), ref))
    assert "Hugging Face cache or models folder" in text and "/srv/models" not in text
    assert len(_sentences(text)) == 1, text
    gated = str(models._hub_error(hub_errors.GatedRepoError("gated", response=_response()), ref))
    assert "huggingface.co/settings/tokens" in gated and "HF_TOKEN=hf_..." in gated


def _response():
    import httpx2

    return httpx2.Response(403, request=httpx2.Request("GET", "https://hub.invalid/x"))


# ---------------------------------------------------------------- the first screen in plain words (issue 19, item 16)

# Words a person who has never heard of speculative decoding meets first. Each may appear on a tab's first
# screen only behind plain words, in parentheses ("the same word list (tokenizer)"); everything else is one
# click away (a closed accordion or a <details>).
JARGON = ("tokenizer", "hub id", "org/name", "MTP", "DFlash", "num_assistant_tokens", "prompt_lookup_num_tokens",
          "heuristic", "forward pass", "IQR", "bonus token", "Student", "exponentiated", "The first N", "α",
          "Prompts per category", "n-gram")


def _first_screen_texts(one_click_too: bool = False) -> list[str]:
    """Every label, hint, choice and text of the form and of each tab that shows without a click (with
    `one_click_too`, also what the closed accordions hold)."""
    import gradio as gr

    from assistlab.ui import compare_tab, form, history_tab, suite_tab, sweep_tab

    with gr.Blocks() as demo:
        form.build()
        compare_tab.build()
        sweep_tab.build()
        suite_tab.build()
        history_tab.build_history()
        history_tab.build_board()
    texts = []
    for block in demo.blocks.values():
        parent, hidden = getattr(block, "parent", None), False
        while parent is not None:  # inside a closed accordion (Settings, the details): one click away
            hidden |= isinstance(parent, gr.Accordion) and not parent.open
            parent = getattr(parent, "parent", None)
        if (hidden and not one_click_too) or getattr(block, "visible", True) is False:
            continue
        for name in ("label", "info", "placeholder"):
            if isinstance(getattr(block, name, None), str):
                texts.append(getattr(block, name))
        if isinstance(block, (gr.Markdown, gr.HTML)) and isinstance(block.value, str):
            texts.append(block.value)
        for choice in getattr(block, "choices", None) or []:
            texts.append(str(choice[0] if isinstance(choice, (tuple, list)) else choice))
    return texts


def _unexplained(text: str) -> list[str]:
    shown = re.sub(r"<details[^>]*>.*?</details>", "", text, flags=re.S)  # one click away
    shown = re.sub(r"<[^>]+>", "", shown)
    while re.search(r"\([^()]*\)", shown):  # behind plain words, in parentheses
        shown = re.sub(r"\([^()]*\)", "", shown)
    return [word for word in JARGON if word in shown]


def test_the_first_screen_of_every_tab_is_plain_words_with_the_expert_words_behind_them():
    texts = _first_screen_texts()
    assert len(texts) > 40
    unexplained = {text[:80]: words for text in texts if (words := _unexplained(text))}
    assert not unexplained, unexplained
    joined = "\n".join(_first_screen_texts(one_click_too=True))
    # the expert words are still there, behind the plain ones or one click away (the strategies are in Settings)
    for word in ("tokenizer", "hub id", "MTP", "DFlash", "speculative decoding"):
        assert word in joined, word


def test_the_details_stay_one_click_away():
    from assistlab.ui.fields import HINTS, SWEEP_DETAILS
    from assistlab.ui.suite_tab import DETAILS, summary_html

    assert "num_assistant_tokens" in SWEEP_DETAILS and "heuristic" in SWEEP_DETAILS
    assert "num_assistant_tokens" in HINTS["num_assistant_tokens"] and "heuristic" in HINTS["schedule"]
    assert "JSON lines" in DETAILS
    suite = {"name": "Spec-Bench", "rule": "the first 1 per category", "interval": "95% Student-t interval",
             "categories": [], "overall": {"best": "Overall: no arm."}, "skipped": []}
    page = summary_html({"suite": suite})
    assert "<summary>How is this worked out?</summary>" in page and "Student-t" in page
    assert not _unexplained(page.split("<details")[0])


def _until_clear(report: dict, ended_by: str | None, status: str = "complete", sequence=None) -> dict:
    """`report` as a run until clear: each arm's time-uniform sequence (too few for an interval unless given)."""
    seq = sequence or {"ci_low": None, "ci_high": None, "n": 2, "level": 0.95, "family_level": 0.95,
                       "arms_sharing": 1, "band": 0.03, "settled": None, "interval": "none"}
    for comp in report["comparison"]:
        comp["sequence"] = dict(seq)
    report["status"] = status
    report["stopping"] = {"rule": "clear", "ended_by": ended_by, "reached": ended_by == "clear", "repetitions": 2,
                          "max_time_s": 600.0, "max_repetitions": 30,
                          "arms": {c["arm"]: {"repetitions": 2, "settled": None, "looks": []}
                                   for c in report["comparison"]}}
    return report


def test_a_run_the_budget_ended_before_it_was_clear_says_so_and_not_that_it_goes_on():
    """Issue 36 item 2: after the run ended, never 'the runs go on until…', and the ranking is not an answer."""
    said = ("No clear answer: the time budget of 600 s ran out after 2 repetitions, before the answer was clear for "
            "universal: small (k=5), prompt-lookup (k=10).")
    report = _until_clear(_report(SLOW, SLOWER), "time budget")
    lead = charts.lead_sentence(report)
    assert lead.startswith(said) and "go on" not in lead and "fastest" not in lead
    first = re.findall(r"<p[^>]*>(.*?)</p>", panels.headline_html(report))[0]
    assert re.sub(r"<[^>]+>", "", first) == lead
    assert "go on" not in panels.headline_html(report)
    note = re.sub(r"<[^>]+>", "", re.search(r'id="al-ranking-note">(.*?)</p>', panels.ranking_html(report)).group(1))
    assert note.startswith(said) and "not an answer" in note and "ranks first" not in note
    assert all(row[0] == "–" for row in _ranking_rows(panels.ranking_html(report)))  # listed, never ranked
    from assistlab.cli.tables import ranking_lines
    lines = ranking_lines(report)
    assert lines[0].startswith("By median, not ranked: ") and not re.search(r"\d\. ", lines[0])
    assert lines[1].strip().startswith(said)
    most = _until_clear(_report(SLOW), "repetitions")
    assert charts.lead_sentence(most).startswith("No clear answer: 2 repetitions, the most allowed, ran, before")
    # While it runs, the runs do go on; once clear, the answer leads.
    running = _until_clear(_report(SLOW), None, status="running")
    assert charts.lead_sentence(running) == "So far: " + charts.TOO_FEW_FOR_EVERY_LOOK
    faster = {"ci_low": 1.1, "ci_high": 1.4, "n": 8, "level": 0.95, "family_level": 0.95, "arms_sharing": 1,
              "band": 0.03, "settled": "faster", "interval": "time-uniform"}
    clear = _until_clear(_report(FAST), "clear", sequence=faster)
    assert charts.lead_sentence(clear).startswith("assistant: small (k=5) was fastest")


def test_an_arm_that_drafted_nothing_is_never_given_a_speedup():
    """Issue 36 item 7: 2.46× beside 'Nothing was drafted' is not a speedup; said so, and never the answer."""
    from assistlab.history import derive
    from assistlab.results import explain
    from assistlab.results.report import speedup_sentence

    arm, comp = _arm("assistant: none (k=5)", "assistant", 2.46, 2.1, 2.8)
    comp.update(limit_kind=explain.NOTHING_DRAFTED, limit=explain.nothing_drafted_words(2.46), acceptance_rate=None)
    arm["spec"] = {"assistant": "none"}
    report = _report((arm, comp))
    sentence = speedup_sentence(comp)
    assert sentence.startswith("assistant: none (k=5) drafted nothing, so its 2.46× against plain is not a speedup")
    assert "faster" not in sentence
    assert "not a speedup" in comp["limit"] and "2.46×" in comp["limit"]
    assert "fastest" not in charts.lead_sentence(report)
    (row,) = derive.arm_rows(report)
    assert row["speedup"] is None and derive.summary_columns(report)["best_speedup"] is None
    comp.pop("limit_kind")  # the same figures from an arm that drafted: a speedup, and the answer
    assert charts.lead_sentence(_report((arm, comp))).startswith("assistant: none (k=5) was fastest")
    assert derive.arm_rows(_report((arm, comp)))[0]["speedup"] == 2.46


def test_one_repetition_is_said_in_the_singular():
    """Issue 36 item 9: '1 repetitions' nowhere a count is said."""
    from assistlab.results.report import counted

    assert (counted(1, "repetition"), counted(2, "repetition"), counted(0, "prompt")) == (
        "1 repetition", "2 repetitions", "0 prompts")
    one = _report(SLOW, status="stopped")
    one["planned_repetitions"] = 1
    assert "Stopped after 5 of 1 repetition." in charts.headline_lines(one)
    running = _until_clear(_report(SLOW), None, status="running")
    running["counted_repetitions"] = 1
    assert any(line.startswith("So far: 1 repetition;") for line in charts.headline_lines(running))


def test_terms_in_the_result_sentences_explain_themselves_on_hover():
    """Issue 36 item 9: plain words first, the term in a hover, where the sentences use it."""
    from assistlab.views.markup import with_terms

    shown = with_terms("a (transformers defaults) run, too few for an interval that holds at every look <b>")
    assert shown.count("<abbr") == 2 and "&lt;b&gt;" in shown and "<b>" not in shown
    assert 'title="transformers defaults: no drafting setting was chosen here' in shown
    assert 'title="an interval that holds at every look: a range for the true speedup' in shown
    report = _until_clear(_report(SLOW), "time budget")
    assert 'title="universal assisted generation: ' in panels.headline_html(report)
