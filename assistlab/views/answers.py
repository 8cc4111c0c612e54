"""An answer that rests on the likely interval (the rule 'likely', or 'clear' before its sure answer), in the
headline's words, its assumption said.

Pure functions of a report dict, as the charts and panels are: `headline_lines` and `lead_sentence` are
charts' own with each answer that rests on a likely interval said as such, for the page and the API.
"""

from __future__ import annotations

from ..results import sequential
from ..results.likely import arm_answer
from ..results.report import busy_clause, is_busy
from ..results.verdicts import LIKELY_NOTHING_HELPED, confirming, likely_verdict  # noqa: F401
from . import charts


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
    then = "; confirming without that assumption" if confirming(report) else ""
    return f"{name}: {words}: {said}{then}." + busy_clause(is_busy(report))


def lead_sentence(report: dict) -> str | None:
    """The answer first (charts.lead_sentence; under the rule 'likely' the likely answer's lead, its assumption
    said: results.verdicts.likely_lead)."""
    return charts.lead_sentence(report)


def headline_lines(report: dict) -> list[str]:
    """charts.headline_lines, each arm answered by its likely interval said with its assumption."""
    likely = {comp["arm"]: likely_sentence(report, comp) for _i, _arm, comp in charts._assisted(report)
              if comp["speedup"].get("median") is not None and likely_verdict(report, comp)}
    return [next((said for name, said in likely.items() if line.startswith((f"{name} ", f"So far {name} "))), line)
            for line in charts.headline_lines(report)]


def headline(report: dict) -> str:
    """The headline as one text (the API's), as charts.headline with the likely answers said."""
    return "\n".join(headline_lines(report))
