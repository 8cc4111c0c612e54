"""`python -m assistlab` in a subprocess, as a person types it, for the command-line tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from patience import patient

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, models_dir=None, env_extra=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ASSISTLAB_MODELS_DIR", None)
    if models_dir is not None:
        env["ASSISTLAB_MODELS_DIR"] = str(models_dir)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "assistlab", *args], capture_output=True, text=True, env=env, timeout=patient(300)
    )
