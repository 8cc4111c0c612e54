"""Stopping a server's process group: a process that has ended but waits to be reaped (a zombie) is not one
still running, so a stop does not wait for init to reap the lifeline's watcher or a worker (a container's init
reaped them about 1.3 s late here, and may never)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from assistlab.engines.vllm import server


def _zombie_leader() -> subprocess.Popen:
    """A process group whose only member has exited and is not reaped yet (this test reaps it at the end)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    end = time.monotonic() + 30
    while psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE:  # reading the status does not reap
        assert time.monotonic() < end
        time.sleep(0.01)
    return process


def test_a_group_of_zombies_alone_is_not_alive():
    process = _zombie_leader()
    try:
        os.killpg(process.pid, 0)  # the kernel still finds the group ...
        assert server._group_alive(process.pid) is False  # ... but nothing in it runs
    finally:
        process.wait()
    assert server._group_alive(process.pid) is False


def test_a_group_with_a_running_member_is_alive():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert server._group_alive(process.pid) is True
    finally:
        process.kill()
        process.wait()
    assert server._group_alive(process.pid) is False
