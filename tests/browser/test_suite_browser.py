"""The Workloads tab in a real browser: upload a prompts file, run it, read the per-category results."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from browsing import ARGS, CHROMIUM, choose, run_prompts_file

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def page(models_dir, store, launch_app):
    sync_api = pytest.importorskip("playwright.sync_api")
    with launch_app(models_dir, store) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
            page = context.new_page()
            page.set_default_timeout(30_000)
            page.goto(url)
            page.wait_for_selector("#al-run")
            yield page
        finally:
            browser.close()


def test_a_prompts_file_runs_and_shows_categories_and_texts(page, tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"category": "fox", "prompt": "the quick brown fox"},
        {"category": "fox", "prompt": "the lazy dog"},
        {"category": "essay", "prompt": "write me a long essay"},
    ]))
    choose(page, "target", "assistant-other", tokens=6, repeats=2)
    run_prompts_file(page, path)
    page.wait_for_selector("#al-suite-download-json", state="visible", timeout=300_000)
    assert "Complete: 3 of 3 prompts measured" in page.inner_text("#al-suite-progress")
    assert page.locator("#al-plot-suite .js-plotly-plot").count() == 1
    # Two categories and overall, two assisted arms each (universal and prompt lookup), plus the header.
    assert page.locator("#al-suite-table tr").count() == 1 + 3 * 2
    assert page.locator("#al-suite-prompts tr").count() == 1 + 3
    summary = page.inner_text("#al-suite-results")
    assert "fox (2 prompts):" in summary and "Overall (3 prompts):" in summary
    cards = page.locator("#al-suite-results #al-texts .al-text-card")
    assert cards.count() == 3 and "plain" in cards.nth(0).inner_text()
    first = cards.nth(0).inner_text()
    page.click("#al-suite-pick input")
    page.fill("#al-suite-pick input", "essay")  # the dropdown filters its choices as one types
    page.keyboard.press("Enter")
    page.wait_for_function(
        "t => document.querySelector('#al-suite-results #al-texts .al-text-card').innerText !== t", arg=first, timeout=10_000
    )
    with page.expect_download() as download:
        page.click("#al-suite-download-json")
    report = json.loads(Path(download.value.path()).read_text())
    assert report["suite"]["name"] == "mine.jsonl" and report["suite"]["overall"]["prompts"] == 3
    folder = Path(os.environ.get("ASSISTLAB_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.locator("#al-tab-workloads").screenshot(path=str(folder / "workloads.png"))
    assert (folder / "workloads.png").stat().st_size > 10_000


def test_each_prompt_until_its_answer_is_clear_is_one_box_and_says_what_ended_each(page, tmp_path):
    # A person ticks the box after setting a count: the count is then the most per prompt, and the closing line
    # says how many prompts reached a clear answer (3 repetitions are too few for any, so none did). A page of its
    # own: the module's page holds the previous test's file.
    path = tmp_path / "two.txt"
    path.write_text("the quick brown fox\n\nwrite me a long essay")
    context = page.context.browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    try:
        mine = context.new_page()
        mine.set_default_timeout(30_000)
        mine.goto(page.url)
        mine.wait_for_selector("#al-run")
        choose(mine, "target", "assistant-other", tokens=6, repeats=3)
        mine.get_by_role("tab", name="Workloads").click()
        box = mine.locator("#al-suite-until-clear input[type=checkbox]")
        assert not box.is_checked()  # a fixed count per prompt unless asked
        mine.get_by_text("My prompts (a file)").click()
        mine.locator("#al-suite-file input[type=file]").set_input_files(str(path))
        box.check()
        mine.wait_for_timeout(500)
        mine.click("#al-suite-run")
        mine.wait_for_selector("#al-suite-download-json", state="visible", timeout=300_000)
        progress = mine.inner_text("#al-suite-progress")
        assert "Complete: 2 of 2 prompts measured" in progress
        assert "0 of 2 prompts reached a clear answer; 2 were not clear after 3 repetitions" in progress
        with mine.expect_download() as download:
            mine.click("#al-suite-download-json")
        report = json.loads(Path(download.value.path()).read_text())
    finally:
        context.close()
    assert report["stopping"]["rule"] == "clear" and report["stopping"]["max_repetitions"] == 3
    assert [p["ended_by"] for p in report["stopping"]["prompts"].values()] == ["repetitions", "repetitions"]
