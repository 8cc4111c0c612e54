"""What a measurement reports as it goes: a status line, or a finished run with the report so far."""

from __future__ import annotations

from dataclasses import dataclass

from .report import Report


@dataclass
class Event:
    """What the runner reports: a status line, or a finished run with the report so far.

    `done` and `total` count runs including warm-up, for progress bars: `total` the runs that will most likely
    run, `most` the most that may (larger when a rule stops once the answer is clear). A "status" event comes before each
    step starts (loading, converting, each run, each drafting-cost measurement) and names that step, so what
    a person reads is what is happening now, not what just finished; while a model loads it repeats every
    few seconds with the time updated.

    A workload's events say which prompt: `prompt` (1-based) of `prompts`, `where` in words, and
    `prompt_done` on the event that follows a prompt's last run; their `report` is the workload's report.
    """

    kind: str  # "status", "run" or "done"
    message: str
    done: int
    total: int
    report: Report | None = None  # a workload's SuiteReport on a workload's events
    warmup: bool = False
    step: str = ""  # the step now under way, in words: "Warm-up of plain (not counted)", "Repetition 2 of 3: ..."
    elapsed_s: float | None = None  # seconds since the comparison started
    # Estimated seconds left: for the whole comparison once a run has been timed (from the runs so far); while
    # a bundled model is converted, for that conversion (a fixed measured estimate); otherwise None.
    eta_s: float | None = None
    # True on the last run of a warm-up round or repetition: every arm has just run once more. The page
    # redraws its charts on these only, so its drawing falls between repetitions.
    round_done: bool = False
    # True when eta_s is the rough first estimate (results.estimate), made before any run was timed.
    eta_rough: bool = False
    # On a "run" event: how long that run took, so its progress line names the step and its time in one form.
    took_s: float | None = None
    # A workload's: the prompt being measured (1-based, 0 before the first) of how many, and where, in words.
    prompt: int = 0
    prompts: int = 0
    prompt_done: bool = False
    where: str = ""
    # True while the busy-machine watch sees others using the machine: the time left may then be longer.
    eta_busy: bool = False
    # The most runs that may run, when more than `total` (0: no more than `total`).
    most: int = 0
    # On a line the page refreshes between events: seconds since the step under way began.
    step_s: float | None = None
