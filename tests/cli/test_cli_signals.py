"""The command line under signals: SIGTERM and SIGHUP stop it as Ctrl-C does, and the vLLM servers it started
end with it however it ends (SIGKILL too); servers are fake ones (tests/fake_openai.py) started as vLLM is."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/, where fake_openai.py is
ROOT = HERE.parent
MARK = "ASSISTLAB_SIGNAL_MARK"


def fake_python(folder: Path) -> Path:
    """An ASSISTLAB_VLLM_PYTHON that reports a vLLM and serves tests/fake_openai.py as vLLM's server."""
    script = folder / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ]; then exec {sys.executable} -c \'print("{{\\"vllm\\": \\"0.0-fake\\", \\"torch\\": null, '
        f'\\"transformers\\": null}}")\'; fi\n'
        f'shift 2\nexec {sys.executable} {HERE / "fake_openai.py"} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def marked(mark: str, pid: int | None = None) -> list[str]:
    """Live processes with `mark` in their environment, other than `pid` and this one."""
    import psutil

    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid not in (os.getpid(), pid) and proc.environ().get(MARK) == mark \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
        except psutil.Error:
            continue
    return out


def wait_for(check, timeout: float, pause: float = 0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(pause)
    return check()


def launch_cli(models_dir: Path, tmp_path: Path, mark: str, start_s: str = "120") -> subprocess.Popen:
    env = {**os.environ, MARK: mark, "ASSISTLAB_MODELS_DIR": str(models_dir), "FAKE_START_S": start_s,
           "ASSISTLAB_VLLM_PYTHON": str(fake_python(tmp_path)), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "assistlab", "bench", "--target", "target", "--engines", "vllm", "--vllm-method",
         "ngram", "--max-new-tokens", "4", "--repeats", "1", "--warmup", "0", "--prompt", "hello there"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def servers_up(mark: str, pid: int) -> list[str]:
    return [p for p in marked(mark, pid) if "fake_openai.py" in p]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_the_cli_and_its_servers(models_dir, tmp_path, sig):
    mark = f"{os.getpid()}-{sig.name}"
    cli = launch_cli(models_dir, tmp_path, mark)
    try:
        assert wait_for(lambda: len(servers_up(mark, cli.pid)) >= 2, 180), cli.poll()
        cli.send_signal(sig)
        _out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 128 + sig, err[-2000:]
    assert f"{sig.name}: stopping" in err and f"Stopped by {sig.name}." in err
    assert wait_for(lambda: not marked(mark), 10), marked(mark)


def test_sigkill_of_the_cli_leaves_no_server(models_dir, tmp_path):
    mark = f"{os.getpid()}-kill"
    cli = launch_cli(models_dir, tmp_path, mark)
    try:
        assert wait_for(lambda: len(servers_up(mark, cli.pid)) >= 2, 180), cli.poll()
        cli.kill()
        cli.wait(10)
    finally:
        if cli.poll() is None:
            cli.kill()
    # The watcher of each server's group sees its pipe close and ends the group (server and its child).
    assert wait_for(lambda: not marked(mark), 15), marked(mark)
