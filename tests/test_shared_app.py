"""The shared server through the running app (issue 10): a cancelled or abandoned request stops its work and the
next person's timings are not slowed; one client's markup never reaches another's report."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from assistlab.slots import SlotPool

pytestmark = pytest.mark.filterwarnings("ignore:.*:Warning:gradio.queueing")

QUICK = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "prompt": "deep learning",
         "max_new_tokens": 24, "repeats": 3, "warmup": 1}
# Minutes of work if nothing stopped it: 50 repetitions of two 60-token runs (seconds each on a busy CPU).
LONG = {**QUICK, "max_new_tokens": 60, "repeats": 50, "warmup": 0}


@pytest.fixture(scope="module")
def app(models_dir, launch_app):
    from assistlab.models import ModelStore

    pool = SlotPool(0)
    with launch_app(models_dir, ModelStore(max_models=4), pool=pool) as url:
        yield url, pool


def busy_cpu_seconds(window: float = 1.0) -> float:
    """CPU seconds this process (the server runs in it) used over `window` seconds of wall time."""
    before = time.process_time()
    time.sleep(window)
    return time.process_time() - before


def wait_idle(pool: SlotPool, within: float) -> float:
    """Seconds until the slot is free and the process is quiet; fails after `within`."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        if not pool.busy() and busy_cpu_seconds(0.5) < 0.1:
            return time.monotonic() - started
    raise AssertionError(f"the server was still working {within:.0f} s after its requests were cancelled "
                         f"(slot busy: {bool(pool.busy())})")


def plain_median(report: dict) -> float:
    return report["arms"][0]["latency_summary"]["median"]


def wait_running(pool: SlotPool, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not pool.busy():
        assert time.monotonic() < deadline, "the long comparison never started"
        time.sleep(0.05)
    time.sleep(1.0)  # well into its generation


def test_cancelled_jobs_stop_and_the_next_run_is_not_slowed(app):
    from gradio_client import Client

    url, pool = app
    idle = plain_median(Client(url, verbose=False).predict(**QUICK, api_name="/compare")[0])

    jobs = [Client(url, verbose=False).submit(**LONG, api_name="/compare") for _ in range(4)]
    wait_running(pool)
    for job in jobs:
        job.cancel()
    # Within one timed run (between runs here; within a step once the runner checks the flag every step),
    # where the cancelled jobs alone would keep the server busy for minutes.
    quiet_after = wait_idle(pool, within=30.0)

    after = plain_median(Client(url, verbose=False).predict(**QUICK, api_name="/compare")[0])
    assert after < 2.5 * idle + 0.05, f"plain took {after:.3f} s after the cancels against {idle:.3f} s idle"
    print(f"idle {quiet_after:.1f} s after four cancels; plain median {after:.3f} s vs {idle:.3f} s on an idle server")


KILLED_CLIENT = textwrap.dedent("""
    import json, sys
    from gradio_client import Client
    Client(sys.argv[1], verbose=False).submit(**json.loads(sys.argv[2]), api_name="/compare").result()
""")


def test_a_killed_client_stops_its_run(app):
    from gradio_client import Client

    url, pool = app
    process = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, url, json.dumps(LONG)])
    try:
        wait_running(pool)
    finally:
        process.kill()
        process.wait(10)
    # Gradio notices a departed client within its 10 s stream timeout; the run stops at its next check.
    quiet_after = wait_idle(pool, within=40.0)
    report = Client(url, verbose=False).predict(**QUICK, api_name="/compare")[0]
    assert report["status"] == "complete"
    print(f"idle {quiet_after:.1f} s after the client was killed")
