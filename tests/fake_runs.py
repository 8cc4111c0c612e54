"""Timed runs that take a latency of the test's choosing instead of a real generate(): plain 1 s, each assisted arm
its own factor, with noise, on a fake clock (or, with `sleep_s`, also some real time, so a page can be watched)."""

from __future__ import annotations

import time

import numpy as np
import torch

from assistlab.engines.transformers import timing


class FakeRuns:
    """Runs that take their latency on a fake clock: plain 1 s, each assisted arm its own factor (keyed by its
    prompt-lookup length, None for an assistant model), with noise."""

    def __init__(self, slow: dict[int | None, float], noise: float = 0.01, seed: int = 0,
                 outliers: dict[int, dict[int, float]] | None = None, sleep_s: float = 0.0):
        self.now, self.noise, self.slow, self.sleep_s = 0.0, noise, slow, sleep_s
        self.rng = np.random.default_rng(seed)
        self.calls = 0
        self.outliers = outliers or {}  # per arm (its draft length), its n-th run (from 1) to the factor it takes
        self.arm_calls: dict[int, int] = {}
        self.asked: list[int] = []  # the new tokens each run asked for

    def clock(self) -> float:
        return self.now

    def timed_generate(self, target, inputs, kwargs, clock, assisted, *args, **more):
        self.calls += 1
        time.sleep(self.sleep_s)
        lookup = kwargs.get("prompt_lookup_num_tokens")
        factor = self.slow.get(lookup, 1.0) if assisted else 1.0
        self.arm_calls[lookup] = seen = self.arm_calls.get(lookup, 0) + 1
        factor = self.outliers.get(lookup, {}).get(seen, factor) if assisted else factor
        self.asked.append(kwargs["max_new_tokens"])
        latency = factor * (1.0 + self.noise * float(self.rng.standard_normal()))
        self.now += latency
        n = kwargs["max_new_tokens"]
        output = torch.cat([inputs["input_ids"], torch.zeros((1, n), dtype=torch.long)], dim=1)
        streamer = timing.StepStreamer(clock, 0.0)
        streamer.times, streamer.tokens = [latency], [n]
        return timing.Timed(latency=latency, streamer=streamer, drafted=[], accepted=[], output=output, memory=0,
                            wall_window=(0.0, 0.0))
