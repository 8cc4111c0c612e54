"""Warm-up, then interleaved timed runs of every arm; yields after each run so callers can stream and stop.

The scheduler only: every engine is prepared by measure.setup and every arm runs through the engine interface
(engines/base.py), so nothing here asks which engine an arm is on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator

from ..config import WARMUP_TOKENS, BenchRequest
from ..engines import catalog
from ..engines.base import Arm, Host, RunFailure, RunResult, Status, unwatched
from ..errors import AssistLabError, InputError, ResourceError
from ..results import estimate, explain, stats
from ..results.events import Event
from ..results.report import Report, RunRecord, counted
from . import blocks, contention, setup
from . import load as load_phase
from . import stopping as stop_rules
from .progress import Clock, Pace, Progress, likely_repetitions

# After each repetition: (request, report, repetitions so far, seconds of timed runs) -> whether to stop.
Decide = Callable[[BenchRequest, Report, int, float], stop_rules.Decision]
MAX_RUN_ENV = "ASSISTLAB_MAX_RUN_S"  # the operator's cap on one comparison's wall time, in seconds


def max_run_s(environ: dict | None = None) -> float | None:
    """$ASSISTLAB_MAX_RUN_S as a positive number of seconds, or None (unset or 0: no cap); bad values raise."""
    import math
    import os

    value = ((os.environ if environ is None else environ).get(MAX_RUN_ENV) or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise InputError(f"{MAX_RUN_ENV} must be a number of seconds, got {value!r}.") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise InputError(f"{MAX_RUN_ENV} must be a positive number of seconds (0 for no cap), got {value!r}.")
    return seconds or None


def rotation(n_arms: int, round_index: int) -> list[int]:
    """The order of the arms in one round (warm-up or repetition): round r starts at arm r mod n_arms.

    Over any n_arms consecutive rounds every arm runs once in every position, so drift within a repetition
    and the cost of coming first (cold caches, a model swapped in) fall on each arm alike. A rotation rather
    than a shuffle keeps that balance at the small counts a CPU affords, and is reproducible.
    """
    start = round_index % n_arms
    return [(start + i) % n_arms for i in range(n_arms)]


def precision_reached(speedups: list[dict], precision: float) -> bool:
    """True when every speedup interval lies within ±precision of its median.

    A speedup without a stated confidence `level` (too few runs for a real interval, or a bare range) has
    not reached any precision; nor has an empty list.
    """
    if not speedups:
        return False
    for s in speedups:
        median, low, high = s.get("median"), s.get("ci_low"), s.get("ci_high")
        if not s.get("level") or s.get("interval") in ("range", "none"):
            return False  # a range of a few runs states no confidence a precision could rest on
        if median is None or low is None or high is None or median <= 0:
            return False
        if low < median * (1.0 - precision) or high > median * (1.0 + precision):
            return False
    return True


def arm_speedups(report: Report) -> list[dict]:
    """stats.speedup of every assisted arm still running, its runs paired with its engine's plain by repetition."""
    out = []
    for index, info in enumerate(report.arms):
        if not info.assisted or info.error:
            continue
        plain = {r.repetition: r.latency_s for r in report.baseline_runs(index)}
        paired = [(plain[r.repetition], r.latency_s) for r in report.runs_of(index) if r.repetition in plain]
        out.append(stats.speedup([p for p, _ in paired], [c for _, c in paired]))
    return out


def _run_step(name: str, warmup: bool, repetition: int, request: BenchRequest) -> tuple[str, str]:
    """(step, message) for the run about to start; with a precision target the count is the most that may run."""
    if warmup:
        count = f" {repetition + 1} of {request.warmup}" if request.warmup > 1 else ""
        return f"Warm-up{count} of {name} (not counted)", f"Warming up {name} (not counted)..."
    of = f"of at most {request.repeats}" if request.stopping_rule != "fixed" else f"of {request.repeats}"
    return (f"Repetition {repetition + 1} {of}: {name}",
            f"Timing {name}, repetition {repetition + 1} {of}...")


def record_run(report: Report, index: int, repetition: int, position: int, outcome: RunResult, host: Host) -> None:
    times = outcome.times
    report.runs.append(
        RunRecord(
            arm=index,
            repetition=repetition,
            latency_s=outcome.latency,
            new_tokens=len(outcome.token_ids),
            ttft_s=times[0] if times else None,
            step_times=times,
            step_tokens=outcome.tokens,
            drafted=outcome.drafted,
            accepted=outcome.accepted,
            engine_counts=outcome.counts,
            token_ids=outcome.token_ids,
            text=host.decode(outcome.token_ids),
            memory_bytes=outcome.memory,
            wall_window=outcome.wall_window,
            position=position,
        )
    )
    if outcome.origins:  # an engine that does not say which tokens were drafted has no text segments
        report.segments[index] = explain.text_segments(host.tokenizer, report.runs[-1])


def keep_whole_repetitions(report: Report, whole: int, host: Host | None) -> None:
    """Drop the runs of a repetition a stop cut short, so a stopped report holds whole repetitions only: every
    figure (and `counted_repetitions`) then compares the arms over the same rounds, as a finished one does.
    Without a `host` (the command line after an interrupt) the token origins of a dropped run are dropped too."""
    del report.orders[whole:]  # a round a stop ended before its first run has its order and nothing else
    if all(run.repetition < whole for run in report.runs):
        return
    report.runs = [run for run in report.runs if run.repetition < whole]
    for index in range(len(report.arms)):
        runs = report.runs_of(index)
        if runs and host is not None:
            report.segments[index] = explain.text_segments(host.tokenizer, runs[-1])
        else:
            report.segments.pop(index, None)


def whole_repetitions(report: Report) -> int:
    """How many counted repetitions ran every arm that had not failed: the last one may have been cut short,
    and in blocks (measure/blocks.py) every repetition of the cycle under way may lack an arm."""
    whole = len(report.orders)
    while whole:
        done = {run.arm for run in report.runs if run.repetition == whole - 1}
        if not any(i not in done and not report.arms[i].error for i in report.orders[whole - 1]):
            break
        whole -= 1
    return whole


def interrupted(report: Report) -> Report:
    """A comparison an interrupt cut short (the command line's second Ctrl-C, or one that arrived where no stop
    flag is read), kept as a stopped one: its whole repetitions, status 'stopped', the message saying so."""
    if report.status in ("running", "stopped"):
        whole = whole_repetitions(report)
        keep_whole_repetitions(report, whole, None)
        report.status = "stopped"
        report.message = f"Stopped by an interrupt after {whole} of {report.planned_repeats or whole} repetitions."
        if report.stopping is not None:
            report.stopping["ended_by"] = "stopped"
    return report


def run_round(
    request: BenchRequest,
    host: Host,
    prompt_ids: list[int],
    arms: list[Arm],
    report: Report,
    round_index: int,
    warmup: bool,
    clock: Clock,
    should_stop: Callable[[], bool],
    progress: Progress,
    monitor: contention.Monitor | None = None,
    turn: int | None = None,
    emit: Callable[..., Event] | None = None,
) -> Generator[Event, None, bool]:
    """One warm-up round or counted repetition: every arm once, in `rotation` order, each run stoppable.

    Yields a 'status' event naming each run before it starts and a 'run' event after it; counted runs go into
    `report` (with their position) and the order into `report.orders` (or `warmup_orders`). Returns True when a
    stop ended the round: a run cut short by the stopping criterion is discarded. A failing plain run raises;
    another failing arm is marked and skipped. `turn` is the round's place in the rotation when it is not
    `round_index` (a suite keeps rotating from one prompt's repetitions to the next). `emit` makes the events
    (progress.event's arguments); a workload's names the prompt. Every arm runs through the engine interface:
    this loop never asks which engine it holds.
    """
    order = rotation(len(arms), round_index if turn is None else turn)
    (report.warmup_orders if warmup else report.orders).append(order)
    for position, index in enumerate(order):
        if (yield from run_one(request, host, prompt_ids, arms, report, index, round_index, position, warmup, clock,
                               should_stop, progress, monitor, emit, last=position == len(order) - 1)):
            return True
    return False


def run_one(request: BenchRequest, host: Host, prompt_ids: list[int], arms: list[Arm], report: Report, index: int,
            repetition: int, position: int, warmup: bool, clock: Clock, should_stop: Callable[[], bool],
            progress: Progress, monitor: contention.Monitor | None = None, emit: Callable[..., Event] | None = None,
            last: bool = False) -> Generator[Event, None, bool]:
    """One run of arm `index` (a warm-up or repetition `repetition`, at `position` in its round's order), as
    run_round describes; True when a stop ended it. `last` marks the run that ends a round of the progress."""
    emit = progress.event if emit is None else emit
    watch = unwatched if warmup or monitor is None else monitor.window
    arm = arms[index]
    if should_stop():
        return True
    if arm.info.error or arm.info.left:  # failed, or retired by a search (measure/tune.py)
        progress.done += 1
        return False
    step, announce = _run_step(arm.info.name, warmup, repetition, request)
    if not warmup and (report.stopping or {}).get("waiting_for"):  # what the stopping rule waits for
        step = f"{step} · {report.stopping['waiting_for']}"
    yield emit("status", announce, None, warmup, step)
    if arm.quiet is not None:  # another server's poll after its last request would share the cores
        arm.quiet(should_stop)
    began = progress.pace.elapsed()
    if warmup:  # a few tokens reach the steady speed; the rest of a whole run would only delay the answer
        outcome = arm.warm_up(prompt_ids, repetition, clock, should_stop, WARMUP_TOKENS)
    else:
        outcome = arm.run(prompt_ids, repetition, clock, should_stop, watch)
    if isinstance(outcome, RunFailure) and outcome.stopped:
        return True  # cut short: not a measurement of the work asked for
    progress.done += 1
    if not isinstance(outcome, RunFailure):
        # A short warm-up's pace, scaled to a whole run's tokens (its prompt read counted in full, so a little
        # long): the time left stops being a rough guess after the first warm-up run, and the first counted
        # run of the arm replaces it (Pace drops an arm's first run once it has a second).
        scale = request.max_new_tokens / min(WARMUP_TOKENS, request.max_new_tokens) if warmup else 1.0
        progress.pace.record(index, (progress.pace.elapsed() - began) * scale)
    if isinstance(outcome, RunFailure):
        arm.info.error = outcome.reason
        if index == 0:
            report.status = "failed"
            report.message = f"The plain (unassisted) run {outcome.reason}"
            raise (ResourceError if outcome.oom else AssistLabError)(report.message)
        if not arm.info.assisted:  # another engine's baseline: its assisted arms have nothing to be timed against
            for other in arms:
                if other.info.engine == arm.info.engine and other.info.assisted and not other.info.error:
                    other.info.error = f"its baseline, {arm.info.name}, {outcome.reason}"
        yield emit("run", f"{arm.info.name} {outcome.reason}", report, warmup, step, round_done=last)
        return False
    most = "at most " if request.stopping_rule != "fixed" else ""
    if warmup:
        phase = f"warm-up {repetition + 1}/{request.warmup}"
    else:
        record_run(report, index, repetition, position, outcome, host)
        if report.stopping is not None and progress.started is not None:
            report.stopping["elapsed_s"] = clock() - progress.started
        phase = f"repetition {repetition + 1}/{most}{request.repeats}"
    message = f"{arm.info.name}: {phase}, {outcome.latency:.2f} s"
    yield emit("run", message, report, warmup, step, round_done=last, took_s=outcome.latency)
    return False


def run_benchmark(
    request: BenchRequest,
    store,
    clock: Clock = time.perf_counter,
    should_stop: Callable[[], bool] = lambda: False,
    decide: Decide | None = None,
    probes: bool = True,
) -> Iterator[Event]:
    """Load, warm up, then time every arm in rotated order, repetition after repetition. The last event is 'done'.

    How many repetitions run is the request's stopping rule: a fixed count, or until every speedup is known
    to the precision asked for (at least MIN_PRECISION_REPEATS), the time budget is spent, or the most
    repetitions allowed are done. `should_stop` is checked between runs and, inside each engine, during every
    run: a run cut short is discarded and the report ends 'stopped'.

    Every engine is closed (servers stopped) when this generator ends, however it ends: done, stopped, an
    error, or closed by its caller (a cancelled request).

    `decide(request, report, count, elapsed)`, when given, takes the stopping rule's place after each repetition
    (a search's: it may retire arms by setting their `info.left`, and rounds then skip them); `probes` False
    leaves out the untimed drafting-cost runs.
    """
    engines: list = []
    try:
        yield from _run_benchmark(request, store, clock, should_stop, engines, decide or stop_rules.after_repetition,
                                  probes)
    finally:
        setup.close(engines)


def _run_benchmark(request: BenchRequest, store, clock: Clock, should_stop: Callable[[], bool],
                   engines: list, decide: Decide, probes: bool) -> Iterator[Event]:
    cap = max_run_s()
    if cap is not None:  # the operator's cap stops a comparison as Stop does, keeping what was measured
        deadline, asked = time.monotonic() + cap, should_stop
        should_stop = lambda: asked() or time.monotonic() > deadline  # noqa: E731
    device, dtype = setup.place(request)
    request = request.resolved(device.type)
    pace = Pace()  # the time so far and left, for the person watching; not the benchmark's clock
    request = catalog.canonical_request(request)  # refuses a bad reference before loading; names as shown
    prompt: dict[str, list[int]] = {}

    def status(step: Status) -> Event:
        return Event("status", step.message, 0, 0, step=step.step, elapsed_s=pace.elapsed(), eta_s=step.eta_s)

    def checked(host: Host) -> None:
        """The prompt's ids, refused before any server starts when it does not fit every model."""
        prompt["ids"] = host.encode(request)
        host.check(request, prompt["ids"])

    ready = yield from setup.prepare(request, store, device, dtype, should_stop, pace.elapsed, status, engines,
                                     check=checked)
    host, arms, ids = ready.host, ready.arms, prompt["ids"]
    for arm in arms:
        if arm.info.choice:
            yield Event("status", arm.info.choice, 0, 0, step=f"Choosing the drafter for {arm.info.name}",
                        elapsed_s=pace.elapsed())

    described = ready.described
    report = Report(
        request=request.to_dict(),
        environment=ready.machine,
        arms=[a.info for a in arms],
        planned_repeats=request.repeats,
    )
    report.environment["prompt_tokens"] = len(ids)
    report.environment.update(host.prompt_facts(request))
    report.environment["load_messages"] = ready.messages
    report.environment["changes_from_transformers"] = host.changes(request, {a.info.strategy for a in arms})
    report.environment["engines"] = ready.engines_env
    if ready.quiet is not None:
        report.environment["servers_quiet"] = ready.quiet
    report.stopping = stopping = stop_rules.record(request, report)
    likely = likely_repetitions(request, sum(1 for a in arms if a.info.assisted and not a.info.error))
    progress = Progress(total=(request.warmup + likely) * len(arms), most=(request.warmup + request.repeats) * len(arms),
                        pace=pace, assisted=tuple(i for i, a in enumerate(arms) if a.info.assisted and a.probes))
    progress.rough_s = estimate.comparison_seconds(
        device.type, described["target"].get("parameters") or 0, host.assistant_parameters(request, described),
        report.environment["prompt_tokens"], request.max_new_tokens, request.warmup, request.repeats,
        request.max_time_s,
    )
    progress.rough_at = pace.elapsed()  # until a run is timed, every event's time left comes from this
    monitor = contention.Monitor(device)  # one window per counted timed run; its record is live in the report
    report.environment["contention"] = progress.contention = monitor.record

    def stopped_event() -> Event:
        stopping["elapsed_s"] = 0.0 if progress.started is None else clock() - progress.started
        stopping["ended_by"] = "stopped"
        keep_whole_repetitions(report, stopping["repetitions"], host)
        report.status = "stopped"
        most = "at most " if request.stopping_rule != "fixed" else ""
        report.message = f"Stopped after {stopping['repetitions']} of {most}{counted(request.repeats, 'repetition')}."
        if cap is not None and time.monotonic() > deadline:
            report.message += f" This server stops a comparison after {cap:g} s ({MAX_RUN_ENV})."
        return progress.event("done", report.message, report, step="Stopped", eta_s=0.0)

    def after(count: int, untimed_s: float = 0.0) -> Generator[Event, None, bool]:
        """The stopping rule after `count` repetitions (`untimed_s`: the seconds since the first that went to
        anything but timed runs, the block design's server starts); True when the repetitions are over."""
        decision = decide(request, report, count, clock() - progress.started - untimed_s)
        now = pace.elapsed()
        report.timing.setdefault("first_repetition_s", now)
        if "likely_s" not in report.timing and stop_rules.all_likely(stopping):
            report.timing["likely_s"] = now
        if "first_answer_s" not in report.timing and stop_rules.all_answered(stopping):
            report.timing["first_answer_s"] = now
        if decision.stop:
            return True
        progress.expect((request.warmup + count + 1) * len(arms))  # not over yet: at least one more repetition
        stopping["waiting_for"] = decision.waiting
        if decision.waiting:
            yield progress.event("status", decision.waiting, report, step=decision.waiting)
        return False

    def enter(index: int) -> Generator[Event, None, bool]:
        """Arm `index` made ready for its block (in blocks: its server started afresh), with its status lines."""
        waiting = arms[index].enter_block(should_stop)
        while True:
            try:
                step = next(waiting)
            except StopIteration as ready:
                return bool(ready.value)
            yield progress.event("status", step.message, report, step=step.step)

    def run(index: int, repetition: int, warmup: bool, position: int, last: bool) -> Generator:
        return run_one(request, host, ids, arms, report, index, repetition, position, warmup, clock, should_stop,
                       progress, None if warmup else monitor, last=last)

    report.timing["load_s"] = warm_began = pace.elapsed()
    in_blocks = any(arm.in_blocks for arm in arms)
    if in_blocks:  # one server at a time: every arm's runs in blocks, mirrored
        progress.started = clock()
        if (yield from blocks.repetitions(arms, report, request.repeats, request.warmup, enter, run, after, clock,
                                          progress)):
            monitor.close()
            yield stopped_event()
            return
    else:
        for w in range(request.warmup):
            if (yield from run_round(request, host, ids, arms, report, w, True, clock, should_stop, progress)):
                monitor.close()
                yield stopped_event()
                return
        report.timing["warmup_s"] = pace.elapsed() - warm_began
        progress.started = clock()  # the time budget counts timed repetitions only
        for r in range(request.repeats):
            if (yield from run_round(request, host, ids, arms, report, r, False, clock, should_stop, progress,
                                     monitor)):
                monitor.close()
                yield stopped_event()
                return
            if (yield from after(r + 1)):
                break
    monitor.close()
    # The repetitions are over: what ran is all they owe (an answer that came early leaves no runs to count).
    progress.total, progress.most = progress.done, 0
    stopping.pop("waiting_for", None)
    if stopping["repetitions"]:  # the answer, final, before the untimed drafting-cost runs delay it
        report.timing["answer_s"] = pace.elapsed()
        yield progress.event("status", stop_rules.answer_message(report), report, step="The answer", round_done=True)

    # The cost model: one untimed, instrumented run per assisted arm that has one, after every timed run. Each
    # is watched like a timed run (one window around it): its drafting time is the prediction's c, so others'
    # work during it would make the prediction wrong without touching the measured speedup.
    probing = [(index, arm) for index, arm in enumerate(arms)
               if probes and arm.info.assisted and not arm.info.error and not arm.info.left and arm.probes]
    watch = contention.Monitor(device)
    report.environment["probe_contention"] = watch.record
    try:
        for count, (index, arm) in enumerate(probing, start=1):
            if not should_stop():
                step = f"Measuring the drafting cost, {count} of {len(probing)}: {arm.info.name} (untimed)"
                left = progress.eta(len(probing) - count + 1, runs_left=0)
                yield progress.event("status", f"{step}...", report, step=step, eta_s=left)
                seen = len(watch.windows)
                probe = arm.probe(ids, clock, should_stop, watch.window)
                if probe is None:
                    break  # a probe cut short would describe a shorter run; keep none
                if len(watch.windows) > seen:  # no window when the machine cannot be read
                    probe["contention"] = watch.window_record(watch.windows[-1])
                report.probes[index] = probe
    finally:
        watch.close()
    if should_stop():
        # Every repetition the rule asked for was measured; only the untimed cost-model runs were cut.
        report.status = "stopped"
        report.message = (f"Stopped during the untimed cost-model runs, after all {stopping['repetitions']} "
                          f"repetitions were measured.")
        yield progress.event("done", report.message, report, step="Stopped", eta_s=0.0)
        return

    if request.concurrency:  # the load phase, after the single-request answer: many requests at once per arm
        progress.total += load_phase.runs_of_phase(request, arms)
        watch = contention.Monitor(device)
        report.environment["load_contention"] = watch.record
        try:
            stopped = yield from load_phase.run_load(request, load_phase.same_prompt(ids), arms, report, clock,
                                                     should_stop, progress, rotation, watch,
                                                     enter=enter if in_blocks else None)
        finally:
            watch.close()
        if stopped:
            report.status = "stopped"
            report.message = (f"Stopped during the load phase, after all {stopping['repetitions']} repetitions were "
                              f"measured; {load_phase.kept_words(report.load)}.")
            if cap is not None and time.monotonic() > deadline:
                report.message += f" This server stops a comparison after {cap:g} s ({MAX_RUN_ENV})."
            yield progress.event("done", report.message, report, step="Stopped", eta_s=0.0)
            return

    report.status = "complete"
    report.message = stop_rules.finish_message(report, request)
    yield progress.event("done", report.message, report, step="Complete", eta_s=0.0)


def to_the_end(events: Generator) -> tuple[Report, object]:
    """Run a generator of events (a sweep's, a search's) to its end: the last event's report and what it returned."""
    final = None
    while True:
        try:
            final = next(events)
        except StopIteration as stop:
            return final.report, stop.value


def run_to_report(request: BenchRequest, store, **kwargs) -> Report:
    """Run a comparison to the end and return its report."""
    final = None
    for event in run_benchmark(request, store, **kwargs):
        final = event
    return final.report
