"""A search's summary as typed records (measure/tune_summary.py builds them, measure/tune.py adds the schedule
step's), turned into the report's `tune` block (docs/tune.md) in one place: `TuneSummary.to_dict`. Every view
reads that JSON form, which is also what a saved search holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Candidate:
    """One candidate of the search: what it is, when and why it left (None: in to the end), its runs, and its
    speedup over its plain arm (the sure and likely intervals), the one interval every view shows, and the
    interval the search decided on after each repetition."""

    arm: str
    engine: str
    family: str
    settings: dict
    left_at: int | None
    why: str | None
    runs: int
    speedup: dict | None
    interval: dict | None
    looks: list


@dataclass
class Recommendation:
    """The pick: its settings in words, its speedup with the interval shown, how it compares with its engine's
    default setting, the `bench` options that re-time it and the code that deploys it."""

    arm: str
    engine: str
    strategy: str
    family: str
    settings: dict
    phrase: str
    speedup: dict
    interval: dict
    over_default: dict | None
    bench_args: list[str]
    bench_command: str
    deploy: dict
    mean_log_speedup: float | None


@dataclass
class Budget:
    """The time budget against the timed runs' seconds; `sentence` says an overrun, else ''."""

    max_time_s: float | None
    timed_s: float | None
    over: bool
    sentence: str


@dataclass
class TuneSummary:
    """The whole summary: how the search ended, at what level, every candidate, the pick, the confirmation, the
    runs it took, what to deploy, the budget and the sentence; with load levels, the schedule step's records
    (None when that step did not run: then they are left out of the JSON)."""

    outcome: str
    settled: bool
    assumption: str
    level: float
    comparisons: int
    comparison_level: float
    looks: list[int]
    band: float | None
    candidates: list[Candidate]
    recommendation: Recommendation | None
    confirmed: bool | None
    confirmed_against: str | None
    repetitions: int
    runs_used: int
    runs_without_elimination: int
    deploy: dict | None
    budget: Budget
    sentence: str
    schedule: dict | None = None
    schedule_check: dict | None = field(default=None)

    def to_dict(self) -> dict:
        """The report's `tune` block, in the order docs/tune.md lists its fields."""
        data = asdict(self)
        if self.schedule is None:
            del data["schedule"], data["schedule_check"]
        return data
