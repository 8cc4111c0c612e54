"""Whether a schedule of draft lengths per batch size holds up: at each load level, its throughput beside the
best fixed K of that level, timed in the same rotated rounds, with the ratio's interval and the band.

The ratio at a level is the median over rounds of (schedule's output tokens/s) / (fixed K's), paired by round:
both arms ran in every round, in rotated order, so a round's busy spell touches both. Its interval is the
order-statistic interval of stats.speedup, which assumes only independent rounds (5 rounds: [min, max], 93.75%);
it is per level, not adjusted across levels. Where the servers took turns in blocks (one at a time), the two
arms' rounds ran at different moments on different server starts, and the rounds of one block share theirs: the
ratio then pairs blocks (each block's tokens over its wall time), assuming independent blocks. `within_band` is
True when that interval lies inside 1 ± band (no practical difference, config.NO_DIFFERENCE_BAND unless the
request says), False when it lies wholly outside the band, None while it is too wide to say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import stats

if TYPE_CHECKING:
    from ..engines.vllm.schedule_plan import SchedulePlan


def _arm_index(arms: list[dict], spec: dict) -> int | None:
    return next((i for i, a in enumerate(arms) if a.get("spec") == spec), None)


def _entry(load: list[dict], index: int | None, level: int) -> dict | None:
    return next((e for e in load if e.get("arm_index") == index and e.get("concurrency") == level), None)


def _failed(entry: dict | None, arm: dict | None) -> str | None:
    """Why an arm has no figure at a level: its own error (a server that would not start, a refused schedule),
    else the level's failure."""
    if arm is not None and arm.get("error"):
        return arm["error"]
    if entry is None:
        return "it was not measured at this level"
    return entry.get("failed")


def band_verdict(ratio: dict, band: float) -> bool | None:
    """True inside 1 ± band, False wholly outside it, None while the interval is too wide or absent."""
    if not stats.has_interval(ratio):
        return None
    low, high = ratio["ci_low"], ratio["ci_high"]
    if 1.0 - band <= low and high <= 1.0 + band:
        return True
    if high < 1.0 - band or low > 1.0 + band:
        return False
    return None


def _level_sentence(level: int, ratio: dict, within: bool | None, band: float, fixed_k: int,
                    unit: str = "rounds") -> str:
    at = f"At {level} request{'' if level == 1 else 's'} at once"
    rival = f"the fixed k={fixed_k}" if fixed_k else "plain"
    if ratio.get("median") is None:
        return f"{at} the schedule and {rival} have no paired rounds to compare."
    figure = f"{ratio['median']:.3f}×"
    if not stats.has_interval(ratio):
        return (f"{at} the schedule ran at {figure} the throughput of {rival}, from too few {unit} "
                f"({ratio.get('n') or 0}) for an interval.")
    interval = f"{ratio['ci_low']:.3f}–{ratio['ci_high']:.3f} at {ratio['level'] * 100:.4g}%"
    if within is True:
        return (f"{at} the schedule ran at {figure} the throughput of {rival} ({interval}): within "
                f"±{band:.0%}, no practical difference.")
    if within is False:
        side = "faster" if ratio["ci_low"] > 1.0 else "slower"
        said = f"{at} the schedule was {side} than {rival} by more than ±{band:.0%}: {figure} ({interval})."
        if not fixed_k and side == "slower":  # measured with vLLM 0.32's CPU build: docs/tune.md, the proof
            said += (" Its 0 draft tokens there did not make the server plain (vLLM 0.32 still calls the drafter "
                     "every step); for those loads a plain server is faster.")
        return said
    return (f"{at} the schedule ran at {figure} the throughput of {rival} ({interval}): not yet "
            f"shown within ±{band:.0%} or outside it; more {unit} would tell.")


def judge(report: dict, plan: SchedulePlan) -> dict:
    """The report's `tune.schedule_check` from the finished comparison of `plan` (one of plan.parts()): its
    report (Report.to_dict(), or one read back) judged with the plan's arms, its K per level and its band."""
    mine, fixed = plan.specs()
    return judge_arms(report, mine, fixed, plan.ks(), plan.request.band)


def judge_arms(report: dict, schedule_spec: dict, fixed_specs: dict[int, dict], ks: dict[int, int],
               band: float) -> dict:
    """judge's check from the arms' specs: per level of `fixed_specs` ({level: the spec of that level's best
    fixed-K arm}), the two throughputs (medians over rounds), the ratio with its interval, and `within_band`. `ks` is
    the schedule's K at each level. A level whose best was plain (no fixed arm) compares the schedule with plain.
    Arms are found by their spec."""
    arms, load = report.get("arms") or [], report.get("load") or []
    mine = _arm_index(arms, schedule_spec)
    plain = next((i for i, a in enumerate(arms) if a.get("strategy") == "plain"), None)
    refused = arms[mine]["error"] if mine is not None and arms[mine].get("error") else None
    levels = []
    for level in sorted(ks):
        spec = fixed_specs.get(level)
        other = _arm_index(arms, spec) if spec is not None else plain
        fixed_k = (spec or {}).get("num_speculative_tokens") or 0
        ours, theirs = _entry(load, mine, level), _entry(load, other, level)
        failed = (_failed(ours, arms[mine] if mine is not None else None)
                  or _failed(theirs, arms[other] if other is not None else None))
        row = {"concurrency": level, "schedule_k": ks[level], "fixed_k": fixed_k,
               "fixed_arm": None if other is None else arms[other].get("name"),
               "schedule_tokens_per_s": None, "fixed_tokens_per_s": None, "ratio": None, "within_band": None,
               "failed": failed, "sentence": None}
        if failed:
            row["sentence"] = f"At {level} at once the schedule could not be compared: {failed.rstrip('.')}."
            levels.append(row)
            continue
        unit = "blocks" if ours.get("paired_by") == "blocks" else "rounds"
        a, b = ours[f"output_tokens_per_s_{unit}"], theirs[f"output_tokens_per_s_{unit}"]
        n = min(len(a), len(b))  # every round times both arms; a failure drops all of an arm's rounds there
        ratio = stats.speedup(a[:n], b[:n])  # baseline / candidate: the schedule's throughput over the fixed K's
        within = band_verdict(ratio, band)
        row.update(schedule_tokens_per_s=ours["output_tokens_per_s"], fixed_tokens_per_s=theirs["output_tokens_per_s"],
                   ratio=ratio, paired_by=unit, within_band=within,
                   sentence=_level_sentence(level, ratio, within, band, fixed_k, unit))
        levels.append(row)
    verdicts = [r["within_band"] for r in levels]
    every = (None if refused or not levels else False if False in verdicts else None if None in verdicts else True)
    blocked = any(r.get("paired_by") == "blocks" for r in levels)
    return {"band": band, "levels": levels, "refused": refused, "all_within_band": every,
            "assumption": f"independent {'blocks' if blocked else 'rounds'} (an order-statistic interval of the "
                          f"median ratio), per level"}


def merged(checks: list[dict]) -> dict:
    """One `schedule_check` from the checks of a schedule timed one level at a time (each `check`'s, in level
    order): their levels together, the first refusal, and the verdict over every level."""
    levels = [row for checked in checks for row in checked["levels"]]
    refused = next((c["refused"] for c in checks if c.get("refused")), None)
    verdicts = [r["within_band"] for r in levels]
    every = (None if refused or not levels else False if False in verdicts else None if None in verdicts else True)
    return {**checks[0], "levels": levels, "refused": refused, "all_within_band": every}
