"""The files a server leaves: its report folders survive pruning while it runs and go with it when it ends (Ctrl-C or
SIGTERM), a start-up prunes what dead servers left, gradio's copies are swept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from assistlab.measure.slots import SlotPool
from patience import patient


def test_pruning_keeps_the_folders_the_app_needs(tmp_path):
    from assistlab.ui.session import REPORT_FILES_MAX_AGE_S, ReportFiles

    files = ReportFiles(tmp_path)
    saved = files.folder("saved")
    (saved / "assistlab-report-old.json").write_text("{}")
    (saved / "assistlab-report-new.json").write_text("{}")
    run = tmp_path / "20260101-000000-abcdef12"
    run.mkdir()
    long_ago = time.time() - 2 * REPORT_FILES_MAX_AGE_S
    for old in (saved, saved / "assistlab-report-old.json", run):
        os.utime(old, (long_ago, long_ago))
    files._prune()
    assert saved.is_dir() and not run.exists()
    assert [p.name for p in saved.iterdir()] == ["assistlab-report-new.json"]
    files._prune(now=time.time() + 2 * REPORT_FILES_MAX_AGE_S)  # hours later, nothing opened since
    assert saved.is_dir() and not any(saved.iterdir())
    shutil.rmtree(saved)  # whoever removed it, the next use makes it again
    assert files.folder("saved").is_dir()




def _serve(tmp_path, models_dir, extra_env=None):
    """python app.py on loopback, its temporary folder inside tmp_path; returns (process, url)."""
    import os

    from app_process import start_app
    from ports import free_port

    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "GRADIO_SERVER_PORT": str(port),
           "GRADIO_SERVER_NAME": "127.0.0.1", "ASSISTLAB_MODELS_DIR": str(models_dir),
           "ASSISTLAB_DATA_DIR": str(tmp_path / "data"), **(extra_env or {})}
    env.pop("GRADIO_TEMP_DIR", None)
    return start_app(env, port)


@pytest.mark.slow  # starts app.py
def test_sigterm_leaves_no_reports_or_copies_and_a_start_prunes_dead_servers_folders(tmp_path, models_dir):
    import os
    import signal
    import subprocess
    import sys

    import httpx

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp / f"assistlab-reports-{int(dead.stdout)}-abc123"  # a SIGKILLed server's folder
    (left / "20260101-000000-1234abcd").mkdir(parents=True)
    (left / "20260101-000000-1234abcd" / "assistlab-report.json").write_text("{}")
    alive = tmp / f"assistlab-reports-{os.getpid()}-def456"  # a running process's folder
    alive.mkdir()
    proc, url = _serve(tmp_path, models_dir)
    try:
        assert not left.exists() and alive.exists()
        ours = [p for p in tmp.glob("assistlab-reports-*") if p != alive]
        assert len(ours) == 1 and ours[0].name.startswith(f"assistlab-reports-{proc.pid}-")
        upload = httpx.post(f"{url}gradio_api/upload", files={"files": ("prompts.txt", b"a prompt\n")}, timeout=30)
        assert upload.status_code == 200, upload.text
        copies = [p for p in (tmp / "gradio").rglob("*") if p.is_file()]
        assert copies, "gradio kept no copy of the upload"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=patient(60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not ours[0].exists()
    assert not [p for p in (tmp / "gradio").rglob("*") if p.is_file()]
    assert alive.exists()


def test_the_apps_own_report_folder_goes_with_the_process(tmp_path):
    script = "from assistlab.ui.session import ReportFiles; print(ReportFiles().root)"
    root = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=str(__import__("pathlib").Path(__file__).parent.parent.parent)).stdout.strip()
    assert root and not __import__("os").path.exists(root)

    from assistlab.ui.session import ReportFiles

    given = ReportFiles(tmp_path / "given")
    given.close()
    assert given.root.is_dir()  # a folder the operator named is theirs to keep


def test_gradios_copies_are_swept_and_removed_at_close(models_dir, store, monkeypatch):
    from assistlab import ui
    from assistlab.ui.app import CACHE_SWEEP

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    demo = ui.build_app(store, pool=SlotPool(0))
    assert demo.delete_cache == CACHE_SWEEP and CACHE_SWEEP[1] <= 3600
