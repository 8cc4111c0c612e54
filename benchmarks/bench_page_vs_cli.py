"""Do the page and the command line measure the same comparison alike? Both, alternately, in one script.

The page is driven in Chromium as a person would (Run, wait, download the JSON report); the command line runs
`python -m assistlab bench` with the same prompt, tokens and repetitions. Rounds alternate which goes first.
The same comparison also goes through the server's /compare API from a client in another process (the server
as it is when the browser is on another machine). Per arm it prints the median latency from each, and each
assisted arm's speedup, with the ratio to the command line's in brackets, and what other processes used.

Run: python benchmarks/bench_page_vs_cli.py [--tokens N] [--repeats R] [--rounds K]
Not collected by pytest: it is a benchmark (it proves speed), and its numbers depend on the machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' browser helpers

import argparse
import json
import socket
import statistics
import subprocess
import tempfile

from browsing import CHROMIUM, opened, set_run_size  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_quietly(page, selector: str, timeout_s: float) -> None:
    """Wait until `selector` is visible, looking once a second. Playwright's wait_for_selector looks on every
    animation frame, which keeps the browser drawing 60 times a second, as no person's browser does; here that
    took about 0.1 cores from the timed runs."""
    page.wait_for_function(
        "s => { const e = document.querySelector(s); return !!e && e.offsetParent !== null; }",
        arg=selector, polling=1000, timeout=timeout_s * 1000,
    )


def through_page(browser, url: str, tokens: int, repeats: int, folder: Path) -> tuple[dict, str]:
    """One comparison from the page with the default pair; returns its downloaded report and the prompt used."""
    with opened(browser, url, timeout_ms=60_000, accept_downloads=True) as page:
        prompt = page.locator("#al-prompt textarea").input_value()
        set_run_size(page, tokens, repeats)
        page.click("#al-run")
        wait_quietly(page, "#al-download-json", 900)
        with page.expect_download() as download:
            page.click("#al-download-json")
        path = folder / f"page-{len(list(folder.iterdir()))}.json"
        download.value.save_as(path)
        return json.loads(path.read_text()), prompt


def through_api(url: str, prompt: str, tokens: int, repeats: int, folder: Path) -> dict:
    """The same comparison through the running server's /compare API, from a client in its own process: the
    server as a browser on another machine sees it."""
    path = folder / f"api-{len(list(folder.iterdir()))}.json"
    script = (
        "import json, sys; from gradio_client import Client; "
        "report, _ = Client(sys.argv[1], verbose=False).predict(prompt=sys.argv[2], max_new_tokens=int(sys.argv[3]), "
        "repeats=int(sys.argv[4]), api_name='/compare'); open(sys.argv[5], 'w').write(json.dumps(report))"
    )
    subprocess.run([sys.executable, "-c", script, url, prompt, str(tokens), str(repeats), str(path)], check=True)
    return json.loads(path.read_text())


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
    from assistlab.engines import catalog
    from assistlab.engines.transformers.models import ModelStore

    demo = ui.build_app(ModelStore())
    _app, url, _share = demo.launch(prevent_thread_lock=True, server_port=free_port(), quiet=True,
                                    **ui.launch_options({}))
    reports: dict[str, list[dict]] = {"page": [], "api": [], "cli": []}
    folder = Path(tempfile.mkdtemp(prefix="assistlab-page-vs-cli-"))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
            prompt = catalog.default_prompt(catalog.BUNDLED_TARGET)  # what the page starts with
            for r in range(args.rounds):
                for side in ("page", "api", "cli")[r % 3:] + ("page", "api", "cli")[:r % 3]:
                    if side == "page":
                        report, shown = through_page(browser, url, args.tokens, args.repeats, folder)
                        assert shown == prompt, f"the page's default prompt is {shown!r}, not {prompt!r}"
                        reports["page"].append(report)
                    elif side == "api":
                        reports["api"].append(through_api(url, prompt, args.tokens, args.repeats, folder))
                    else:
                        reports["cli"].append(through_cli(prompt, args.tokens, args.repeats, folder))
            browser.close()
    finally:
        demo.close()

    names = [a["name"] for a in reports["page"][0]["arms"]]
    print(f"{args.tokens} tokens, {args.repeats} repetitions, {args.rounds} comparisons each from the page (Chromium "
          f"on this machine), the API (a client in another process) and the command line")

    def latency(side: str, index: int) -> float:
        return statistics.median(x for rep in reports[side] for x in rep["arms"][index]["latencies_s"])

    def speedup(side: str, index: int) -> float:
        return statistics.median(rep["comparison"][index]["speedup"]["median"] for rep in reports[side])

    for index, name in enumerate(names):
        cli = latency("cli", index)
        print(f"{name:55s} " + "  ".join(f"{side} {latency(side, index):.3f} s ({latency(side, index) / cli:.3f})"
                                          for side in ("page", "api")) + f"  cli {cli:.3f} s")
    for index, name in enumerate(names[1:]):
        cli = speedup("cli", index)
        print(f"speedup {name:47s} " + "  ".join(f"{side} {speedup(side, index):.3f}× ({speedup(side, index) / cli:.3f})"
                                                 for side in ("page", "api")) + f"  cli {cli:.3f}×")
    for side, reps in reports.items():
        cores = [rep["environment"]["contention"].get("other_cpu_cores") for rep in reps]
        print(f"{side}: other processes used " + ", ".join(f"{c:.2f}" for c in cores if c is not None)
              + " CPU cores during the timed runs")
    busy = [w for side in reports.values() for rep in side for w in rep.get("warnings") or []]
    print("warnings:", busy or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
