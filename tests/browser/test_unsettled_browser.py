"""An unsettled run in a real browser (issue 36 item 2): a run until clear that ended before its answer was clear
says "No clear answer" on the page, in History and on the Leaderboard, never that the runs go on, never "plain (no
assistant helped)", and is never ranked."""

from __future__ import annotations

import re

import pytest
from browsing import CHROMIUM

from assistlab.config import BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.history import History
from assistlab.measure import runner
from assistlab.results.report import unsettled

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium")]


@pytest.fixture(scope="module")
def unsettled_report(models_dir, store):
    """A real run until clear on the tiny models, ended by its most repetitions (2) long before any answer."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
        request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), prompt="one two three one two",
                               max_new_tokens=4, repeats=2, warmup=0, stop_rule="clear")
        report = runner.run_to_report(request, store).to_dict()
    assert unsettled(report), report["stopping"]
    return report


def test_an_unsettled_run_says_no_clear_answer_on_the_page_in_history_and_on_the_board(
        unsettled_report, models_dir, store, launch_app, browser, tmp_path):
    history = History(f"sqlite:///{tmp_path / 'history.sqlite3'}", max_entries=None)
    run_id = history.save(unsettled_report).id
    assert run_id
    with launch_app(models_dir, store, history=history) as url:
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        try:
            page.set_default_timeout(120_000)  # a busy 2-core machine
            page.goto(f"{url}?run={run_id}")
            page.wait_for_selector("#al-saved-left-speedup .js-plotly-plot")
            opened = page.locator("#al-saved-left").inner_text()
            assert "No clear answer: 2 repetitions, the most allowed, ran, before the answer was clear" in opened
            assert "go on" not in opened and "was fastest" not in opened
            # History: said in the same words, never plain as the best; where the file is, and how to use another.
            page.get_by_role("button", name="Show saved comparisons").click()
            page.wait_for_selector("#al-history-list table")
            listing = page.locator("#al-history-list").inner_text()
            assert "no clear answer: the runs ended before it was clear" in listing
            assert "plain (no assistant helped)" not in listing
            where = page.locator("#al-history-where").inner_text()
            assert "history.sqlite3" in where and "ASSISTLAB_DATA_DIR" in where
            # The Leaderboard lists it without a rank.
            page.get_by_role("tab", name="Leaderboard").click()
            page.wait_for_selector("#al-board table")
            board = page.locator("#al-board")
            assert "No clear answer: these comparisons ended before their answer was clear" in board.inner_text()
            ranks = [cell.strip() for cell in board.locator("table tbody tr td:first-child").all_inner_texts()]
            assert ranks and all(rank == "–" for rank in ranks), ranks
            assert not any(re.fullmatch(r"\d+", rank) for rank in ranks)
        finally:
            page.close()
    history.close()
