"""Which setting to deploy: a search over each engine's declared settings that drops the candidates clearly
behind, run by the runner (warm-up, rotated rounds, busy watch, progress, Stop) with a stopping hook.

The package's interface, which the command line (`python -m assistlab tune`), the page and the API call:
  - `tune_request(target, ...)`: the BenchRequest whose arms are the candidates (measure/tune_space.py);
  - `tune(request, store, ...)`: the runner's events, the last one 'done' with `report.tune` set (its summary,
    docs/tune.md); `run_tune(...)`: the same to the end, (report, summary).
The `Tuner` is the runner's stopping rule: after each repetition at a planned look it decides that look with
results/tune.search, the candidates already out passed in; it alone keeps who left, when and why, and writes
`info.left`, which the rounds skip. When the search ends with budget left, the winner and its nearest rival
(back in if it had left) run on until the rule that assumes nothing confirms the winner or contradicts it
(`confirmed`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator

import numpy as np

from ..config import ArmRequest, BenchRequest
from ..engines import registry
from ..errors import InputError
from ..results import tune as elimination
from ..results.report import Report
from ..results.tune_record import TuneSummary
from . import stopping as stop_rules
from . import tune_schedule
from .tune_space import candidate_arms, default_assistants, tune_request  # noqa: F401 (the interface)
from .runner import Clock, Event, run_benchmark, to_the_end

SEARCH, CONFIRM = "search", "confirm"


BENCHED = "not needed to confirm the winner"


@dataclasses.dataclass(frozen=True)
class Leaving:
    """Why a candidate left the search: at which repetition, the code (results/tune), the leader it fell behind."""

    at: int
    code: int
    leader: int | None = None


@dataclasses.dataclass
class Tuner:
    """The search as one object with one state, handed to the runner as its stopping rule: after each repetition
    it says whether to stop, and which candidates are still in (the runner skips an arm whose `info.left` is set;
    `_publish` is the one writer of it). Who left, when and why is kept here (`gone`), and becomes words once
    (`reason`); the phase moves from the search to the confirmation, and `answered` once the answer stands."""

    request: BenchRequest
    candidates: list[int] = dataclasses.field(default_factory=list)  # report arm indices, by position
    specs: list[ArmRequest] = dataclasses.field(default_factory=list)
    baselines: list[int] = dataclasses.field(default_factory=list)
    simplicity: list[float] = dataclasses.field(default_factory=list)
    levels: elimination.Levels = elimination.Levels(1)
    bound: bool = False
    phase: str = SEARCH
    outcome: str = elimination.OPEN
    winner: int | None = None
    rival: int | None = None
    confirmed: bool | None = None
    answered: bool = False
    loading: bool = False  # the load phase: every draft length a schedule could use is timed again
    gone: dict[int, Leaving] = dataclasses.field(default_factory=dict)
    benched: set[int] = dataclasses.field(default_factory=set)

    def bind(self, report: Report, request: BenchRequest | None = None) -> None:
        """Match the report's assisted arms to the request's candidates (each engine keeps their order), once;
        `request` the runner's, resolved for its device (else for the CPU)."""
        if self.bound:
            return
        self.request = request or self.request.resolved("cpu")
        for engine in self.request.engines:
            wanted = [a for a in self.request.arms if a.engine == engine and a.assisted]
            indices = [i for i, info in enumerate(report.arms) if info.engine == engine and info.assisted]
            plain = next((i for i, info in enumerate(report.arms) if info.engine == engine and not info.assisted), 0)
            for spec, index in zip(wanted, indices):
                self.candidates.append(index)
                self.specs.append(spec)
                self.baselines.append(plain)
        keys = [registry.SETTINGS[s.engine].simplicity(s) for s in self.specs]
        order = sorted(range(len(keys)), key=lambda i: keys[i])
        self.simplicity = [float(order.index(i)) for i in range(len(keys))]
        self.levels = elimination.Levels(len(self.candidates), elimination.planned_looks(self.request.repeats))
        self.bound = True

    def __call__(self, request: BenchRequest, report: Report, count: int, elapsed: float) -> stop_rules.Decision:
        """The runner's stopping hook. The budget is kept: a search stops before a repetition that would likely
        overrun it (stopping.budget_ends), not stretched to the fewest repetitions the bench rule's own answer
        needs (that ran a saved search's timed runs to 716 s of a 600 s budget); that rule's own "clear", every
        arm against plain, is not the search's."""
        self.bind(report, request)
        stop = report.stopping
        stop_rules.after_repetition(request, report, count, elapsed, extend_to_floor=False)  # its record only
        budget = stop["ended_by"] if stop["ended_by"] == "no assisted arm" else \
            stop_rules.budget_ends(request, count, elapsed)
        if self.phase == SEARCH:
            self._look(report, count)
            if self.outcome != elimination.OPEN:
                self._start_confirming(report, budget is not None)
        elif not self.answered:
            self.confirmed = self._confirm(report)
            self.answered = self.confirmed is not None
        ends = self.answered or budget is not None
        stop.update(ended_by="clear" if self.answered else budget, reached=self.answered)
        self.loading = ends and bool(request.concurrency)
        self._publish(report)
        return stop_rules.Decision(True) if ends else stop_rules.Decision(False, self._waiting(report))

    def _look(self, report: Report, count: int) -> None:
        """One look at a time, from the state kept: a candidate that failed or left is out, whatever came before."""
        out = np.array([[pos in self.gone or bool(report.arms[i].error) for pos, i in enumerate(self.candidates)]])
        logs = np.full((1, len(report.arms), count), np.nan)  # log latencies by arm and repetition; NaN: not run
        for run in (r for r in report.runs if r.repetition < count and r.latency_s > 0):
            logs[0, run.arm, run.repetition] = np.log(run.latency_s)
        looks = self.levels.looks
        result = elimination.search(logs, self.baselines, self.candidates, self.request.band,
                                    self.simplicity, out, looks=looks, decide_at=[count] if count in looks else [])
        for pos, index in enumerate(self.candidates):
            code = int(result.why[0, pos])
            if pos in self.gone or report.arms[index].error or code not in (elimination.SLOWER_THAN_PLAIN,
                                                                              elimination.SLOWER_THAN_LEADER):
                continue
            leader = int(result.beaten_by[0, pos]) if code == elimination.SLOWER_THAN_LEADER else None
            self.gone[pos] = Leaving(int(result.left_at[0, pos]), code, leader)
        self.outcome = str(result.ended[0])
        self.winner = None if result.pick[0] < 0 else int(result.pick[0])

    def _start_confirming(self, report: Report, out_of_budget: bool) -> None:
        """The search has its answer: the winner and its nearest rival (back in if it had left) run on, with
        plain, until the rule that assumes nothing agrees or disagrees; no rival or no budget left: it stands."""
        self.rival = _nearest_rival(self, report) if self.winner is not None else None
        self.answered = self.rival is None or out_of_budget
        if self.answered:
            return
        self.confirmed = self._confirm(report)
        self.answered = self.confirmed is not None
        if not self.answered:
            self.phase = CONFIRM
            self.benched = {pos for pos in range(len(self.candidates))
                            if pos not in (self.winner, self.rival) and pos not in self.gone}

    def _confirm(self, report: Report) -> bool | None:
        rival, winner = report.paired(self.candidates[self.rival], self.candidates[self.winner])
        return elimination.confirm(winner, rival, self.outcome, self.request.band, self.levels)

    def reason(self, pos: int, report: Report) -> str:
        """Why a candidate left, in words."""
        left = self.gone[pos]
        if left.code == elimination.SLOWER_THAN_PLAIN:
            return f"clearly slower than plain after {left.at} repetitions"
        leader = report.arms[self.candidates[left.leader]].name
        return f"clearly slower than {leader}, the leader, after {left.at} repetitions"

    def leaving(self, report: Report) -> dict[int, tuple[int, str]]:
        """{position: (the repetition it left at, why)} of every candidate the search dropped."""
        return {pos: (self.gone[pos].at, self.reason(pos, report)) for pos in sorted(self.gone)}

    def _left_word(self, pos: int, report: Report, final: bool) -> str | None:
        """What `info.left` holds for a candidate: why it left, while it is out of the rounds (and at the end,
        timed under load or not, it left the search); None while it runs (the rival being confirmed, a draft
        length timed under load)."""
        info = report.arms[self.candidates[pos]]
        loads = (self.loading and not info.error
                 and registry.SCHEDULES.schedule_family(self.specs[pos]) is not None)
        back = loads or (pos == self.rival and self.phase == CONFIRM)
        if pos in self.gone and (final or not back):
            return self.reason(pos, report)
        return BENCHED if pos in self.benched and not loads else None

    def _publish(self, report: Report, final: bool = False) -> None:
        """The one writer of each candidate's `info.left`: the runner's skip flag, and the report's words."""
        for pos, index in enumerate(self.candidates):
            report.arms[index].left = self._left_word(pos, report, final)

    def finish(self, report: Report) -> None:
        """After the runs: bind (a search stopped before its first repetition never asked), and the words."""
        self.bind(report)
        self._publish(report, final=True)

    def _waiting(self, report: Report) -> str:
        """The progress line's words: the candidates still in, and in the confirmation which two run on."""
        if self.phase == CONFIRM:
            return (f"confirming {report.arms[self.candidates[self.winner]].name} against "
                    f"{report.arms[self.candidates[self.rival]].name}, assuming nothing")
        still = [report.arms[i].name for pos, i in enumerate(self.candidates)
                 if pos not in self.gone and not report.arms[i].error]
        return f"still in: {', '.join(still)}" if still else ""


def _nearest_rival(tuner: Tuner, report: Report) -> int | None:
    """The candidate (position) closest to the winner: the lowest ranking statistic (results/tune.ranking, the
    median log latency ratio over plain, as the search ranks) but the winner's."""
    best, rival = np.inf, None
    for pos, index in enumerate(tuner.candidates):
        if pos == tuner.winner or report.arms[index].error:
            continue
        base, mine = report.paired(tuner.baselines[pos], index)
        if mine:
            value = float(elimination.ranking(np.log(np.divide(mine, base))))
            if value < best:
                best, rival = value, pos
    return rival


def tune(request: BenchRequest, store, clock: Clock = time.perf_counter,
         should_stop: Callable[[], bool] = lambda: False) -> Generator[Event, None, TuneSummary]:
    """Run the search, yielding the runner's events; the 'done' event's report carries `tune` (its summary),
    which is also returned. `request` comes from `tune_request`: search_space() -> Tuner (the runner's stopping
    rule) -> its state -> summarize (with the confirmation's word) -> the deploy snippet; with load levels,
    the schedule (measure/tune_schedule.py)."""
    from .tune_summary import summarize

    if not any(a.assisted for a in request.arms):
        raise InputError("There is nothing to search: no candidate setting; name one with {candidates}.", "candidates")
    tuner = Tuner(request)
    final = None
    for event in run_benchmark(request, store, clock, should_stop, decide=tuner, probes=False):
        if event.kind == "done":
            final = event
            break
        yield event
    report = final.report
    tuner.finish(report)
    summary = summarize(report, tuner)
    if request.concurrency and report.status == "complete":
        pick = None if tuner.winner is None else tuner.candidates[tuner.winner]
        found, counted = yield from tune_schedule.after_search(tuner.request, report, tuner.specs, tuner.candidates,
                                                               pick, store, clock, should_stop, final.done)
        if found:
            summary.schedule, summary.schedule_check = found["schedule"], found["schedule_check"]
        final = dataclasses.replace(final, done=counted, total=counted, most=0)
    report.tune = summary
    under_load = (summary.schedule or {}).get("sentence", "")
    report.message = " ".join(x for x in (summary.sentence, _ended_words(report), summary.budget.sentence,
                                          under_load) if x)
    yield dataclasses.replace(final, message=report.message)
    return summary


ENDED = {"clear": "when the answer was clear", "repetitions": "at the most repetitions allowed",
         "time budget": "when the time budget ran out", "no assisted arm": "with no candidate left to time"}


def _ended_words(report: Report) -> str:
    """How the runs ended, after the sentence: the runner's own words for a stop, else the search's."""
    stop = report.stopping or {}
    if report.status != "complete":
        return report.message
    n = stop.get("repetitions", 0)
    return f"The search ran {n} repetition{'s' if n != 1 else ''} and ended {ENDED.get(stop.get('ended_by'), 'there')}."


def run_tune(request: BenchRequest, store, **kwargs) -> tuple[Report, dict]:
    """Run a search to the end: its report and its summary's JSON form (the report's `tune` block)."""
    report, summary = to_the_end(tune(request, store, **kwargs))
    return report, summary.to_dict()
