"""The page when the history misbehaves or a person stops early: the history's sentences reach the page, Open
survives a pruned folder, a stop inside the first repetition saves nothing."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from browsing import ARGS, CHROMIUM

from assistlab.history import History


QUICK = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "prompt": "deep learning",
         "max_new_tokens": 8, "repeats": 1, "warmup": 0}


def _damage(path: Path) -> None:
    with open(path, "r+b") as f:  # in place: the same file, as a failing disk or a stray write would leave it
        f.write(b"this is no longer a database " * 40)


def _browser(p):
    return p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium")
def test_history_sentences_reach_the_page_and_open_survives_a_pruned_folder(models_dir, store, launch_app,
                                                                             tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from gradio_client import Client

    history = History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    reports = tmp_path / "reports"
    with launch_app(models_dir, store, history=history, reports_dir=reports) as url, \
            sync_api.sync_playwright() as p:
        run_id = Client(url, verbose=False).predict(**QUICK, api_name="/compare")[0]["saved"]["id"]
        browser = _browser(p)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(url)
            page.get_by_role("tab", name="History").click()
            page.wait_for_selector("#al-history-list table")
            page.get_by_role("button", name="Open", exact=True).click()
            page.locator("#al-history-status").get_by_text("Choose one or two saved comparisons to open.").wait_for()
            page.get_by_role("button", name="Delete", exact=True).click()
            page.locator("#al-history-status").get_by_text("Choose the saved comparisons to delete.").wait_for()
            assert page.get_by_text("Error", exact=True).count() == 0
            # a damaged file: the listing and the board say so
            shutil.rmtree(reports / "saved", ignore_errors=True)  # as the hourly pruning did
            page.goto(f"{url}?run={run_id}")
            page.wait_for_selector("#al-saved-left-speedup .js-plotly-plot")
            history.close()
            _damage(tmp_path / "h.sqlite3")
            page.get_by_role("button", name="Show saved comparisons").click()
            page.locator("#al-history-list").get_by_text("damaged").wait_for()
            page.get_by_role("tab", name="Leaderboard").click()
            page.get_by_role("button", name="Show the leaderboard").click()
            page.locator("#al-board").get_by_text("move the file aside").wait_for()
        finally:
            browser.close()


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium")
def test_a_page_stop_inside_the_first_repetition_saves_nothing(models_dir, store, launch_app, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from browsing import choose

    history = History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    with launch_app(models_dir, store, history=history) as url, sync_api.sync_playwright() as p:
        browser = _browser(p)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(url)
            page.wait_for_selector("#al-run")
            # 256 tokens: each run of the tiny models lasts long enough for the Stop to land inside the assisted
            # arm's run (with 32 the first repetition could end between the poll and the click, and was saved).
            choose(page, "target", "assistant-same", tokens=256, repeats=40)
            page.click("#al-run")
            # plain has run in the first counted repetition; an assisted arm is timing now
            seen, deadline = [], time.monotonic() + 240
            while not re.search(r"Repetition 1 of \d+: (?!plain)", seen[-1] if seen else ""):
                assert time.monotonic() < deadline, seen[-20:]
                text = page.inner_text("#al-progress")
                if not seen or text != seen[-1]:
                    seen.append(text)
                page.wait_for_timeout(100)
            page.click("#al-stop")
            page.wait_for_selector("#al-progress .al-stopped", timeout=60_000)
            page.wait_for_timeout(1500)
            assert page.locator("#al-saved").count() == 0
            assert history.count() == 0
            text = page.inner_text("#al-progress")
            assert re.search(r"Stopped: you pressed Stop, after 0 of", text), text
        finally:
            browser.close()
