"""Reading saved comparisons: the list filtered and paged, newest first; one entry with its report; the count."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timezone

import sqlalchemy as sa

from ..config import check_encodable
from ..errors import InputError
from .records import MAX_NAME_CHARS, MAX_PAGE, MAX_PAGE_SIZE, Entry, HistoryError, Page, check_id
from .schema import arms_table, comparisons

# How a query gets its connection: History's, which turns a failing database into one HistoryError.
Connect = Callable[[], AbstractContextManager[sa.Connection]]


_FILTERS = {"target": "target", "device_name": "device", "assistant": "assistant"}  # a column as its filter box


def part_of(column: sa.ColumnElement, text: str) -> list[sa.ColumnElement[bool]]:
    """`column` contains what was typed in a filter box (trimmed, at most a name long); no condition when blank."""
    if text is not None and not isinstance(text, str):
        raise InputError(f"The {_FILTERS.get(column.name, column.name)} filter must be text; got {text!r}.")
    if not (text and text.strip()):
        return []
    check_encodable(f"{_FILTERS.get(column.name, column.name)} filter", text)  # the database driver cannot send it
    return [column.contains(text.strip()[:MAX_NAME_CHARS], autoescape=True)]


def _entry_columns() -> list[sa.Column]:
    return [comparisons.c[name] for name in Entry.__dataclass_fields__]


def _entry(row) -> Entry:
    m = row._mapping
    created = m["created_at"]
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return Entry(**{name: m[name] for name in Entry.__dataclass_fields__ if name != "created_at"}, created_at=created)


def _whole(field: str, value: object) -> int:
    """A paging number as an int, or one sentence naming the field."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{field} must be a whole number; got {value!r}.") from None


def list_entries(connect: Connect, *, target: str = "", assistant: str = "", device: str = "", page: int = 1,
                 page_size: int = 20) -> Page:
    """Saved comparisons, newest first, filtered by parts of the target, an assistant and the device."""
    page = max(1, _whole("page", page))
    if page > MAX_PAGE:  # an offset past every database's integers; no history has that many pages
        raise InputError(f"page must be a page number from 1 to {MAX_PAGE:,}; {page:,} is past any history.")
    page_size = min(max(1, _whole("page_size", page_size)), MAX_PAGE_SIZE)
    conditions = [*part_of(comparisons.c.target, target), *part_of(comparisons.c.device_name, device)]
    if assistant and assistant.strip():
        conditions.append(sa.exists().where(
            arms_table.c.comparison_seq == comparisons.c.seq, *part_of(arms_table.c.assistant, assistant),
        ))
    with connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(comparisons).where(*conditions)).scalar_one()
        rows = conn.execute(
            sa.select(*_entry_columns()).where(*conditions).order_by(comparisons.c.seq.desc())
            .limit(page_size).offset((page - 1) * page_size)
        ).all()
    return Page(tuple(_entry(r) for r in rows), int(total), page, page_size)


def get_entry(connect: Connect, run_id: str) -> tuple[Entry, dict]:
    """One saved comparison: its list entry and its whole report, as data (never markup)."""
    run_id = check_id(run_id)
    with connect() as conn:
        row = conn.execute(sa.select(*_entry_columns(), comparisons.c.report).where(comparisons.c.id == run_id)).first()
    if row is None:
        raise HistoryError(f"There is no saved comparison {run_id}; it may have been deleted.")
    try:
        report = json.loads(row.report)
    except ValueError:
        raise HistoryError(f"The saved report of comparison {run_id} is damaged and cannot be shown.") from None
    return _entry(row), report


def count_entries(connect: Connect) -> int:
    """How many comparisons are saved."""
    with connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(comparisons)).scalar_one())
