"""The history's tables, the migrations that build them step by step, and upgrading a database to the current one."""

from __future__ import annotations

import json
from collections.abc import Callable

import sqlalchemy as sa

from .derive import DEFAULT_ENGINE, MAX_ENGINES_CHARS, arm_rows, engine_of, load_rows, summary_columns
from .records import MAX_NAME_CHARS, MAX_OWNER_CHARS, MAX_PREVIEW_CHARS, MAX_RECOMMENDATION_CHARS, HistoryError

# The final shape, used by queries. The whole JSON report is kept; the columns beside it (canonical model
# names, device, speedups) are derived from it, so a migration can always recompute them. The migrations
# below build this shape step by step with their own tables.

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
    sa.Column("prompt_hash", sa.String(64)),
    sa.Column("do_sample", sa.Boolean),
    sa.Column("workload", sa.String(MAX_NAME_CHARS)),
    sa.Column("engines", sa.String(MAX_ENGINES_CHARS), nullable=False, server_default=DEFAULT_ENGINE),
    sa.Column("kind", sa.String(16), nullable=False, server_default="comparison"),
    sa.Column("recommendation", sa.String(MAX_RECOMMENDATION_CHARS)),
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
    sa.Column("engine", sa.String(16), nullable=False, server_default=DEFAULT_ENGINE),
    # Requests at once: 1 for a comparison's own result, a load level's for its rows (derive.load_rows).
    sa.Column("concurrency", sa.Integer, nullable=False, server_default="1"),
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
        for arm in arm_rows(report):  # the columns of this version; later ones fill in theirs
            conn.execute(arms.insert().values(comparison_seq=seq, **{k: v for k, v in arm.items() if k in arms.c}))


def _migration_3(conn: sa.Connection) -> None:
    """Version 3: what each comparison measured (prompt, sampling, workload), so the leaderboard ranks like with
    like; and the best of a comparison in which nothing beat plain is plain. Both recomputed from the reports."""
    for column, kind in (("prompt_hash", "VARCHAR(64)"), ("do_sample", "BOOLEAN"), ("workload", "VARCHAR(200)")):
        conn.execute(sa.text(f"ALTER TABLE comparisons ADD COLUMN {column} {kind}"))
    md = sa.MetaData()
    table = sa.Table(
        "comparisons", md, sa.Column("seq", sa.Integer, primary_key=True), sa.Column("prompt_hash", sa.String(64)),
        sa.Column("do_sample", sa.Boolean), sa.Column("workload", sa.String(200)), sa.Column("best_arm", sa.String(200)),
        sa.Column("best_speedup", sa.Float),
    )
    rows = conn.execute(sa.text("SELECT seq, report FROM comparisons")).all()
    for seq, text in rows:
        try:
            report = json.loads(text)
        except ValueError:
            continue
        columns = summary_columns(report)
        conn.execute(table.update().where(table.c.seq == seq).values(
            **{name: columns[name] for name in ("prompt_hash", "do_sample", "workload", "best_arm", "best_speedup")}
        ))


def _migration_4(conn: sa.Connection) -> None:
    """Version 4: the engine each arm ran on and the engines each comparison timed (issue 21). Rows saved
    before read as transformers; a comparison that held another engine's arms gets its arm rows and columns
    recomputed from its report (its vLLM arms were stored as if transformers had run them)."""
    conn.execute(sa.text(f"ALTER TABLE comparisons ADD COLUMN engines VARCHAR({MAX_ENGINES_CHARS}) "
                         f"NOT NULL DEFAULT '{DEFAULT_ENGINE}'"))
    conn.execute(sa.text(f"ALTER TABLE comparison_arms ADD COLUMN engine VARCHAR(16) NOT NULL DEFAULT '{DEFAULT_ENGINE}'"))
    md = sa.MetaData()
    recomputed = ("engines", "assistants", "strategies", "best_arm", "best_speedup", "outputs_identical")
    table = sa.Table(
        "comparisons", md, sa.Column("seq", sa.Integer, primary_key=True), sa.Column("engines", sa.String(64)),
        sa.Column("assistants", sa.Text), sa.Column("strategies", sa.Text), sa.Column("best_arm", sa.String(200)),
        sa.Column("best_speedup", sa.Float), sa.Column("outputs_identical", sa.Boolean),
    )
    arms = sa.Table(
        "comparison_arms", md,
        sa.Column("comparison_seq", sa.Integer, sa.ForeignKey("comparisons.seq"), primary_key=True),
        sa.Column("arm_index", sa.Integer, primary_key=True), sa.Column("label", sa.String(400)),
        sa.Column("strategy", sa.String(32)), sa.Column("assistant", sa.String(200)), sa.Column("setting", sa.String(200)),
        sa.Column("speedup", sa.Float), sa.Column("ci_low", sa.Float), sa.Column("ci_high", sa.Float),
        sa.Column("ci_level", sa.Float), sa.Column("ci_kind", sa.String(16)), sa.Column("n", sa.Integer),
        sa.Column("acceptance_rate", sa.Float), sa.Column("outputs_identical", sa.Boolean),
        sa.Column("engine", sa.String(16)),
    )
    # Only a report that names another engine can need it; the rest keep their rows as they are.
    rows = conn.execute(sa.text("SELECT seq, report FROM comparisons WHERE report LIKE :named"),
                        {"named": '%"engine"%'}).all()
    for seq, text in rows:
        try:
            report = json.loads(text)
        except ValueError:
            continue
        if all(engine_of(a) == DEFAULT_ENGINE for a in report.get("arms") or [] if isinstance(a, dict)):
            continue
        columns = summary_columns(report)
        conn.execute(table.update().where(table.c.seq == seq).values(**{name: columns[name] for name in recomputed}))
        conn.execute(arms.delete().where(arms.c.comparison_seq == seq))
        rebuilt = [{k: v for k, v in arm.items() if k in arms.c} for arm in arm_rows(report)]
        if rebuilt:
            conn.execute(arms.insert(), [{**arm, "comparison_seq": seq} for arm in rebuilt])


def _migration_5(conn: sa.Connection) -> None:
    """Version 5: the requests at once each arm row was timed at (issue 27). Rows saved before are one request
    at a time; a report that timed load levels gets a row per assisted arm and level above 1, from its report."""
    conn.execute(sa.text("ALTER TABLE comparison_arms ADD COLUMN concurrency INTEGER NOT NULL DEFAULT 1"))
    md = sa.MetaData()
    arms = sa.Table(
        "comparison_arms", md,
        sa.Column("comparison_seq", sa.Integer, primary_key=True), sa.Column("arm_index", sa.Integer, primary_key=True),
        sa.Column("label", sa.String(400)), sa.Column("strategy", sa.String(32)), sa.Column("assistant", sa.String(200)),
        sa.Column("setting", sa.String(200)), sa.Column("speedup", sa.Float), sa.Column("ci_low", sa.Float),
        sa.Column("ci_high", sa.Float), sa.Column("ci_level", sa.Float), sa.Column("ci_kind", sa.String(16)),
        sa.Column("n", sa.Integer), sa.Column("acceptance_rate", sa.Float), sa.Column("outputs_identical", sa.Boolean),
        sa.Column("engine", sa.String(16)), sa.Column("concurrency", sa.Integer),
    )
    # Only a report with a load summary can have load rows; the rest keep theirs as they are.
    rows = conn.execute(sa.text("SELECT seq, report FROM comparisons WHERE report LIKE :load"),
                        {"load": '%"load_summary"%'}).all()
    for seq, text in rows:
        try:
            report = json.loads(text)
        except ValueError:
            continue
        added = [{k: v for k, v in row.items() if k in arms.c} for row in load_rows(report)]
        if added:
            conn.execute(arms.insert(), [{**row, "comparison_seq": seq} for row in added])


def _migration_6(conn: sa.Connection) -> None:
    """Version 6: what each saved report is (a comparison, a workload, or a tuner's search, issue 34) and a
    search's answer in its sentence. Reports saved before get their kind from the report; a tuner's search keeps
    only its pick's arm rows (the candidates it dropped were timed only until they were clearly behind)."""
    conn.execute(sa.text("ALTER TABLE comparisons ADD COLUMN kind VARCHAR(16) NOT NULL DEFAULT 'comparison'"))
    conn.execute(sa.text(f"ALTER TABLE comparisons ADD COLUMN recommendation VARCHAR({MAX_RECOMMENDATION_CHARS})"))
    md = sa.MetaData()
    table = sa.Table("comparisons", md, sa.Column("seq", sa.Integer, primary_key=True), sa.Column("kind", sa.String(16)),
                     sa.Column("recommendation", sa.String(MAX_RECOMMENDATION_CHARS)))
    arms = sa.Table("comparison_arms", md, sa.Column("comparison_seq", sa.Integer, primary_key=True),
                    sa.Column("arm_index", sa.Integer, primary_key=True), sa.Column("label", sa.String(400)))
    rows = conn.execute(sa.text("SELECT seq, report FROM comparisons WHERE report LIKE :kinds OR report LIKE :tune"),
                        {"kinds": '%"kind": "suite"%', "tune": '%"tune": {%'}).all()
    for seq, text in rows:
        try:
            report = json.loads(text)
        except ValueError:
            continue
        columns = summary_columns(report)
        conn.execute(table.update().where(table.c.seq == seq).values(kind=columns["kind"],
                                                                     recommendation=columns["recommendation"]))
        if columns["kind"] == "tune":
            kept = [row["arm_index"] for row in arm_rows(report)]
            conn.execute(arms.delete().where(arms.c.comparison_seq == seq, arms.c.arm_index.not_in(kept)))


# Ordered: (version it brings the database to, what it does). Append; never edit a released step.
MIGRATIONS: tuple[tuple[int, Callable[[sa.Connection], None]], ...] = (
    (1, _migration_1), (2, _migration_2), (3, _migration_3), (4, _migration_4), (5, _migration_5), (6, _migration_6),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def current_version(conn: sa.Connection) -> int:
    """The schema version a database is at; 0 when it has none yet."""
    if not sa.inspect(conn).has_table(schema_table.name):
        return 0
    value = conn.execute(sa.select(schema_table.c.version).where(schema_table.c.id == 1)).scalar()
    return int(value or 0)


def upgrade(engine: sa.Engine, to_version: int = SCHEMA_VERSION) -> int:
    """Bring a database up to `to_version`, one migration per transaction; returns the version it is at.

    Several servers may start at once: SQLite's BEGIN IMMEDIATE and PostgreSQL's advisory lock make them take
    turns, and each re-reads the version inside its transaction. A database already at `to_version` is only read:
    opening the history never waits for a writer elsewhere.
    """
    with engine.connect() as conn:
        if current_version(conn) == to_version:
            return to_version
    while True:
        with engine.connect() as conn, conn.execution_options(assistlab_write=True).begin():
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
