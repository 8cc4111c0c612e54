"""The README's screenshots, taken from the page as a person sees it with the bundled pair.

Starts the app with the bundled models and drives it in Chromium: a default comparison at 1440 px
(assets/screenshot.png), a short one at a phone's 390 px (assets/screenshot-phone.png, two screens from the progress line
down), and the default
Spec-Bench workload on the Workloads tab (assets/workloads.png). With `--only load --report R.json` (a report
of `bench --concurrency ...`), the Under load panel of that report as a saved comparison (assets/under-load.png). Every figure on them is measured on this
machine at the time. Takes about as long as the three runs (minutes on a CPU).

Run: python scripts/make_screenshots.py [--out assets] [--only desktop|phone|workloads|load [--report R.json]]
Not collected by pytest.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_page_vs_cli's server helpers
sys.path.insert(0, str(ROOT / "tests"))  # the tests' browser helpers

import argparse
import time

from bench_page_vs_cli import free_port, wait_quietly
from browsing import CHROMIUM, opened, set_run_size


def compare(browser, url: str, width: int, height: int, path: Path, tokens=None, repeats=None,
            crop_from: str | None = None) -> float:
    """Run the default pair from the page and save the page; with `crop_from`, only two screens' height from
    that element down (a phone's whole page is many screens long)."""
    with opened(browser, url, width, height, timeout_ms=60_000) as page:
        if tokens or repeats:
            set_run_size(page, tokens, repeats)
        began = time.monotonic()
        page.click("#al-run")
        wait_quietly(page, "#al-download-json", 1800)
        took = time.monotonic() - began
        page.wait_for_timeout(1500)  # plotly finishes drawing
        if crop_from is None:
            page.screenshot(path=str(path), full_page=True)
        else:
            top = page.evaluate("s => document.querySelector(s).getBoundingClientRect().top + window.scrollY",
                                crop_from)
            page.screenshot(path=str(path), full_page=True,
                            clip={"x": 0, "y": max(0, top - 16), "width": width, "height": 2 * height})
        return took


def workloads(browser, url: str, path: Path) -> float:
    with opened(browser, url, timeout_ms=60_000) as page:
        page.get_by_role("tab", name="Workloads").click()
        began = time.monotonic()
        page.click("#al-suite-run")
        wait_quietly(page, "#al-suite-download-json", 3600)
        took = time.monotonic() - began
        page.wait_for_timeout(1500)
        page.locator("#al-tab-workloads").screenshot(path=str(path))
        return took


def under_load(browser, url: str, run_id: str, path: Path) -> None:
    """The Under load panel of a saved comparison (the left of two), in a window wide enough for its table."""
    with opened(browser, f"{url}?run={run_id}", 2300, 1000, timeout_ms=60_000) as page:  # its half is the table's width
        page.wait_for_selector("#al-saved-left-load-pareto .js-plotly-plot")
        page.wait_for_timeout(1500)  # plotly finishes drawing
        page.locator("#al-saved-left-load-panel").screenshot(path=str(path))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets")
    parser.add_argument("--only", choices=("desktop", "phone", "workloads", "load"), help="take one screenshot")
    parser.add_argument("--report", type=Path, help="for --only load: a report with load levels (bench --json)")
    args = parser.parse_args()
    if args.only == "load" and args.report is None:
        parser.error("--only load needs --report, a report of bench --concurrency ... --json")

    from playwright.sync_api import sync_playwright

    from assistlab import ui
    from assistlab.engines.transformers.models import ModelStore

    history, run_id = None, None
    if args.only == "load":
        import json
        import tempfile

        from assistlab.history import History

        history = History(f"sqlite:///{Path(tempfile.mkdtemp()) / 'h.sqlite3'}")
        saved = history.save(json.loads(args.report.read_text()))
        if not saved.saved:
            raise SystemExit(f"the report could not be saved to show it: {saved.warning}")
        run_id = saved.id
    demo = ui.build_app(ModelStore(), history=history)
    _app, url, _share = demo.launch(prevent_thread_lock=True, server_port=free_port(), quiet=True,
                                    **ui.launch_options({}))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
            if args.only in (None, "desktop"):
                took = compare(browser, url, 1440, 1000, args.out / "screenshot.png")
                print(f"screenshot.png: the default comparison took {took:.0f} s")
            if args.only in (None, "phone"):
                took = compare(browser, url, 390, 844, args.out / "screenshot-phone.png", tokens=16, repeats=2,
                               crop_from="#al-progress")
                print(f"screenshot-phone.png: 16 tokens, 2 repetitions, {took:.0f} s")
            if args.only in (None, "workloads"):
                took = workloads(browser, url, args.out / "workloads.png")
                print(f"workloads.png: the default Spec-Bench workload took {took:.0f} s")
            if args.only == "load":
                under_load(browser, url, run_id, args.out / "under-load.png")
                print(f"under-load.png: the Under load panel of {args.report}")
            browser.close()
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
