"""The tuner's elimination simulated (tests/results/test_tune_elimination.py's searches), side by side for two
versions of results/tune.py: the figures a refactor must keep within their noise.

Run: python benchmarks/sim_tune.py [--before COMMIT] [--searches 2000]
For this tree and, with --before, the results/tune.py of that commit (read from git, nothing checked out), each
case's 2,000 searches over 8 candidates with noise resampled from the recorded runs (benchmarks/noise/): the
share whose pick is the true best or within the band of it, the share where the best never left, the share
ending clearly, the runs used against a grid of the budget, and under no difference at all the share where a
candidate left (an error). Not collected by pytest; the tests hold the bounds, this prints the figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "results"))

import argparse
import importlib.util
import subprocess
import types

import numpy as np

from assistlab.results import tune as current

SEARCHES, BUDGET, BAND = 2_000, 50, 0.03
CASES = {"one ahead": [0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.8],
         "close at the top": [1.0, 1.1, 1.2, 1.3, 1.4, 1.45, 1.49, 1.5],
         "no difference": [1.0] * 8}


def version_at(commit: str) -> types.ModuleType:
    """results/tune.py as it was at `commit`, loaded as a module of this package (its imports are relative)."""
    source = subprocess.run(["git", "show", f"{commit}:assistlab/results/tune.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("assistlab.results._tune_before", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "assistlab.results"
    exec(compile(source, f"{commit}:assistlab/results/tune.py", "exec"), module.__dict__)
    return module


def figures(tune: types.ModuleType, searches: int) -> dict[str, dict[str, float]]:
    from test_tune_elimination import recorded_noise

    out = {}
    for name, speedups in CASES.items():
        rng = np.random.default_rng(4 if name == "no difference" else 1)
        m = len(speedups)
        noise = recorded_noise()(rng, (searches, m, BUDGET))
        logs = np.concatenate([np.zeros((searches, 1, BUDGET)), -(np.log(speedups)[None, :, None] + noise)], axis=1)
        result = tune.search(logs, [0] * m, list(range(1, m + 1)), BAND)
        chosen = np.asarray(speedups)[np.maximum(result.pick, 0)]
        used, grid = result.runs(1)
        best = int(np.argmax(speedups))
        out[name] = {
            "pick within the band": float(((result.pick >= 0) & (max(speedups) / chosen <= 1 + BAND)).mean()),
            "best never left": float((result.left_at[:, best] == 0).mean()),
            "ended clearly": float((result.ended == tune.CLEAR).mean()),
            "runs / grid": float(used.sum() / grid.sum()),
            "a candidate left": float((result.left_at > 0).any(axis=1).mean()),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="a commit whose results/tune.py to set beside this tree's")
    parser.add_argument("--searches", type=int, default=SEARCHES)
    args = parser.parse_args()
    columns = {"this tree": figures(current, args.searches)}
    if args.before:
        columns[args.before] = figures(version_at(args.before), args.searches)
    names = list(columns)
    print(f"{'case':<18} {'figure':<22} " + " ".join(f"{n:>12}" for n in names))
    for case in CASES:
        for figure in columns[names[0]][case]:
            print(f"{case:<18} {figure:<22} " + " ".join(f"{columns[n][case][figure]:>12.3f}" for n in names))


if __name__ == "__main__":
    main()
