"""Fixtures for the engines' tests: a mark every server a test starts inherits, a fake vLLM Python, the real one."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from vllm_processes import MARK

from assistlab.engines.vllm import server
from assistlab.errors import EngineError

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
        # FAKE_VLLM_FEATURES: JSON added to what the probe reports (speculative_fields, one_kv_cache_group)
        f'if [ "$1" = "-c" ]; then exec {sys.executable} -c \'import json, os; print(json.dumps({{"vllm": "0.0-fake", '
        f'"torch": None, "transformers": None, **json.loads(os.environ.get("FAKE_VLLM_FEATURES") or "{{}}")}}))\'; fi\n'
        f'shift 2\nexec {sys.executable} {HERE / "fake_openai.py"} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv(server.PYTHON_VAR, str(script))
    return script


SMALL_KV = "--kv-cache-memory-bytes 536870912"


@pytest.fixture(scope="session")
def real_vllm():
    """Real-vLLM settings for the session: eager mode (compiling costs minutes on two cores) and a KV cache of
    0.5 GiB (one sequence of 2048 tokens of the bundled target needs 0.04 GiB; a share of RAM reserves GiBs).
    Skips, with the reason, where ASSISTLAB_VLLM_PYTHON is unset or has no working vLLM."""
    if not os.environ.get(server.PYTHON_VAR):
        pytest.skip(f"{server.PYTHON_VAR} is unset (install: {server.INSTALL_CPU})")
    try:
        python = server.find_python()
    except EngineError as exc:
        pytest.skip(str(exc))
    mp = pytest.MonkeyPatch()
    mp.setenv(server.ARGS_VAR, os.environ.get(server.ARGS_VAR, f"--enforce-eager {SMALL_KV}"))
    mp.setenv(server.MEMORY_VAR, os.environ.get(server.MEMORY_VAR, "0.3"))
    yield python
    mp.undo()
