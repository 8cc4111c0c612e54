"""On a busy machine the answer reads first: one warning line under it, the details one click away (issue 30)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from browsing import ARGS, CHROMIUM, typed

# Burns one core for at most five minutes, so a test that dies leaves nothing running for long.
BURN = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end:\n    pass\n"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]


@pytest.fixture
def burners():
    """One CPU-burning process per core while the test runs: the busy-machine watch must see them."""
    procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(os.cpu_count() or 2)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=10)


def test_a_busy_machine_is_one_line_under_the_answer_with_the_details_a_click_away(models_dir, store, launch_app,
                                                                                 burners):
    sync_api = pytest.importorskip("playwright.sync_api")
    with launch_app(models_dir, store) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(url)
            page.wait_for_selector("#al-run")
            for selector, value in (("#al-target input", "target"), ("#al-assistant input", "assistant-other")):
                page.click(selector)
                page.fill(selector, value)
                page.keyboard.press("Enter")
            page.fill("#al-prompt textarea", "write me a long essay on deep learning")
            page.locator("#al-settings").get_by_text("Settings", exact=True).click()
            for label, value in (("New tokens per run", "4"), ("Repetitions", "2")):
                typed(page, page.get_by_label(label), value)
            page.click("#al-run")
            # While the watch sees the burners, the time left says it may take longer, beside its figure.
            page.get_by_text("longer while the machine is busy").first.wait_for(timeout=240_000)
            page.wait_for_selector("#al-download-json", state="visible", timeout=300_000)

            headline = page.locator("#al-headline")
            warnings = headline.locator(".al-warning")
            assert warnings.count() == 1, headline.inner_html()
            line = warnings.inner_text()
            assert line.startswith("⚠ Measured on a busy machine (others used ") and line.endswith(
                "% of the CPU): the result may not hold on an idle one."), line
            # It stands right under the answer, before any arm's sentence.
            order = headline.evaluate("h => [...h.children].map(c => c.className || c.tagName)")
            assert order[:3] == ["al-lead", "al-warning", "al-warning-details"], order
            details = headline.locator("details.al-warning-details")
            body = details.locator("p").first
            assert not body.is_visible()  # the sentences are folded away...
            assert "The machine was busy" not in headline.inner_text()
            details.locator("summary").click()  # ...one click away
            body.wait_for(state="visible")
            assert "The machine was busy: other processes used" in details.inner_text()
            assert "may not hold on an idle one" not in headline.locator(".al-arm").first.inner_text()
        finally:
            browser.close()
