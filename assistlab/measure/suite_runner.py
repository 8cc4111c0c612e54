"""A suite run: load once, warm each arm up once, then one interleaved comparison per selected prompt."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator

from ..config import CLEAR_MAX_REPEATS, SUITE_CLEAR_MAX_TIME_S, BenchRequest
from ..engines import catalog, registry
from ..engines.base import Host, Status
from ..errors import AssistLabError, InputError
from ..results import estimate, stats
from ..results.events import Event
from ..results.report import Report, counted
from ..results.suite import PromptResult, SuiteReport
from ..results.suite_inputs import CPU_SUITE_DEFAULTS, CUDA_SUITE_DEFAULTS, Selection
from . import contention, setup
from . import stopping as stop_rules
from . import load as load_phase
from .progress import Clock, Pace, Progress
from .runner import interrupted as interrupted_report
from .runner import keep_whole_repetitions, rotation, run_round


def suite_bench(bench: BenchRequest, device_type: str) -> BenchRequest:
    """The suite's settings: empty fields take the suite defaults (shorter than a single comparison's).

    A suite runs a fixed number of repetitions per prompt, unless its rule is "clear" (`stop_rule`): then each
    prompt runs until its answer is clear, at most `repeats` times (CLEAR_MAX_REPEATS when empty), within
    `max_time_s` of timed runs for the whole workload (SUITE_CLEAR_MAX_TIME_S when empty). A precision target
    (the page's "Careful") and its time budget are for one comparison, and are dropped here.
    """
    defaults = dict(CUDA_SUITE_DEFAULTS if device_type == "cuda" else CPU_SUITE_DEFAULTS)
    if bench.stop_rule == "clear":
        defaults.update(repeats=CLEAR_MAX_REPEATS, max_time_s=SUITE_CLEAR_MAX_TIME_S)
    changes = {k: v for k, v in defaults.items() if getattr(bench, k) is None}
    if bench.precision is not None:
        changes.update(precision=None, max_time_s=None, stop_rule=None)
    return dataclasses.replace(bench, **changes) if changes else bench


def until_clear(bench: BenchRequest) -> bool:
    """Whether each prompt runs until its answer is clear (else a fixed count per prompt)."""
    return bench.stop_rule == "clear"


def prompt_share(bench: BenchRequest, spent_s: float, prompts_left: int) -> BenchRequest:
    """One prompt's request under the rule "clear": the workload's budget not yet spent, shared equally among the
    prompts not yet measured (this one included), as its own time budget; a prompt that settles early leaves its
    time to the ones after it."""
    left = max(bench.max_time_s - spent_s, 0.0)
    return dataclasses.replace(bench, max_time_s=max(left / max(prompts_left, 1), 1e-3))


def estimate_runs(bench: BenchRequest, selection: Selection, device_type: str = "cpu") -> dict:
    """How much work a suite is before it starts: timed runs, warm-up runs, tokens."""
    bench = suite_bench(bench, device_type).resolved(device_type)
    arms = registry.HOST.wanted(bench) + len(bench.arms)  # another engine's plain arm is among bench.arms
    items = len(selection.items)
    return {
        "prompts": items,
        "arms": arms,
        "repeats": bench.repeats,
        "warmup_runs": bench.warmup * arms,
        "timed_runs": items * bench.repeats * arms,
        "new_tokens": bench.max_new_tokens,
        # Under the rule "clear" the counts are the most that may run; the budget of timed runs bounds them too.
        "until_clear": until_clear(bench),
        "max_time_s": bench.max_time_s if until_clear(bench) else None,
    }


def describe_estimate(estimate: dict, seconds_per_run: float | None = None) -> str:
    """The estimate in words, with a time when a seconds-per-run figure is known."""
    most = "at most " if estimate.get("until_clear") else ""
    text = (
        f"{counted(estimate['prompts'], 'prompt')} × {counted(estimate['arms'], 'arm')} × "
        f"{most}{counted(estimate['repeats'], 'repetition')} = "
        f"{most}{estimate['timed_runs']} timed runs of {estimate['new_tokens']} new tokens, plus "
        f"{estimate['warmup_runs']} warm-up runs"
    )
    if estimate.get("until_clear"):
        return text + (f"; each prompt stops once its answer is clear, within {_minutes(estimate['max_time_s'])} of "
                       f"timed runs for the whole workload.")
    if seconds_per_run:
        total = seconds_per_run * (estimate["timed_runs"] + estimate["warmup_runs"])
        text += f"; about {_minutes(total)}"
    return text + "."


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{seconds / 60:.0f} min"


def _longest_prompt(bench: BenchRequest, host: Host, selection: Selection) -> int:
    """The most tokens any selected prompt may be sent with: its turns, and the target's earlier answers at
    most `max_new_tokens` each (prompts too long for the target are skipped later, so they do not count)."""
    longest = 0
    for item in selection.items:
        try:
            encoded = host.encode_turns(bench, item.turns, [""] * (len(item.turns) - 1))
        except InputError:
            continue
        longest = max(longest, len(encoded) + (len(item.turns) - 1) * bench.max_new_tokens)
    return longest


def run_suite(
    bench: BenchRequest,
    selection: Selection,
    store,
    clock: Clock = time.perf_counter,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[Event]:
    """Measure every selected item as one comparison; the last event is 'done' and carries the report.

    `bench` gives the target, the arms and the timing settings shared by every prompt (its `prompt` is
    not used). Models load once; each arm warms up `warmup` times on the first prompt that fits, not once
    per prompt. Every prompt's runs are `runner.run_round`'s, as in a single comparison: the order of the
    arms rotates from one repetition to the next over the whole suite, and what else used the machine is
    watched during every counted run. A prompt that does not fit the target's context is skipped with its
    reason; one whose plain run fails is marked failed, and the suite goes on with the next.

    The engines are prepared once (measure.setup, as for a comparison): a server starts once, before the first
    prompt, serves every prompt, and every engine is closed when this generator ends, however it ends: done,
    stopped, an error, or closed by its caller.
    """
    engines: list = []
    try:
        yield from _run_suite(bench, selection, store, clock, should_stop, engines)
    finally:
        setup.close(engines)


def _run_suite(
    bench: BenchRequest,
    selection: Selection,
    store,
    clock: Clock,
    should_stop: Callable[[], bool],
    engines: list,
) -> Iterator[Event]:
    device, dtype = setup.place(bench)
    bench = suite_bench(bench, device.type).resolved(device.type)
    n_items = len(selection.items)
    catalog.canonical_request(bench)  # refuses a bad reference before loading, naming its field
    pace = Pace()

    def status(step: Status) -> Event:
        return Event("status", step.message, 0, 0, step=step.step, elapsed_s=pace.elapsed(), eta_s=step.eta_s,
                     prompts=n_items)

    # One server per arm that needs one for the whole suite, sized for its longest prompt; never one per prompt.
    ready = yield from setup.prepare(bench, store, device, dtype, should_stop, pace.elapsed, status, engines,
                                     prompt_tokens=lambda host: _longest_prompt(bench, host, selection))
    host, arms, described = ready.host, ready.arms, ready.described
    environment = ready.machine
    environment["load_messages"] = ready.messages
    environment["engines"] = ready.engines_env
    monitor = contention.Monitor(device)  # one window per counted run of every prompt; its record is live
    environment["contention"] = monitor.record
    suite = SuiteReport(
        selection=selection,
        request={k: v for k, v in bench.to_dict().items() if k != "prompt"},  # each prompt is in suite.prompts
        environment=environment,
        arm_names=[a.info.name for a in arms if a.info.assisted],  # each against its own engine's plain arm
        results=[PromptResult(item) for item in selection.items],
    )
    per_prompt = bench.repeats * len(arms)
    progress = Progress(total=bench.warmup * len(arms) + n_items * per_prompt, contention=monitor.record)
    began = clock()
    failed_arms: dict[int, str] = {}  # arms that failed their warm-up: not run on any prompt
    answers: dict[str, list[str]] = {}  # prompt id -> the plain arm's answers to its turns so far
    turn = 0  # counted rounds so far over the whole suite: the order keeps rotating from prompt to prompt
    measured_ids: list[list[int]] = []  # the measured prompts' ids, for the load phase's requests in turn

    progress.rough_s = estimate.suite_seconds(
        device.type, described["target"].get("parameters") or 0,
        host.assistant_parameters(bench, described),
        [estimate.prompt_tokens_guess(item.turns) for item in selection.items], bench.max_new_tokens,
        bench.warmup, bench.repeats,
    )
    progress.rough_at = progress.pace.elapsed()

    def eta() -> tuple[float | None, bool]:
        """(seconds left, whether that is the rough first estimate)."""
        left = progress.eta()  # each arm's pace smoothed over its runs so far, on every prompt (runner.Pace)
        if left is not None:
            return left, False
        rough = progress.rough_left()
        return rough, rough is not None

    clear = until_clear(bench)
    timed_s = 0.0  # seconds of counted repetitions over every prompt so far: the budget "clear" shares out
    if clear:
        suite.stopping = {"rule": "clear", "max_time_s": bench.max_time_s, "max_repetitions": bench.repeats,
                          "band": bench.band, "level": stats.TARGET_LEVEL, "spent_s": 0.0,
                          "prompts": {}}

    def event(kind: str, message: str, position: int, prompt_done: bool = False, **words) -> Event:
        suite.elapsed_s = clock() - began
        left, rough = eta()
        return Event(kind, message, progress.done, progress.total, suite, prompt=position, prompts=n_items,
                     eta_s=left, prompt_done=prompt_done, elapsed_s=suite.elapsed_s, eta_rough=rough,
                     eta_busy=progress.busy(), **words)

    def emitter(position: int, item) -> Callable[..., Event]:
        """The events of a round on this prompt (run_round's `emit`): named by prompt, with the suite's time left."""
        where = f"Prompt {position} of {n_items} ({item.id}, {item.category})"

        def emit(kind: str, message: str, report=None, warmup: bool = False, step: str = "",
                 eta_s: float | None = None, round_done: bool = False, took_s: float | None = None) -> Event:
            if warmup and kind == "run":
                text = f"Warm-up on prompt {position} (not counted): {message}"
            else:
                text = f"{where}: {message}"
            return event(kind, text, position, where=where, step=step, took_s=took_s, warmup=warmup)

        return emit

    warmed = bench.warmup == 0
    try:
        for position, result in enumerate(suite.results, start=1):
            item = result.item
            if should_stop():
                break
            earlier = answers.get(item.prompt_id, [])
            if item.turn > 1 and len(earlier) < item.turn - 1:
                result.status, result.reason = "skipped", f"turn {item.turn - 1} of this prompt was not measured."
                progress.total -= per_prompt
                yield event("status", f"Prompt {position} of {n_items} ({item.id}) skipped: {result.reason}", position)
                continue
            try:
                ids = host.encode_turns(bench, item.turns, earlier)
            except InputError as exc:
                result.status, result.reason = "skipped", str(exc)
                progress.total -= per_prompt
                yield event("status", f"Prompt {position} of {n_items} ({item.id}, {item.category}) skipped: {exc}",
                            position)
                continue
            result.prompt_tokens = len(ids)
            # This prompt's own arms: an assisted arm failing here is marked for this prompt only.
            # A vLLM arm whose server could not start keeps its sentence on every prompt.
            mine = [a.with_info(dataclasses.replace(a.info, error=failed_arms.get(i, a.info.error)))
                    for i, a in enumerate(arms)]
            report = Report(
                # The workload's load phase is the suite's, after every prompt, not this prompt's.
                request={**bench.to_dict(), "prompt": item.text, "concurrency": []},
                environment={"prompt_tokens": result.prompt_tokens},
                arms=[a.info for a in mine],
                planned_repeats=bench.repeats,
            )
            mine_request = prompt_share(bench, timed_s, n_items - position + 1) if clear else bench
            if clear:
                report.stopping = stop_rules.record(mine_request, report)
            result.report, result.status = report, "running"
            emit = emitter(position, item)
            before, stopped = progress.done, False
            try:
                if not warmed:
                    # One warm-up per arm for the whole suite, on the first prompt that fits.
                    for w in range(bench.warmup):
                        stopped = yield from run_round(bench, host, ids, mine, report, w, True, clock, should_stop,
                                                       progress, emit=emit)
                        if stopped:
                            break
                    warmed = True
                    failed_arms = {i: a.info.error for i, a in enumerate(mine) if a.info.error}
                    progress.total -= progress.done
                    progress.done = before = 0
                started = clock()
                for r in range(bench.repeats):
                    if stopped:
                        break
                    counted = run_round(bench, host, ids, mine, report, r, False, clock, should_stop, progress,
                                        monitor, turn, emit=emit)
                    turn += 1  # a round that fails still took its place in the rotation
                    stopped = yield from counted
                    if stopped:  # the round a stop cut short is not counted: the prompt keeps its whole ones
                        keep_whole_repetitions(report, r, host)
                    if clear and not stopped:
                        decision = stop_rules.after_repetition(mine_request, report, r + 1, clock() - started,
                                                              extend_to_floor=False)
                        if decision.stop:
                            # Runs planned for this prompt that its answer no longer needs: the bar's total shrinks.
                            progress.total -= (bench.repeats - r - 1) * len(mine)
                            break
                if clear:
                    timed_s += clock() - started
                    suite.stopping["spent_s"] = timed_s
            except AssistLabError as exc:  # the plain run failed (run_round says how): no baseline for this prompt
                result.status, result.reason = "failed", str(exc)
                if warmed:
                    progress.total -= per_prompt - (progress.done - before)
                else:  # a failed warm-up is tried again on the next prompt
                    progress.total -= per_prompt
                    progress.done = before
                yield event("status", f"Prompt {position} of {n_items} ({item.id}, {item.category}) failed: {exc}",
                            position)
            if result.status != "failed":
                result.status = "stopped" if stopped else "measured"
            result.finish()
            if clear and report.stopping is not None:
                kept = report.stopping
                suite.stopping["prompts"][item.id] = {"repetitions": kept["repetitions"], "ended_by": kept["ended_by"],
                                                      "max_time_s": mine_request.max_time_s}
            if result.status == "measured":
                said = f" ({stop_rules.prompt_words(report.stopping)})" if clear and report.stopping else ""
                yield event("status", f"Prompt {position} of {n_items} ({item.id}, {item.category}) measured{said}.",
                            position, prompt_done=True)
            plain = report.plain
            if plain:
                answers[item.prompt_id] = earlier + [plain[-1].text]
            if result.status == "measured":
                measured_ids.append(ids)
            if stopped:
                break
    finally:
        monitor.close()

    load_stopped = False
    if bench.concurrency and not should_stop():
        load_stopped = yield from _suite_load(bench, arms, failed_arms, measured_ids, suite, clock, should_stop,
                                              progress, device, began)

    measured = sum(1 for r in suite.results if r.status in ("measured", "stopped"))
    skipped = sum(1 for r in suite.results if r.status == "skipped")
    failed = sum(1 for r in suite.results if r.status == "failed")
    if load_stopped:
        suite.status = "stopped"
        suite.message = (f"Stopped during the load phase, after {measured} of {n_items} prompts were measured; "
                         f"{load_phase.kept_words(suite.load)}.")
    elif should_stop() and any(r.status in ("pending", "stopped") for r in suite.results):
        suite.status = "stopped"
        finished = sum(1 for r in suite.results if r.status == "measured")
        if finished == measured:
            suite.message = f"Stopped after {measured} of {n_items} prompts; the figures use what was measured."
        else:  # a prompt cut short is started, not finished (issue 36 item 6)
            suite.message = (f"Stopped: {measured} of {n_items} prompts started, {finished} finished; the figures "
                             "use the whole repetitions measured.")
    else:
        suite.status = "complete"
        others = ", ".join(f"{count} {what}" for count, what in ((skipped, "skipped"), (failed, "failed")) if count)
        suite.message = f"Complete: {measured} of {n_items} prompts measured" + (
            f", {others} (see the reasons)." if others else "."
        )
        if clear and suite.stopping["prompts"]:
            suite.message += " Each ran until its answer was clear: " + stop_rules.suite_words(suite.stopping)
    for result in suite.results:
        if result.status == "pending":
            result.status, result.reason = "not run", "the suite was stopped before this prompt."
    suite.elapsed_s = clock() - began
    yield Event("done", suite.message, progress.done, progress.total, suite, prompt=n_items, prompts=n_items,
                eta_s=0.0, elapsed_s=suite.elapsed_s)


def interrupted(suite: SuiteReport) -> SuiteReport:
    """A workload an interrupt cut short (see runner.interrupted), kept as a stopped one: the prompt under way keeps
    its whole repetitions, the prompts not reached say so, and the message says how many were measured."""
    if suite.status in ("running", "stopped"):
        for result in suite.results:
            if result.status == "running":
                if result.report is not None:
                    interrupted_report(result.report)
                result.status = "stopped"
                result.finish()
            elif result.status == "pending":
                result.status, result.reason = "not run", "the suite was stopped before this prompt."
        measured = sum(1 for r in suite.results if r.report is not None and r.report.runs)
        suite.status = "stopped"
        suite.message = (f"Stopped by an interrupt after {measured} of {len(suite.results)} prompts; the figures "
                         f"use what was measured.")
    return suite


def _suite_load(bench: BenchRequest, arms: list, failed_arms: dict[int, str], measured_ids: list[list[int]],
                suite: SuiteReport, clock: Clock, should_stop: Callable[[], bool], progress: Progress, device,
                began: float) -> Iterator[Event]:
    """The workload's load phase, once after its prompts: each round's requests take the measured prompts in turn.

    Its rounds go into `suite.load`; returns True when a stop cut it short (whole levels are kept)."""
    suite.load_arms = [a.info for a in arms]
    if not measured_ids:
        suite.load_note = "No prompt was measured, so the load phase did not run."
        return False
    mine = [a.with_info(dataclasses.replace(a.info, error=failed_arms.get(i, a.info.error)))
            for i, a in enumerate(arms)]
    scratch = Report(request=suite.request, environment={}, arms=[a.info for a in mine])
    progress.total += load_phase.runs_of_phase(bench, mine)
    n_items = len(suite.results)

    def emit(kind: str, message: str, step: str, eta_s: float | None, round_done: bool) -> Event:
        suite.elapsed_s = clock() - began
        return Event(kind, message, progress.done, progress.total, suite, prompt=n_items, prompts=n_items,
                     eta_s=eta_s, elapsed_s=suite.elapsed_s, step=step, where="Under load", round_done=round_done,
                     eta_busy=progress.busy())

    watch = contention.Monitor(device)
    suite.environment["load_contention"] = watch.record
    try:
        stopped = yield from load_phase.run_load(bench, load_phase.prompts_in_turn(measured_ids), mine, scratch,
                                                 clock, should_stop, progress, rotation, watch, emit)
    finally:
        watch.close()
        suite.load = scratch.load
    return stopped


def run_suite_to_report(bench: BenchRequest, selection: Selection, store, **kwargs) -> SuiteReport:
    """Run a suite to the end and return its report."""
    final = None
    for event in run_suite(bench, selection, store, **kwargs):
        final = event
    return final.report
