"""A search's summary, the report's `tune` block (docs/tune.md): each candidate, the recommendation with its
intervals, the runs it took, the `bench` options that re-time it, what to deploy (the pick only when it is
clearly faster than plain, else plain generation, with why) and whether the timed runs kept to the budget.

Every view of the pick's interval (the sentence, the tuner's page, the command line, the leaderboard) reads one
field, `recommendation.interval` (`interval` of each candidate likewise): its ends, its level and its words."""

from __future__ import annotations

import shlex

import numpy as np

from ..engines import catalog, registry
from ..results import likely, sequential
from ..results import tune as elimination
from ..results.report import Report
from ..results.tune_interval import clearly_faster, decided, one_interval
from ..results.tune_record import Budget, Candidate, Recommendation, TuneSummary


def _settings(spec) -> dict:
    """The declared settings of a candidate, as it asks for them (None: the engine's default)."""
    family = registry.SETTINGS[spec.engine].family_of(spec)
    names = [s.name for s in family.settings] if family else []
    out = {name: getattr(spec, name, None) for name in names}
    if getattr(spec, "assistant", None) or getattr(spec, "draft_model", None):
        out["assistant"] = getattr(spec, "assistant", None) or getattr(spec, "draft_model", None)
    return out


def _interval(base: list[float], arm: list[float], levels: elimination.Levels) -> dict:
    """The speedup base/arm as the search judges one comparison (levels: results/tune.Levels): the sure interval
    (time-uniform, assumes nothing) at the sign-based share and the likely one at its share, said at the
    comparison's level."""
    sure = sequential.speedup_sequence(base, arm, levels.sure_alpha)
    seen = likely.speedup_sequence(base, arm, levels.likely_alpha, levels.looks)
    return {"median": sure["median"], "n": sure["n"], "level": levels.level,
            "ci_low": sure["ci_low"], "ci_high": sure["ci_high"], "interval": sure["interval"],
            "likely_low": seen["ci_low"], "likely_high": seen["ci_high"], "likely_skewed": seen["skewed"]}


def _search_looks(base: list[float], arm: list[float], levels: elimination.Levels) -> list[list[float | None]]:
    """The speedup base/arm's interval after each paired repetition as the search decides on it
    (levels.bounds: one comparison's share); None for an end not bounded."""
    x = np.log([b / a for b, a in zip(base, arm) if b > 0 and a > 0])
    if not x.size:
        return []
    low, high = levels.bounds(x)
    return [[float(np.exp(lo)) if np.isfinite(lo) else None, float(np.exp(hi)) if np.isfinite(hi) else None]
            for lo, hi in zip(low, high)]


def _bench_args(report: Report, spec) -> list[str]:
    request = report.request
    args = ["--target", request["target"], *registry.SETTINGS[spec.engine].bench_args(spec)]
    if request.get("max_new_tokens"):
        args += ["--max-new-tokens", str(request["max_new_tokens"])]
    if request.get("prompt") and request["prompt"] != catalog.default_prompt(request["target"]):
        args += ["--prompt", request["prompt"]]
    return args


def _figure(interval: dict) -> str:
    """The speedup as every other view says it: faster or slower only where its interval says so, a slower one
    as its speedup below 1x (never as a time), one whose interval holds 1x as no clear difference."""
    low, high, ratio = interval["ci_low"], interval["ci_high"], interval["median"] or 0.0
    if low is not None and low > 1.0:
        return f"{ratio:.2f}× faster than plain"
    if high is not None and high < 1.0:
        return f"slower, {ratio:.2f}× the speed of plain"
    if low is not None:
        return f"{ratio:.2f}× the speed of plain, no clear difference"
    return f"{ratio:.2f}× the speed of plain"


def _sentence(rec: Recommendation | None, outcome: str) -> str:
    if rec is None:
        if outcome == elimination.NONE:
            return "Use plain generation: every candidate was clearly slower than plain."
        return "No candidate could be timed; nothing to recommend."
    interval = rec.interval
    span = f" ({interval['text']})" if interval["text"] else " (too few repetitions for an interval)"
    text = f"{rec.phrase[0].upper()}{rec.phrase[1:]}: {_figure(interval)}{span}"
    over = rec.over_default
    owner = registry.SETTINGS[rec.engine].possessive
    if over and over.get("is_default"):
        text += f", and it is {owner} default setting"
    elif over and over.get("median"):
        pct = (over["median"] - 1.0) * 100
        text += f", {abs(pct):.0f}% {'faster' if pct >= 0 else 'slower'} than {owner} defaults"
    if outcome == elimination.OPEN:
        return f"Not settled within the budget; best so far: {text[0].lower()}{text[1:]}."
    return f"Use {text[0].lower()}{text[1:]}."


def _deploy(report: Report, rec: Recommendation | None, outcome: str, engine: str) -> dict | None:
    """What to deploy: the pick's code when it is clearly faster than plain, else plain generation's (on
    `engine`, the pick's or the first candidate's), each with its sentence; None when no candidate could be
    timed (nothing was learnt)."""
    if rec is not None and clearly_faster(rec.interval):
        return {**rec.deploy, "plain": False,
                "sentence": f"Deploy it: {rec.phrase}, {_figure(rec.interval)} ({rec.interval['text']})."}
    if rec is None and outcome != elimination.NONE:
        return None
    if rec is None:
        why = "every candidate was clearly slower than plain."
    else:
        interval = rec.interval
        figures = ", ".join(x for x in (f"{interval['median']:.2f}×" if interval["median"] else "",
                                        interval["text"] or "too few repetitions for an interval") if x)
        why = f"no setting was clearly faster than plain here (best: {rec.phrase}, {figures})."
    plain = registry.SETTINGS[engine].deploy(None, report.request["target"], None, request=_deployed_request(report))
    return {**plain, "plain": True, "sentence": f"Deploy plain generation: {why}"}


def _deployed_request(report: Report) -> dict:
    """The request a deploy snippet reproduces: the searched prompt and length, and the device it ran on."""
    return {**report.request, "device": (report.environment or {}).get("device") or report.request.get("device")}


def _budget(report: Report) -> Budget:
    """The time budget against the timed runs' seconds; `sentence` says when a repetition already started ran
    past it (the search stops before a repetition that would likely overrun, but cannot cut one short)."""
    stop = report.stopping or {}
    budget, took = stop.get("max_time_s"), stop.get("elapsed_s")
    over = isinstance(budget, (int, float)) and isinstance(took, (int, float)) and took > budget
    sentence = ""
    if over:
        seconds = f"{took:.0f}" if took >= 10 else f"{took:.2g}"
        sentence = (f"The timed runs took {seconds} s, past the {budget:g} s budget: a repetition already started "
                    "is finished.")
    return Budget(budget, took, over, sentence)


def summarize(report: Report, state) -> TuneSummary:
    """The `tune` block from the report and the search's state (measure/tune.py's Tuner)."""
    levels = state.levels
    m = levels.m
    candidates, leaving = [], state.leaving(report)
    for pos, (index, spec) in enumerate(zip(state.candidates, state.specs)):
        info = report.arms[index]
        base, mine = report.paired(state.baselines[pos], index)
        left = leaving.get(pos)
        speedup = _interval(base, mine, levels) if mine else None
        looks = _search_looks(base, mine, levels)  # the interval the search decided on, per repetition
        candidates.append(Candidate(
            info.name, spec.engine, getattr(spec, "strategy", None) or spec.method, _settings(spec),
            left[0] if left else None, info.error or (left[1] if left else None), len(mine), speedup,
            one_interval(speedup, decided(looks)), looks))
    rec = None
    if state.winner is not None:
        rec = _recommendation(report, state, state.winner)
    runs_used = len(report.runs)
    reps = report.stopping["repetitions"] if report.stopping else 0
    arms_timed = len([a for a in report.arms if not a.error or report.runs_of(report.arms.index(a))])
    engine = rec.engine if rec else state.specs[0].engine if state.specs else registry.HOST.name
    return TuneSummary(
        outcome=state.outcome,
        settled=state.outcome != elimination.OPEN,
        assumption=elimination.ASSUMPTION,
        level=levels.family,
        comparisons=levels.comparisons,
        comparison_level=levels.level,
        looks=list(levels.looks),
        band=report.request.get("band"),
        candidates=candidates,
        recommendation=rec,
        confirmed=state.confirmed,
        confirmed_against=(report.arms[state.candidates[state.rival]].name
                           if state.rival is not None and state.confirmed is not None else None),
        repetitions=reps,
        runs_used=runs_used,
        runs_without_elimination=arms_timed * reps,
        deploy=_deploy(report, rec, state.outcome, engine),
        budget=_budget(report),
        sentence=_sentence(rec, state.outcome),
    )


def _recommendation(report: Report, state, pos: int) -> Recommendation:
    index, spec = state.candidates[pos], state.specs[pos]
    declared = registry.SETTINGS[spec.engine]
    base, mine = report.paired(state.baselines[pos], index)
    family = declared.family_of(spec)
    helper = getattr(spec, "assistant", None) or getattr(spec, "draft_model", None)
    default = declared.default_arm(family, helper) if family else None
    over: dict | None
    if default is not None and default == spec:
        over = {"is_default": True, "median": 1.0, "default": report.arms[index].name}
    elif default is not None and default in state.specs:
        d = state.specs.index(default)
        theirs, ours = report.paired(state.candidates[d], index)
        over = {**_interval(theirs, ours, state.levels), "is_default": False,
                "default": report.arms[state.candidates[d]].name}
    else:
        over = {"is_default": False, "median": None, "default": None,
                "why": "the engine's default setting was not among the candidates"}
    info = report.arms[index]
    arm_info = {"strategy": info.strategy, "settings": info.settings}
    args = _bench_args(report, spec)
    speedup = _interval(base, mine, state.levels)
    return Recommendation(
        arm=info.name, engine=spec.engine, strategy=info.strategy,
        family=getattr(spec, "strategy", None) or spec.method, settings=_settings(spec),
        phrase=declared.phrase(spec),
        speedup=speedup,
        interval=one_interval(speedup, decided(_search_looks(base, mine, state.levels))),
        over_default=over,
        bench_args=args,
        bench_command="python -m assistlab bench " + shlex.join(args),
        deploy=declared.deploy(spec, report.request["target"], arm_info, request=_deployed_request(report)),
        mean_log_speedup=float(np.mean(np.log(np.divide(base, mine)))) if mine else None,
    )
