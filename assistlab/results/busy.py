"""Whether a comparison's timings were disturbed: the busy-machine judgement of the figures measure/ recorded.

Thresholds (a result is flagged `busy-machine` at or above either; measure/contention.py says why these):
a quarter of one CPU core used by others on average over the timed runs, or the GPU kept busy by other
processes a tenth of the time.
"""

from __future__ import annotations

CPU_BUSY_CORES = 0.25
GPU_BUSY_PERCENT = 10.0


def warnings(contention: dict | None) -> list[dict]:
    """[{"code": "busy-machine", "message": ...}] when others used a meaningful share of the CPU or the GPU."""
    if not contention:
        return []
    found = []
    cores = contention.get("other_cpu_cores")
    if cores is not None and cores >= CPU_BUSY_CORES:
        found.append(
            f"other processes used {cores:.2f} CPU cores on average ({contention['other_cpu_percent']:.0f}% of "
            f"this machine's {contention['cpu_count']}) while the runs were timed"
        )
    gpu = contention.get("gpu") or {}
    theirs = gpu.get("others_utilization_percent")
    if theirs is not None and theirs >= GPU_BUSY_PERCENT:
        found.append(f"other processes kept the GPU busy {theirs:.0f}% of the time while the runs were timed")
    elif theirs is None and gpu.get("other_processes"):
        found.append(
            f"{gpu['other_processes']} other process(es) used the GPU while the runs were timed (how much could "
            f"not be measured)"
        )
    if not found:
        return []
    reasons = "; ".join(found)
    return [{
        "code": "busy-machine",
        "message": (
            f"The machine was busy: {reasons}. Timings take longer and vary more than on an idle machine, so the "
            f"result may not hold there; close other programs and run again to be sure."
        ),
    }]
