"""The app as an API: `/compare` through gradio_client on a live server, plus the form and page helpers."""

from __future__ import annotations

import html
import threading

import pytest

from assistlab import ui
from assistlab.config import CLEAR_MAX_REPEATS, CPU_DEFAULTS, LIMITS
from assistlab.engines.transformers import paths
from assistlab.errors import InputError
from assistlab.results.report import is_busy, speedup_sentence
from assistlab.ui.fields import HINTS
from assistlab.views import panels, texts

# gradio's own queue bookkeeping trips pandas deprecation warnings; they are not ours to fix.
API_PARAMETERS = [
    "target", "assistant", "strategy", "prompt", "max_new_tokens", "repeats", "warmup", "also_prompt_lookup",
    "extra_assistants", "chat_template", "do_sample", "seed", "device", "dtype", "num_assistant_tokens",
    "schedule", "confidence_threshold", "prompt_lookup_num_tokens", "early_exit_layer", "device_map_auto",
    "measure",  # added last, so positional callers of the earlier parameters are unaffected
    # The Engines accordion's, after it for the same reason.
    "engines", "vllm_methods", "vllm_speculative_tokens", "vllm_lookup_min", "vllm_lookup_max", "servers",
    "server_api_key",
    "concurrency",  # load levels for the vLLM arms (issue 27), last for the same reason
    "band_percent",  # the band of no practical difference (issue 28), last for the same reason
]


@pytest.fixture(scope="module")
def client(models_dir, store, launch_app):
    from gradio_client import Client

    with launch_app(models_dir, store) as url:
        yield Client(url, verbose=False)


def compare(client, **kwargs):
    settings = {"prompt": "write me a long essay on deep learning", "max_new_tokens": 8, "repeats": 2, "warmup": 1}
    return client.predict(**{**settings, **kwargs}, api_name="/compare")


def test_compare_returns_the_complete_report(client):
    report, headline = compare(client, target="target", assistant="assistant-other", strategy="auto")
    assert report["schema"] == 1
    assert report["status"] == "complete"
    names = [a["name"] for a in report["arms"]]
    assert names == ["plain", "universal: assistant-other (transformers defaults)", "prompt-lookup (k=10)"]
    assert all(len(a["latencies_s"]) == 2 and a["new_tokens"] == [8, 8] for a in report["arms"])
    assert [c["arm"] for c in report["comparison"]] == names[1:]
    assert report["environment"]["device"] == "cpu"
    assert report["request"]["warmup"] == 1
    lines = headline.splitlines()[:2]  # one line per assisted arm; a note on noisy timings may follow
    # Two repetitions: each arm's line is a range of 2 runs, with no verdict drawn from it.
    assert [line.split(" ran at ")[0] for line in lines] == names[1:]
    assert all("×" in line and "range of 2 runs" in line and " was " not in line for line in lines)
    # The API's headline and the command line speak with one voice.
    assert lines == [speedup_sentence(entry, busy=is_busy(report)) for entry in report["comparison"]]
    assert all(arm["text_segments"] for arm in report["arms"][1:])


def test_extra_assistants_are_ranked_with_the_rest(client):
    report, _ = compare(client, target="target", assistant="assistant-other", extra_assistants="assistant-same",
                        max_new_tokens=6)
    assisted = [a["name"] for a in report["arms"][1:]]
    assert assisted == ["universal: assistant-other (transformers defaults)", "assistant: assistant-same (transformers defaults)", "prompt-lookup (k=10)"]
    assert sorted(row["arm"] for row in report["ranking"] if not row["plain"]) == sorted(assisted)
    assert [row["arm"] for row in report["ranking"] if row["plain"]] == ["plain"]  # plain ranks among them
    speeds = [row["speedup"] for row in report["ranking"]]
    assert speeds == sorted(speeds, reverse=True)
    table = panels.ranking_html(report)
    assert table.count("<tr>") == 1 + 3  # header and one row per assisted arm, the extra assistant included
    assert all(html.escape(name) in table for name in assisted)
    why = panels.why_html(report)
    assert why.count('class="al-why-card"') == 3


def test_the_api_keeps_its_parameter_names(client):
    info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/compare"]
    assert [p["parameter_name"] for p in info["parameters"]] == API_PARAMETERS
    assert all(p["parameter_has_default"] for p in info["parameters"])


def test_a_bad_model_is_a_clear_error_and_the_app_keeps_serving(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        compare(client, target="/etc")
    message = str(caught.value)
    assert "outside the allowed models folder" in message
    assert "Traceback" not in message
    with pytest.raises(AppError, match="needs an assistant model"):
        compare(client, target="target", assistant="", strategy="assistant")
    report, _ = compare(client, target="target", strategy="prompt-lookup", also_prompt_lookup=False, repeats=1)
    assert report["status"] == "complete"
    assert [a["name"] for a in report["arms"]] == ["plain", "prompt-lookup (k=10)"]


# ---------------------------------------------------------------- the form, the files, the launcher


def test_the_form_adds_prompt_lookup_and_extra_assistants():
    request = ui.request_from_form(
        "target", "assistant-same", "assistant", "hi", extra_assistants="a-one, a-two\na-three",
        num_assistant_tokens=7.0,
    )
    assert [(a.strategy, a.assistant) for a in request.arms] == [
        ("assistant", "assistant-same"), ("assistant", "a-one"), ("assistant", "a-two"), ("assistant", "a-three"),
        ("prompt-lookup", None),
    ]
    assert request.arms[0].num_assistant_tokens == 7
    only = ui.request_from_form("target", "ignored", "prompt-lookup", "hi", also_prompt_lookup=True)
    assert [(a.strategy, a.assistant) for a in only.arms] == [("prompt-lookup", None)]


def test_empty_counts_mean_the_device_default_and_zero_is_refused():
    request = ui.request_from_form("target", "x", "auto", "hi", max_new_tokens=None, repeats="", warmup=None,
                                   confidence_threshold=0, early_exit_layer=0)
    assert (request.max_new_tokens, request.repeats, request.warmup) == (None, None, None)
    assert request.resolved("cpu").max_new_tokens == CPU_DEFAULTS["max_new_tokens"]
    assert request.arms[0].assistant_confidence_threshold == 0.0  # 0 switches the confidence stop off
    zero_warmup = ui.request_from_form("target", "x", "auto", "hi", warmup=0)
    assert zero_warmup.warmup == 0
    for field in ("max_new_tokens", "repeats"):  # as on the command line: 0 runs nothing, so it is a mistake
        with pytest.raises(InputError, match=f"{field} must be between 1"):
            ui.request_from_form("target", "x", "auto", "hi", **{field: 0})


def test_how_sure_chooses_a_fixed_count_or_a_precision_target():
    quick = ui.request_from_form("target", "x", "auto", "hi")
    assert (quick.precision, quick.max_time_s, quick.stopping_rule) == (None, None, "clear")  # stop once clear
    assert quick.resolved("cpu").repeats == CLEAR_MAX_REPEATS  # at the most
    counted = ui.request_from_form("target", "x", "auto", "hi", repeats="5")
    assert (counted.stopping_rule, counted.resolved("cpu").repeats) == ("fixed", 5)  # exactly as asked
    careful = ui.request_from_form("target", "x", "auto", "hi", measure="careful")
    assert (careful.precision, careful.max_time_s) == (0.05, 300.0)
    assert careful.resolved("cpu").repeats == LIMITS["repeats"]  # the target, not a count, ends it
    capped = ui.request_from_form("target", "x", "auto", "hi", measure="careful", repeats="12")
    assert (capped.precision, capped.repeats) == (0.05, 12)  # Repetitions caps the count
    with pytest.raises(InputError, match=r"How sure \(measure\) must be one of likely, quick, careful \(Likely, Sure, Careful\); got 'thorough'"):
        ui.request_from_form("target", "x", "auto", "hi", measure="thorough")


def test_how_sure_offers_the_three_rules_in_the_command_lines_words():
    """Likely, Sure and Careful on the page are --stop likely, sure and careful, in the same words; the API's
    values stay: 'quick' is Sure, and 'likely' is new."""
    from assistlab.config import RULE_WORDS
    from assistlab.ui.fields import MEASURE_CHOICES

    assert [label for label, _ in MEASURE_CHOICES] == [words for _, _, words in RULE_WORDS]
    assert [value for _, value in MEASURE_CHOICES] == ["likely", "quick", "careful"]
    likely = ui.request_from_form("target", "x", "auto", "hi", measure="likely")
    assert (likely.stopping_rule, likely.precision) == ("likely", None)
    assert likely.resolved("cpu").repeats == CLEAR_MAX_REPEATS
    capped = ui.request_from_form("target", "x", "auto", "hi", measure="likely", repeats="8")
    assert (capped.stopping_rule, capped.repeats) == ("likely", 8)  # Repetitions caps the count
    assert ui.request_from_form("target", "x", "auto", "hi", measure="quick").stopping_rule == "clear"


def test_careful_through_the_api_repeats_until_the_target_or_the_budget(client):
    report, _ = compare(client, repeats=6, measure="careful")
    stop = report["stopping"]
    assert stop["rule"] == "precision" and stop["target"] == 0.05 and stop["max_time_s"] == 300.0
    assert stop["max_repetitions"] == 6 and 5 <= stop["repetitions"] <= 6
    assert stop["ended_by"] in ("precision", "repetitions", "time budget")


def test_empty_drafting_boxes_leave_the_settings_to_transformers():
    request = ui.request_from_form("target", "x", "assistant", "hi", num_assistant_tokens="", schedule="",
                                   confidence_threshold=" ", prompt_lookup_num_tokens=None)
    for arm in request.arms:
        assert (arm.num_assistant_tokens, arm.num_assistant_tokens_schedule, arm.assistant_confidence_threshold,
                arm.prompt_lookup_num_tokens) == (None, None, None, None)
    assert request.arms[0].label == "assistant: x (transformers defaults)"
    typed = ui.request_from_form("target", "x", "assistant", "hi", num_assistant_tokens=" 7 ", schedule="heuristic",
                                 confidence_threshold="0", prompt_lookup_num_tokens="3")
    arm = typed.arms[0]
    assert (arm.num_assistant_tokens, arm.num_assistant_tokens_schedule, arm.assistant_confidence_threshold) == (
        7, "heuristic", 0.0)  # a typed 0 is kept: it switches the confidence stop off
    assert typed.arms[-1].prompt_lookup_num_tokens == 3
    # The hints say what empty means, with transformers' own numbers.
    defaults = paths.transformers_defaults()
    assert f"transformers' default ({defaults['num_assistant_tokens']})" in HINTS["num_assistant_tokens"]
    assert f"transformers' default ({defaults['assistant_confidence_threshold']:g})" in HINTS["confidence_threshold"]
    assert "0 switches it off" in HINTS["confidence_threshold"]
    with pytest.raises(InputError, match="num_assistant_tokens must be a whole number"):
        ui.request_from_form("target", "x", "assistant", "hi", num_assistant_tokens="five")


def test_the_form_refuses_what_the_engine_refuses():
    with pytest.raises(InputError, match="early_exit_layer"):
        ui.request_from_form("target", "", "early-exit", "hi", early_exit_layer=0)
    with pytest.raises(InputError, match="prompt is empty"):
        ui.request_from_form("target", "x", "auto", "   ")


def test_gpu_seconds_grows_with_the_work():
    small = ui.request_from_form("t", "a", "auto", "hi", max_new_tokens=16, repeats=1, warmup=0)
    large = ui.request_from_form("t", "a", "auto", "hi", max_new_tokens=512, repeats=10, warmup=2)
    assert 60 <= ui.gpu_seconds(small) < ui.gpu_seconds(large) <= 1800
    # A sweep of six settings holds the GPU longer than the comparison it starts from.
    plan = ui.sweep_plan("num_assistant_tokens", "1,2,3,5,8")
    assert ui.gpu_seconds(small, plan) > ui.gpu_seconds(small)


def test_the_sweep_box_becomes_a_plan():
    plan = ui.sweep_plan("num_assistant_tokens", " 1, 2;3  5,,8 ")
    assert (plan.param, plan.values, plan.schedules) == ("num_assistant_tokens", ("1", "2", "3", "5", "8"),
                                                         ("heuristic",))
    request = ui.request_from_form("t", "a", "assistant", "hi", also_prompt_lookup=True)
    swept = plan.apply(request)
    assert [(a.num_assistant_tokens, a.num_assistant_tokens_schedule) for a in swept.arms] == [
        (1, "constant"), (2, "constant"), (3, "constant"), (5, "constant"), (8, "constant"),
        # The adaptive point starts from the form's draft length: empty there, so transformers' default.
        (paths.transformers_defaults()["num_assistant_tokens"], "heuristic"),
    ]
    lookup = ui.sweep_plan("prompt_lookup_num_tokens", "4,2")
    assert lookup.schedules == ()
    assert [a.prompt_lookup_num_tokens for a in lookup.apply(request).arms] == [2, 4]
    with pytest.raises(InputError, match="num_assistant_tokens must be a whole number, got 'abc'"):
        ui.sweep_plan("num_assistant_tokens", "2,abc").apply(request)
    with pytest.raises(InputError, match="needs an arm with an assistant model"):
        plan.apply(ui.request_from_form("t", "", "prompt-lookup", "hi"))


def test_apply_best_writes_the_setting_that_won():
    k, schedule, lookup, note = ui.best_setting_updates(
        {"param": "num_assistant_tokens", "value": 3, "schedule": "heuristic", "label": "heuristic (from k=3)"}
    )
    assert (k, schedule) == ("3", "heuristic") and lookup == {"__type__": "update"}  # text, for the text boxes
    assert "draft length 3 with the heuristic schedule" in note
    k, schedule, lookup, note = ui.best_setting_updates(
        {"param": "prompt_lookup_num_tokens", "value": 2, "schedule": "constant", "label": "k=2"}
    )
    assert lookup == "2" and k == {"__type__": "update"} and schedule == {"__type__": "update"}
    assert all(u == {"__type__": "update"} for u in ui.best_setting_updates(None))


def test_a_sweep_streams_through_the_apps_runner(allowed_models, store):
    request = ui.request_from_form("target", "", "prompt-lookup", "deep learning deep learning", max_new_tokens=4,
                                   repeats=1, warmup=0)
    plan = ui.sweep_plan("prompt_lookup_num_tokens", "1,3")
    events = list(ui._gpu_runner(store)(request, threading.Event().is_set, plan))
    report = events[-1].report.to_dict()
    assert events[-1].kind == "done" and report["status"] == "complete"
    assert [p["value"] for p in report["sweep"]["points"]] == [1, 3]
    assert report["sweep"]["best"]["value"] in (1, 3)
    page = panels.sweep_html(report)
    assert report["sweep"]["best_text"] in page.replace("&#x27;", "'") and page.count("<tr>") == 3


def test_session_stops_are_per_session():
    stops = ui.SessionStops()
    stops.stop("a")
    assert stops.flag("a").is_set() and not stops.flag("b").is_set()
    stops.arm("a")
    assert not stops.flag("a").is_set()
    flag = stops.flag("c")
    stops.forget("c")
    assert flag.is_set()  # a closed tab stops the run it left behind


def test_report_files_are_written_where_the_app_owns_them(tmp_path, models_dir, store, monkeypatch):
    from assistlab.config import BenchRequest
    from assistlab.engines.transformers.arms import ArmSpec
    from assistlab.measure.runner import run_to_report

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    report = run_to_report(
        BenchRequest("target", (ArmSpec("prompt-lookup"),), prompt="hi", max_new_tokens=4, repeats=1, warmup=0),
        store,
    )
    json_path, csv_path = ui.ReportFiles(tmp_path).write(report)
    assert json_path.startswith(str(tmp_path)) and csv_path.startswith(str(tmp_path))
    assert '"schema": 1' in open(json_path).read()
    assert open(csv_path).read().startswith("arm,strategy,repetition")


def test_page_text_is_escaped_and_differences_marked():
    assert texts.diff_html("the cat <b>", "the dog <b>") == "the <del>cat</del><mark>dog</mark> &lt;b&gt;"
    assert texts.diff_html("same\x07 text", "same\x07 text") == "same\ufffd text"  # control characters made visible
    assert texts.diff_html("a b c", "a b") == "a b<del> c</del>"  # a word missing at the end is still shown
    report = {
        "arms": [
            {"name": "plain", "strategy": "plain", "text": "<script>alert(1)</script>", "latencies_s": [1.0]},
            {"name": "x<y", "strategy": "assistant", "text": "<script>alert(2)</script>", "latencies_s": [1.0]},
        ],
        "comparison": [{"arm": "x<y", "outputs_identical": False, "first_difference": 5}],
    }
    page = texts.texts_html(report)
    assert "<script>" not in page and "x&lt;y" in page
    assert "differs from token 6" in page


def test_each_token_is_marked_by_where_it_came_from():
    segments = [["the <b>", "draft"], ["cat", "target"], [" sat", "draft"]]
    assert texts.marked_html("the <b>cat sat", None, segments) == (
        '<span class="al-o-draft">the &lt;b&gt;</span><span class="al-o-target">cat</span>'
        '<span class="al-o-draft"> sat</span>'
    )
    # Origin and difference together: the changed word keeps its origin tint inside the difference mark.
    assert texts.marked_html("the dog sat", "the cat sat", [["the ", "draft"], ["dog sat", "target"]]) == (
        '<span class="al-o-draft">the </span><del>cat</del><mark class="al-o-target">dog</mark>'
        '<span class="al-o-target"> sat</span>'
    )
    # Pieces that do not spell the text (a tokenizer that decodes differently) are not guessed at.
    assert texts.marked_html("abc", None, [["xyz", "draft"]]) == "abc"
    report = {
        "arms": [
            {"name": "plain", "strategy": "plain", "text": "one two", "latencies_s": [1.0]},
            {"name": "a", "strategy": "assistant", "text": "one two", "latencies_s": [1.0],
             "text_segments": [["one", "draft"], [" two", "target"]], "token_origins": ["draft", "target"]},
        ],
        "comparison": [{"arm": "a", "outputs_identical": True, "first_difference": None}],
    }
    page = texts.texts_html(report)
    assert 'id="al-legend"' in page and "accepted by the target" in page and "bonus token" in page
    assert '<span class="al-o-draft">one</span><span class="al-o-target"> two</span>' in page
    assert "1 of 2 tokens drafted and accepted" in page
    plain_card = page.split('class="al-text-card"')[1]
    assert "al-o-" not in plain_card  # the reference is all the target's own; no tint


def _explained(**entry):
    base = {"arm": "assistant: small (k=5)", "speedup": {"median": 1.3, "ci_low": 1.2, "ci_high": 1.4, "n": 5,
                                                         "level": 0.9375, "interval": "order-statistic"},
            "alpha": 0.8, "c": 0.1, "k": 5.0, "predicted_speedup": 2.0, "acceptance_rate": 0.7,
            "limit": "Overhead limits this pair: <it measures 1.30x>.",
            "analysis": {"best_k": 6, "best_k_speedup": 2.01}}
    return {
        "status": "complete",
        "arms": [{"name": "plain", "strategy": "plain", "latencies_s": [1.0]},
                 {"name": base["arm"], "strategy": "assistant", "latencies_s": [0.8]}],
        "comparison": [{**base, **entry}],
    }


def test_the_why_panel_puts_prediction_beside_measurement():
    page = panels.why_html(_explained())
    assert 'id="al-why"' in page and page.count('class="al-why-card"') == 1
    assert "1.30×" in page and "(1.20–1.40×, 93.7%)" in page and "2.00×" in page
    # Each symbol carries its meaning as a hover (markup.term).
    assert ">α</abbr></th><td>0.80</td>" in page and ">c</abbr></th><td>0.10</td>" in page
    assert ">drafted per step</abbr></th><td>5</td>" in page  # "k" is the draft length in an arm's name
    assert "&lt;it measures 1.30x&gt;" in page and "<it " not in page
    assert "Leviathan et al. 2023" in page
    assert "would favour" not in page  # k=6 is predicted only 0.5% better: not worth a line
    hinted = panels.why_html(_explained(analysis={"best_k": 2, "best_k_speedup": 2.4}))
    assert "would favour k = 2 (predicted 2.40×)" in hinted
    running = _explained(predicted_speedup=None, c=None, limit=None)
    running["status"] = "running"
    assert "measured after the timed runs" in panels.why_html(running)
    assert panels.why_html({"arms": [{"name": "plain", "strategy": "plain"}], "comparison": []}) == ""


def test_the_ranking_needs_two_assisted_arms():
    row = {"arm": "a<b", "rank": 1, "speedup": 1.3, "ci_low": 1.2, "ci_high": 1.4, "n": 3, "level": 0.75,
           "interval": "range", "clearly_first": False, "family_level": None, "acceptance_rate": 0.7,
           "c": 0.1, "alpha": 0.8, "predicted_speedup": 2.0, "limit": "Low acceptance limits this pair."}
    report = {"arms": [{"name": "plain"}, {"name": "a<b"}, {"name": "z"}], "ranking": [row]}
    assert panels.ranking_html(report) == ""
    report["ranking"] = [row, {"arm": "z", "rank": None, "speedup": None, "error": "ran out of memory"}]
    table = panels.ranking_html(report)
    assert 'id="al-ranking"' in table and table.count("<tr>") == 3
    assert all(h in table for h in ("Rank", "Speedup (interval, its level)", "Accepted", "α", "Predicted",
                                    "What limits it"))
    assert "95%" not in table and "(range of 3 runs 1.20–1.40×)" in table
    assert "a&lt;b" in table and "1.30×" in table and "2.00×" in table and "Low acceptance" in table
    assert "ran out of memory" in table and "failed" in table


def test_the_ranking_says_whether_the_first_is_ahead():
    def row(name, rank, **extra):
        return {"arm": name, "rank": rank, "speedup": 1.5 - rank / 10, "ci_low": 1.1, "ci_high": 1.6, "n": 10,
                "level": 1002 / 1024, "interval": "order-statistic", "clearly_first": None, "family_level": None,
                "behind_first": None, **extra}

    arms = [{"name": "plain"}, {"name": "a"}, {"name": "b"}, {"name": "c"}]
    plain = {"arm": "plain", "plain": True, "rank": 4, "speedup": 1.0, "behind_first": {"ci_low": 1.3}}
    clear = [row("a", 1, clearly_first=True, family_level=1 - 66 / 1024),
             row("b", 2, behind_first={"ci_low": 1.05}), row("c", 3, behind_first={"ci_low": 1.2}), plain]
    assert ("a is clearly ahead of every other arm, plain included (93.5% sure of all 3 run-by-run comparisons "
            "together).") in panels.ranking_html({"arms": arms, "ranking": clear})
    # A report saved before plain was ranked: its comparisons left plain out, and the note says so.
    legacy = [row("a", 1, clearly_first=True, family_level=1 - 44 / 1024),
              row("b", 2, behind_first={"ci_low": 1.05}), row("c", 3, behind_first={"ci_low": 1.2})]
    assert "a is clearly ahead of every other assistant (95.7% sure of all 2 run-by-run comparisons together)." in (
        panels.ranking_html({"arms": arms, "ranking": legacy}))
    close = [row("a", 1, clearly_first=False, family_level=1 - 44 / 1024),
             row("b", 2, behind_first={"ci_low": 0.97}), row("c", 3, behind_first={"ci_low": 1.2})]
    assert "Ranked by median; a is not clearly ahead of b (95.7% sure" in panels.ranking_html(
        {"arms": arms, "ranking": close})
    few = [row("a", 1, clearly_first=False, family_level=0.5), row("b", 2), row("c", 3)]
    note = panels.ranking_html({"arms": arms, "ranking": few})
    assert "Ranked by median only: too few runs to be sure of this order." in note and "clearly ahead" not in note


def test_launch_options_read_the_environment():
    default = ui.launch_options({})
    assert default["server_name"] == "127.0.0.1"
    assert "server_port" not in default and "root_path" not in default and "auth" not in default
    env = {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "8080", "GRADIO_ROOT_PATH": "/lab",
           "ASSISTLAB_AUTH": "ann:pw1, bob:p:w2"}
    options = ui.launch_options(env)
    assert (options["server_name"], options["server_port"], options["root_path"]) == ("0.0.0.0", 8080, "/lab")
    assert options["auth"].throttle.accounts == {"ann": "pw1", "bob": "p:w2"}
    with pytest.raises(InputError, match="ASSISTLAB_AUTH"):
        ui.launch_options({"ASSISTLAB_AUTH": "nobody"})


def test_all_model_work_shares_one_gpu_slot(models_dir, store, monkeypatch):
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    demo = ui.build_app(store)
    names = ("run_stream", "sweep_draft_length", "sweep_lookup_length", "compare", "compare_suite", "tune")
    heavy = [fn for fn in demo.fns.values() if fn.name in names]
    assert {fn.name for fn in heavy} == set(names)
    assert len(heavy) == 8  # run_stream three times: the Compare, Workloads and Find the best setting tabs
    assert {(fn.concurrency_id, fn.concurrency_limit) for fn in heavy} == {(ui.GPU_GROUP, 1)}  # one slot on a CPU
    api = {"compare", "compare_suite", "tune"}
    assert {fn.api_name for fn in heavy if fn.name in api} == api
    assert all(fn.api_visibility == "private" for fn in heavy if fn.name not in api)
    quick = ("request_stop", "arm_run", "arm_sweep", "best_setting_updates")
    light = [fn for fn in demo.fns.values() if fn.name in quick]
    # arm_run and request_stop on each of the four tabs that run (the tuner's too), the sweep's arm_sweep and its best setting.
    assert len(light) == 10 and not any(fn.queue for fn in light)  # Stop must not wait behind the run it stops
    assert demo._queue.max_size == ui.QUEUE_SIZE
    assert ui.build_app(store, queue_max_size=2)._queue.max_size == 2


def test_on_zero_gpu_the_run_goes_through_spaces_gpu(allowed_models, store, monkeypatch):
    import sys
    import threading
    import types

    asked = []

    def gpu(duration):
        def wrap(fn):
            def on_gpu(*args, **kwargs):
                asked.append(duration(*args, **kwargs))
                yield from fn(*args, **kwargs)
            return on_gpu
        return wrap

    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=gpu))
    request = ui.request_from_form("target", "", "prompt-lookup", "hi", max_new_tokens=4, repeats=1, warmup=0)
    events = list(ui._gpu_runner(store)(request, threading.Event().is_set))
    assert events[-1].kind == "done" and events[-1].report.status == "complete"
    assert asked == [ui.gpu_seconds(request)]


def test_every_strategy_can_be_chosen_by_name_on_the_page():
    from assistlab.engines.transformers.paths import STRATEGIES
    from assistlab.ui.fields import STRATEGY_CHOICES

    assert [value for _label, value in STRATEGY_CHOICES] == list(STRATEGIES)


def test_a_workload_refuses_the_rule_likely_in_one_sentence():
    from assistlab.ui import suite_tab

    values = {"target": "target", "assistant": "x", "strategy": "auto", "measure": "likely"}
    with pytest.raises(InputError, match="How sure: Likely stops one comparison"):
        suite_tab.bench_from_form(values)
    assert suite_tab.bench_from_form({**values, "measure": "quick"}, until_clear=True).stop_rule == "clear"
