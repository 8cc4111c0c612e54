"""Workload reports: per-category and overall figures over the prompts of a selection, measured one by one.

Pure: no torch. The suite runner (`suite_runner.py`) measures each selected prompt (`suite_inputs.select`) as
one comparison (a `report.Report`); everything here reads those reports and derives the per-category and
overall numbers.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field

import numpy as np

from . import cells
from . import load as load_mod
from .busy import warnings as busy_warnings
from .report import Report, level_words, with_level_words
from .suite_inputs import Item, Selection

LEVEL = 0.95
# Two-sided 95% Student t quantiles t_{0.975, df} for df = 1..30; beyond that a Cornish-Fisher expansion.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
INTERVAL_METHOD = (
    "geometric mean of per-prompt speedups; 95% Student-t interval of the mean log speedup over prompts, "
    "exponentiated"
)


# ---------------------------------------------------------------- statistics over prompts


def t_quantile(df: int) -> float:
    """t_{0.975} with `df` degrees of freedom (two-sided 95%)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959963984540054
    return (
        z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def geomean_interval(speedups: list[float]) -> dict:
    """Geometric mean of per-prompt speedups with a 95% t-interval of the mean log speedup (n >= 2).

    The interval treats the prompts as a sample of the kind of work the category stands for; with one
    prompt there is none. `median` is the median of the per-prompt speedups, given beside it.
    """
    values = [float(v) for v in speedups if v is not None and v > 0 and math.isfinite(v)]
    n = len(values)
    out = {"geomean": None, "median": None, "ci_low": None, "ci_high": None, "level": LEVEL, "n": n,
           "method": INTERVAL_METHOD}
    if not n:
        return out
    logs = np.log(values)
    mean = float(logs.mean())
    out["geomean"] = math.exp(mean)
    out["median"] = float(np.median(values))
    if n >= 2:
        half = t_quantile(n - 1) * float(logs.std(ddof=1)) / math.sqrt(n)
        out["ci_low"], out["ci_high"] = math.exp(mean - half), math.exp(mean + half)
    return out


# ---------------------------------------------------------------- results


@dataclass
class PromptResult:
    """One measured item: its comparison report, or why it was skipped."""

    item: Item
    status: str = "pending"  # pending, running, measured, skipped, stopped, failed
    reason: str | None = None
    prompt_tokens: int | None = None
    report: Report | None = None
    _frozen: dict | None = field(default=None, repr=False)

    def finish(self) -> None:
        """Freeze the per-prompt report dict once its runs are done (it no longer changes)."""
        if self.report is not None:
            self._frozen = self.report.to_dict()

    def report_dict(self) -> dict | None:
        if self._frozen is not None:
            return self._frozen
        return self.report.to_dict() if self.report is not None else None


def arm_figures(report: dict) -> list[dict]:
    """Per assisted arm of one prompt's report: the paired speedup, acceptance, tokens per forward, identity.

    `accepted`, `drafted` and `steps` are sums over the counted runs, for pooling over prompts.
    """
    out = []
    assisted = [a for a in report["arms"] if a["strategy"] != "plain"]
    for entry, arm in zip(report["comparison"], assisted, strict=True):
        # Verification steps with a draft: one per drafted step of generate(), a server's count of its drafts.
        steps = sum((t["counts"].get("drafts") or 0) if t.get("counts") is not None else len(t.get("drafted", []))
                    for t in arm["trace"])
        accepted = sum(arm.get("accepted_tokens", []))
        out.append({
            "arm": entry["arm"],
            "speedup": (entry.get("speedup") or {}).get("median"),
            "speedup_ci": [entry["speedup"].get("ci_low"), entry["speedup"].get("ci_high")] if entry.get("speedup") else None,
            "acceptance_rate": entry.get("acceptance_rate"),
            "tokens_per_forward": entry.get("tokens_per_forward"),
            "mean_accepted_tokens": 1 + accepted / steps if steps else None,
            "identical": entry.get("outputs_identical"),
            "first_difference": entry.get("first_difference"),
            "drafted": sum(arm.get("drafted_tokens", [])),
            "accepted": accepted,
            "steps": steps,
            "error": arm.get("error"),
        })
    return out


def aggregate(rows: list[dict], arm_names: list[str]) -> dict:
    """Per arm over prompts: geometric-mean speedup with interval, pooled acceptance, mean accepted tokens.

    `rows` are per-prompt records with `arms` from `arm_figures`; prompts where an arm has no speedup
    (failed, or stopped before it ran) do not count for that arm.
    """
    arms = []
    for name in arm_names:
        figures = [a for r in rows for a in r["arms"] if a["arm"] == name and a["speedup"] is not None]
        drafted = sum(a["drafted"] for a in figures)
        accepted = sum(a["accepted"] for a in figures)
        steps = sum(a["steps"] for a in figures)
        identical = [a["identical"] for a in figures if a["identical"] is not None]
        arms.append({
            "arm": name,
            "speedup": geomean_interval([a["speedup"] for a in figures]),
            "acceptance_rate": accepted / drafted if drafted else None,
            "mean_accepted_tokens": 1 + accepted / steps if steps else None,
            "identical": sum(bool(i) for i in identical),
            "prompts": len(figures),
        })
    # The prompts behind these figures: those where some arm has a speedup, so a label's count ('summary (1)')
    # never counts a prompt whose runs gave no speedup yet ('nothing measured yet').
    measured = sum(1 for r in rows if any(a["arm"] in arm_names and a["speedup"] is not None for a in r["arms"]))
    return {"prompts": measured, "arms": arms}


def _interval_text(s: dict) -> str:
    if s["ci_low"] is None:
        return "one prompt, so no interval" if s["n"] == 1 else "no interval"
    return f"{level_words(s['level'])} interval {s['ci_low']:.2f}–{s['ci_high']:.2f}×"


def best_sentence(label: str, entry: dict) -> str:
    """Which arm was fastest on a category, in one sentence; never a winner from an interval that holds 1×."""
    arms = [a for a in entry["arms"] if a["speedup"]["geomean"] is not None]
    count = f"{entry['prompts']} prompt{'s' if entry['prompts'] != 1 else ''}"
    if not arms:
        return f"{label} ({count}): nothing measured yet."
    arms.sort(key=lambda a: -a["speedup"]["geomean"])
    best, s = arms[0], arms[0]["speedup"]
    figure = f"{s['geomean']:.2f}× ({_interval_text(s)})"
    if s["ci_low"] is None:
        if s["geomean"] < 1.0:  # plain was the fastest measured: say that first
            return (
                f"{label} ({count}): plain was fastest; every assisted arm was slower, the least slow "
                f"{best['arm']} at {figure}; too few prompts to be sure."
            )
        return (
            f"{label} ({count}): {best['arm']} was fastest at {figure}; too few prompts to call it clearly "
            f"faster than plain."
        )
    if s["ci_low"] > 1.0:
        sentence = f"{label} ({count}): {best['arm']} was fastest, {figure}"
        close = [a for a in arms[1:] if a["speedup"]["ci_high"] is not None and a["speedup"]["ci_high"] >= s["ci_low"]]
        if close:
            sentence += f", though not clearly ahead of {close[0]['arm']} ({close[0]['speedup']['geomean']:.2f}×)"
        return sentence + "."
    if all(a["speedup"]["ci_high"] is not None and a["speedup"]["ci_high"] < 1.0 for a in arms):
        return (f"{label} ({count}): plain was fastest; every assisted arm was clearly slower, the least slow "
                f"{best['arm']}, {figure}.")
    return (
        f"{label} ({count}): no arm was clearly faster than plain; the highest, {best['arm']} at {figure}, "
        f"has an interval that contains 1×."
    )


def summary_sentences(data: dict) -> list[str]:
    """A suite report dict in sentences: which arm was best per category and overall, then any warning."""
    suite = data["suite"]
    return ([c["best"] for c in suite["categories"]] + [suite["overall"]["best"]]
            + [w["message"] for w in data.get("warnings") or []])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "suite"


@dataclass
class SuiteReport:
    """A whole suite: the selection, the per-prompt comparisons, and figures derived from them."""

    selection: Selection
    request: dict  # the BenchRequest settings shared by every prompt (its `prompt` is not used)
    environment: dict
    arm_names: list[str]
    results: list[PromptResult]
    status: str = "running"
    message: str = ""
    elapsed_s: float = 0.0
    load: load_mod.LoadRecord | None = None  # the workload's load phase, once after its prompts
    load_arms: list = field(default_factory=list)  # every arm's ArmInfo, for the load figures
    load_note: str | None = None  # why the load phase did not run, when levels were asked
    # With the rule "clear" per prompt: the rule, the workload's budget and what was spent, and per prompt id its
    # repetitions and what ended them (each prompt's own `stopping` block is in its report); None: a fixed count.
    stopping: dict | None = None

    def prompt_rows(self) -> list[dict]:
        rows = []
        for result in self.results:
            item = result.item
            row = {
                "id": item.id,
                "prompt_id": item.prompt_id,
                "category": item.category,
                "turn": item.turn,
                "prompt": item.text,
                "status": result.status,
                "reason": result.reason,
                "prompt_tokens": result.prompt_tokens,
                "arms": [],
            }
            data = result.report_dict()
            if data is not None and data["counted_repetitions"]:
                row["arms"] = arm_figures(data)
                row["repetitions"] = data["counted_repetitions"]
                if data.get("stopping") is not None:  # the rule "clear": its looks and what ended this prompt
                    row["stopping"] = data["stopping"]
                row["orders"] = data["orders"]  # the arms' order in each repetition, rotated as in a comparison
                row["runs"] = [
                    {key: arm[key] for key in (
                        "name", "strategy", "error", "latencies_s", "new_tokens", "tokens_per_s", "text",
                        "token_ids", "token_origins", "text_segments", "drafted_tokens", "accepted_tokens",
                    ) if key in arm}
                    for arm in data["arms"]
                ]
            rows.append(row)
        return rows

    def to_dict(self) -> dict:
        rows = self.prompt_rows()
        measured = [r for r in rows if r["arms"]]
        categories = []
        for category in self.selection.categories:
            entry = {"category": category, **aggregate([r for r in measured if r["category"] == category], self.arm_names)}
            entry["selected"] = sum(1 for r in rows if r["category"] == category)
            entry["best"] = best_sentence(category, entry)
            categories.append(entry)
        overall = aggregate(measured, self.arm_names)
        overall["selected"] = len(rows)
        overall["best"] = best_sentence("Overall", overall)
        suite = {
            "name": self.selection.name,
            "source": self.selection.source,
            **self.selection.to_dict(),
            "interval": INTERVAL_METHOD,
            "categories": categories,
            "overall": overall,
            "skipped": [{"id": r["id"], "category": r["category"], "reason": r["reason"]} for r in rows if r["status"] == "skipped"],
            "prompts": rows,
        }
        data = {
            "schema": 1,
            "kind": "suite",
            "status": self.status,
            "message": self.message,
            "elapsed_s": self.elapsed_s,
            "request": self.request,
            "suite_request": self.selection.request.to_dict(),
            "environment": self.environment,
            # What a single comparison warns of (busy-machine), from what was watched during every prompt's runs.
            "warnings": busy_warnings(self.environment.get("contention")),
            "arms": self.arm_names,
            "suite": suite,
        }
        if self.stopping is not None:
            data["stopping"] = self.stopping
        if self.request.get("concurrency"):  # the load phase, run once over the workload's prompts in turn
            data.update(load_mod.report_parts(self.load, self.load_arms, self.environment.get("load_contention")))
            data["load_summary"]["notes"] += [self.load_note] if self.load_note else []
            data["load_raw"] = load_mod.raw(self.load)
        data["answer"] = overall["best"]  # the workload's answer in the words the page shows
        return with_level_words(data)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_csv(self) -> str:
        """One row per counted run, with the prompt's id, category and turn first."""
        out = io.StringIO()
        writer = cells.Writer(out)
        header_written = False
        for result in self.results:
            if result.report is None or not result.report.runs:
                continue
            rows = list(csv.reader(io.StringIO(result.report.to_csv())))
            if not header_written:
                writer.writerow(["prompt_id", "category", "turn", *rows[0]])
                header_written = True
            for row in rows[1:]:
                writer.writerow([result.item.id, result.item.category, result.item.turn, *row])
        if not header_written:
            writer.writerow(["prompt_id", "category", "turn"])
        arms = [(a.name, a.strategy, a.engine) for a in self.load_arms or []]
        for row in load_mod.csv_rows(load_mod.raw(self.load), arms) if header_written else []:
            writer.writerow(["load", "", "", *row])  # the load phase's requests, over the prompts in turn
        return out.getvalue()

    @property
    def file_stem(self) -> str:
        return f"suite-{_slug(self.selection.name)}"
