"""The files the app hands Gradio (report downloads) are written mode 600, and Gradio's copies of them in
$TMPDIR/gradio go when the server is stopped with SIGTERM or Ctrl-C (issue 29, item 11)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from patience import patient

ROOT = Path(__file__).resolve().parents[2]

# The server, launched as app.py launches it; it hands Gradio a saved comparison's files the way opening one does
# (the DownloadButton's copy into Gradio's cache), then prints the copies and waits to be stopped.
SERVER = textwrap.dedent("""
    import sys
    import gradio as gr
    from assistlab import ui
    from assistlab.engines.transformers.models import ModelStore
    from assistlab.measure.slots import SlotPool
    from assistlab.results.report import Report
    from assistlab.ui.session import ReportFiles

    demo = ui.build_app(ModelStore(), pool=SlotPool(0))
    ui.stop_on_sigterm()
    demo.launch(prevent_thread_lock=True, quiet=True, server_port=int(sys.argv[1]))
    button = next(b for b in demo.blocks.values() if isinstance(b, gr.DownloadButton))
    for path in ReportFiles(sys.argv[2]).write(Report(request={}, environment={}, arms=[])):
        print(button.move_resource_to_block_cache(path), flush=True)
    print("ready", flush=True)
    demo.block_thread()
""")


def _default_signals() -> None:
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_gradios_copies_are_private_and_go_at_a_signal(tmp_path, how):
    from ports import free_port

    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)}
    env.pop("GRADIO_TEMP_DIR", None)
    # The server starts with SIGINT and SIGTERM at their defaults, as a person's shell starts app.py: a signal
    # the pytest process ignores (something earlier in the full suite leaves SIGINT ignored) is inherited
    # ignored, and Python then installs no Ctrl-C handler at all: the SIGINT case hung for 240 s twice that way.
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(free_port()), str(tmp_path / "reports")], env=env,
                              stdout=subprocess.PIPE, text=True, cwd=str(ROOT), preexec_fn=_default_signals)
    try:
        copies = []
        for line in server.stdout:
            if line.strip() == "ready":
                break
            copies.append(Path(line.strip()))
        assert len(copies) == 2 and all(c.is_relative_to(temp / "gradio") for c in copies), copies
        for copy in copies:
            assert stat.S_IMODE(copy.stat().st_mode) == 0o600, oct(copy.stat().st_mode)
        # "ready" is printed just before block_thread(), whose handler turns the signal into Gradio's close; a
        # person's Ctrl-C comes once the page is up: wait a moment.
        time.sleep(1.0)
        server.send_signal(how)
        server.wait(patient(60))
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(patient(10))
    left = [p for p in (temp / "gradio").rglob("*") if p.is_file()] if (temp / "gradio").exists() else []
    assert not left, left
