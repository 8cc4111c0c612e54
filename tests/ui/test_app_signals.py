"""The app under SIGTERM in the middle of a comparison: it closes and exits 0, never aborting inside torch, and
keeps the comparison in the history as stopped, with its whole repetitions, as Stop keeps it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

LONG = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "prompt": "deep learning",
        "max_new_tokens": 60, "repeats": 50, "warmup": 0}


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
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(job.outputs()) < 3:
            time.sleep(0.5)  # until timed runs are under way in one of gradio's threads
        time.sleep(1)
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
