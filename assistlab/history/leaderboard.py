"""The leaderboard: per target, device, engine, what was measured and requests at once, the pairings tried, ranked
by their median speedup over that engine's plain, with plain on the board as the line to beat."""

from __future__ import annotations

from datetime import timezone

import sqlalchemy as sa

from .derive import DEFAULT_ENGINE, TUNE_INTERVAL_KINDS
from .queries import Connect, part_of
from .records import INTERVAL_KINDS, BoardRow, BoardSection
from .schema import arms_table, comparisons

# What a comparison measured, beside its target and device: a median mixes only comparisons alike in all of it.
MEASURED = ("new_tokens", "workload", "prompt_hash", "do_sample", "status")


def leaderboard(connect: Connect, *, target: str = "", device: str = "") -> tuple[BoardSection, ...]:
    """For each target, device, engine and measured setting, the pairings tried, fastest first, from every saved
    comparison."""
    query = (
        sa.select(comparisons.c.id, comparisons.c.created_at, comparisons.c.target, comparisons.c.device_name,
                  comparisons.c.new_tokens, comparisons.c.workload, comparisons.c.prompt_hash,
                  comparisons.c.do_sample, comparisons.c.status, comparisons.c.prompt_preview, arms_table)
        .join(arms_table, arms_table.c.comparison_seq == comparisons.c.seq)
        .where(arms_table.c.speedup.is_not(None))
        .where(*part_of(comparisons.c.target, target), *part_of(comparisons.c.device_name, device))
        .order_by(comparisons.c.seq)
    )
    with connect() as conn:
        rows = conn.execute(query).all()
    return build_board([r._mapping for r in rows])


def has_interval(row) -> bool:
    """True when an arm row's [ci_low, ci_high] is a real interval (not the range of a few runs): a comparison's,
    or a tuner's pick's (the interval its page shows)."""
    return (row["ci_kind"] in (*INTERVAL_KINDS, *TUNE_INTERVAL_KINDS) and row["ci_low"] is not None
            and row["ci_high"] is not None)


def _is_faster(row) -> bool:
    """Beaten plain: a real interval lying wholly above 1x."""
    return has_interval(row) and row["ci_low"] > 1.0


def _measured(row) -> tuple:
    """The part of a row's group key that says what was measured; rows from before it was recorded read None."""
    values = ["" if row.get(name) is None else row.get(name) for name in MEASURED]
    if values[1]:  # a workload is its own measure: its prompts are its name's
        values[2] = ""
    return tuple(values)


def build_board(rows: list) -> tuple[BoardSection, ...]:
    """Group arm rows (oldest first) by target, device, what was measured, engine and pairing; rank pairings by
    their median speedup within each group, so no median mixes different token counts, prompts, sampling or
    stopped runs, nor one engine's speedups with another's."""
    groups: dict[tuple, dict[tuple, list]] = {}
    for r in rows:
        key = (r["strategy"], r["assistant"], r["setting"])
        # Each engine's arms were timed against that engine's plain: a board per engine, never one mixing them;
        # and a board per load level, so a pairing at 8 requests at once is never ranked with one at a time.
        engine = r.get("engine") or DEFAULT_ENGINE
        level = r.get("concurrency") or 1
        groups.setdefault((r["target"], r["device_name"], *_measured(r), engine, level), {}).setdefault(
            key, []).append(r)
    sections = []
    for (target, device, new_tokens, workload, _prompt, sampling, status, engine, level), pairings in sorted(
            groups.items(), key=lambda item: (tuple(str(v) for v in item[0][:-1]), item[0][-1])):
        board, newest = [], None
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
                latest_level=latest["ci_level"], latest_kind=latest["ci_kind"] or "none", latest_n=latest["n"],
                latest_at=created, latest_id=latest["id"], faster=faster, latest_speedup=latest["speedup"],
            ))
            if newest is None or created >= newest[0]:
                newest = (created, latest)
        board.sort(key=lambda b: (-b.speedup, -b.comparisons, b.label))
        last = newest[1] if newest else {}
        sections.append(BoardSection(
            target, device, tuple(board), new_tokens=new_tokens or None, workload=workload or None,
            prompt_preview=None if workload else last.get("prompt_preview"),
            sampling=bool(sampling) if sampling != "" else None, stopped=status == "stopped", engine=engine,
            concurrency=level, unsettled=status == "unsettled",
        ))
    return tuple(sections)
