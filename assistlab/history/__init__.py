"""The history of comparisons: a SQLite or PostgreSQL store, its queries and the leaderboard."""

from .derive import (arm_rows, board_rows, canonical_model, canonical_report, clean_text, kind_of, runs_csv, savable,
                     summary_columns)
from .leaderboard import build_board, has_interval
from .records import (
    ID_PATTERN,
    INTERVAL_KINDS,
    MAX_NAME_CHARS,
    MAX_OWNER_CHARS,
    MAX_PAGE_SIZE,
    MAX_PREVIEW_CHARS,
    BoardRow,
    BoardSection,
    Entry,
    HistoryError,
    Page,
    SaveResult,
    check_id,
)
from .schema import SCHEMA_VERSION, arms_table, comparisons, current_version, metadata, schema_table, upgrade
from .store import (
    BUSY_TIMEOUT_S,
    DATA_DIR_ENV,
    DATABASE_URL_ENV,
    DB_FILENAME,
    DEFAULT_HISTORY_MAX,
    HISTORY_MAX_ENV,
    History,
    data_dir,
    database_url,
    history_max,
)

__all__ = [
    "BUSY_TIMEOUT_S", "DATABASE_URL_ENV", "DATA_DIR_ENV", "DB_FILENAME", "DEFAULT_HISTORY_MAX", "HISTORY_MAX_ENV",
    "ID_PATTERN", "INTERVAL_KINDS", "MAX_NAME_CHARS", "MAX_OWNER_CHARS", "MAX_PAGE_SIZE", "MAX_PREVIEW_CHARS",
    "SCHEMA_VERSION",
    "BoardRow", "BoardSection", "Entry", "History", "HistoryError", "Page", "SaveResult",
    "arm_rows", "arms_table", "board_rows", "build_board", "canonical_model", "canonical_report", "check_id", "clean_text",
    "kind_of",
    "comparisons", "current_version", "data_dir", "database_url", "has_interval", "history_max", "metadata",
    "runs_csv", "savable", "schema_table", "summary_columns", "upgrade",
]
