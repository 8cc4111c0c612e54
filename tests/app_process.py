"""Start `app.py` as a person does, in a process of its own, and wait until it answers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from patience import patient

ROOT = Path(__file__).resolve().parents[1]


def start_app(env: dict, port: int, within_s: float = 180.0) -> tuple[subprocess.Popen, str]:
    """`python app.py` with `env` (which sets GRADIO_SERVER_PORT to `port`); the process and its URL once it answers."""
    import httpx

    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + patient(within_s)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"app.py ended early: {proc.stdout.read()}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"app.py did not answer within {patient(within_s):g} s")
