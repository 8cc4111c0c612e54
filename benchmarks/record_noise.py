"""Record real per-repetition latencies for the stopping simulations: every arm, paired by repetition, with the
machine's state, appended to benchmarks/noise/recorded.csv (kept in the repository; tests resample from it).

    python benchmarks/record_noise.py [--repeats 12] [--from report.json ...] [bench options...]

Without --from it runs `python -m assistlab bench --repeats N --json …` (the bundled pair unless options say
otherwise) and records that report; with --from it records reports already written by `bench --json`. The state
is "busy" when the report carries the busy-machine warning (others used the CPU during the timed runs), else
"idle". Each recording gets an id (its date and engine), so repetitions pair only within it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOISE = ROOT / "benchmarks" / "noise" / "recorded.csv"
COLUMNS = ("recording", "state", "engine", "machine", "arm", "assisted", "repetition", "latency_s")


def rows_of(report: dict, recorded_at: str) -> list[dict]:
    """One row per counted run of every arm of a `bench --json` report written at `recorded_at`."""
    warnings = {w.get("code") for w in report.get("warnings") or []}
    state = "busy" if "busy-machine" in warnings else "idle"
    env = report.get("environment") or {}
    machine = f"{env.get('device', 'cpu')}, {env.get('cpu_threads', '?')} threads, {env.get('cpu_model', '?')}"
    engines = sorted({arm.get("engine", "transformers") for arm in report["arms"]})
    recording = f"{recorded_at} {'+'.join(engines)}"
    rows = []
    for index, arm in enumerate(report["arms"]):
        for repetition, latency in enumerate(arm.get("latencies_s") or []):
            rows.append({"recording": recording, "state": state, "engine": arm.get("engine", "transformers"),
                         "machine": machine, "arm": arm["name"], "assisted": int(index > 0 and
                                                                               arm.get("assisted", True)),
                         "repetition": repetition + 1, "latency_s": f"{latency:.6f}"})
    return rows


def append(rows: list[dict], path: Path = NOISE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--from", dest="reports", nargs="*", type=Path, default=[])
    args, bench = parser.parse_known_args()
    reports = list(args.reports)
    if not reports:
        out = Path(tempfile.mkdtemp()) / "report.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        subprocess.run([sys.executable, "-m", "assistlab", "bench", "--repeats", str(args.repeats), "--json",
                        str(out), *bench], check=True, env=env, cwd=ROOT)
        reports = [out]
    for path in reports:
        written = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        rows = rows_of(json.loads(path.read_text()), written)
        append(rows)
        print(f"{path}: {len(rows)} runs recorded into {NOISE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
