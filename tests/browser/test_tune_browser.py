"""The tuner in a real browser (issue 34): a search on the tiny models runs to its sentence, the deploy snippet is
copied with the code box's button, the saved search opens again from History in the tuner's tab, and a second
search stopped mid-way keeps what was measured and says "not settled"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browsing import CHROMIUM, opened, pick_models

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    from assistlab.history import History

    return History(f"sqlite:///{tmp_path_factory.mktemp('tune') / 'history.sqlite3'}", max_entries=None)


@pytest.fixture(scope="module")
def app_url(models_dir, store, launch_app, history):
    with launch_app(models_dir, store, history=history) as url:
        yield url


@pytest.fixture
def page(browser, app_url):
    with opened(browser, app_url, accept_downloads=True, permissions=["clipboard-read", "clipboard-write"]) as page:
        yield page


def _fill(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} textarea, #{elem_id} input").first
    box.fill(value)
    box.press("Tab")
    assert box.input_value() == value


def _search(page, candidates: str, repeats: str) -> None:
    """The form's target, prompt and a few new tokens, then the tab's boxes, as a person types them."""
    pick_models(page, "target")
    page.fill("#al-prompt textarea", PROMPT)
    page.locator("#al-settings").get_by_text("Settings", exact=True).click()
    for label, value in (("New tokens per run", "4"), ("Warm-up runs", "0")):
        box = page.get_by_label(label)
        for _ in range(5):  # the accordion mounts its contents as it opens and may reset a value typed then
            box.fill(value)
            box.press("Tab")
            page.wait_for_timeout(150)
            if box.input_value() == value:
                break
    page.get_by_role("tab", name="Find the best setting").click()
    _fill(page, "al-tune-assistants", "none")
    _fill(page, "al-tune-candidates", candidates)
    _fill(page, "al-tune-repeats", repeats)
    page.click("#al-tune-run")


def _report(page) -> dict:
    with page.expect_download() as download:
        page.click("#al-tune-download")
    return json.loads(Path(download.value.path()).read_text())


def test_a_search_runs_to_its_sentence_its_snippet_is_copied_and_it_opens_again_from_history(page, history, app_url):
    _search(page, "prompt-lookup:prompt_lookup_num_tokens=1,2", "4")
    page.wait_for_selector("#al-tune-download", state="visible", timeout=240_000)
    sentence = page.inner_text("#al-tune-sentence")
    assert re.match(r"^(Use |Not settled within the budget; best so far: )prompt lookup with [12] tokens?: ", sentence)
    assert sentence.rstrip(".") in page.inner_text("#al-tune-progress")  # the progress line ends on the answer
    page.wait_for_selector("#al-plot-tune .js-plotly-plot", timeout=30_000)  # plotly draws after gradio mounts it
    assert page.locator("#al-plot-tune .js-plotly-plot").count() == 1
    assert page.locator("#al-tune-table tbody tr").count() == 2
    report = _report(page)
    tune = report["tune"]
    assert tune["sentence"] == sentence and tune["repetitions"] == 4
    # The code box's copy button puts the deploy snippet on the clipboard, as it is in the report.
    page.locator("#al-tune-snippet").get_by_role("button", name=re.compile("copy", re.I)).first.click()
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied.strip() == tune["deploy"]["snippet"].strip()
    assert "prompt_lookup_num_tokens=" in copied and "generate(" in copied

    # Saved as a tuner's run; on a fresh page its History row opens it in this tab, not as a comparison.
    page.wait_for_selector("#al-tune-progress #al-saved")
    run_id = re.search(r"as ([0-9a-f]{16})", page.inner_text("#al-saved")).group(1)
    _entry, saved = history.get(run_id)
    assert saved["tune"]["sentence"] == sentence
    page.reload()
    page.wait_for_selector("#al-run")
    page.get_by_role("tab", name="History").click()
    page.get_by_role("button", name="Show saved comparisons").click()
    row = page.locator(f"#al-history-list tr[data-run='{run_id}']")
    assert "tuner" in row.inner_text()
    row.locator("td").nth(2).click()
    page.wait_for_selector("#al-plot-tune .js-plotly-plot", timeout=30_000)
    assert page.locator("#al-tab-tune").is_visible()  # the tuner's tab is the one shown
    assert page.inner_text("#al-tune-sentence") == sentence
    assert run_id in page.inner_text("#al-tune-progress")
    assert page.locator("#al-tune-table tbody tr").count() == 2
    assert page.locator("#al-tune-snippet").inner_text().strip()
    # Its link does the same.
    page.goto(f"{app_url.rstrip('/')}/?run={run_id}")
    page.wait_for_selector("#al-plot-tune .js-plotly-plot", timeout=30_000)
    assert page.inner_text("#al-tune-sentence") == sentence and page.locator("#al-tab-tune").is_visible()


def test_stop_mid_search_keeps_what_was_measured_and_says_not_settled(page):
    _search(page, "prompt-lookup:prompt_lookup_num_tokens=1,2,3", "30")
    # The progress line names the candidates still in once a repetition has ended; stop then.
    page.wait_for_function(
        "() => /still in: /.test(document.querySelector('#al-tune-progress')?.innerText || '')", timeout=150_000)
    page.click("#al-tune-stop")
    try:  # generous: on the shared 2-core machine (load 19-34) a tiny run took seconds, not milliseconds
        page.wait_for_selector("#al-tune-download", state="visible", timeout=240_000)
    except Exception:  # what the page said instead, rather than a bare timeout
        raise AssertionError(page.inner_text("#al-tune-progress")) from None
    sentence = page.inner_text("#al-tune-sentence")
    assert sentence.startswith("Not settled within the budget; best so far: "), sentence
    assert page.locator("#al-tune-progress .al-stopped").count() == 1
    assert "you pressed Stop" in page.inner_text("#al-tune-progress")
    rows = page.locator("#al-tune-table tbody tr")
    assert rows.count() == 3
    report = _report(page)
    tune = report["tune"]
    assert report["status"] == "stopped" and tune["settled"] is False and tune["outcome"] == "not settled"
    assert 1 <= tune["repetitions"] < 30
    assert all(c["runs"] >= 1 for c in tune["candidates"])  # what was measured is kept


def test_the_families_ticks_narrow_the_search_and_none_ticked_is_a_sentence(page):
    pick_models(page, "target")
    page.fill("#al-prompt textarea", PROMPT)
    page.get_by_role("tab", name="Find the best setting").click()
    ticks = page.locator("#al-tune-families")
    # Untouched: the families each engine searches by default are ticked, early exit is not offered.
    labels = ticks.locator("label")
    assert labels.count() >= 4 and "early exit" not in ticks.inner_text()
    lookup = labels.filter(has_text="Prompt lookup").locator("input")
    assert lookup.is_checked()
    # A mistake: nothing ticked; the sentence names the box and nothing runs.
    for i in range(labels.count()):
        box = labels.nth(i).locator("input")
        if box.is_checked():
            box.uncheck()
    _fill(page, "al-tune-assistants", "none")
    page.click("#al-tune-run")
    page.wait_for_function("() => /Families to try/.test(document.querySelector('#al-tune-progress')?.innerText "
                           "|| '')", timeout=30_000)
    assert "tick at least one family" in page.inner_text("#al-tune-progress")
    assert not page.locator("#al-tune-download").is_visible()
    # Prompt lookup alone, its declared values, two repetitions: its candidates only are timed.
    lookup.check()
    _fill(page, "al-tune-repeats", "2")
    page.click("#al-tune-run")
    page.wait_for_selector("#al-tune-download", state="visible", timeout=240_000)
    report = _report(page)
    assert {c["family"] for c in report["tune"]["candidates"]} == {"prompt-lookup"}
    assert report["request"]["target"] == "target"
