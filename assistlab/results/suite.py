"""Workloads: Spec-Bench or a user's prompts file, a reproducible selection, and per-category figures.

Pure: no torch. The suite runner (`suite_runner.py`) measures each selected prompt as one comparison (a
`report.Report`); everything here reads those reports and derives the per-category and overall numbers.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import LIMITS, _as_int, _choice
from ..errors import InputError
from . import cells
from .busy import warnings as busy_warnings
from .report import Report, level_words

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "spec_bench"  # assistlab/data/spec_bench
SPEC_BENCH = "spec-bench"
SOURCES = (SPEC_BENCH, "file")
SELECTIONS = ("first", "sample")
TURNS = ("first", "both")

MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
SINGLE_TURN_CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag")
SPEC_BENCH_CATEGORIES = MT_BENCH_CATEGORIES + SINGLE_TURN_CATEGORIES
# The default suite: one prompt from each single-turn category, small enough for a CPU.
DEFAULT_CATEGORIES = SINGLE_TURN_CATEGORIES
UNCATEGORIZED = "uncategorized"

# Limits on a user's prompts file. Each prompt has the single prompt's limit, LIMITS["prompt_chars"].
SUITE_LIMITS = {
    "prompts": 500,  # entries in a file, and prompts measured in one suite
    "turns": 8,  # user messages in one entry
    "file_bytes": 4_000_000,
    "per_category": 100,
}
# Suite settings when the user leaves them empty: shorter runs than a single comparison, since a suite
# multiplies the work (the defaults measured in docs/workloads.md finish in a few minutes on two CPU cores).
CPU_SUITE_DEFAULTS = {"max_new_tokens": 32, "repeats": 3, "warmup": 1}
CUDA_SUITE_DEFAULTS = {"max_new_tokens": 128, "repeats": 3, "warmup": 1}

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


@dataclass(frozen=True)
class SuitePrompt:
    """One entry of a suite: an id, a category and one or more user turns (asked in order)."""

    id: str
    category: str
    turns: tuple[str, ...]
    line: int | None = None  # where it starts in a user's file

    def to_dict(self) -> dict:
        return {"id": self.id, "category": self.category, "turns": list(self.turns), "line": self.line}


@dataclass(frozen=True)
class SuiteRequest:
    """Which workload to measure: the suite, its categories, how many prompts each, and how they are chosen.

    `categories` empty means the default: Spec-Bench's five single-turn categories, or every category of a
    file. `per_category` None means 1 for Spec-Bench and every prompt of a file. `selection` is 'first' (the first N of each category, in file order) or 'sample' (a seeded sample
    of N). `turns` is 'first' (only the first user turn of multi-turn entries) or 'both' (every turn, each
    asked after the target's own answer to the turns before it).
    """

    suite: str = SPEC_BENCH
    file: str | None = None
    categories: tuple[str, ...] = ()
    per_category: int | None = None
    selection: str = "first"
    seed: int = 0
    turns: str = "first"

    def __post_init__(self) -> None:
        _choice("suite", self.suite, SOURCES)
        categories = self.categories
        if isinstance(categories, str):
            categories = categories.split(",")
        if not isinstance(categories, (tuple, list)):
            raise InputError(f"categories must be a list of category names, got {categories!r}.")
        cleaned = []
        for name in categories:
            if not isinstance(name, str):
                raise InputError(f"categories must be names (text), got {name!r}.")
            if name.strip() and name.strip() not in cleaned:
                cleaned.append(name.strip())
        if self.suite == SPEC_BENCH:
            unknown = [c for c in cleaned if c not in SPEC_BENCH_CATEGORIES]
            if unknown:
                raise InputError(
                    f"categories: Spec-Bench has no category {unknown[0]!r}; choose among "
                    f"{', '.join(SPEC_BENCH_CATEGORIES)}."
                )
            object.__setattr__(self, "file", None)
        elif not self.file or not str(self.file).strip():
            raise InputError("file: choose a prompts file (JSON lines, CSV or plain text) for a suite of your own.")
        object.__setattr__(self, "categories", tuple(cleaned))
        if self.per_category is not None and not (isinstance(self.per_category, str) and not self.per_category.strip()):
            object.__setattr__(
                self, "per_category", _as_int("per_category", self.per_category, 1, SUITE_LIMITS["per_category"])
            )
        else:
            object.__setattr__(self, "per_category", None)
        _choice("selection", self.selection, SELECTIONS)
        object.__setattr__(self, "seed", _as_int("seed", self.seed, 0, 2**31 - 1))
        _choice("turns", self.turns, TURNS)

    @property
    def name(self) -> str:
        return "Spec-Bench" if self.suite == SPEC_BENCH else Path(str(self.file)).name

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["categories"] = list(self.categories)
        return data


# ---------------------------------------------------------------- loading prompts


def load_spec_bench() -> list[SuitePrompt]:
    """Spec-Bench's 480 questions from the copy inside the package."""
    prompts = []
    with open(DATA_DIR / "question.jsonl", encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            row = json.loads(line)
            prompts.append(SuitePrompt(str(row["question_id"]), row["category"], tuple(row["turns"]), number))
    return prompts


def _decode(data: bytes) -> str:
    if not data.strip():
        raise InputError("The prompts file is empty; put one prompt per entry (JSON lines, CSV or plain text).")
    if len(data) > SUITE_LIMITS["file_bytes"]:
        raise InputError(
            f"The prompts file is {len(data) / 1e6:.1f} MB; the limit is {SUITE_LIMITS['file_bytes'] / 1e6:.0f} MB. "
            f"Split it or choose fewer prompts."
        )
    if b"\x00" in data:
        raise InputError("The prompts file is not text (it holds binary data); save the prompts as UTF-8 text.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"The prompts file is not UTF-8 text (line {line} has bytes that are not); save it as UTF-8."
        ) from None


def _check_turn(text: object, line: int, what: str = "prompt") -> str:
    if not isinstance(text, str):
        raise InputError(f"Line {line} of the prompts file: the {what} must be text, got {type(text).__name__}.")
    if not text.strip():
        raise InputError(f"Line {line} of the prompts file has an empty {what}; give it some text or remove it.")
    if len(text) > LIMITS["prompt_chars"]:
        raise InputError(
            f"The prompt on line {line} of the prompts file has {len(text):,} characters; the limit is "
            f"{LIMITS['prompt_chars']:,}. Shorten it."
        )
    return text


def _category(value: object, line: int) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        return UNCATEGORIZED
    if not isinstance(value, str):
        raise InputError(f"Line {line} of the prompts file: the category must be text, got {value!r}.")
    return value.strip()[:80]


def _count_check(count: int) -> None:
    if count > SUITE_LIMITS["prompts"]:
        raise InputError(
            f"The prompts file has {count:,} prompts; the limit is {SUITE_LIMITS['prompts']:,}. Split it."
        )


def _parse_jsonl(text: str) -> list[SuitePrompt]:
    prompts = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(f"Line {line} of the prompts file is not valid JSON ({exc.msg}); fix or remove it.") from None
        except RecursionError:
            raise InputError(
                f"Line {line} of the prompts file nests lists or objects too deeply to read; a prompt is an object "
                f'like {{"category": "qa", "prompt": "..."}}.'
            ) from None
        if not isinstance(entry, dict):
            raise InputError(
                f'Line {line} of the prompts file must be a JSON object like {{"category": "qa", "prompt": "..."}}.'
            )
        if "turns" in entry and entry["turns"] is not None:
            turns = entry["turns"]
            if not isinstance(turns, list) or not turns:
                raise InputError(f"Line {line} of the prompts file: \"turns\" must be a non-empty list of texts.")
            if len(turns) > SUITE_LIMITS["turns"]:
                raise InputError(
                    f"Line {line} of the prompts file has {len(turns)} turns; the limit is {SUITE_LIMITS['turns']}."
                )
            turns = tuple(_check_turn(t, line, "turn") for t in turns)
        elif "prompt" in entry:
            turns = (_check_turn(entry["prompt"], line),)
        else:
            raise InputError(f'Line {line} of the prompts file has no prompt; give it a "prompt" or a "turns" list.')
        prompts.append(SuitePrompt(str(len(prompts) + 1), _category(entry.get("category"), line), turns, line))
        _count_check(len(prompts))
    return prompts


def _parse_csv(text: str) -> list[SuitePrompt]:
    try:
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        columns = [c.strip().lower() for c in header or []]
        if "prompt" not in columns:
            raise InputError(
                "The CSV prompts file has no 'prompt' column; its first row must name the columns "
                "(prompt, and optionally category)."
            )
        at_prompt = columns.index("prompt")
        at_category = columns.index("category") if "category" in columns else None
        prompts = []
        start = reader.line_num + 1
        for row in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            prompt = row[at_prompt] if at_prompt < len(row) else ""
            if not prompt.strip():
                raise InputError(f"Line {line} of the prompts file has no prompt in its 'prompt' column.")
            category = row[at_category] if at_category is not None and at_category < len(row) else None
            prompts.append(SuitePrompt(str(len(prompts) + 1), _category(category, line), (_check_turn(prompt, line),), line))
            _count_check(len(prompts))
    except csv.Error as exc:
        raise InputError(f"The CSV prompts file cannot be read near line {reader.line_num}: {exc}.") from None
    return prompts


def _parse_text(text: str) -> list[SuitePrompt]:
    prompts, block, first = [], [], 0
    lines = text.splitlines()
    for line, raw in enumerate(lines + [""], start=1):
        if raw.strip():
            if not block:
                first = line
            block.append(raw)
            continue
        if block:
            prompt = "\n".join(block).strip()
            prompts.append(SuitePrompt(str(len(prompts) + 1), UNCATEGORIZED, (_check_turn(prompt, first),), first))
            _count_check(len(prompts))
            block = []
    return prompts


def parse_prompts(data: bytes, filename: str = "") -> list[SuitePrompt]:
    """A user's prompts: JSON lines (.jsonl/.json), CSV (.csv), or plain text with blank lines between prompts.

    Without a known extension, a file whose first non-blank character is '{' is read as JSON lines. Every
    problem is one InputError sentence naming the line where there is one.
    """
    text = _decode(data)
    suffix = Path(filename).suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson") or (suffix not in (".csv", ".txt", ".md") and text.lstrip().startswith("{")):
        prompts = _parse_jsonl(text)
    elif suffix == ".csv":
        prompts = _parse_csv(text)
    else:
        prompts = _parse_text(text)
    if not prompts:
        raise InputError("The prompts file has no prompts in it; put one prompt per entry.")
    return prompts


def read_prompts_file(path: str | Path) -> list[SuitePrompt]:
    """Read and parse a prompts file, refusing one over the size limit before reading it whole."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > SUITE_LIMITS["file_bytes"]:
            raise InputError(
                f"The prompts file is {size / 1e6:.1f} MB; the limit is {SUITE_LIMITS['file_bytes'] / 1e6:.0f} MB. "
                f"Split it or choose fewer prompts."
            )
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"Cannot read the prompts file {path.name!r}: {exc.strerror or exc}.") from None
    return parse_prompts(data, path.name)


# ---------------------------------------------------------------- selection


@dataclass(frozen=True)
class Item:
    """One measured generation: a turn of a suite prompt. Turn n > 1 follows the target's earlier answers."""

    id: str
    prompt_id: str
    category: str
    turn: int
    turns: tuple[str, ...]  # the user turns up to and including this one

    @property
    def text(self) -> str:
        return self.turns[-1]


@dataclass(frozen=True)
class Selection:
    """The prompts a suite measures, in order, and the rule that chose them (recorded in the report)."""

    name: str
    source: str
    rule: str
    categories: tuple[str, ...]
    prompts: tuple[SuitePrompt, ...]
    items: tuple[Item, ...]
    request: SuiteRequest

    def to_dict(self) -> dict:
        return {
            "rule": self.rule,
            "selection": self.request.selection,
            "per_category": self.request.per_category or (1 if self.request.suite == SPEC_BENCH else None),
            "seed": self.request.seed if self.request.selection == "sample" else None,
            "turns": self.request.turns,
            "categories": list(self.categories),
            "prompt_ids": [p.id for p in self.prompts],
        }


def select(request: SuiteRequest, prompts: list[SuitePrompt] | None = None) -> Selection:
    """The reproducible selection: the first N per category, or a sample of N seeded by (seed, category).

    `prompts` is the user's parsed file for suite 'file'; Spec-Bench is read from the package.
    """
    if request.suite == SPEC_BENCH:
        prompts = load_spec_bench()
        source = "Spec-Bench question.jsonl (hemingkx/Spec-Bench fd2c1cd, Apache-2.0), bundled with AssistLab"
    else:
        if prompts is None:
            prompts = read_prompts_file(request.file)
        source = f"file {request.name}"
    available = list(dict.fromkeys(p.category for p in prompts))
    if request.categories:
        missing = [c for c in request.categories if c not in available]
        if missing:
            raise InputError(
                f"categories: {request.name} has no category {missing[0]!r}; it has {', '.join(available)}."
            )
        categories = list(request.categories)
    elif request.suite == SPEC_BENCH:
        categories = list(DEFAULT_CATEGORIES)
    else:
        categories = available
    per_category = request.per_category or (1 if request.suite == SPEC_BENCH else SUITE_LIMITS["prompts"])
    chosen: list[SuitePrompt] = []
    for category in categories:
        members = [p for p in prompts if p.category == category]
        count = min(per_category, len(members))
        if request.selection == "first":
            picked = members[:count]
        else:
            # Seeding by (seed, category) keeps each category's sample the same whatever else is chosen.
            rng = random.Random(f"{request.seed}/{category}")
            positions = sorted(rng.sample(range(len(members)), count))
            picked = [members[i] for i in positions]
        chosen += picked
    items = []
    for p in chosen:
        last = len(p.turns) if request.turns == "both" else 1
        for turn in range(1, last + 1):
            item_id = p.id if turn == 1 else f"{p.id}.{turn}"
            items.append(Item(item_id, p.id, p.category, turn, p.turns[:turn]))
    if len(items) > SUITE_LIMITS["prompts"]:
        raise InputError(
            f"The selection has {len(items)} prompts to measure; the limit is {SUITE_LIMITS['prompts']}. "
            f"Choose fewer categories or fewer per category."
        )
    if request.per_category is None and request.suite != SPEC_BENCH:
        how = "every prompt"
    elif request.selection == "first":
        how = f"the first {per_category}"
    else:
        how = f"a sample of {per_category} (seed {request.seed})"
    rule = f"{how} per category, {len(categories)} categor{'y' if len(categories) == 1 else 'ies'} ({', '.join(categories)}); " + (
        "every turn" if request.turns == "both" else "first turn only"
    )
    return Selection(request.name, source, rule, tuple(categories), tuple(chosen), tuple(items), request)


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
    return {"prompts": len(rows), "arms": arms}


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
        return {
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
        return out.getvalue()

    @property
    def file_stem(self) -> str:
        return f"suite-{_slug(self.selection.name)}"
