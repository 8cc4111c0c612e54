"""Several arms side by side: each comparison entry paired with its arm, and every arm ranked fastest first."""

from __future__ import annotations

from . import sequential, stats
from .explain import ANALYSIS_KEYS


def paired_arms(report: dict) -> list[tuple[dict, dict]]:
    """(comparison entry, its arm) from a report dict, paired by position: arm names may repeat.

    The comparison lists the assisted arms in order, and the plain arm is always first.
    """
    assisted = [a for a in report.get("arms", []) if a.get("strategy") != "plain"]
    return list(zip(report.get("comparison", []), assisted, strict=True))


def versus_best(report: dict, best: list[float], rivals: list[list[float]]) -> dict:
    """Whether the arm with latencies `best` is faster than every rival, run by run: stats.compare_with_best for a
    fixed count; for a run that stopped when the data said so (the rules 'clear', 'likely' and 'precision'), the
    time-uniform comparison (sequential.compare_with_best), since a fixed-count interval read at a stop the data
    chose claims more than it holds (the rule 'likely' stops on the data too: its ranking claims only what the
    time-uniform comparison holds)."""
    if (report.get("stopping") or {}).get("rule") in ("clear", "likely", "precision"):
        return sequential.compare_with_best(best, rivals, stats.TARGET_LEVEL)
    return stats.compare_with_best(best, rivals)


def rank_arms(report: dict) -> list[dict]:
    """Every arm from a report dict, plain among them, fastest first (by median speedup over plain).

    Plain's row (`plain: True`) stands at 1×, the line to beat; an assisted arm ties with it at exactly 1× and
    comes after it, so an arm is ranked above plain only when its median beats 1×. Arms with no speedup
    (failed, or no runs yet) come last, in their original order. The order of the medians is not a claim;
    whether the first is really ahead is: the first row's `clearly_first` is `versus_best` of its
    runs against every other ranked arm's, plain included, paired by repetition (position in `latencies_s`),
    Bonferroni over the rivals, with the joint level in `family_level`; each other ranked row's
    `behind_first` is its run-by-run comparison (ratio of its latency to the first's).
    A lossy arm (ensemble verification, sampling) ranks by its speed too, but its row says `lossless: false` and
    its name carries the lossy mark the runner gives it, so it never stands above a lossless arm unmarked.
    """
    arms = report.get("arms") or []
    rows = []
    if arms:
        plain = arms[0]
        rows.append(
            {
                "arm": plain.get("name", "plain"),
                "strategy": "plain",
                "plain": True,
                "speedup": 1.0,
                "ci_low": None,
                "ci_high": None,
                "level": None,
                "n": len(plain.get("latencies_s") or []),
                "interval": None,
                "acceptance_rate": None,
                "tokens_per_forward": 1.0,
                **{key: None for key in ANALYSIS_KEYS},
                "outputs_identical": True,
                "lossless": True,
                "lossy_reason": None,
                "error": plain.get("error"),
                "clearly_first": None,
                "family_level": None,
                "behind_first": None,
                "_latencies": plain.get("latencies_s") or [],
            }
        )
    for entry, arm in paired_arms(report):
        speed = entry.get("speedup") or {}
        rows.append(
            {
                "arm": entry["arm"],
                "strategy": arm.get("strategy"),
                "plain": False,
                "speedup": speed.get("median"),
                "ci_low": speed.get("ci_low"),
                "ci_high": speed.get("ci_high"),
                "level": speed.get("level"),
                "n": speed.get("n", 0),
                "interval": speed.get("interval"),
                "acceptance_rate": entry.get("acceptance_rate"),
                "tokens_per_forward": entry.get("tokens_per_forward"),
                **{key: entry.get(key) for key in ANALYSIS_KEYS},
                "outputs_identical": entry.get("outputs_identical"),
                "lossless": entry.get("lossless", True),
                "lossy_reason": entry.get("lossy_reason"),
                "error": arm.get("error"),
                "clearly_first": None,
                "family_level": None,
                "behind_first": None,
                "_latencies": arm.get("latencies_s") or [],
            }
        )
    # Ties with plain go to plain: an assistant that saves nothing does not stand above the line it did not beat.
    ordered = sorted(rows, key=lambda r: (r["speedup"] is None, -(r["speedup"] or 0.0), not r["plain"]))
    for rank, row in enumerate(ordered, start=1):
        row["rank"] = rank if row["speedup"] is not None else None
    ranked = [row for row in ordered if row["rank"] is not None]
    if len(ranked) > 1:
        first, rest = ranked[0], ranked[1:]
        versus = versus_best(report, first["_latencies"], [row["_latencies"] for row in rest])
        first["clearly_first"], first["family_level"] = versus["clear"], versus["family_level"]
        for row, comparison in zip(rest, versus["comparisons"]):
            row["behind_first"] = comparison
    for row in ordered:
        del row["_latencies"]
    return ordered
