"""The records the history hands out (SaveResult, Entry, Page, BoardRow, BoardSection), its limits and its error."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ..errors import AssistLabError, InputError

# Size limits for what one comparison may store (issue 10: the database follows the page's rules).
MAX_NAME_CHARS = 200
MAX_OWNER_CHARS = 128
MAX_PREVIEW_CHARS = 200
MAX_PAGE_SIZE = 200
MAX_PAGE = 1_000_000_000  # far past any history; keeps the row offset inside every database's integers

# Interval kinds a verdict may rest on: stats' exact order-statistic one, and the bootstrap of older reports.
INTERVAL_KINDS = ("order-statistic", "bootstrap")
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

    def to_dict(self) -> dict:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["latest_at"] = self.latest_at.isoformat()
        return data


@dataclass(frozen=True)
class BoardSection:
    target: str
    device_name: str
    rows: tuple[BoardRow, ...]

    @property
    def beaten(self) -> bool:
        return any(r.faster for r in self.rows)

    @property
    def note(self) -> str:
        if self.beaten:
            best = self.rows[0]
            return f"{best.label} is the fastest pairing measured here ({best.speedup:.2f}×)."
        return "No assistant has beaten plain here yet."

    def to_dict(self) -> dict:
        return {"target": self.target, "device_name": self.device_name, "beaten": self.beaten, "note": self.note,
                "rows": [r.to_dict() for r in self.rows]}
