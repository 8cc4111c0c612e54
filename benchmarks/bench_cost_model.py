"""Does the cost model predict? The default comparison on the bundled pair, predicted against measured per arm.

Run: python benchmarks/bench_cost_model.py [any `python -m assistlab bench` options, e.g. --max-new-tokens 48]
Not collected by pytest: it is a benchmark, its figures depend on the machine, and it is only meaningful on
an idle one (the report's busy-machine warning, printed below, says when it was not). Goal: |prediction
error| <= 15% for every arm with the fitted verification cost; the ideal model (verification = one plain
step, Leviathan et al.) is printed beside it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: the repository's package

from assistlab.cli import build_parser, request_from_args
from assistlab.engines.transformers.models import ModelStore
from assistlab.measure.runner import run_benchmark

GOAL = 0.15


def main(argv: list[str]) -> int:
    request = request_from_args(build_parser().parse_args(["bench", *argv]))
    final = None
    for final in run_benchmark(request, ModelStore()):
        print(f"  [{final.done}/{final.total}] {final.message}", file=sys.stderr, flush=True)
    data = final.report.to_dict()
    env = data["environment"]
    contention = env.get("contention") or {}
    print(f"{data['counted_repetitions']} repetitions, {env['device']} {env['dtype']}, {env['cpu_threads']} threads; "
          f"others used {contention.get('other_cpu_cores') or 0:.2f} CPU cores during the timed runs")
    for warning in data["warnings"]:
        print(f"WARNING ({warning['code']}): {warning['message']}")
    header = f"{'arm':42} {'measured':>9} {'fitted':>8} {'error':>7} {'ideal':>7} {'error':>7} {'alpha':>6} {'even at':>8}"
    print(header)
    print("-" * len(header))
    misses = 0
    for entry in data["comparison"]:
        a = entry["analysis"]
        measured, fitted, ideal = a["measured_speedup"], a["predicted_speedup"], a["predicted_speedup_ideal"]
        if measured is None or fitted is None:
            print(f"{entry['arm'][:42]:42} no prediction: {a['limit']}")
            misses += 1
            continue
        even = a["break_even_alpha"]
        print(f"{entry['arm'][:42]:42} {measured:8.2f}x {fitted:7.2f}x {a['prediction_error']:+7.0%} {ideal:6.2f}x "
              f"{ideal / measured - 1:+7.0%} {a['alpha']:6.2f} {'never' if even is None else f'{even:.2f}':>8}")
        misses += abs(a["prediction_error"]) > GOAL
    fit = data["comparison"][0]["analysis"]["verify_fit"] if data["comparison"] else None
    if fit:
        print(f"verification: {fit['a']:.3f} + {fit['b']:.4f} x tokens plain steps "
              f"({fit['points']} points, {fit['tokens_min']}-{fit['tokens_max']} tokens)")
    print(f"{'all arms within' if not misses else f'{misses} arm(s) outside'} ±{GOAL:.0%}")
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
