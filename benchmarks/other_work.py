"""Other work on the machine, for a benchmark's busy figures: processes that each keep one core busy for a set
share of every 100 ms, as a colleague's job would on a shared server. `bench_tune.py --other-work 2x0.6` runs
both its grid and its tuner beside two such processes at 60%; what they actually took is printed with each run
(a process at 60% of a period gets less when the benchmark competes for the same cores).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

PERIOD_S = 0.1


def parse(text: str) -> tuple[int, float]:
    """'2x0.6' -> (2 processes, each busy 60% of the time); an argparse type, so a wrong one is its message."""
    processes, sep, duty = text.partition("x")
    try:
        count, share = int(processes), float(duty)
    except ValueError:
        count, share = -1, -1.0
    if not sep or count < 1 or not 0.0 < share <= 1.0:
        raise argparse.ArgumentTypeError(f"other work is PROCESSESxSHARE, for example 2x0.6; got {text!r}")
    return count, share


def _burn(duty: float, parent: int) -> None:
    """Busy `duty` of every period until the benchmark that started it is gone (also when it was killed)."""
    while os.getppid() == parent:
        began = time.perf_counter()
        while time.perf_counter() - began < PERIOD_S * duty:
            sum(i * i for i in range(200))
        time.sleep(PERIOD_S * (1.0 - duty))


@contextmanager
def other_work(processes: int, duty: float) -> Iterator[None]:
    """Runs `processes` busy loops (each `duty` of every PERIOD_S) while the block runs; they are ended after it,
    however it ends."""
    workers = [multiprocessing.Process(target=_burn, args=(duty, os.getpid()), daemon=True) for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join()
