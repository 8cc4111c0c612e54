"""The browser for the page's tests: one headless Chromium per module."""

from __future__ import annotations

import pytest
from browsing import ARGS, CHROMIUM


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
