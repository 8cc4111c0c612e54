"""Noise recorded from real runs (benchmarks/noise/recorded.csv, written by benchmarks/record_noise.py): the
paired log speedups log(plain / assisted) of every assisted arm, each centred on its own median, to resample."""

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

RECORDED = Path(__file__).resolve().parent.parent / "benchmarks" / "noise" / "recorded.csv"


def robust_sd(x: np.ndarray) -> float:
    """The median absolute deviation scaled to a normal sample's standard deviation."""
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def residuals(state: str | None = None, standardized: bool = False) -> np.ndarray:
    """Every recorded assisted run's log speedup over plain of the same repetition, minus its arm's median;
    `state` ('idle' or 'busy') keeps only recordings made in that state. `standardized` divides each arm's
    residuals by their own robust SD, so recordings of different spreads (a busy machine's, an idle one's) pool
    their shapes rather than letting the widest set the tails."""
    runs: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    plain: dict[str, str] = {}
    with RECORDED.open() as handle:
        for row in csv.DictReader(handle):
            if state is not None and row["state"] != state:
                continue
            runs[(row["recording"], row["arm"])][int(row["repetition"])] = float(row["latency_s"])
            if row["assisted"] == "0":
                plain[row["recording"]] = row["arm"]
    out = []
    for (recording, arm), by_rep in runs.items():
        if arm == plain.get(recording):
            continue
        base = runs[(recording, plain[recording])]
        logs = np.log([base[r] / by_rep[r] for r in by_rep if r in base])
        centred = logs - np.median(logs)
        spread = robust_sd(centred) if standardized else 1.0
        if spread > 0:
            out.extend(centred / spread)
    return np.asarray(out)


def resampler(state: str | None = None):
    """A noise(rng, shape) that draws recorded residuals with replacement."""
    pool = residuals(state)

    def noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.choice(pool, size=shape, replace=True)

    return noise
