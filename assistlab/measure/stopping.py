"""When a comparison has measured enough: the decision after each repetition, its record, its closing sentence."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import MIN_PRECISION_REPEATS, BenchRequest
from ..results import likely, sequential, stats
from ..results.likely import answer_words, arm_answer
from ..results.report import Report, counted, unsettled_sentence

# What the sequential rules record as their method, for the report's `stopping` block.
METHOD = ("confidence sequence for the median paired speedup: a sequential sign test with a Beta(0.1, 0.1) "
          "mixture (Ville's inequality), its running intersection; the level split equally over the assisted "
          "arms (Bonferroni)")


# The rule "likely" in one sentence, for the report's stopping block.
ASSUMPTION = ("The runs stopped at the likely answer, which assumes the repetitions' log speedups are independent "
              "and roughly normal; an arm whose sample was strongly skewed waited for the sure answer, which assumes "
              "nothing.")


@dataclass(frozen=True)
class Decision:
    """After a repetition: whether to stop, and else what the stop waits for (for the progress line)."""

    stop: bool
    waiting: str = ""


def record(request: BenchRequest, report: Report | None = None) -> dict:
    """The report's `stopping` block before the first repetition: the rule, its level, band and budgets."""
    rule = request.stopping_rule
    looks = rule in ("clear", "likely", "precision")
    arms = [a.name for a in report.arms if a.assisted] if report is not None else []
    return {
        "rule": rule,
        "target": request.precision,
        "max_time_s": request.max_time_s,
        "max_repetitions": request.repeats,
        "min_repetitions": min(MIN_PRECISION_REPEATS, request.repeats) if rule == "precision" else (
            1 if rule in ("clear", "likely") else request.repeats),
        "reached": False,
        "repetitions": 0,
        "elapsed_s": 0.0,
        "ended_by": None,
        "level": stats.TARGET_LEVEL if looks else None,
        "arm_level": 1.0 - sequential.arm_alpha(stats.TARGET_LEVEL, len(arms)) if looks and arms else None,
        "method": METHOD if looks else None,
        "band": request.band if rule in ("clear", "likely") else None,
        "arms": {name: {"repetitions": 0, "settled": None, "looks": []} for name in arms},
        # The likely answer, computed whatever the rule: per arm its verdict so far and the repetition it came at.
        "likely": {name: None for name in arms},
        "likely_at": {name: None for name in arms},
        "likely_assumption": likely.ASSUMPTION,
        # Only the rule that stops at the likely answer rests on an assumption; the others assume nothing.
        **({"assumption": ASSUMPTION} if rule == "likely" else {}),
    }


def _record_likely(stop: dict, name: str, seq: dict) -> None:
    """The likely verdict of one arm so far into the stopping block (a report kept from before has none)."""
    stop.setdefault("likely", {})[name] = seq["settled"]
    stop.setdefault("likely_at", {})[name] = seq["settled_at"]
    stop["arms"][name]["likely_skewed"] = seq["skewed"]


def all_likely(stopping: dict) -> bool:
    """True once every assisted arm still measured has a likely verdict."""
    verdicts = [v for name, v in (stopping.get("likely") or {}).items()
                if "error" not in stopping["arms"].get(name, {})]
    return bool(verdicts) and all(verdicts)


def all_answered(stopping: dict) -> bool:
    """True once every assisted arm still measured has an answer, likely or sure (the first answer's moment)."""
    if stopping.get("rule") not in ("clear", "likely"):  # a fixed count or a precision target answers at its end
        return False
    arms = {name: arm for name, arm in (stopping.get("arms") or {}).items() if "error" not in arm}
    likely_ = stopping.get("likely") or {}
    return bool(arms) and all(arm.get("settled") or likely_.get(name) for name, arm in arms.items())


def _measured(report: Report) -> list[tuple[str, dict]]:
    """(name, time-uniform sequence) of every assisted arm still running."""
    return [(info.name, report.sequence(i)) for i, info in enumerate(report.arms) if info.assisted and not info.error]


def after_repetition(request: BenchRequest, report: Report, count: int, elapsed: float,
                     extend_to_floor: bool = True) -> Decision:
    """Update `report.stopping` after `count` repetitions in `elapsed` seconds, and say whether to stop.

    'fixed' stops at its count; 'clear' once every assisted arm's sequence excludes 1× or lies within the band;
    'precision' once every sequence lies within ±precision of its median (from MIN_PRECISION_REPEATS on). All
    stop at the most repetitions allowed, and before a repetition that would likely overrun the time budget
    (for 'clear', only past the fewest repetitions an answer needs, unless `extend_to_floor` is False, as for a
    workload's prompt, whose budget is a share of the workload's).
    """
    stop, rule = report.stopping, request.stopping_rule
    stop.update(repetitions=count, elapsed_s=elapsed)
    for index, info in enumerate(report.arms):
        if info.assisted and info.name in stop["arms"]:
            arm = stop["arms"][info.name]
            arm["repetitions"] = len(report.runs_of(index))
            if info.error:
                arm["error"] = info.error
            else:
                _record_likely(stop, info.name, report.likely_sequence(index))
    if rule != "fixed":
        measured = _measured(report)
        for name, seq in measured:
            stop["arms"][name].update(settled=seq["settled"], looks=seq["looks"])
        if not measured:  # every assisted arm failed (or there was none): nothing left to settle
            stop["ended_by"] = "no assisted arm"
            return Decision(True)
        if rule == "likely":
            open_arms = [name for name, seq in measured if seq["settled"] is None and not stop["likely"].get(name)]
            if not open_arms:
                stop.update(reached=True, ended_by="likely")
                return Decision(True)
            # One short line: the answers so far are the headline's, not the progress line's.
            skewed = [name for name in open_arms if stop["arms"][name].get("likely_skewed")]
            waiting = f"waiting for the likely answer for {_whom(open_arms)}"
            if skewed:
                waiting += f" (the sure one for {_whom(skewed)}: too skewed to assume normal noise)"
        elif rule == "clear":
            open_arms = [name for name, seq in measured if seq["settled"] is None]
            if not open_arms:
                stop.update(reached=True, ended_by="clear")
                return Decision(True)
            waiting = f"waiting for the sure answer for {_whom(open_arms)}"
        else:
            loose = [name for name, seq in measured if not sequential.within(seq, request.precision)]
            if count >= stop["min_repetitions"] and not loose:
                stop.update(reached=True, ended_by="precision")
                return Decision(True)
            waiting = f"waiting for {' and '.join(loose) or 'more repetitions'} to be known to ±{request.precision:.0%}"
    else:
        waiting = ""
    ended = budget_ends(request, count, elapsed)
    if ended == "repetitions":
        stop["ended_by"] = "repetitions"
        stop["reached"] = rule == "fixed"
        return Decision(True)
    # A time budget that ends before the fewest repetitions any answer needs (rule "clear") can only end without
    # an answer, so it is extended to that floor (the operator's ASSISTLAB_MAX_RUN_S still ends the run) and the
    # progress line says how long the answer will take.
    if ended == "time budget":
        floor = _floor(stop) if rule in ("clear", "likely") and extend_to_floor else 0
        if count >= floor:
            stop["ended_by"] = "time budget"
            return Decision(True)
        stop["budget_extended_to_s"] = round(elapsed / count * floor, 1)
        extended = f"the {request.max_time_s:g} s budget extended to the {floor} repetitions an answer needs"
        waiting = f"{waiting} ({extended})" if waiting else extended
    return Decision(False, waiting)


def budget_ends(request: BenchRequest, count: int, elapsed: float) -> str | None:
    """The budget's word after `count` repetitions in `elapsed` seconds: 'repetitions' at the most allowed, 'time
    budget' before a repetition that would likely overrun the time budget (the mean so far predicts its length),
    else None. The comparison's rules and the tuner (measure/tune.py) both stop on it."""
    if count >= request.repeats:
        return "repetitions"
    if request.max_time_s is not None and elapsed + elapsed / count > request.max_time_s:
        return "time budget"
    return None


def _whom(names: list[str]) -> str:
    """The arms a progress line waits for, short: one by its name, several by their count (the headline names
    them, with what each has so far)."""
    return names[0] if len(names) == 1 else f"{len(names)} arms"


def _floor(stop: dict) -> int:
    """The fewest repetitions after which the rule can answer for the assisted arms still measured: the sure
    rule's floor, or for the rule "likely" its first planned look (the sure floor once an arm is too skewed)."""
    arms = [name for name, arm in stop["arms"].items() if "error" not in arm]
    if not arms:
        return 0
    sure = sequential.fewest_for_verdict(sequential.arm_alpha(stats.TARGET_LEVEL, len(stop["arms"])))
    if stop["rule"] == "likely" and not any(stop["arms"][name].get("likely_skewed") for name in arms):
        sure = likely.LOOKS[0]
    return min(sure, stop["max_repetitions"])


def answer_message(report: Report) -> str:
    """The status line once the repetitions are over and before the untimed drafting-cost runs."""
    n = report.stopping["repetitions"]
    if report.stopping["ended_by"] == "clear":
        return f"Stopped after {counted(n, 'repetition')}: the answer was clear."
    if report.stopping["ended_by"] == "likely":
        return f"Stopped after {counted(n, 'repetition')}: {answer_words(report.stopping)}."
    return f"The timed repetitions are done ({n})."


def prompt_words(stopping: dict) -> str:
    """What ended one prompt of a workload run until clear, in a few words: 'clear after 7 repetitions'."""
    n, ended = stopping["repetitions"], stopping["ended_by"]
    runs = f"{n} repetition{'s' if n != 1 else ''}"
    if ended == "clear":
        return f"clear after {runs}"
    if ended == "time budget":
        return f"its share of the time budget ran out after {runs}"
    if ended == "repetitions":
        return f"not clear after {runs}, the most allowed"
    if ended == "no assisted arm":
        return f"no assisted arm left after {runs}"
    return runs


def suite_words(stopping: dict) -> str:
    """A workload's rule "clear" in one sentence: how many prompts settled and what ended the others."""
    prompts = list(stopping["prompts"].values())
    settled = sum(1 for p in prompts if p["ended_by"] == "clear")
    budget = sum(1 for p in prompts if p["ended_by"] == "time budget")
    most = sum(1 for p in prompts if p["ended_by"] == "repetitions")
    parts = [f"{settled} of {len(prompts)} prompts reached a clear answer"]
    if budget:
        parts.append(f"{budget} ran out of their share of the {stopping['max_time_s']:g} s budget")
    if most:
        parts.append(f"{most} were not clear after {stopping['max_repetitions']} repetitions")
    return "; ".join(parts) + f" ({stopping['spent_s']:.0f} s of timed runs)."


def finish_message(report: Report, request: BenchRequest) -> str:
    """The closing sentence of a complete comparison: how many repetitions ran and what ended them."""
    stop = report.stopping
    n = stop["repetitions"]
    failed = [a.name for a in report.arms if a.error]
    tail = "" if not failed else f" {', '.join(failed)} failed."
    ended = stop["ended_by"]
    if stop["rule"] == "clear":
        if ended == "clear":
            text = f"Complete. Stopped after {counted(n, 'repetition')}: the answer was clear. {answer_words(stop)}."
        elif ended == "no assisted arm":
            text = "Complete, but no assisted arm is left to compare."
        else:  # the time budget or the most repetitions: said as the page, History and the command line say it
            text = f"Complete. {unsettled_sentence(stop)}"
    elif stop["rule"] == "likely":
        said = answer_words(stop)
        if ended == "likely":
            text = f"Complete after {counted(n, 'repetition')}. {said}."
        elif ended == "no assisted arm":
            text = "Complete, but no assisted arm is left to compare."
        else:  # no answer, likely or sure, for some arm: the same sentence as an unsettled 'clear' run
            text = f"Complete. {unsettled_sentence(stop)}" + (f" So far: {said}." if said else "")
    elif stop["rule"] == "precision":
        target = f"±{request.precision:.0%}"
        if stop["reached"]:
            text = f"Complete: every speedup is known to {target} at every look after {counted(n, 'repetition')}."
        elif ended == "time budget":
            text = (f"Complete, but the time budget of {request.max_time_s:g} s ran out after {counted(n, 'repetition')} "
                    f"before every speedup was known to {target}.")
        elif ended == "no assisted arm":
            text = f"Complete, but no assisted arm is left to measure to {target}."
        else:
            text = (f"Complete, but {n} repetitions (the most allowed) did not pin every speedup down to "
                    f"{target}.")
    elif ended == "time budget":
        text = (f"Complete, but the time budget of {request.max_time_s:g} s ended the runs after {n} of "
                f"{counted(request.repeats, 'repetition')}.")
    else:
        text = "Complete."
    return text + tail
