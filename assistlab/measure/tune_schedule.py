"""A search with load levels, after its load phase: each level's best draft length of one speculative method
becomes a schedule of draft lengths per batch size, which is then served and timed beside each level's best
fixed K (measure/schedule_check.py). What it adds to the search's summary: `schedule` and `schedule_check`.

Which method: the family (method and its other settings, registry.SCHEDULES.schedule_family) of the search's
pick when that is one, else the family whose candidates reached the highest throughput speedup at any level.
A level's best K is the candidate with the highest median throughput speedup over plain there, and it is 1 or
more at every level: a 0 in vLLM 0.32's `num_speculative_tokens_per_batch_size` does not make a server plain (its
drafter still runs: 0.90x plain at 16 requests, measured), so a level where plain beat every K keeps the best K
and the sentence says that a plain server is faster for those loads. When one K is best at every level, a fixed K
serves them all and nothing is checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator

from ..config import BenchRequest
from ..errors import AssistLabError, StoppedError
from ..engines import registry
from ..results import load
from ..results.events import Event
from ..results.report import Report
from .schedule_check import check_schedule

CHECKING = "Checking the schedule"


def _families(request_specs: list, indices: list[int]) -> dict[tuple, list[tuple[int, object]]]:
    """{family: [(report arm index, spec), ...]} of the candidates a schedule can vary."""
    out: dict[tuple, list] = {}
    for spec, index in zip(request_specs, indices):
        family = registry.SCHEDULES.schedule_family(spec)
        if family is not None:
            out.setdefault(family, []).append((index, spec))
    return out


def _speedups(entries: list[dict]) -> dict[tuple[int, int], float]:
    """{(arm index, level): median throughput speedup over plain} of the load entries that have one."""
    out = {}
    for entry in entries:
        median = (entry.get("speedup") or {}).get("median")
        if median is not None and not entry.get("failed"):
            out[(entry["arm_index"], entry["concurrency"])] = median
    return out


def _measured(members: list[tuple[int, object]], speedups: dict, level: int) -> list[tuple[float, int]]:
    return [(speedups[(index, level)], spec.num_speculative_tokens) for index, spec in members
            if (index, level) in speedups]


def best_by_level(members: list[tuple[int, object]], speedups: dict, levels: tuple[int, ...]) -> dict[int, int]:
    """{level: the K (1 or more) of the family's best candidate there}; levels with no figure out."""
    best = {}
    for level in levels:
        measured = _measured(members, speedups, level)
        if measured:
            best[level] = max(measured, key=lambda pair: (pair[0], -pair[1]))[1]  # a tie goes to the shorter draft
    return best


def plain_best_at(members: list[tuple[int, object]], speedups: dict, levels: tuple[int, ...]) -> list[int]:
    """The levels where no candidate of the family beat plain (every median throughput speedup at most 1×)."""
    return [level for level in levels
            if _measured(members, speedups, level) and max(x for x, _ in _measured(members, speedups, level)) <= 1.0]


def plan(report: Report, specs: list, indices: list[int], pick: int | None
         ) -> tuple[object, dict[int, int], list[int]] | None:
    """(the family's template arm, {level: best K, 1 or more}, the levels where plain beat every K) for the
    schedule, or None when no family of at least two draft lengths was timed under load. `pick` is the search's
    winner (report arm index) or None."""
    levels = tuple(report.request.get("concurrency") or ())
    speedups = _speedups(load.entries(report.load, report.arms))
    families = {f: m for f, m in _families(specs, indices).items()
                if len({spec.num_speculative_tokens for _, spec in m}) >= 2
                and any((index, level) in speedups for index, _ in m for level in levels)}
    if not families:
        return None

    def reach(members) -> float:
        return max((speedups.get((index, level), 0.0) for index, _ in members for level in levels), default=0.0)

    chosen = next((m for m in families.values() if any(index == pick for index, _ in m)), None)
    if chosen is None:
        chosen = max(families.values(), key=reach)
    best = best_by_level(chosen, speedups, levels)
    return (chosen[0][1], best, plain_best_at(chosen, speedups, levels)) if best else None


def after_search(request: BenchRequest, report: Report, specs: list, indices: list[int], pick: int | None, store,
                 clock: Callable[[], float], should_stop: Callable[[], bool],
                 done: int = 0) -> Generator[Event, None, tuple[dict, int]]:
    """Yield the check's events as the search's own (its report, its count of runs continued from `done`, the
    check's end a status line); return (the summary's `schedule` and `schedule_check`, {} when no schedule
    applies; the runs counted at the end)."""
    found = plan(report, specs, indices, pick)
    if found is None or should_stop():
        return {}, done
    template, best, plain_levels = found
    method = template.method
    by_level = {str(level): k for level, k in sorted(best.items())}
    if len(plain_levels) == len(best):
        said = (f"No {method} draft length beat plain under load at any level measured: a plain server is faster "
                f"for those loads, so no schedule was served.")
        return {"schedule": {"method": method, "best_k_by_level": by_level, "plain_best_at": plain_levels,
                             "sentence": said}, "schedule_check": None}, done
    if len(set(best.values())) == 1:
        k = next(iter(best.values()))
        said = (f"k={k} was the best {method} draft length at every load level measured: a fixed k serves them "
                f"all, so no schedule was checked.{_plain_words(plain_levels, method)}")
        return {"schedule": {"method": method, "best_k_by_level": by_level, "plain_best_at": plain_levels,
                             "sentence": said}, "schedule_check": None}, done
    # The search's own comparison ran its servers side by side; the check starts no more at once.
    servers = registry.SCHEDULES.started_servers(request.arms)
    events = check_schedule(request, template, best, store, clock, should_stop, max_servers=servers)
    counted = done
    while True:
        try:
            event = next(events)
        except StopIteration as ended:
            out = ended.value
            break
        except StoppedError:
            raise
        except AssistLabError as exc:  # the check could not run (its plain server, memory): the search stands
            record = {**registry.SCHEDULES.plan(request, template, best).record(),
                      "plain_best_at": plain_levels}
            checked = {"band": request.band, "levels": [], "refused": None, "all_within_band": None,
                       "failed": str(exc)}
            record["sentence"] = _schedule_sentence(record, checked)
            return {"schedule": record, "schedule_check": checked}, counted
        counted = done + event.done  # the check's runs after the search's: the count never goes back
        step = f"{CHECKING}: {event.step}" if event.step else ""
        yield dataclasses.replace(event, kind="status" if event.kind == "done" else event.kind, report=report,
                                  message=f"{CHECKING}: {event.message}", step=step, done=counted,
                                  total=done + event.total, most=done + event.most if event.most else 0)
    checked = out["schedule_check"]
    record = {**out["schedule"], "plain_best_at": plain_levels}
    record["sentence"] = _schedule_sentence(record, checked)
    return {"schedule": record, "schedule_check": checked}, counted


def _plain_words(levels: list[int], method: str) -> str:
    """' At 16 requests at once plain beat every ngram draft length: ...', or '' when it beat none anywhere."""
    if not levels:
        return ""
    at = ", ".join(map(str, levels))
    return (f" At {at} request{'' if levels == [1] else 's'} at once plain beat every {method} draft length "
            f"measured: a plain server is faster for those loads (the schedule keeps the best k there, since a k of "
            f"0 in vLLM's schedule still runs its drafter).")


def _schedule_sentence(record: dict, checked: dict) -> str:
    """The schedule in one sentence, then what its check said, then the levels where plain was faster."""
    return _checked_sentence(record, checked) + _plain_words(record.get("plain_best_at") or [], record["method"])


def _checked_sentence(record: dict, checked: dict) -> str:
    spans = [f"{f'k={k}' if k else 'no drafting'} for {first}{'' if last == first else f'–{last}'} "
             f"request{'' if last == 1 else 's'} at once" for first, last, k in record["ranges"]]
    head = f"Under load, {record['method']}: {', '.join(spans)}"
    if checked.get("refused"):
        return f"{head}; vLLM refused the schedule: {checked['refused'].rstrip('.')}."
    if checked.get("failed"):
        return f"{head}; the check could not run, so the schedule is not verified: {checked['failed'].rstrip('.')}."
    verdict = {True: f"served, and within ±{checked['band']:.0%} of the best fixed k at every level",
               False: "served, but not within the band of the best fixed k at every level (see each level)",
               None: "served; the rounds were too few to say whether it matches the best fixed k at every level"}
    return f"{head}: {verdict[checked.get('all_within_band')]}."
