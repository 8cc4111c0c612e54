"""The vLLM servers (and workers) a test started, found by a mark in their environment."""

from __future__ import annotations

import os

MARK = "ASSISTLAB_TEST_MARK"


def vllm_processes() -> list[str]:
    """Live processes that carry this test's mark, other than this one: servers and workers it started."""
    import psutil

    mark, out = os.environ.get(MARK), []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get(MARK) == mark and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
        except psutil.Error:
            continue
    return out


def own_vllm_processes(before: set[str]) -> list[str]:
    return [line for line in vllm_processes() if line not in before]
