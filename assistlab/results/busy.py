"""Whether a comparison's timings were disturbed: the busy-machine judgement of the figures measure/ recorded.

Thresholds (a result is flagged `busy-machine` at or above either; measure/contention.py says why these):
a quarter of one CPU core used by others on average over the timed runs, or the GPU kept busy by other
processes a tenth of the time.
"""

from __future__ import annotations

CPU_BUSY_CORES = 0.25
GPU_BUSY_PERCENT = 10.0


PROBE_BUSY = "busy-probe"
WHILE_TIMED = "while the runs were timed"
WHILE_PROBED = "while it was measured"


def reasons(contention: dict | None, during: str = WHILE_TIMED) -> list[str]:
    """What others used, one phrase per resource at or above its threshold; [] on an idle machine."""
    if not contention:
        return []
    found = []
    cores = contention.get("other_cpu_cores")
    if cores is not None and cores >= CPU_BUSY_CORES:
        found.append(
            f"other processes used {cores:.2f} CPU cores on average ({contention['other_cpu_percent']:.0f}% of "
            f"this machine's {contention['cpu_count']}) {during}"
        )
    gpu = contention.get("gpu") or {}
    theirs = gpu.get("others_utilization_percent")
    if theirs is not None and theirs >= GPU_BUSY_PERCENT:
        found.append(f"other processes kept the GPU busy {theirs:.0f}% of the time {during}")
    elif theirs is None and gpu.get("other_processes"):
        found.append(
            f"{gpu['other_processes']} other process(es) used the GPU {during} (how much could not be measured)"
        )
    return found


def probe_disturbed(contention: dict | None) -> str | None:
    """Why an arm's untimed drafting-cost run (Arm.probe) was disturbed, or None when it was not."""
    found = reasons(contention, WHILE_PROBED)
    return "; ".join(found) if found else None


def probe_warning(arm: str, why: str) -> dict:
    """The warning entry for a prediction that rests on a drafting cost measured on a busy machine."""
    return {
        "code": PROBE_BUSY,
        "message": (
            f"The machine was busy while the drafting cost of {arm} was measured (the untimed run after the timed "
            f"ones): {why}. Its predicted speedup rests on that measurement and may be far off; the measured "
            f"speedup is not affected."
        ),
    }


def warnings(contention: dict | None) -> list[dict]:
    """[{"code": "busy-machine", "message": ...}] when others used a meaningful share of the CPU or the GPU."""
    found = reasons(contention)
    if not found:
        return []
    why = "; ".join(found)
    return [{
        "code": "busy-machine",
        "message": (
            f"The machine was busy: {why}. Timings take longer and vary more than on an idle machine, so the "
            f"result may not hold there; close other programs and run again to be sure."
        ),
    }]


def summary(warnings: list[dict], contention: dict | None) -> str | None:
    """The one line that stands under the answer for all the busy-machine warnings; None when there are none.

    'Measured on a busy machine (others used 71% of the CPU): the result may not hold on an idle one.' The
    warnings' full sentences (which window, how much, what to do) go one click away.
    """
    codes = {w.get("code") for w in warnings or []}
    if "busy-machine" in codes:
        contention = contention or {}
        cores = contention.get("other_cpu_cores")
        theirs = (contention.get("gpu") or {}).get("others_utilization_percent")
        if cores is not None and cores >= CPU_BUSY_CORES and contention.get("other_cpu_percent") is not None:
            how = f" (others used {contention['other_cpu_percent']:.0f}% of the CPU)"
        elif theirs is not None and theirs >= GPU_BUSY_PERCENT:
            how = f" (others kept the GPU busy {theirs:.0f}% of the time)"
        else:
            how = ""
        return f"Measured on a busy machine{how}: the result may not hold on an idle one."
    if PROBE_BUSY in codes:
        return ("The drafting cost was measured on a busy machine: the predicted speedup may be far off "
                "(the measured one is not affected).")
    return None
