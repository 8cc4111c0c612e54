"""Workloads' inputs: Spec-Bench or a user's prompts file, read and checked, and a reproducible selection.

Pure: no torch. `suite.py` turns the measured selection into the workload's report.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

from ..config import LIMITS, _as_int, _choice
from ..errors import InputError

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
