"""Do the page and the command line measure the same comparison alike? Both, alternately, in one script.

The page is driven in Chromium as a person would (Run, wait, download the JSON report); the command line runs
`python -m assistlab bench` with the same prompt, tokens and repetitions. Rounds alternate which goes first.
Per arm it prints the median latency from each, and each assisted arm's speedup, with the page/CLI ratio.

Run: python tests/bench_page_vs_cli.py [--tokens N] [--repeats R] [--rounds K]
Not collected by pytest: it is a benchmark (it proves speed), and its numbers depend on the machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing

import argparse
import json
import socket
import statistics
import subprocess
import tempfile

from test_browser import CHROMIUM, set_run_size


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def through_page(browser, url: str, tokens: int, repeats: int, folder: Path) -> tuple[dict, str]:
    """One comparison from the page with the default pair; returns its downloaded report and the prompt used."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(url)
        page.wait_for_selector("#al-run")
        prompt = page.locator("#al-prompt textarea").input_value()
        set_run_size(page, tokens, repeats)
        page.click("#al-run")
        page.wait_for_selector("#al-download-json", state="visible", timeout=900_000)
        with page.expect_download() as download:
            page.click("#al-download-json")
        path = folder / f"page-{len(list(folder.iterdir()))}.json"
        download.value.save_as(path)
        return json.loads(path.read_text()), prompt
    finally:
        context.close()


def through_cli(prompt: str, tokens: int, repeats: int, folder: Path) -> dict:
    path = folder / f"cli-{len(list(folder.iterdir()))}.json"
    subprocess.run(
        [sys.executable, "-m", "assistlab", "bench", "--prompt", prompt, "--max-new-tokens", str(tokens),
         "--repeats", str(repeats), "--json", str(path), "--quiet"],
        check=True, cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.DEVNULL,
    )
    return json.loads(path.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from assistlab import ui
    from assistlab.models import ModelStore

    demo = ui.build_app(ModelStore())
    _app, url, _share = demo.launch(prevent_thread_lock=True, server_port=free_port(), quiet=True,
                                    **ui.launch_options({}))
    reports: dict[str, list[dict]] = {"page": [], "cli": []}
    folder = Path(tempfile.mkdtemp(prefix="assistlab-page-vs-cli-"))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
            prompt = None  # the page's default prompt, read in the first round (the page goes first there)
            for r in range(args.rounds):
                for side in ("page", "cli") if r % 2 == 0 else ("cli", "page"):
                    if side == "page":
                        report, prompt = through_page(browser, url, args.tokens, args.repeats, folder)
                        reports["page"].append(report)
                    else:
                        reports["cli"].append(through_cli(prompt, args.tokens, args.repeats, folder))
            browser.close()
    finally:
        demo.close()

    names = [a["name"] for a in reports["page"][0]["arms"]]
    print(f"{args.tokens} tokens, {args.repeats} repetitions, {len(reports['page'])} page and "
          f"{len(reports['cli'])} command-line comparisons")
    for index, name in enumerate(names):
        page_s = statistics.median(x for rep in reports["page"] for x in rep["arms"][index]["latencies_s"])
        cli_s = statistics.median(x for rep in reports["cli"] for x in rep["arms"][index]["latencies_s"])
        print(f"{name:55s} page {page_s:.3f} s  cli {cli_s:.3f} s  page/cli {page_s / cli_s:.3f}")
    for index, name in enumerate(names[1:]):
        page_x = statistics.median(rep["comparison"][index]["speedup"]["median"] for rep in reports["page"])
        cli_x = statistics.median(rep["comparison"][index]["speedup"]["median"] for rep in reports["cli"])
        print(f"speedup {name:47s} page {page_x:.3f}×  cli {cli_x:.3f}×  page/cli {page_x / cli_x:.3f}")
    busy = [w for side in reports.values() for rep in side for w in rep.get("warnings") or []]
    print("warnings:", busy or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
