"""The band of no practical difference on the page and the API (`band_percent`): percent in, the request's share
out, a bad value refused in one sentence naming the box, and the stopping rule using what was typed."""

from __future__ import annotations

import pytest

from assistlab.config import NO_DIFFERENCE_BAND
from assistlab.errors import InputError
from assistlab.measure import stopping
from assistlab.results.report import Report
from assistlab.ui import app as app_module
from assistlab.ui import suite_tab
from assistlab.ui.api_parameters import COMPARE_API, COMPARE_SUITE_API, SUITE_PARAMETERS
from assistlab.ui.fields import HINTS, LABELS, in_page_words, request_from_form

PROMPT = "write me a long essay on deep learning"


def form(**kwargs):
    return request_from_form(**{**dict(target="target", assistant="assistant-same", strategy="prompt-lookup",
                                       prompt=PROMPT, also_prompt_lookup=False), **kwargs})


def _suite_request(**typed):
    """The comparison /compare_suite's function makes from its parameters (each left out at its default), split
    as the endpoint splits them (ui/app.py): the workload's own, the per-prompt rule, the comparison's."""
    values = {p.name: p.default for p in COMPARE_SUITE_API}
    values.update(target="target", assistant="assistant-same", strategy="prompt-lookup", also_prompt_lookup=False,
                  suite="file", prompts_text="write me a long essay on deep learning\n",
                  prompts_filename="prompts.txt", **typed)
    suite = {p.name: values.pop(p.name) for p in SUITE_PARAMETERS}
    until_clear = values.pop("until_clear")
    text, filename = suite.pop("prompts_text"), suite.pop("prompts_filename")
    bench, _plan = suite_tab.suite_plan_from_api(values, {"source": suite.pop("suite"), **suite}, text, filename,
                                                 until_clear)
    return bench


def test_both_routes_take_the_band_in_percent_empty_by_default():
    for api in (COMPARE_API, COMPARE_SUITE_API):
        band = next(p for p in api if p.name == "band_percent")
        assert (band.annotation, band.default) == (float | None, None)
    # A band sent through /compare_suite's function is the request's share; left out, the default band.
    assert _suite_request(band_percent=7).band == pytest.approx(0.07)
    assert _suite_request().band == pytest.approx(NO_DIFFERENCE_BAND)
    assert _suite_request(band_percent="12.5", until_clear=True).band == pytest.approx(0.125)


@pytest.mark.parametrize("typed, share", [(None, NO_DIFFERENCE_BAND), ("", NO_DIFFERENCE_BAND),
                                          ("  ", NO_DIFFERENCE_BAND), ("5", 0.05), (" 1.5 ", 0.015), (10, 0.10),
                                          (0.5, 0.005)])
def test_percent_typed_becomes_the_requests_share(typed, share):
    assert form(band_percent=typed).band == pytest.approx(share)


@pytest.mark.parametrize("typed", ["0", "-3", "50", "75", "three", "nan", "3%", True, False])
def test_a_bad_band_is_one_sentence_naming_the_box(typed):
    with pytest.raises(InputError) as caught:
        form(band_percent=typed)
    message = in_page_words(str(caught.value))
    assert message.startswith(LABELS["band_percent"]) and "3 means within ±3% of plain" in message
    assert "band_percent" not in message and message.count("\n") == 0


def test_the_stopping_rule_records_and_uses_the_band_typed():
    request = form(band_percent="10").resolved("cpu")
    assert request.stopping_rule == "clear"
    report = Report(request=request.to_dict(), environment={}, arms=[])
    assert stopping.record(request, report)["band"] == pytest.approx(0.10)
    # A speedup known to lie within 0.93x..1.06x is inside ±10% but not inside the default ±3%.
    from assistlab.results import sequential
    sequence = {"ci_low": 0.93, "ci_high": 1.06}
    assert sequential.settled(sequence, request.band) == sequential.SAME
    assert sequential.settled(sequence, NO_DIFFERENCE_BAND) is None


def test_the_hint_says_when_it_applies_and_its_default():
    assert "no count set" in HINTS["band_percent"] and "3%" in HINTS["band_percent"]
    # Worded without "Repetitions", so the Repetitions box stays the only field found by that word.
    assert "repetitions" not in HINTS["band_percent"].lower()


def test_the_api_hands_the_band_to_the_request_and_refuses_a_bad_one(api_client, monkeypatch):
    from gradio_client.exceptions import AppError

    seen = []
    real = app_module.request_from_form

    def recording(**values):
        seen.append(real(**values))
        raise InputError("recorded, not run")  # the test wants the request, not a comparison

    monkeypatch.setattr(app_module, "request_from_form", recording)
    settings = dict(target="target", strategy="prompt-lookup", prompt=PROMPT, also_prompt_lookup=False)
    with pytest.raises(AppError, match="recorded, not run"):
        api_client.predict(**settings, band_percent=7, api_name="/compare")
    assert [r.band for r in seen] == [pytest.approx(0.07)]
    monkeypatch.setattr(app_module, "request_from_form", real)
    with pytest.raises(AppError) as caught:
        api_client.predict(**settings, band_percent=80, api_name="/compare")
    assert "band_percent must be a number of percent above 0 and below 50" in str(caught.value)
    assert "Traceback" not in str(caught.value)
