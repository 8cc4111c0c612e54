"""The schedule check: one comparison that serves a schedule of draft lengths per batch size and times it under
load beside each level's best fixed K (and plain), then what it says (results/schedule.py)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator

from ..config import ArmRequest, BenchRequest
from ..errors import InputError
from ..engines import registry
from ..results import schedule
from ..results.events import Event
from . import runner


def check_schedule(base: BenchRequest, template: ArmRequest, best: dict[int, int], store,
                   clock: Callable[[], float] = time.perf_counter, should_stop: Callable[[], bool] = lambda: False,
                   max_batch: int | None = None, max_servers: int | None = None) -> Generator[Event, None, dict]:
    """Yield the comparison's events; return {"schedule", "schedule_check", "report"}: the report's
    `tune.schedule` (the ranges built from `best`, {level: best K}, for `template`'s method and settings),
    `tune.schedule_check` (per level the two throughputs, their ratio with its interval, within the band of
    `base.band`), and the comparison's Report (the evidence; the last level's when timed level by level, all
    of them in "reports"). Every K of `best` is 1 or more (InputError otherwise). A schedule vLLM refuses
    leaves its sentence in `schedule_check.refused` and in that
    arm's error; a stop leaves the levels measured to the end.

    `max_servers`: the most servers the search itself had running at once (it fitted in memory). A check that
    would start more, plain, every distinct best K and the schedule together, is timed one level at a time
    instead (plain, that level's best K and the schedule: three servers), `checked_by_level` in the check."""
    low = sorted(level for level, k in best.items() if k < 1)
    if low:  # vLLM 0.32 still runs the drafter at a K of 0 (0.90x plain at 16 requests, measured): not plain
        raise InputError(f"A schedule of draft lengths needs a K of 1 or more at every level (levels {low} have "
                         f"{sorted({best[level] for level in low})}): a 0 in num_speculative_tokens_per_batch_size "
                         f"does not make vLLM serve plain, its drafter still runs; where plain is faster, serve a "
                         f"plain server at those loads.")
    plan = registry.SCHEDULES.plan(base, template, best, max_batch)
    parts = plan.parts(max_servers)
    checks, reports, offset = [], [], 0
    for part in parts:
        final = None
        for event in runner.run_benchmark(part.request, store, clock, should_stop):
            final = event
            # Level by level, the count of runs goes on from the levels before (it never goes back).
            yield dataclasses.replace(event, done=offset + event.done, total=offset + event.total,
                                      most=offset + event.most if event.most else 0)
        offset += final.done
        reports.append(final.report)
        checks.append(schedule.judge(final.report.to_dict(), part))
        if should_stop():
            break
    checked = {**schedule.merged(checks), "checked_by_level": len(parts) > 1}
    return {"schedule": plan.record(), "schedule_check": checked, "report": reports[-1], "reports": reports}
