"""The app under SIGTERM in the middle of a comparison: it closes and exits 0, never aborting inside torch, and
keeps the comparison in the history as stopped, with its whole repetitions, as Stop keeps it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

LONG = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "prompt": "deep learning",
        "max_new_tokens": 400, "repeats": 50, "warmup": 0}
# /compare answers once, at the end: the test knows its run is under way from the job's status, and leaves it
# time for whole repetitions (about 3 s each here, idle; the 50 would take minutes).
UNDER_WAY_S = 20


def _serve(tmp_path: Path, models_dir: Path) -> tuple[subprocess.Popen, str]:
    from app_process import start_app
    from ports import free_port

    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path), "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "ASSISTLAB_MODELS_DIR": str(models_dir), "ASSISTLAB_DATA_DIR": str(tmp_path / "data")}
    env.pop("GRADIO_TEMP_DIR", None)
    return start_app(env, port)


def test_sigterm_during_a_comparison_exits_cleanly(tmp_path, models_dir):
    from gradio_client import Client

    proc, url = _serve(tmp_path, models_dir)
    try:
        client = Client(url, verbose=False)
        job = client.submit(**LONG, api_name="/compare")
        from gradio_client.utils import Status

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and job.status().code != Status.PROCESSING:
            time.sleep(0.2)  # until the comparison runs in one of gradio's threads
        assert job.status().code == Status.PROCESSING, job.status()
        time.sleep(UNDER_WAY_S)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    assert "terminate called" not in out
    from assistlab import history as hist
    from assistlab.ui.session import REPORTS_PREFIX

    store = hist.History(f"sqlite:///{tmp_path / 'data' / hist.DB_FILENAME}", max_entries=None)
    entries = store.list().entries
    assert len(entries) == 1, out[-3000:]  # it was lost: nothing in the history
    saved = store.get(entries[0].id)[1]
    store.close()
    assert saved["status"] == "stopped" and saved["message"].startswith("Stopped: the server was shut down, after ")
    assert saved["counted_repetitions"] >= 1
    assert {len(arm["latencies_s"]) for arm in saved["arms"]} == {saved["counted_repetitions"]}  # whole ones only
    assert not list(tmp_path.glob(f"{REPORTS_PREFIX}*")), "the report folder was left behind"
