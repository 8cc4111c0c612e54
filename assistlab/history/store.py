"""Saved comparisons: a SQLite file by default, PostgreSQL for a shared board; list, show, delete, leaderboard.

SQLAlchemy Core speaks both dialects. The whole JSON report is kept; the columns beside it (canonical model
names, device, speedups) are derived from it, so a schema upgrade can always recompute them. Saving never
raises: a database that cannot be written gives a warning and the comparison goes on being shown.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import logging
import math
import os
import posixpath
import re
import secrets
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError

from ..errors import AssistLabError, InputError

log = logging.getLogger(__name__)

DATA_DIR_ENV = "ASSISTLAB_DATA_DIR"
DATABASE_URL_ENV = "ASSISTLAB_DATABASE_URL"
HISTORY_MAX_ENV = "ASSISTLAB_HISTORY_MAX"
DB_FILENAME = "history.sqlite3"
DEFAULT_HISTORY_MAX = 10_000

# Size limits for what one comparison may store (issue 10: the database follows the page's rules).
MAX_REPORT_BYTES = 8_000_000
MAX_NAME_CHARS = 200
MAX_OWNER_CHARS = 128
MAX_PREVIEW_CHARS = 200
MAX_PAGE_SIZE = 200
BUSY_TIMEOUT_S = 5.0

# Interval kinds a verdict may rest on: stats' exact order-statistic one, and the bootstrap of older reports.
INTERVAL_KINDS = ("order-statistic", "bootstrap")
ID_PATTERN = re.compile(r"^[0-9a-f]{16}$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._@:/+-]")


class HistoryError(AssistLabError):
    """The history database cannot be used, or an entry is not there or not yours."""


# ---------------------------------------------------------------------------------------------------------
# Schema: the final shape, used by queries. Migrations below build it step by step with their own tables.

metadata = sa.MetaData()

schema_table = sa.Table(
    "assistlab_schema", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)

comparisons = sa.Table(
    "comparisons", metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(16), nullable=False, unique=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("owner", sa.String(MAX_OWNER_CHARS)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("target", sa.String(MAX_NAME_CHARS), nullable=False),
    sa.Column("assistants", sa.Text, nullable=False),
    sa.Column("strategies", sa.Text, nullable=False),
    sa.Column("device", sa.String(16), nullable=False),
    sa.Column("device_name", sa.String(MAX_NAME_CHARS), nullable=False),
    sa.Column("gpu_name", sa.String(MAX_NAME_CHARS)),
    sa.Column("dtype", sa.String(16), nullable=False),
    sa.Column("new_tokens", sa.Integer),
    sa.Column("repetitions", sa.Integer),
    sa.Column("best_arm", sa.String(MAX_NAME_CHARS)),
    sa.Column("best_speedup", sa.Float),
    sa.Column("outputs_identical", sa.Boolean),
    sa.Column("assistlab_version", sa.String(32)),
    sa.Column("transformers_version", sa.String(32)),
    sa.Column("prompt_preview", sa.String(MAX_PREVIEW_CHARS)),
    sa.Column("report", sa.Text, nullable=False),
)

arms_table = sa.Table(
    "comparison_arms", metadata,
    sa.Column("comparison_seq", sa.Integer, sa.ForeignKey("comparisons.seq", ondelete="CASCADE"), primary_key=True),
    sa.Column("arm_index", sa.Integer, primary_key=True),
    sa.Column("label", sa.String(MAX_NAME_CHARS * 2), nullable=False),
    sa.Column("strategy", sa.String(32), nullable=False),
    sa.Column("assistant", sa.String(MAX_NAME_CHARS)),
    sa.Column("setting", sa.String(MAX_NAME_CHARS), nullable=False),
    sa.Column("speedup", sa.Float),
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("ci_level", sa.Float),
    sa.Column("ci_kind", sa.String(16)),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("acceptance_rate", sa.Float),
    sa.Column("outputs_identical", sa.Boolean),
)
def _migration_1(conn: sa.Connection) -> None:
    """Version 1: the comparisons table with its search columns and the whole report."""
    md = sa.MetaData()
    sa.Table(
        "comparisons", md,
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(16), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("owner", sa.String(128)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("assistants", sa.Text, nullable=False),
        sa.Column("strategies", sa.Text, nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("device_name", sa.String(200), nullable=False),
        sa.Column("gpu_name", sa.String(200)),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("new_tokens", sa.Integer),
        sa.Column("repetitions", sa.Integer),
        sa.Column("best_arm", sa.String(200)),
        sa.Column("best_speedup", sa.Float),
        sa.Column("outputs_identical", sa.Boolean),
        sa.Column("assistlab_version", sa.String(32)),
        sa.Column("transformers_version", sa.String(32)),
        sa.Column("prompt_preview", sa.String(200)),
        sa.Column("report", sa.Text, nullable=False),
        sa.Index("ix_comparisons_target", "target"),
        sa.Index("ix_comparisons_created", "created_at"),
    )
    md.create_all(conn)


def _migration_2(conn: sa.Connection) -> None:
    """Version 2: one row per assisted arm (for the leaderboard), filled in from the reports already kept."""
    md = sa.MetaData()
    sa.Table("comparisons", md, sa.Column("seq", sa.Integer, primary_key=True))
    arms = sa.Table(
        "comparison_arms", md,
        sa.Column("comparison_seq", sa.Integer, sa.ForeignKey("comparisons.seq", ondelete="CASCADE"), primary_key=True),
        sa.Column("arm_index", sa.Integer, primary_key=True),
        sa.Column("label", sa.String(400), nullable=False),
        sa.Column("strategy", sa.String(32), nullable=False),
        sa.Column("assistant", sa.String(200)),
        sa.Column("setting", sa.String(200), nullable=False),
        sa.Column("speedup", sa.Float),
        sa.Column("ci_low", sa.Float),
        sa.Column("ci_high", sa.Float),
        sa.Column("ci_level", sa.Float),
        sa.Column("ci_kind", sa.String(16)),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("acceptance_rate", sa.Float),
        sa.Column("outputs_identical", sa.Boolean),
        sa.Index("ix_arms_assistant", "assistant"),
    )
    arms.create(conn)
    rows = conn.execute(sa.text("SELECT seq, report FROM comparisons")).all()
    for seq, text in rows:
        try:
            report = json.loads(text)
        except ValueError:
            continue
        for arm in arm_rows(report):
            conn.execute(arms.insert().values(comparison_seq=seq, **arm))


# Ordered: (version it brings the database to, what it does). Append; never edit a released step.
MIGRATIONS: tuple[tuple[int, Callable[[sa.Connection], None]], ...] = ((1, _migration_1), (2, _migration_2))
SCHEMA_VERSION = MIGRATIONS[-1][0]


# ---------------------------------------------------------------------------------------------------------
# Pure derivations from a report dict.

def clean_text(value: object, limit: int) -> str:
    """Text safe to store and index: one line, no control or format characters, NUL or lone surrogates."""
    text = re.sub(r"\s+", " ", str(value))
    return "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")[:limit].strip()


def canonical_model(text: object, kind: str | None = None) -> str:
    """The name a model is stored and searched under: a hub id, a bundled name or a local folder's own name.

    Never the raw text someone typed: a path like './x/../same' is reduced to 'same', and anything outside
    the characters hub ids and folder names use is dropped.
    """
    raw = str(text or "").strip()
    if kind is None:
        kind = "bundled" if raw.startswith("bundled:") else "local" if raw.startswith(("/", ".", "~")) or ".." in raw else "hub"
    if kind == "local":
        raw = posixpath.basename(posixpath.normpath(raw.replace("\\", "/")).rstrip("/"))
    name = _SAFE_NAME.sub("", raw)[:MAX_NAME_CHARS]
    return name or "unknown"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _model_kinds(report: dict) -> dict[str, str]:
    """Raw reference text -> kind ('hub', 'bundled', 'local'), from the environment the run recorded."""
    kinds = {}
    for info in ((report.get("environment") or {}).get("models") or {}).values():
        if isinstance(info, dict) and isinstance(info.get("ref"), str):
            kinds[info["ref"]] = str(info.get("kind") or "")
    return kinds


def _setting(strategy: str, spec: dict, settings: dict | None = None) -> str:
    """The drafting settings someone chose, as ArmSpec.label says them; none chosen reads 'transformers defaults'."""
    settings = settings or {}
    if strategy == "prompt-lookup":
        lookup = spec.get("prompt_lookup_num_tokens") or settings.get("prompt_lookup_num_tokens")
        return f"k={lookup}"
    parts = []
    if spec.get("num_assistant_tokens") is not None:
        parts.append(f"k={spec['num_assistant_tokens']}")
    if spec.get("num_assistant_tokens_schedule") not in (None, "constant"):
        parts.append(str(spec["num_assistant_tokens_schedule"]))
    if spec.get("assistant_confidence_threshold") is not None:
        parts.append(f"threshold {spec['assistant_confidence_threshold']:g}")
    if strategy == "early-exit":
        parts.insert(0, f"layer {spec.get('early_exit_layer')}")
    return clean_text(", ".join(parts) or "transformers defaults", MAX_NAME_CHARS)


def arm_rows(report: dict) -> list[dict]:
    """One row per assisted arm: canonical label, its speedup over plain with the interval and its level."""
    kinds = _model_kinds(report)
    by_name = {c.get("arm"): c for c in report.get("comparison") or [] if isinstance(c, dict)}
    rows = []
    for index, arm in enumerate(report.get("arms") or []):
        if not isinstance(arm, dict) or arm.get("strategy") in (None, "plain"):
            continue
        strategy = clean_text(arm.get("strategy"), 32)
        spec = arm.get("spec") if isinstance(arm.get("spec"), dict) else {}
        assistant = spec.get("assistant")
        assistant = canonical_model(assistant, kinds.get(assistant) or None) if assistant else None
        setting = _setting(strategy, spec, arm.get("settings") if isinstance(arm.get("settings"), dict) else None)
        label = f"{strategy}: {assistant} ({setting})" if assistant else f"{strategy} ({setting})"
        entry = by_name.get(arm.get("name")) or {}
        speed = entry.get("speedup") if isinstance(entry.get("speedup"), dict) else {}
        n = speed.get("n") if isinstance(speed.get("n"), int) else 0
        low, high, level = _number(speed.get("ci_low")), _number(speed.get("ci_high")), _number(speed.get("level"))
        kind = speed.get("interval")
        if kind is None:  # reports from before exact intervals: a 95% bootstrap interval when n > 1
            kind, level = ("bootstrap", 0.95) if n > 1 and low is not None else ("none", None)
        kind = clean_text(kind, 16)
        identical = entry.get("outputs_identical")
        rows.append({
            "arm_index": index,
            "label": label,
            "strategy": strategy,
            "assistant": assistant,
            "setting": setting,
            "speedup": _number(speed.get("median")),
            "ci_low": low if n > 1 else None,
            "ci_high": high if n > 1 else None,
            "ci_level": level if n > 1 else None,
            "ci_kind": kind,
            "n": n,
            "acceptance_rate": _number(entry.get("acceptance_rate")),
            "outputs_identical": identical if isinstance(identical, bool) else None,
        })
    return rows


def device_label(environment: dict) -> str:
    """'cuda: NVIDIA H200' or 'cpu: <cpu model>': the machine a speedup belongs to."""
    device = clean_text(environment.get("device") or "unknown", 16)
    detail = environment.get("gpu_name") if device == "cuda" else environment.get("cpu_model")
    return clean_text(f"{device}: {detail}" if detail else device, MAX_NAME_CHARS)


def summary_columns(report: dict) -> dict:
    """The searchable columns of one comparison, all derived from its report."""
    request, env = report.get("request") or {}, report.get("environment") or {}
    kinds = _model_kinds(report)
    arms = arm_rows(report)
    measured = [a for a in arms if a["speedup"] is not None]
    best = max(measured, key=lambda a: a["speedup"], default=None)
    identical = [a["outputs_identical"] for a in arms if a["outputs_identical"] is not None]
    target_text = request.get("target") or ""
    strategies = sorted({a["strategy"] for a in arms})
    assistants = sorted({a["assistant"] for a in arms if a["assistant"]})
    plain = (report.get("arms") or [{}])[0] if report.get("arms") else {}
    new_tokens = request.get("max_new_tokens")
    if isinstance(plain, dict) and plain.get("new_tokens"):
        new_tokens = plain["new_tokens"][-1]
    status = "stopped" if report.get("status") == "stopped" else "complete"
    return {
        "status": status,
        "target": canonical_model(target_text, kinds.get(target_text) or None),
        "assistants": ", ".join(assistants)[:4000],
        "strategies": ", ".join(strategies)[:1000],
        "device": clean_text(env.get("device") or "unknown", 16),
        "device_name": device_label(env),
        "gpu_name": clean_text(env["gpu_name"], MAX_NAME_CHARS) if env.get("gpu_name") else None,
        "dtype": clean_text(env.get("dtype") or "unknown", 16),
        "new_tokens": new_tokens if isinstance(new_tokens, int) else None,
        "repetitions": report.get("counted_repetitions") if isinstance(report.get("counted_repetitions"), int) else None,
        "best_arm": best["label"] if best else None,
        "best_speedup": best["speedup"] if best else None,
        "outputs_identical": all(identical) if identical else None,
        "assistlab_version": clean_text(env.get("assistlab") or "", 32) or None,
        "transformers_version": clean_text(env.get("transformers") or "", 32) or None,
        "prompt_preview": clean_text(request.get("prompt") or "", MAX_PREVIEW_CHARS),
    }


def _report_text(report: dict) -> tuple[str, str | None]:
    """The report as JSON within the size limit; per-step traces are dropped first when it is too large."""
    text = json.dumps(report, ensure_ascii=True, allow_nan=False, default=str)
    if len(text) <= MAX_REPORT_BYTES:
        return text, None
    slim = dict(report)
    slim["arms"] = [{**a, "trace": []} if isinstance(a, dict) else a for a in report.get("arms") or []]
    slim["history_note"] = "Per-step traces were left out to keep this saved report under the size limit."
    text = json.dumps(slim, ensure_ascii=True, allow_nan=False, default=str)
    if len(text) <= MAX_REPORT_BYTES:
        return text, slim["history_note"]
    raise InputError(
        f"The report is {len(text):,} bytes even without its traces; the history keeps reports up to "
        f"{MAX_REPORT_BYTES:,} bytes. Use fewer repetitions or new tokens to save it."
    )


_MARKUP = re.compile(r"[<>&\"'`\\]|[\x00-\x1f\x7f]")


def canonical_report(report: dict) -> dict:
    """The report with every model reference and arm name that holds markup replaced by its canonical form.

    A name someone typed (e.g. './<img src=...>/../same') is stored as 'same'; the prompt and the generated
    texts are kept as they are (they are data, escaped wherever they are shown).
    """
    report = copy.deepcopy(report)
    kinds = _model_kinds(report)
    request = report.get("request") if isinstance(report.get("request"), dict) else {}
    if isinstance(request.get("target"), str) and _MARKUP.search(request["target"]):
        request["target"] = canonical_model(request["target"], kinds.get(request["target"]) or None)
    for spec in [a.get("spec") for a in report.get("arms") or [] if isinstance(a, dict)] + list(request.get("arms") or []):
        if isinstance(spec, dict) and isinstance(spec.get("assistant"), str) and _MARKUP.search(spec["assistant"]):
            spec["assistant"] = canonical_model(spec["assistant"], kinds.get(spec["assistant"]) or None)
    env = report.get("environment") if isinstance(report.get("environment"), dict) else {}
    models = env.get("models") if isinstance(env.get("models"), dict) else {}
    for role in list(models):
        info = models[role]
        if isinstance(info, dict) and isinstance(info.get("ref"), str) and _MARKUP.search(info["ref"]):
            info["ref"] = canonical_model(info["ref"], info.get("kind") or None)
        if _MARKUP.search(role):
            models[canonical_model(role.removeprefix("assistant "), kinds.get(role.removeprefix("assistant ")))
                   if role.startswith("assistant ") else "model"] = models.pop(role)
    renamed = {}
    for arm in report.get("arms") or []:
        if isinstance(arm, dict) and isinstance(arm.get("name"), str) and _MARKUP.search(arm["name"]):
            new = clean_text(_MARKUP.sub("", arm["name"]), MAX_NAME_CHARS * 2)
            renamed[arm["name"]] = new
            arm["name"] = new
    for key in ("comparison", "ranking"):
        for entry in report.get(key) or []:
            if isinstance(entry, dict) and entry.get("arm") in renamed:
                entry["arm"] = renamed[entry["arm"]]
    return report


def runs_csv(report: dict) -> str:
    """One row per counted run, from a report dict (as Report.to_csv writes it from the live report)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["arm", "strategy", "repetition", "latency_s", "new_tokens", "tokens_per_s", "ttft_s",
                     "drafted_tokens", "accepted_tokens", "target_forwards", "memory_bytes"])
    for arm in report.get("arms") or []:
        assisted = arm.get("strategy") != "plain"
        for i, latency in enumerate(arm.get("latencies_s") or []):
            pick = lambda key: (arm.get(key) or [])[i] if i < len(arm.get(key) or []) else None  # noqa: E731
            trace = pick("trace") or {}
            writer.writerow([
                arm.get("name"), arm.get("strategy"), i, f"{latency:.6f}", pick("new_tokens"),
                "" if pick("tokens_per_s") is None else f"{pick('tokens_per_s'):.3f}",
                "" if pick("ttft_s") is None else f"{pick('ttft_s'):.6f}",
                pick("drafted_tokens") if assisted else "", pick("accepted_tokens") if assisted else "",
                len(trace.get("tokens") or []), "" if pick("memory_bytes") is None else pick("memory_bytes"),
            ])
    return buf.getvalue()


def _sanitize_json(value):
    """Replace NaN/inf (which JSON cannot hold) by None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _sanitize_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize_json(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------------------
# Records the callers read.

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


def _entry(row) -> Entry:
    m = row._mapping
    created = m["created_at"]
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return Entry(**{name: m[name] for name in Entry.__dataclass_fields__ if name != "created_at"}, created_at=created)


# ---------------------------------------------------------------------------------------------------------
# Where the database lives.

def data_dir() -> Path:
    """$ASSISTLAB_DATA_DIR, else $XDG_DATA_HOME/assistlab, else ~/.local/share/assistlab."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "assistlab"


def database_url() -> str:
    """$ASSISTLAB_DATABASE_URL, else the SQLite file in the data directory."""
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    if url:
        if url.startswith("postgresql://"):  # psycopg 3, not the psycopg2 SQLAlchemy would pick by default
            url = "postgresql+psycopg://" + url[len("postgresql://"):]
        return url
    return f"sqlite:///{data_dir() / DB_FILENAME}"


def history_max() -> int | None:
    """$ASSISTLAB_HISTORY_MAX as a positive count (0 or 'none' keeps everything); bad values raise InputError."""
    value = os.environ.get(HISTORY_MAX_ENV, "").strip()
    if not value:
        return DEFAULT_HISTORY_MAX
    if value.lower() in ("0", "none", "unlimited"):
        return None
    try:
        count = int(value)
    except ValueError:
        raise InputError(f"{HISTORY_MAX_ENV} must be a whole number of comparisons to keep, got {value!r}.") from None
    if count < 0:
        raise InputError(f"{HISTORY_MAX_ENV} must not be negative, got {count}.")
    return count


def _describe(url: str) -> str:
    """The database for a message: the SQLite path, or the server without its password."""
    try:
        parsed = sa.engine.make_url(url)
    except Exception:  # noqa: BLE001 - a URL we cannot parse is still worth naming
        return "the configured database"
    if parsed.get_backend_name() == "sqlite":
        return f"the history file {parsed.database}"
    return f"the history database {parsed.render_as_string(hide_password=True)}"


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


# ---------------------------------------------------------------------------------------------------------

class History:
    """One database of saved comparisons. Connects on first use; every method is safe from several threads."""

    def __init__(self, url: str | None = None, *, max_entries: int | None | str = "env",
                 busy_timeout_s: float = BUSY_TIMEOUT_S):
        self.url = url or database_url()
        self.max_entries = history_max() if max_entries == "env" else max_entries
        self.busy_timeout_s = busy_timeout_s
        self._engine: sa.Engine | None = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return _describe(self.url)

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    # --- connection -------------------------------------------------------------------------------------
    def _make_engine(self) -> sa.Engine:
        if self.is_sqlite:
            path = sa.engine.make_url(self.url).database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(self.url, connect_args={"timeout": self.busy_timeout_s})
            busy_ms = int(self.busy_timeout_s * 1000)

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn, _record):
                dbapi_conn.isolation_level = None  # we say BEGIN ourselves, below
                cur = dbapi_conn.cursor()
                cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
                cur.execute("PRAGMA journal_mode = WAL")  # readers never block the one writer
                cur.execute("PRAGMA synchronous = NORMAL")
                cur.execute("PRAGMA foreign_keys = ON")
                cur.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn):
                # Take the write lock up front, so two savers queue on busy_timeout instead of deadlocking.
                conn.exec_driver_sql("BEGIN IMMEDIATE")

            return engine
        return sa.create_engine(
            self.url, pool_pre_ping=True, pool_size=4, max_overflow=4,
            connect_args={"connect_timeout": max(1, int(self.busy_timeout_s))},
        )

    def _ready(self) -> sa.Engine:
        """The engine, created and upgraded to the current schema on first use; HistoryError if it cannot be."""
        with self._lock:
            if self._engine is not None:
                return self._engine
            engine = None
            try:
                engine = self._make_engine()
                upgrade(engine)
            except HistoryError:
                if engine is not None:
                    engine.dispose()
                raise
            except (SQLAlchemyError, OSError, ValueError) as exc:
                if engine is not None:
                    engine.dispose()
                raise self._error(exc) from None
            self._engine = engine
            return engine

    def _error(self, exc: BaseException) -> HistoryError:
        reason = _reason(exc)
        lower = reason.lower()
        if "not a database" in lower or "malformed" in lower:
            hint = "It is damaged; move the file aside and AssistLab will start a new one."
        elif "locked" in lower or "busy" in lower:
            hint = "Another process is holding it; try again in a moment."
        elif "full" in lower or "no space" in lower:
            hint = "The disk is full; free some space."
        elif any(word in lower for word in ("readonly", "read-only", "permission", "not permitted", "unable to open",
                                            "not a directory", "no such file")):
            hint = f"Check that its folder can be created and is writable, or set {DATA_DIR_ENV} to one that is."
        else:
            hint = f"Check {DATABASE_URL_ENV} / {DATA_DIR_ENV}."
        return HistoryError(f"Cannot use {self.where} ({reason}). {hint}")

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    # --- writing ----------------------------------------------------------------------------------------
    def save(self, report: dict, owner: str | None = None, *, now: datetime | None = None,
             log_warning: bool = True) -> SaveResult:
        """Keep one comparison. Never raises: a problem becomes `SaveResult.warning` and one log line.

        The command line passes `log_warning=False` because it prints the warning itself on stderr.
        """
        try:
            if not isinstance(report, dict) or not report.get("arms") or report.get("counted_repetitions") == 0:
                raise InputError("There is no measured comparison to save (no repetition finished).")
            report = canonical_report(_sanitize_json(report))
            text, note = _report_text(report)
            columns = summary_columns(report)
            arms = arm_rows(report)
            run_id = secrets.token_hex(8)
            created = now or datetime.now(timezone.utc)
            who = clean_text(owner, MAX_OWNER_CHARS) if owner else None
            engine = self._ready()
            with engine.begin() as conn:
                seq = conn.execute(
                    comparisons.insert().values(id=run_id, created_at=created, owner=who or None, report=text,
                                                **columns).returning(comparisons.c.seq)
                ).scalar_one()
                if arms:
                    conn.execute(arms_table.insert(), [{**a, "comparison_seq": seq} for a in arms])
                self._prune(conn)
            return SaveResult(id=run_id, note=note)
        except (HistoryError, InputError) as exc:
            warning = f"This comparison was not saved to the history: {exc}"
        except (SQLAlchemyError, OSError, ValueError, TypeError) as exc:
            warning = f"This comparison was not saved to the history: {self._error(exc)}"
        except Exception as exc:  # noqa: BLE001 - saving must never break the run that was measured
            warning = f"This comparison was not saved to the history: something unexpected went wrong ({type(exc).__name__})."
            if log_warning:
                log.exception("%s", warning)
            return SaveResult(warning=warning)
        if log_warning:
            log.warning("%s", warning)
        return SaveResult(warning=warning)

    def _prune(self, conn: sa.Connection) -> None:
        if not self.max_entries:
            return
        old = sa.select(comparisons.c.seq).order_by(comparisons.c.seq.desc()).offset(self.max_entries)
        doomed = [row[0] for row in conn.execute(old)]
        if doomed:
            conn.execute(arms_table.delete().where(arms_table.c.comparison_seq.in_(doomed)))
            conn.execute(comparisons.delete().where(comparisons.c.seq.in_(doomed)))

    def delete(self, run_id: str, user: str | None = None) -> None:
        """Remove one comparison. With logins on (`user` given) only its owner may; without, anyone may."""
        run_id = check_id(run_id)
        try:
            with self._ready().begin() as conn:
                row = conn.execute(
                    sa.select(comparisons.c.seq, comparisons.c.owner).where(comparisons.c.id == run_id)
                ).first()
                if row is None:
                    raise HistoryError(f"There is no saved comparison {run_id}; it may have been deleted already.")
                if user is not None and row.owner is not None and row.owner != user:
                    raise HistoryError(
                        f"Comparison {run_id} was saved by someone else; only the person who saved it can delete it."
                    )
                conn.execute(arms_table.delete().where(arms_table.c.comparison_seq == row.seq))
                conn.execute(comparisons.delete().where(comparisons.c.seq == row.seq))
        except SQLAlchemyError as exc:
            raise self._error(exc) from None

    # --- reading ----------------------------------------------------------------------------------------
    def list(self, *, target: str = "", assistant: str = "", device: str = "", page: int = 1,
             page_size: int = 20) -> Page:
        """Saved comparisons, newest first, filtered by parts of the target, an assistant and the device."""
        page = max(1, int(page))
        page_size = min(max(1, int(page_size)), MAX_PAGE_SIZE)
        conditions = []
        if target and target.strip():
            conditions.append(comparisons.c.target.contains(target.strip()[:MAX_NAME_CHARS], autoescape=True))
        if device and device.strip():
            conditions.append(comparisons.c.device_name.contains(device.strip()[:MAX_NAME_CHARS], autoescape=True))
        if assistant and assistant.strip():
            conditions.append(
                sa.exists().where(
                    arms_table.c.comparison_seq == comparisons.c.seq,
                    arms_table.c.assistant.contains(assistant.strip()[:MAX_NAME_CHARS], autoescape=True),
                )
            )
        columns = [comparisons.c[name] for name in Entry.__dataclass_fields__]
        try:
            with self._ready().connect() as conn:
                total = conn.execute(sa.select(sa.func.count()).select_from(comparisons).where(*conditions)).scalar_one()
                rows = conn.execute(
                    sa.select(*columns).where(*conditions).order_by(comparisons.c.seq.desc())
                    .limit(page_size).offset((page - 1) * page_size)
                ).all()
        except SQLAlchemyError as exc:
            raise self._error(exc) from None
        return Page(tuple(_entry(r) for r in rows), int(total), page, page_size)

    def get(self, run_id: str) -> tuple[Entry, dict]:
        """One saved comparison: its list entry and its whole report, as data (never markup)."""
        run_id = check_id(run_id)
        columns = [comparisons.c[name] for name in Entry.__dataclass_fields__]
        try:
            with self._ready().connect() as conn:
                row = conn.execute(sa.select(*columns, comparisons.c.report).where(comparisons.c.id == run_id)).first()
        except SQLAlchemyError as exc:
            raise self._error(exc) from None
        if row is None:
            raise HistoryError(f"There is no saved comparison {run_id}; it may have been deleted.")
        try:
            report = json.loads(row.report)
        except ValueError:
            raise HistoryError(f"The saved report of comparison {run_id} is damaged and cannot be shown.") from None
        return _entry(row), report

    def leaderboard(self, *, target: str = "", device: str = "") -> tuple[BoardSection, ...]:
        """For each target and device, the pairings tried, fastest first, from every saved comparison."""
        query = (
            sa.select(comparisons.c.id, comparisons.c.created_at, comparisons.c.target, comparisons.c.device_name,
                      arms_table)
            .join(arms_table, arms_table.c.comparison_seq == comparisons.c.seq)
            .where(arms_table.c.speedup.is_not(None))
            .order_by(comparisons.c.seq)
        )
        if target and target.strip():
            query = query.where(comparisons.c.target.contains(target.strip()[:MAX_NAME_CHARS], autoescape=True))
        if device and device.strip():
            query = query.where(comparisons.c.device_name.contains(device.strip()[:MAX_NAME_CHARS], autoescape=True))
        try:
            with self._ready().connect() as conn:
                rows = conn.execute(query).all()
        except SQLAlchemyError as exc:
            raise self._error(exc) from None
        return build_board([r._mapping for r in rows])

    def count(self) -> int:
        try:
            with self._ready().connect() as conn:
                return int(conn.execute(sa.select(sa.func.count()).select_from(comparisons)).scalar_one())
        except SQLAlchemyError as exc:
            raise self._error(exc) from None


def check_id(run_id: object) -> str:
    """A comparison id as given in a permalink, or InputError."""
    text = str(run_id or "").strip().lower()
    if not ID_PATTERN.match(text):
        raise InputError("A comparison id is 16 letters and digits (0-9, a-f), as shown in the history list.")
    return text


def has_interval(row) -> bool:
    """True when an arm row's [ci_low, ci_high] is a real interval (not the range of a few runs)."""
    return row["ci_kind"] in INTERVAL_KINDS and row["ci_low"] is not None and row["ci_high"] is not None


def _is_faster(row) -> bool:
    """Beaten plain: a real interval lying wholly above 1x."""
    return has_interval(row) and row["ci_low"] > 1.0


def build_board(rows: list) -> tuple[BoardSection, ...]:
    """Group arm rows (oldest first) by target, device and pairing; rank pairings by their median speedup."""
    groups: dict[tuple[str, str], dict[tuple, list]] = {}
    for r in rows:
        key = (r["strategy"], r["assistant"], r["setting"])
        groups.setdefault((r["target"], r["device_name"]), {}).setdefault(key, []).append(r)
    sections = []
    for (target, device), pairings in sorted(groups.items()):
        board = []
        for (strategy, assistant, setting), tried in pairings.items():
            latest = tried[-1]
            speedups = sorted(t["speedup"] for t in tried)
            mid = len(speedups) // 2
            median = speedups[mid] if len(speedups) % 2 else (speedups[mid - 1] + speedups[mid]) / 2
            created = latest["created_at"]
            if created.tzinfo is None:
                created = created.replace(tzinfo=timezone.utc)
            faster = sum(_is_faster(t) for t in tried)
            board.append(BoardRow(
                label=latest["label"], strategy=strategy, assistant=assistant, setting=setting, speedup=median,
                comparisons=len(tried), latest_low=latest["ci_low"], latest_high=latest["ci_high"],
                latest_level=latest["ci_level"], latest_kind=latest["ci_kind"] or "none", latest_n=latest["n"], latest_at=created, latest_id=latest["id"],
                faster=faster,
            ))
        board.sort(key=lambda b: (-b.speedup, -b.comparisons, b.label))
        sections.append(BoardSection(target, device, tuple(board)))
    return tuple(sections)


def current_version(conn: sa.Connection) -> int:
    """The schema version a database is at; 0 when it has none yet."""
    if not sa.inspect(conn).has_table(schema_table.name):
        return 0
    value = conn.execute(sa.select(schema_table.c.version).where(schema_table.c.id == 1)).scalar()
    return int(value or 0)


def upgrade(engine: sa.Engine, to_version: int = SCHEMA_VERSION) -> int:
    """Bring a database up to `to_version`, one migration per transaction; returns the version it is at.

    Several servers may start at once: SQLite's BEGIN IMMEDIATE and PostgreSQL's advisory lock make them take
    turns, and each re-reads the version inside its transaction.
    """
    while True:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(7317001)"))
            version = current_version(conn)
            if version > SCHEMA_VERSION:
                raise HistoryError(
                    f"The history database is at schema version {version}, newer than this AssistLab knows "
                    f"({SCHEMA_VERSION}); upgrade AssistLab on this server."
                )
            pending = [(v, step) for v, step in MIGRATIONS if version < v <= to_version]
            if not pending:
                return version
            v, step = pending[0]
            step(conn)
            if version == 0:
                schema_table.create(conn, checkfirst=True)
                conn.execute(schema_table.insert().values(id=1, version=v))
            else:
                conn.execute(schema_table.update().where(schema_table.c.id == 1).values(version=v))
