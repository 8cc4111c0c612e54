"""The records the history hands out (SaveResult, Entry, Page, BoardRow, BoardSection), its limits and its error."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ..errors import AssistLabError, InputError
from ..results.report import NO_CLEAR_ANSWER, NO_CLEAR_ANSWER_SHORT

# Size limits for what one comparison may store (issue 10: the database follows the page's rules).
MAX_NAME_CHARS = 200
MAX_OWNER_CHARS = 128
MAX_PREVIEW_CHARS = 200
MAX_RECOMMENDATION_CHARS = 400  # a tuner's sentence, as the history list shows it
MAX_PAGE_SIZE = 200
MAX_PAGE = 1_000_000_000  # far past any history; keeps the row offset inside every database's integers

# Interval kinds a verdict may rest on: stats' exact order-statistic one, and the bootstrap of older reports.
# A workload's is the t-interval of its prompts' mean log speedup (results.suite).
INTERVAL_KINDS = ("order-statistic", "bootstrap", "t-interval")
ID_PATTERN = re.compile(r"^[0-9a-f]{16}$")


class HistoryError(AssistLabError):
    """The history database cannot be used, or an entry is not there or not yours."""


def check_id(run_id: object) -> str:
    """A comparison id as given in a permalink, or InputError."""
    text = str(run_id or "").strip().lower()
    if not ID_PATTERN.match(text):
        raise InputError("A comparison id is 16 letters and digits (0-9, a-f), as shown in the history list.")
    return text


@dataclass(frozen=True)
class SaveResult:
    """What a save did: the new id, or a warning sentence (and nothing saved). `note` is said alongside an id."""

    id: str | None = None
    warning: str | None = None
    note: str | None = None

    @property
    def saved(self) -> bool:
        return self.id is not None


@dataclass(frozen=True)
class Entry:
    """One saved comparison as the list shows it (no report)."""

    id: str
    created_at: datetime
    owner: str | None
    status: str
    target: str
    assistants: str
    strategies: str
    device: str
    device_name: str
    gpu_name: str | None
    dtype: str
    new_tokens: int | None
    repetitions: int | None
    best_arm: str | None
    best_speedup: float | None
    outputs_identical: bool | None
    assistlab_version: str | None
    transformers_version: str | None
    prompt_preview: str
    workload: str | None = None  # what a workload measured (history.derive.workload_label); None: one prompt
    engines: str = "transformers"  # the engines it timed, 'transformers, vllm' (history.derive.engines_timed)
    kind: str = "comparison"  # 'comparison', 'workload' or 'tune' (a tuner's search; history.derive.kind_of)
    recommendation: str | None = None  # a tuner's answer in its sentence; None for anything else

    def to_dict(self) -> dict:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["created_at"] = self.created_at.isoformat()
        return data


@dataclass(frozen=True)
class Page:
    entries: tuple[Entry, ...]
    total: int
    page: int
    page_size: int


@dataclass(frozen=True)
class BoardRow:
    """One pairing on one target and device: its speedup across the comparisons that tried it."""

    label: str
    strategy: str
    assistant: str | None
    setting: str
    speedup: float  # median over the comparisons of each one's median speedup
    comparisons: int
    latest_low: float | None  # the interval of the latest comparison, at its stated level
    latest_high: float | None
    latest_level: float | None
    latest_kind: str  # 'order-statistic' or 'bootstrap' (an interval), 'range' (too few runs for one), 'none'
    latest_n: int
    latest_at: datetime
    latest_id: str
    faster: int  # comparisons whose interval lies wholly above 1x
    latest_speedup: float | None = None  # the latest comparison's own median, which its interval is around

    def to_dict(self) -> dict:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["latest_at"] = self.latest_at.isoformat()
        return data


def _comparisons(n: int) -> str:
    return "its one comparison" if n == 1 else f"the median of its {n} comparisons"


@dataclass(frozen=True)
class BoardSection:
    """One target on one device and one engine, measured one way (new tokens, prompt or workload, sampling,
    finished or stopped). Its plain is that engine's plain: a vLLM arm is ranked against vLLM's plain only."""

    target: str
    device_name: str
    rows: tuple[BoardRow, ...]  # the pairings, fastest first; plain, at 1×, is the line they are ranked against
    new_tokens: int | None = None
    workload: str | None = None
    prompt_preview: str | None = None
    sampling: bool | None = None
    stopped: bool = False
    engine: str = "transformers"
    unsettled: bool = False  # comparisons that ended before their answer was clear: shown, never ranked
    concurrency: int = 1  # requests at once: 1 is a comparison's own result, more a load level's (issue 27)

    @property
    def plain(self) -> str:
        """The line these pairings are ranked against, in words: 'plain', or 'vllm plain' on another engine."""
        return "plain" if self.engine == "transformers" else f"{self.engine} plain"

    @property
    def beaten(self) -> bool:
        """Some pairing beat plain: one of its comparisons clearly (an interval above 1×), and its median too."""
        return any(r.faster and r.speedup > 1.0 for r in self.rows)

    @property
    def measured(self) -> str:
        """What these comparisons measured, in words: '16 new tokens · prompt "hello" · greedy'."""
        parts = [f"{self.new_tokens} new tokens"] if self.new_tokens else []
        if self.workload:
            parts.append(f"workload {self.workload}")
        elif self.prompt_preview is not None:
            preview = self.prompt_preview if len(self.prompt_preview) <= 60 else self.prompt_preview[:59] + "…"
            parts.append(f"prompt “{preview}”")
        if self.sampling is not None:
            parts.append("sampling" if self.sampling else "greedy")
        if self.stopped:
            parts.append("stopped before every repetition ran")
        if self.unsettled:
            parts.append(NO_CLEAR_ANSWER_SHORT)
        if self.concurrency > 1:
            parts.append(f"at {self.concurrency} requests at once (throughput)")
        return " · ".join(parts)

    @property
    def note(self) -> str:
        if self.unsettled:
            return (f"{NO_CLEAR_ANSWER}: these comparisons ended before their answer was clear, so their medians "
                    f"are listed, not ranked.")
        winners = [r for r in self.rows if r.faster and r.speedup > 1.0]
        if winners:
            best = self.rows[0]  # its median is above 1× too: winners' are, and it is the highest
            how = f"{best.speedup:.2f}×, {_comparisons(best.comparisons)}"
            note = f"{best.label} is the fastest pairing measured here ({how})"
            if winners[0] is not best:
                return f"{note}; {winners[0].label} has clearly beaten {self.plain}, it has not yet."
            return note + "."
        once = sum(r.faster for r in self.rows)
        if once:
            return (f"No assistant has beaten {self.plain} here: {once} comparison{'s' if once != 1 else ''} did, "
                    f"but no pairing's median is above 1×.")
        return f"No assistant has beaten {self.plain} here yet."

    def to_dict(self) -> dict:
        return {"target": self.target, "device_name": self.device_name, "engine": self.engine,
                "concurrency": self.concurrency,
                "new_tokens": self.new_tokens,
                "workload": self.workload, "prompt_preview": self.prompt_preview, "sampling": self.sampling,
                "stopped": self.stopped, "unsettled": self.unsettled, "measured": self.measured, "beaten": self.beaten,
                "note": self.note,
                "rows": [r.to_dict() for r in self.rows]}
