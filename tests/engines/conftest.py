"""Fixtures for the engines' tests: a mark every server a test starts inherits, and a fake vLLM Python."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from vllm_processes import MARK

from assistlab.engines.vllm import server

HERE = Path(__file__).resolve().parents[1]  # tests/, where fake_openai.py is


@pytest.fixture(autouse=True)
def process_mark(monkeypatch, request):
    """A mark in the environment that every server this test starts (and their workers) inherit."""
    monkeypatch.setenv(MARK, f"{os.getpid()}-{request.node.name}")


@pytest.fixture
def fake_vllm_python(tmp_path, monkeypatch):
    """An ASSISTLAB_VLLM_PYTHON that reports a vLLM version and serves tests/fake_openai.py as vLLM's server."""
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        # FAKE_NO_ARCTIC: a vLLM without arctic-inference, as `python -c "import arctic_inference"` finds it
        'if [ "$1" = "-c" ] && [ -n "$FAKE_NO_ARCTIC" ] && [ "$2" = "import arctic_inference" ]; then '
        "echo \"ModuleNotFoundError: No module named 'arctic_inference'\" >&2; exit 1; fi\n"
        f'if [ "$1" = "-c" ]; then exec {sys.executable} -c \'print("{{\\"vllm\\": \\"0.0-fake\\", \\"torch\\": null, '
        f'\\"transformers\\": null}}")\'; fi\n'
        f'shift 2\nexec {sys.executable} {HERE / "fake_openai.py"} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv(server.PYTHON_VAR, str(script))
    return script
