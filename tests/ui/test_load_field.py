"""The Load field (`concurrency`): the form's text becomes the request's levels, on the page and both API routes."""

from __future__ import annotations

import pytest

from assistlab.errors import InputError
from assistlab.ui import app as app_module
from assistlab.ui import suite_tab
from assistlab.ui.api_parameters import COMPARE_API, COMPARE_SUITE_API
from assistlab.ui.fields import HINTS, LABELS, in_page_words, request_from_form

PROMPT = "write me a long essay on deep learning"


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch):
    monkeypatch.setenv("ASSISTLAB_VLLM_URLS", "http://127.0.0.1")


def form(**kwargs):
    settings = dict(target="target", assistant="assistant-same", strategy="prompt-lookup", prompt=PROMPT,
                    also_prompt_lookup=False, engines="vllm", vllm_methods=["ngram"])
    return request_from_form(**{**settings, **kwargs})


def test_both_routes_take_concurrency_as_text_defaulting_to_none():
    for api in (COMPARE_API, COMPARE_SUITE_API):
        load = next(p for p in api if p.name == "concurrency")
        assert (load.annotation, load.default) == (str, "")
        names = [p.name for p in api]  # each field added since comes after it: earlier places are kept
        tail = names[names.index("concurrency"):]
        assert tail in (["concurrency", "band_percent"], ["concurrency", "band_percent", "until_clear"])


def test_the_load_text_becomes_sorted_levels_and_empty_is_none():
    assert form(concurrency="8, 2,4,1,2").concurrency == (1, 2, 4, 8)
    assert form(concurrency="").concurrency == ()
    assert form(concurrency="   ").concurrency == ()
    assert form().concurrency == ()
    assert form(concurrency="4").to_dict()["concurrency"] == [4]


@pytest.mark.parametrize("text, words", [("0,2", "from 1 to 256"), ("1,two", "from 1 to 256"),
                                         ("1,2,3,4,5,6,7,8,9", "at most 8 load levels"), ("300", "from 1 to 256")])
def test_a_bad_level_is_one_sentence_naming_the_load_box(text, words):
    with pytest.raises(InputError) as caught:
        form(concurrency=text)
    message = in_page_words(str(caught.value))
    assert words in message and message.startswith(LABELS["concurrency"])
    assert message.count("\n") == 0


def test_levels_for_a_transformers_only_comparison_are_refused_naming_the_box():
    with pytest.raises(InputError) as caught:
        form(engines="transformers", concurrency="1,4")
    message = in_page_words(str(caught.value))
    assert message.startswith(LABELS["concurrency"]) and "vLLM" in message


def test_the_hint_says_it_applies_to_vllm_arms():
    assert "vLLM arms only" in HINTS["concurrency"] and "1 to 256" in HINTS["concurrency"]


@pytest.mark.parametrize("route, module", [("/compare", app_module), ("/compare_suite", suite_tab)])
def test_each_route_hands_its_concurrency_to_the_request(api_client, monkeypatch, route, module):
    from gradio_client.exceptions import AppError

    seen = []
    real = module.request_from_form

    def recording(**values):
        request = real(**values)
        seen.append(request)
        raise InputError("recorded, not run")  # the test wants the request, not a comparison

    monkeypatch.setattr(module, "request_from_form", recording)
    settings = dict(target="target", strategy="prompt-lookup", also_prompt_lookup=False, engines="vllm",
                    vllm_methods="ngram", concurrency="4,1")
    if route == "/compare":
        settings["prompt"] = PROMPT
    with pytest.raises(AppError, match="recorded, not run"):
        api_client.predict(**settings, api_name=route)
    assert [r.concurrency for r in seen] == [(1, 4)]


def test_a_route_answers_a_bad_level_in_one_sentence(api_client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        api_client.predict(target="target", strategy="prompt-lookup", prompt=PROMPT, also_prompt_lookup=False,
                               concurrency="1,999", api_name="/compare")
    message = str(caught.value)
    assert "each load level is a whole number of requests at once from 1 to 256" in message
    assert "Traceback" not in message
