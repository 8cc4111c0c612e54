"""What a person does in a real browser, and what the page must then say: Run pressed twice, a run that fails
after one that worked, a prompt longer than allowed, a pair typed over a preset, history rows clicked."""

from __future__ import annotations

import re

import pytest
from browsing import CHROMIUM, pick_models, set_run_size

from assistlab.config import LIMITS
from assistlab.history import History

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

# Every text the progress line shows, recorded as it changes (a step can be on screen for a moment only).
WATCH_PROGRESS = """() => {
  window.__progress = [];
  const box = document.querySelector('#al-progress');
  new MutationObserver(() => window.__progress.push(box.innerText)).observe(
    box, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return History(f"sqlite:///{tmp_path_factory.mktemp('story') / 'history.sqlite3'}", max_entries=None)


@pytest.fixture(scope="module")
def app_url(models_dir, store, launch_app, history):
    with launch_app(models_dir, store, history=history) as url:
        yield url


@pytest.fixture
def page(browser, app_url):
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(app_url)
        page.wait_for_selector("#al-run")
        yield page
    finally:
        context.close()


def press_twice(page, selector: str) -> None:
    """Two presses a moment apart, where the button is, as a person's impatient double press."""
    page.locator(selector).scroll_into_view_if_needed()
    box = page.locator(selector).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.click(x, y)
    page.wait_for_timeout(400)
    page.mouse.click(x, y)


def test_run_pressed_twice_runs_once_with_run_off_until_it_ends_then_a_failure_turns_it_on_again(page, history):
    from playwright.sync_api import expect

    before = history.list().total
    pick_models(page, "target", "assistant-same")
    page.fill("#al-prompt textarea", "the quick brown fox jumps over the lazy dog")
    set_run_size(page, 24, 3)
    page.evaluate(WATCH_PROGRESS)
    press_twice(page, "#al-run")
    expect(page.locator("#al-run")).to_be_disabled(timeout=5_000)
    page.get_by_role("tab", name="Workloads").click()  # the workload's Run is off too: one run at a time
    expect(page.locator("#al-suite-run")).to_be_disabled()
    page.get_by_role("tab", name="Compare").click()
    page.wait_for_selector("#al-progress #al-saved", timeout=120_000)
    expect(page.locator("#al-run")).to_be_enabled(timeout=10_000)
    page.wait_for_timeout(1_500)  # a second run, had the second press started one, would show by now
    assert history.list().total == before + 1
    run_id = re.search(r"as ([0-9a-f]{16})", page.inner_text("#al-saved")).group(1)
    saved = history.get(run_id)[1]
    assert saved["request"]["prompt"] == page.input_value("#al-prompt textarea")
    assert saved["counted_repetitions"] == 3
    # Before any run was timed, the progress line said roughly how long, and that it was an estimate.
    seen = page.evaluate("window.__progress")
    assert any("roughly" in t and "an estimate from the prompt length" in t for t in seen), seen

    # A failure after a success: a target that is no model. The message names the box; Run comes back.
    page.locator("#al-target input").fill("not a model!!")
    page.locator("#al-target input").press("Enter")
    page.click("#al-run")
    page.wait_for_selector("#al-progress .al-failed")
    assert "Target model: 'not a model!!' is not a hub id" in page.inner_text("#al-progress")
    expect(page.locator("#al-run")).to_be_enabled(timeout=10_000)
    assert history.list().total == before + 1


def test_a_pair_typed_over_a_preset_makes_the_preset_say_custom(page):
    preset = page.get_by_label("Preset pair")
    assert preset.input_value().startswith("Bundled, offline")
    pick_models(page, "target", "assistant-other")
    page.wait_for_function("() => document.querySelector('#al-target input').value === 'target'")
    page.wait_for_timeout(500)
    assert preset.input_value() == "Custom"


def test_a_prompt_over_the_limit_is_refused_naming_the_box_not_cut(page, history):
    before = history.list().total
    pick_models(page, "target", "assistant-same")
    long_prompt = "word " * 8_000  # 40,000 characters
    page.fill("#al-prompt textarea", long_prompt)
    assert len(page.input_value("#al-prompt textarea")) == 40_000
    page.click("#al-run")
    page.wait_for_selector("#al-progress .al-failed")
    assert (f"Prompt: the text has 40,000 characters; the limit is {LIMITS['prompt_chars']:,}. Shorten it."
            in page.inner_text("#al-progress"))
    assert history.list().total == before


def test_clicking_a_history_row_opens_it_in_view_with_a_full_link_to_copy(page, history, app_url):
    if not history.list().total:  # this test alone: save one comparison the way the API does
        from gradio_client import Client

        Client(app_url, verbose=False).predict(target="target", assistant="assistant-same", prompt="hello there",
                                               max_new_tokens=4, repeats=1, warmup=0, also_prompt_lookup=False,
                                               api_name="/compare")
    newest = history.list().entries[0]
    page.get_by_role("tab", name="History").click()
    page.get_by_role("button", name="Show saved comparisons").click()
    row = page.locator(f"#al-history-list tr[data-run='{newest.id}']")
    row.locator("td").nth(2).click()  # the target's cell, as a person clicks a row
    page.wait_for_selector("#al-saved-left-speedup .js-plotly-plot")
    # The opened comparison is brought to the top of the window, not left below the fold.
    page.wait_for_function("() => Math.abs(document.querySelector('#al-saved-left').getBoundingClientRect().top) < 150",
                           timeout=10_000)
    caption = page.locator("#al-saved-left-caption")
    full = f"{app_url.rstrip('/')}/?run={newest.id}"
    page.wait_for_function("u => document.querySelector('#al-saved-left-caption a.al-permalink').href === u", arg=full)
    assert full in caption.inner_text()
    caption.get_by_role("button", name="Copy link").click()
    caption.get_by_role("button", name="Copied").wait_for(timeout=5_000)
    # The chooser names the opened one by what tells it apart, not only by id, date and target.
    chosen = page.locator("#al-history-chosen").inner_text()
    assert f"{newest.new_tokens} tokens" in chosen and newest.assistants in chosen


def test_a_workload_is_saved_opens_from_history_in_the_workloads_panels_and_ranks_by_workload(page, history,
                                                                                               tmp_path):
    import json

    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"category": "fox", "prompt": "the quick brown fox"},
        {"category": "essay", "prompt": "write me a long essay"},
    ]))
    before = history.list().total
    pick_models(page, "target", "assistant-same")
    set_run_size(page, 4, 1)
    page.get_by_role("tab", name="Workloads").click()
    page.get_by_text("My prompts (a file)").click()
    page.locator("#al-suite-file input[type=file]").set_input_files(str(path))
    page.wait_for_timeout(500)
    page.click("#al-suite-run")
    page.wait_for_selector("#al-suite-progress .al-done, #al-suite-progress .al-failed", timeout=300_000)
    assert "Complete" in page.inner_text("#al-suite-progress"), page.inner_text("#al-suite-progress")
    page.wait_for_selector("#al-suite-progress #al-saved")
    run_id = re.search(r"as ([0-9a-f]{16})", page.inner_text("#al-saved")).group(1)
    assert history.list().total == before + 1
    entry, report = history.get(run_id)
    assert report["kind"] == "suite" and entry.workload and "mine.jsonl" in entry.workload

    # A fresh page (the old result gone), then History: the row opens the workload in the Workloads panels.
    page.reload()
    page.wait_for_selector("#al-run")
    page.get_by_role("tab", name="History").click()
    page.get_by_role("button", name="Show saved comparisons").click()
    page.locator(f"#al-history-list tr[data-run='{run_id}'] td").nth(2).click()
    page.wait_for_selector("#al-plot-suite .js-plotly-plot", timeout=30_000)
    summary = page.inner_text("#al-suite-results")
    assert "fox (1 prompt)" in summary and "Overall (2 prompts)" in summary
    assert page.locator("#al-suite-results #al-texts .al-text-card").count() >= 2
    assert run_id in page.inner_text("#al-suite-progress")

    # The leaderboard ranks it under its workload, apart from single-prompt comparisons.
    page.get_by_role("tab", name="Leaderboard").click()
    page.get_by_role("button", name="Show the leaderboard").click()
    page.wait_for_selector("#al-board table")
    assert f"workload {entry.workload}" in page.inner_text("#al-board")
