"""An answer that rests on the likely interval (the rule 'likely'), in the headline's words, its assumption said.

Pure functions of a report dict, as the charts and panels are: `headline_lines` and `lead_sentence` are
charts' own with each answer that rests on a likely interval said as such, for the page and the API.
"""

from __future__ import annotations

from ..results import sequential
from ..results.likely import arm_answer
from ..results.report import busy_clause, is_busy, judged, provisional
from . import charts


def likely_verdict(report: dict, comp: dict) -> str | None:
    """The likely verdict an arm's answer rests on under the rule 'likely' (faster, slower or no practical
    difference), or None: another rule, no likely answer yet, or its sure answer came first (then that one is
    the answer)."""
    stop = report.get("stopping") or {}
    if stop.get("rule") != "likely" or (comp.get("sequence") or {}).get("settled"):
        return None
    return (stop.get("likely") or {}).get(comp["arm"])


def likely_sentence(report: dict, comp: dict) -> str:
    """An arm answered by its likely interval, its assumption said: 'universal: Likely slower (4 repetitions,
    assuming roughly normal noise): 0.27× the speed of plain.'"""
    name, median = comp["arm"], comp["speedup"]["median"]
    kind = likely_verdict(report, comp)
    words = arm_answer(report["stopping"], name)
    if kind in (sequential.SLOWER, sequential.FASTER):  # a slower arm is said as its speedup below 1×, as everywhere
        said = f"{median:.2f}× the speed of plain"
    else:
        said = f"{median:.2f}×, within ±{report['stopping']['band']:.0%} of plain"
    return f"{name}: {words}: {said}." + busy_clause(is_busy(report))


LIKELY_NOTHING_HELPED = "Plain generation was likely fastest here, assuming roughly normal noise: no assistant helped."


def likely_lead(report: dict, measured: list[tuple[dict, dict]], so_far: str) -> str | None:
    """The lead under the rule 'likely' once some arm's answer rests on its likely interval; None otherwise."""
    likely = {comp["arm"]: likely_verdict(report, comp) for _arm, comp in measured}
    if not any(likely.values()):
        return None
    answer = {name: v or (judged(comp).get("settled")) for (_arm, comp), (name, v) in zip(measured, likely.items())}
    faster = [(arm, comp) for arm, comp in measured if answer[comp["arm"]] == sequential.FASTER]
    if faster:
        arm, comp = max(faster, key=lambda pair: pair[1]["speedup"]["median"])
        saved = 1.0 - 1.0 / comp["speedup"]["median"]
        hedge = ", assuming roughly normal noise" if likely[comp["arm"]] else ""
        return (f"{so_far}{arm['name']} was {'likely ' if hedge else ''}fastest: the same text took {saved:.0%} less "
                f"time than plain generation (the target model on its own){hedge}.")
    if all(answer.values()):
        return so_far + LIKELY_NOTHING_HELPED
    return None


def lead_sentence(report: dict) -> str | None:
    """charts.lead_sentence, or under the rule 'likely' the likely answer's lead with its assumption."""
    measured = [(arm, comp) for _i, arm, comp in charts._assisted(report)
                if arm.get("latencies_s") and (comp.get("speedup") or {}).get("median") is not None]
    so_far = "So far: " if provisional(report) else ""
    return (likely_lead(report, measured, so_far) if measured else None) or charts.lead_sentence(report)


def headline_lines(report: dict) -> list[str]:
    """charts.headline_lines, each arm answered by its likely interval said with its assumption."""
    likely = {comp["arm"]: likely_sentence(report, comp) for _i, _arm, comp in charts._assisted(report)
              if comp["speedup"].get("median") is not None and likely_verdict(report, comp)}
    return [next((said for name, said in likely.items() if line.startswith((f"{name} ", f"So far {name} "))), line)
            for line in charts.headline_lines(report)]


def headline(report: dict) -> str:
    """The headline as one text (the API's), as charts.headline with the likely answers said."""
    return "\n".join(headline_lines(report))
