"""The tuner on the page: the tab's boxes become a search's request (refusals name the box, or the API's
parameter), and the /tune route runs a search on the tiny models to its sentence, saved to the history as a
tuner's run with its answer, its pick alone on the leaderboard."""

from __future__ import annotations

import pytest

from assistlab.errors import InputError
from assistlab.ui.tune_fields import checked, tune_request_from_form

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"
CANDIDATES = "prompt-lookup:prompt_lookup_num_tokens=1,2"


def test_the_tab_s_boxes_become_the_search_and_an_empty_box_takes_its_default():
    request = tune_request_from_form(target="target", assistants="none", candidates=CANDIDATES, repeats="5",
                                     max_time_s="60", max_new_tokens="4", warmup=0, device="cpu", band_percent="5")
    assert [a.label for a in request.arms if a.assisted] == ["prompt-lookup (k=1)", "prompt-lookup (k=2)"]
    assert (request.repeats, request.max_time_s, request.band, request.stop_rule) == (5, 60.0, 0.05, "clear")
    defaults = tune_request_from_form(target="bundled:gemma-3-270m", prompt="")
    assert (defaults.repeats, defaults.max_time_s) == (30, 600.0)
    assert defaults.prompt  # the target's preset prompt
    # Empty assistants: the presets' for the target, so the bundled target's assistant drafts in some candidates.
    assert any(getattr(a, "assistant", None) == "bundled:smollm2-135m-instruct" for a in defaults.arms)


@pytest.fixture
def vllm_found(monkeypatch):
    """vLLM's finder finds it (server.find_python), as on a server with ASSISTLAB_VLLM_PYTHON set up."""
    from assistlab.engines.vllm import server

    monkeypatch.setenv(server.PYTHON_VAR, "/opt/vllm-venv/bin/python")
    monkeypatch.setattr(server, "find_python", lambda **_: server.VllmPython("/opt/vllm-venv/bin/python", "0.32",
                                                                             None, None))


@pytest.fixture
def vllm_absent(monkeypatch):
    """No vLLM on this server: ASSISTLAB_VLLM_PYTHON unset."""
    from assistlab.engines.vllm import server

    monkeypatch.delenv(server.PYTHON_VAR, raising=False)


def test_the_ticks_narrow_the_families_and_untouched_they_are_the_default_search(vllm_found):
    from assistlab.ui.tune_fields import default_families, family_choices

    keys = [key for _words, key in family_choices()]
    assert {"transformers auto", "transformers prompt-lookup", "vllm ngram", "vllm draft_model"} <= set(keys)
    assert "transformers early-exit" not in keys  # it needs a layer named: the candidates box reaches it
    assert default_families() == ["transformers auto", "transformers prompt-lookup", "vllm ngram"]
    base = {"target": "target", "assistants": "org/helper", "max_new_tokens": "4"}
    untouched = tune_request_from_form(**base, families=default_families())
    assert untouched.arms == tune_request_from_form(**base).arms
    # vLLM's tick is passed over while the Engines choice leaves vLLM out; the API takes text with commas too.
    only = tune_request_from_form(**base, families="transformers prompt-lookup, vllm ngram")
    assert {a.strategy for a in only.arms if a.assisted} == {"prompt-lookup"}
    # Untouched ticks let the candidates box name a family not ticked by default; changed ticks do not.
    assert tune_request_from_form(**base, engines="vllm", candidates="vllm draft_model",
                                  families=default_families()).arms[1].method == "draft_model"
    with pytest.raises(InputError) as caught:
        checked(lambda: tune_request_from_form(**base, candidates="auto", families=["transformers prompt-lookup"]))
    assert str(caught.value).startswith("Candidates to try names transformers auto, which “Families to try” leaves "
                                        "out")
    assert caught.value.field == "candidates"  # kept for the page to point at its box
    with pytest.raises(InputError) as caught:
        checked(lambda: tune_request_from_form(**base, families=[]), page=False)
    assert str(caught.value).startswith("families leaves nothing to search: tick at least one family")


def test_families_that_cannot_run_here_open_unticked_with_the_reason_beside_them(vllm_absent):
    from assistlab.ui.tune_fields import (HINTS, NOT_HERE, cannot_run, default_families, families_from_ticks,
                                          families_hint, family_choices)

    reasons = cannot_run()
    assert set(reasons) == {"vllm ngram", "vllm draft_model", "vllm mtp", "vllm suffix"}
    # vLLM's ngram, searched by default, opens unticked; transformers' families as before.
    assert default_families(reasons) == ["transformers auto", "transformers prompt-lookup"]
    labels = dict((key, words) for words, key in family_choices(reasons))
    assert all(labels[key].endswith(f": {NOT_HERE}") for key in reasons)
    assert not labels["transformers prompt-lookup"].endswith(NOT_HERE)
    hint = families_hint(reasons)
    assert hint.startswith(HINTS["families"])
    assert hint.count("vLLM families: vLLM is not installed on this server (ASSISTLAB_VLLM_PYTHON is not set).") == 1
    # Ticks left as they opened are the default search still (vLLM named in the candidates box is then allowed,
    # and fails, if chosen, with the finder's sentence when the search starts); so are the declared defaults.
    engines = ("transformers", "vllm")
    assert families_from_ticks(default_families(reasons), engines) is None
    assert families_from_ticks(["transformers auto", "transformers prompt-lookup", "vllm ngram"], engines) is None


def test_the_tab_opens_with_the_families_that_can_run_here_ticked(vllm_absent):
    """The page itself: its ticks unticked where vLLM is absent, and the reason in the ticks' info line."""
    from assistlab import ui
    from assistlab.engines.transformers.models import ModelStore

    demo = ui.build_app(ModelStore(max_models=1))
    ticks = next(c for c in demo.blocks.values() if getattr(c, "elem_id", None) == "al-tune-families")
    assert ticks.value == ["transformers auto", "transformers prompt-lookup"]
    assert "vLLM families: vLLM is not installed on this server" in ticks.info
    assert any(label.startswith("vLLM's n-gram lookup") and "cannot run on this server" in label
               for label, _key in ticks.choices)


def test_a_target_without_mtp_layers_says_so_beside_vllm_s_mtp_tick(allowed_models):
    from assistlab.ui.tune_fields import NOT_HERE, cannot_run, families_hint, family_choices

    reasons = cannot_run("target", {"transformers": None, "vllm": None})  # vLLM found; the tiny target has none
    assert reasons == {"vllm mtp": "target has no MTP layers"}
    labels = {key: words for words, key in family_choices(reasons)}
    assert labels["vllm mtp"].endswith(NOT_HERE) and not labels["vllm ngram"].endswith(NOT_HERE)
    assert families_hint(reasons).endswith("vLLM mtp: target has no MTP layers.")


@pytest.mark.parametrize(("values", "page_words", "api_words"), [
    ({"candidates": "bogus"}, "Candidates to try: no family 'bogus'", "candidates: no family 'bogus'"),
    ({"candidates": "auto:num_assistant_tokens=3", "assistants": "none"},
     "give one with “Assistant models to try”", "give one with assistants"),
    ({"repeats": "five"}, "Most repetitions must be a whole number", "repeats must be a whole number"),
    ({"max_time_s": "-1"}, "Most seconds of timed runs must be more than 0", "max_time_s must be more than 0"),
])
def test_a_refusal_names_the_box_on_the_page_and_the_parameter_in_the_api(values, page_words, api_words):
    for page, words in ((True, page_words), (False, api_words)):
        with pytest.raises(InputError) as caught:
            checked(lambda: tune_request_from_form(target="target", **values), page=page)
        assert words in str(caught.value), str(caught.value)
        assert "--" not in str(caught.value)


@pytest.fixture(scope="module")
def client(models_dir, store, launch_app, tmp_path_factory):
    from gradio_client import Client

    from assistlab.history import History

    history = History(f"sqlite:///{tmp_path_factory.mktemp('tune') / 'history.sqlite3'}", max_entries=None)
    with launch_app(models_dir, store, history=history) as url:
        yield Client(url, verbose=False)


def test_tune_runs_a_search_to_its_sentence_and_the_history_keeps_it_as_a_tuner_s_run(client, known_latencies):
    """Latencies set so the answer is known (k=1 twice as fast as plain, k=2 behind it): the search through the
    API ends clear at its one look, deploys k=1, and the history and the leaderboard keep that pick."""
    known_latencies.update({"plain": 1.0, "prompt-lookup (k=1)": 0.5, "prompt-lookup (k=2)": 0.8})
    report, sentence = client.predict(target="target", assistants="none", candidates=CANDIDATES, prompt=PROMPT,
                                      max_new_tokens=4, repeats=4, warmup=0, device="cpu", api_name="/tune")
    tune = report["tune"]
    assert sentence == tune["sentence"] and sentence.startswith("Use prompt lookup with 1 token: ")
    assert [c["arm"] for c in tune["candidates"]] == ["prompt-lookup (k=1)", "prompt-lookup (k=2)"]
    assert tune["repetitions"] == 4 and report["status"] == "complete" and tune["outcome"] == "clear"
    assert "clearly slower than prompt-lookup (k=1), the leader" in tune["candidates"][1]["why"]
    rec, deploy = tune["recommendation"], tune["deploy"]
    assert rec["arm"] == "prompt-lookup (k=1)" and rec["interval"]["ci_low"] > 1.0
    # "Deploy it" for a pick clearly faster than plain, with its own code.
    assert deploy["plain"] is False and deploy["sentence"].startswith("Deploy it: prompt lookup with 1 token, ")
    assert "prompt_lookup_num_tokens=1" in deploy["snippet"] and "max_new_tokens=4)" in deploy["snippet"]
    run_id = report["saved"]["id"]
    assert run_id, report["saved"]
    listing = client.predict(api_name="/history")
    entry = next(e for e in listing["entries"] if e["id"] == run_id)
    assert entry["kind"] == "tune" and entry["recommendation"] == sentence
    # The leaderboard keeps the search's pick only: the other candidate was timed only until it was behind.
    labels = [row["label"] for section in client.predict(api_name="/leaderboard") for row in section["rows"]]
    assert len(labels) == 1 and "k=1" in labels[0], labels


def test_tune_refuses_a_bad_candidates_box_in_one_sentence_naming_it(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        client.predict(target="target", assistants="none", candidates="prompt-lookup:k=1", api_name="/tune")
    message = str(caught.value)
    assert message.startswith("candidates: transformers prompt-lookup") and "has no setting 'k'" in message and "Traceback" not in message
