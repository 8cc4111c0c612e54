"""Driving Chromium through Playwright for the page's tests: where it is, how it starts, a page opened ready."""

from __future__ import annotations

import contextlib
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


@contextlib.contextmanager
def opened(browser, url: str, width: int = 1440, height: int = 1000, timeout_ms: int = 30_000,
           ready: str = "#al-run", **options):
    """The page in a fresh browser context of the given window size, loaded and ready (`ready` shown: the Run
    button, or, for a saved run's link, which opens its own panels, something of those); closed afterwards."""
    context = browser.new_context(viewport={"width": width, "height": height}, **options)
    try:
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        page.goto(url)
        page.wait_for_selector(ready)
        yield page
    finally:
        context.close()


def choose(page, target: str, assistant: str, tokens: int, repeats: int) -> None:
    """Type folder names into the model boxes (they accept custom values) and set the run size."""
    pick_models(page, target, assistant)
    page.fill("#al-prompt textarea", "write me a long essay on deep learning")
    set_run_size(page, tokens, repeats)


def set_run_size(page, tokens: int, repeats: int) -> None:
    """Open Settings (unless it is open) and type the new tokens per run and the repetitions, as a person does."""
    if not page.get_by_label("New tokens per run").is_visible():
        page.locator("#al-settings").get_by_text("Settings", exact=True).click()
    for label, value in (("New tokens per run", tokens), ("Repetitions", repeats)):
        typed(page, page.get_by_label(label), value)


def typed(page, box, value) -> None:
    """Type `value` into a box and leave it (number boxes commit on blur), as a person does. A box that has just
    mounted (an accordion opening, a tab shown for the first time) may reset a value typed in that instant, so
    the typing is repeated until the box keeps it, as a person would retype it."""
    box.wait_for()
    for _ in range(5):
        box.fill(str(value))
        box.press("Tab")
        page.wait_for_timeout(150)
        if box.input_value() == str(value):
            break
    assert box.input_value() == str(value)


def pick_models(page, target: str, assistant: str = "assistant-other") -> None:
    for selector, value in (("#al-target input", target), ("#al-assistant input", assistant)):
        page.click(selector)
        page.fill(selector, value)
        page.keyboard.press("Enter")


def run_prompts_file(page, path) -> None:
    """On the Workloads tab, choose "My prompts (a file)", upload `path` and press its Run, as a person does."""
    page.get_by_role("tab", name="Workloads").click()
    page.get_by_text("My prompts (a file)").click()
    page.locator("#al-suite-file input[type=file]").set_input_files(str(path))
    page.wait_for_timeout(500)  # the upload lands before Run reads it
    page.click("#al-suite-run")
