"""A suite run: load once, warm each arm up once, then one interleaved comparison per selected prompt."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

from ..config import BenchRequest
from ..engines import catalog
from ..engines.transformers import models as models_mod
from ..engines.transformers import paths
from ..engines.transformers.models import LoadedModel, ModelStore
from ..engines.vllm import engine as vllm_engine
from ..errors import AssistLabError, InputError
from ..results import estimate
from ..results import report as report_mod
from ..results.report import Report
from ..results.suite import CPU_SUITE_DEFAULTS, CUDA_SUITE_DEFAULTS, PromptResult, Selection, SuiteReport
from . import contention
from .runner import (
    Clock,
    Event,
    Pace,
    Progress,
    add_vllm_arms,
    build_arms,
    encode_prompt,
    fitted_inputs,
    loading_step,
    run_round,
    vllm_drafts,
    vllm_setup,
    wait_for_conversions,
)


@dataclass
class SuiteEvent:
    """Progress of a suite: a status line, or a finished run with the suite report so far.

    `done`/`total` count timed runs including warm-up; `prompt` is the 1-based item being measured of
    `prompts`; `eta_s` is the time left: from the runs so far once one has finished, before that the rough
    estimate (`eta_rough`) from the prompts' lengths and the models' sizes. `prompt_done` marks the event that
    follows a prompt's last run, once its figures are in the report. `where` (the prompt), `step` (the run under
    way, in the runner's words), `elapsed_s` and `took_s` make its progress line the same form as a single
    comparison's (views.panels.progress_text).
    """

    kind: str  # "status", "run" or "done"
    message: str
    done: int
    total: int
    prompt: int
    prompts: int
    eta_s: float | None = None
    report: SuiteReport | None = None
    prompt_done: bool = False
    where: str = ""
    step: str = ""
    elapsed_s: float | None = None
    eta_rough: bool = False
    took_s: float | None = None
    warmup: bool = False
    eta_busy: bool = False  # others are using the machine: the time left is uncertain (views.panels.timing_text)


def suite_bench(bench: BenchRequest, device_type: str) -> BenchRequest:
    """The suite's settings: empty fields take the suite defaults (shorter than a single comparison's).

    A suite runs a fixed number of repetitions per prompt: a precision target (the page's "Careful") and its
    time budget are for one comparison, and are dropped here.
    """
    defaults = CUDA_SUITE_DEFAULTS if device_type == "cuda" else CPU_SUITE_DEFAULTS
    changes = {k: v for k, v in defaults.items() if getattr(bench, k) is None}
    if bench.precision is not None:
        changes.update(precision=None, max_time_s=None)
    return dataclasses.replace(bench, **changes) if changes else bench


def estimate_runs(bench: BenchRequest, selection: Selection, device_type: str = "cpu") -> dict:
    """How much work a suite is before it starts: timed runs, warm-up runs, tokens."""
    bench = suite_bench(bench, device_type).resolved(device_type)
    arms = ("transformers" in bench.engines) + len(bench.arms)  # vLLM's plain arm is among bench.arms
    items = len(selection.items)
    return {
        "prompts": items,
        "arms": arms,
        "repeats": bench.repeats,
        "warmup_runs": bench.warmup * arms,
        "timed_runs": items * bench.repeats * arms,
        "new_tokens": bench.max_new_tokens,
    }


def describe_estimate(estimate: dict, seconds_per_run: float | None = None) -> str:
    """The estimate in words, with a time when a seconds-per-run figure is known."""
    text = (
        f"{estimate['prompts']} prompts × {estimate['arms']} arms × {estimate['repeats']} repetitions = "
        f"{estimate['timed_runs']} timed runs of {estimate['new_tokens']} new tokens, plus "
        f"{estimate['warmup_runs']} warm-up runs"
    )
    if seconds_per_run:
        total = seconds_per_run * (estimate["timed_runs"] + estimate["warmup_runs"])
        text += f"; about {_minutes(total)}"
    return text + "."


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{seconds / 60:.0f} min"


def encode_turns(bench: BenchRequest, target: LoadedModel, turns: tuple[str, ...], answers: list[str]) -> dict:
    """Token ids for a conversation: the user's turns with the target's own earlier answers between them.

    One turn is exactly `runner.encode_prompt`. Later turns go through the chat template as a conversation
    (or, without one, as the texts joined by blank lines), with the same context-length check.
    """
    if len(turns) == 1:
        return encode_prompt(dataclasses.replace(bench, prompt=turns[0]), target)
    tok = target.tokenizer
    if bench.chat_template and getattr(tok, "chat_template", None):
        messages = []
        for i, user in enumerate(turns):
            messages.append({"role": "user", "content": user})
            if i < len(answers) and i < len(turns) - 1:
                messages.append({"role": "assistant", "content": answers[i]})
        encoded = tok.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
    else:
        parts = [p for pair in zip(turns[:-1], answers) for p in pair] + [turns[-1]]
        encoded = tok("\n\n".join(parts), return_tensors="pt")
    return fitted_inputs(encoded, target, bench.max_new_tokens, f"The conversation up to turn {len(turns)}")


def _longest_prompt(bench: BenchRequest, target: LoadedModel, selection: Selection) -> int:
    """The most tokens any selected prompt may be sent with: its turns, and the target's earlier answers at
    most `max_new_tokens` each (prompts too long for the target are skipped later, so they do not count)."""
    longest = 0
    for item in selection.items:
        try:
            encoded = encode_turns(bench, target, item.turns, [""] * (len(item.turns) - 1))
        except InputError:
            continue
        longest = max(longest, int(encoded["input_ids"].shape[1]) + (len(item.turns) - 1) * bench.max_new_tokens)
    return longest


def run_suite(
    bench: BenchRequest,
    selection: Selection,
    store: ModelStore,
    clock: Clock = time.perf_counter,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[SuiteEvent]:
    """Measure every selected item as one comparison; the last event is 'done' and carries the report.

    `bench` gives the target, the arms and the timing settings shared by every prompt (its `prompt` is
    not used). Models load once; each arm warms up `warmup` times on the first prompt that fits, not once
    per prompt. Every prompt's runs are `runner.run_round`'s, as in a single comparison: the order of the
    arms rotates from one repetition to the next over the whole suite, and what else used the machine is
    watched during every counted run. A prompt that does not fit the target's context is skipped with its
    reason; one whose plain run fails is marked failed, and the suite goes on with the next.

    vLLM arms' servers start once, before the first prompt, serve every prompt, and are stopped when this
    generator ends, however it ends: done, stopped, an error, or closed by its caller.
    """
    endpoints: list[vllm_engine.Endpoint] = []
    try:
        yield from _run_suite(bench, selection, store, clock, should_stop, endpoints)
    finally:
        vllm_engine.stop_all(endpoints)


def _run_suite(
    bench: BenchRequest,
    selection: Selection,
    store: ModelStore,
    clock: Clock,
    should_stop: Callable[[], bool],
    endpoints: list[vllm_engine.Endpoint],
) -> Iterator[SuiteEvent]:
    device = models_mod.choose_device(bench.device)
    dtype = models_mod.choose_dtype(bench.dtype, device)
    bench = suite_bench(bench, device.type).resolved(device.type)
    n_items = len(selection.items)
    catalog.canonical_request(bench)  # refuses a bad reference before loading, naming its field
    messages: list[str] = []
    pace = Pace()

    def load(text: str, keep: set):
        return store.get(text, device, dtype, bench.device_map_auto, progress=messages.append, keep=keep)

    def loading(role: str, text: str) -> SuiteEvent:
        _, message, estimate = loading_step(role, text)  # a conversion under way says so, with its time left
        return SuiteEvent("status", message, 0, 0, 0, n_items, estimate)

    def relay_setup(steps: Generator[Event, None, object]) -> Generator[SuiteEvent, None, object]:
        """The vLLM set-up's status lines as the suite's, before any prompt; returns what it returns."""
        while True:
            try:
                step = next(steps)
            except StopIteration as end:
                return end.value
            yield SuiteEvent("status", step.message, 0, 0, 0, n_items)

    if "transformers" in bench.engines:
        yield loading("target", bench.target)
        target_key, target = load(bench.target, set())
    else:  # only servers run it: its tokenizer is enough here
        yield SuiteEvent("status", f"Reading the target {bench.target}'s tokenizer...", 0, 0, 0, n_items)
        target_key, target = ("tokenizer only",), models_mod.tokenizer_only(bench.target, messages.append)
    keep = {target_key}
    assistants: dict[str, LoadedModel] = {}
    for spec in bench.arms:
        if spec.engine != "transformers":
            continue
        if spec.strategy in paths.MODEL_STRATEGIES and spec.assistant not in assistants:
            yield loading("assistant", spec.assistant)
            key, assistants[spec.assistant] = load(spec.assistant, keep)
            keep.add(key)
    arms = build_arms(bench, target, assistants)
    engines_env = {"transformers": {"version": report_mod.transformers_version(), "in_this_process": True}} if (
        "transformers" in bench.engines) else {}
    if any(a.engine == "vllm" for a in bench.arms):
        # One server per vLLM arm for the whole suite, sized for its longest prompt; never one per prompt.
        drafts = yield from relay_setup(vllm_drafts(bench, messages, pace))
        engines_env["vllm"] = yield from relay_setup(vllm_setup(
            bench, target, drafts, models_mod.dtype_name(dtype), endpoints, pace, should_stop,
            prompt_tokens=_longest_prompt(bench, target, selection)))
        add_vllm_arms(arms, endpoints)
    described = {"target": target.describe()}
    for text, helper in assistants.items():
        described[f"assistant {text}"] = helper.describe()
    environment = report_mod.environment(device, models_mod.dtype_name(dtype), described)
    environment["load_messages"] = messages
    environment["engines"] = engines_env
    monitor = contention.Monitor(device)  # one window per counted run of every prompt; its record is live
    environment["contention"] = monitor.record
    suite = SuiteReport(
        selection=selection,
        request={k: v for k, v in bench.to_dict().items() if k != "prompt"},  # each prompt is in suite.prompts
        environment=environment,
        arm_names=[a.info.name for a in arms if a.info.assisted],  # each against its own engine's plain arm
        results=[PromptResult(item) for item in selection.items],
    )
    for wait in wait_for_conversions(pace, should_stop):  # another model's conversion would slow every run
        yield SuiteEvent("status", wait.message, 0, 0, 0, n_items, wait.eta_s)
    per_prompt = bench.repeats * len(arms)
    progress = Progress(total=bench.warmup * len(arms) + n_items * per_prompt, contention=monitor.record)
    began = clock()
    failed_arms: dict[int, str] = {}  # arms that failed their warm-up: not run on any prompt
    answers: dict[str, list[str]] = {}  # prompt id -> the plain arm's answers to its turns so far
    turn = 0  # counted rounds so far over the whole suite: the order keeps rotating from prompt to prompt

    progress.rough_s = estimate.suite_seconds(
        device.type, described["target"].get("parameters") or 0,
        [described[f"assistant {spec.assistant}"].get("parameters") or 0
         if spec.engine == "transformers" and spec.strategy in paths.MODEL_STRATEGIES and spec.assistant else 0
         for spec in bench.arms],
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

    def event(kind: str, message: str, position: int, prompt_done: bool = False, **words) -> SuiteEvent:
        suite.elapsed_s = clock() - began
        left, rough = eta()
        return SuiteEvent(kind, message, progress.done, progress.total, position, n_items, left, suite,
                          prompt_done, elapsed_s=suite.elapsed_s, eta_rough=rough, eta_busy=progress.busy(), **words)

    def relay(round_: Generator[Event, None, bool], position: int, item) -> Generator[SuiteEvent, None, bool]:
        """A round's events named by prompt, with the time left; returns whether a stop ended the round."""
        where = f"Prompt {position} of {n_items} ({item.id}, {item.category})"
        while True:
            try:
                step = next(round_)
            except StopIteration as end:
                return end.value
            if step.warmup and step.kind == "run":
                text = f"Warm-up on prompt {position} (not counted): {step.message}"
            else:
                text = f"{where}: {step.message}"
            yield event(step.kind, text, position, where=where, step=step.step, took_s=step.took_s,
                        warmup=step.warmup)

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
                inputs = encode_turns(bench, target, item.turns, earlier)
            except InputError as exc:
                result.status, result.reason = "skipped", str(exc)
                progress.total -= per_prompt
                yield event("status", f"Prompt {position} of {n_items} ({item.id}, {item.category}) skipped: {exc}",
                            position)
                continue
            result.prompt_tokens = int(inputs["input_ids"].shape[1])
            # This prompt's own arms: an assisted arm failing here is marked for this prompt only.
            # A vLLM arm whose server could not start keeps its sentence on every prompt.
            mine = [dataclasses.replace(a, info=dataclasses.replace(a.info, error=failed_arms.get(i, a.info.error)))
                    for i, a in enumerate(arms)]
            report = Report(
                request={**bench.to_dict(), "prompt": item.text},
                environment={"prompt_tokens": result.prompt_tokens},
                arms=[a.info for a in mine],
                planned_repeats=bench.repeats,
            )
            result.report, result.status = report, "running"
            before, stopped = progress.done, False
            try:
                if not warmed:
                    # One warm-up per arm for the whole suite, on the first prompt that fits.
                    for w in range(bench.warmup):
                        stopped = yield from relay(
                            run_round(bench, target, inputs, mine, report, w, True, clock, should_stop, progress),
                            position, item)
                        if stopped:
                            break
                    warmed = True
                    failed_arms = {i: a.info.error for i, a in enumerate(mine) if a.info.error}
                    progress.total -= progress.done
                    progress.done = before = 0
                for r in range(bench.repeats):
                    if stopped:
                        break
                    counted = run_round(bench, target, inputs, mine, report, r, False, clock, should_stop, progress,
                                        monitor, turn)
                    turn += 1  # a round that fails still took its place in the rotation
                    stopped = yield from relay(counted, position, item)
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
            if result.status == "measured":
                yield event("status", f"Prompt {position} of {n_items} ({item.id}, {item.category}) measured.",
                            position, prompt_done=True)
            plain = report.plain
            if plain:
                answers[item.prompt_id] = earlier + [plain[-1].text]
            if stopped:
                break
    finally:
        monitor.close()

    measured = sum(1 for r in suite.results if r.status in ("measured", "stopped"))
    skipped = sum(1 for r in suite.results if r.status == "skipped")
    failed = sum(1 for r in suite.results if r.status == "failed")
    if should_stop() and any(r.status in ("pending", "stopped") for r in suite.results):
        suite.status = "stopped"
        suite.message = f"Stopped after {measured} of {n_items} prompts; the figures use what was measured."
    else:
        suite.status = "complete"
        others = ", ".join(f"{count} {what}" for count, what in ((skipped, "skipped"), (failed, "failed")) if count)
        suite.message = f"Complete: {measured} of {n_items} prompts measured" + (
            f", {others} (see the reasons)." if others else "."
        )
    for result in suite.results:
        if result.status == "pending":
            result.status, result.reason = "not run", "the suite was stopped before this prompt."
    suite.elapsed_s = clock() - began
    yield SuiteEvent("done", suite.message, progress.done, progress.total, n_items, n_items, 0.0, suite,
                     elapsed_s=suite.elapsed_s)


def run_suite_to_report(bench: BenchRequest, selection: Selection, store: ModelStore, **kwargs) -> SuiteReport:
    """Run a suite to the end and return its report."""
    final = None
    for event in run_suite(bench, selection, store, **kwargs):
        final = event
    return final.report
