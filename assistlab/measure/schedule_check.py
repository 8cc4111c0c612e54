"""The schedule check: one comparison that serves a schedule of draft lengths per batch size and times it under
load beside each level's best fixed K (and plain), then what it says (results/schedule.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator

from ..config import ArmRequest, BenchRequest
from ..engines import registry
from ..results import schedule
from ..results.events import Event
from . import runner


def check_schedule(base: BenchRequest, template: ArmRequest, best: dict[int, int], store,
                   clock: Callable[[], float] = time.perf_counter, should_stop: Callable[[], bool] = lambda: False,
                   max_batch: int | None = None) -> Generator[Event, None, dict]:
    """Yield the comparison's events; return {"schedule", "schedule_check", "report"}: the report's
    `tune.schedule` (the ranges built from `best`, {level: best K}, for `template`'s method and settings),
    `tune.schedule_check` (per level the two throughputs, their ratio with its interval, within the band of
    `base.band`), and the comparison's Report (the evidence). A schedule vLLM refuses leaves its sentence in
    `schedule_check.refused` and in that arm's error; a stop leaves the levels measured to the end."""
    plan = registry.SCHEDULES.schedule_plan(base, template, best, max_batch)
    final = None
    for event in runner.run_benchmark(plan.request, store, clock, should_stop):
        final = event
        yield event
    report = final.report
    mine, fixed = plan.specs()
    checked = schedule.check(report.to_dict(), mine, fixed, plan.ks(), plan.request.band)
    return {"schedule": plan.record(), "schedule_check": checked, "report": report}
