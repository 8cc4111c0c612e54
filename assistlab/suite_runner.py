"""A suite run: load once, warm each arm up once, then one interleaved comparison per selected prompt."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from . import catalog, explain
from . import models as models_mod
from . import report as report_mod
from .config import MODEL_STRATEGIES, BenchRequest
from .errors import AssistLabError, InputError, ResourceError
from .models import LoadedModel, ModelStore
from .report import ArmInfo, Report, RunRecord
from .runner import Clock, build_arms, encode_prompt, stoppable, timed_generate
from .suite import CPU_SUITE_DEFAULTS, CUDA_SUITE_DEFAULTS, PromptResult, Selection, SuiteReport


@dataclass
class SuiteEvent:
    """Progress of a suite: a status line, or a finished run with the suite report so far.

    `done`/`total` count timed runs including warm-up; `prompt` is the 1-based item being measured of
    `prompts`; `eta_s` is the time left estimated from the runs so far (None until one has finished).
    """

    kind: str  # "status", "run" or "done"
    message: str
    done: int
    total: int
    prompt: int
    prompts: int
    eta_s: float | None = None
    report: SuiteReport | None = None


def suite_bench(bench: BenchRequest, device_type: str) -> BenchRequest:
    """The suite's settings: empty fields take the suite defaults (shorter than a single comparison's)."""
    defaults = CUDA_SUITE_DEFAULTS if device_type == "cuda" else CPU_SUITE_DEFAULTS
    changes = {k: v for k, v in defaults.items() if getattr(bench, k) is None}
    return dataclasses.replace(bench, **changes) if changes else bench


def estimate_runs(bench: BenchRequest, selection: Selection, device_type: str = "cpu") -> dict:
    """How much work a suite is before it starts: timed runs, warm-up runs, tokens."""
    bench = suite_bench(bench, device_type).resolved(device_type)
    arms = 1 + len(bench.arms)
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
    inputs = {k: v.to(target.device) for k, v in encoded.items() if k in ("input_ids", "attention_mask")}
    length = int(inputs["input_ids"].shape[1])
    limit = target.context_length
    if limit and length + bench.max_new_tokens > limit:
        raise InputError(
            f"The conversation up to turn {len(turns)} is {length} tokens and {bench.max_new_tokens} new tokens "
            f"are asked for, but {target.name} reads at most {limit} tokens."
        )
    return inputs


def _failure(exc: Exception) -> tuple[str, bool]:
    oom = isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )
    if isinstance(exc, AssistLabError):
        return str(exc), oom
    if oom:
        return "ran out of memory; lower max_new_tokens, use a smaller model, or leave out long prompts.", True
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"failed: {type(exc).__name__}: {detail}", False


def _record(index: int, repetition: int, timed, inputs: dict, target: LoadedModel) -> RunRecord:
    prompt_len = inputs["input_ids"].shape[1]
    new_ids = timed.output[0, prompt_len:].tolist()
    times = timed.streamer.times
    return RunRecord(
        arm=index, repetition=repetition, latency_s=timed.latency, new_tokens=len(new_ids),
        ttft_s=times[0] if times else None, step_times=times, step_tokens=timed.streamer.tokens,
        drafted=timed.drafted, accepted=timed.accepted, token_ids=new_ids,
        text=target.tokenizer.decode(new_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False),
        memory_bytes=timed.memory, wall_window=timed.wall_window,
    )


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
    per prompt. A prompt that does not fit the target's context is skipped with its reason.
    """
    device = models_mod.choose_device(bench.device)
    dtype = models_mod.choose_dtype(bench.dtype, device)
    bench = suite_bench(bench, device.type).resolved(device.type)
    n_items = len(selection.items)
    for text in [bench.target] + [a.assistant for a in bench.arms if a.assistant]:
        catalog.resolve(text)
    messages: list[str] = []

    def load(text: str, keep: set):
        return store.get(text, device, dtype, bench.device_map_auto, progress=messages.append, keep=keep)

    yield SuiteEvent("status", f"Loading the target {bench.target}...", 0, 0, 0, n_items)
    target_key, target = load(bench.target, set())
    keep = {target_key}
    assistants: dict[str, LoadedModel] = {}
    for spec in bench.arms:
        if spec.strategy in MODEL_STRATEGIES and spec.assistant not in assistants:
            yield SuiteEvent("status", f"Loading the assistant {spec.assistant}...", 0, 0, 0, n_items)
            key, assistants[spec.assistant] = load(spec.assistant, keep)
            keep.add(key)
    arms = build_arms(bench, target, assistants)
    described = {"target": target.describe()}
    for text, helper in assistants.items():
        described[f"assistant {text}"] = helper.describe()
    environment = report_mod.environment(device, models_mod.dtype_name(dtype), described)
    environment["load_messages"] = messages
    suite = SuiteReport(
        selection=selection,
        request={k: v for k, v in bench.to_dict().items() if k != "prompt"},  # each prompt is in suite.prompts
        environment=environment,
        arm_names=[a.info.name for a in arms[1:]],
        results=[PromptResult(item) for item in selection.items],
    )
    per_prompt = bench.repeats * len(arms)
    total = bench.warmup * len(arms) + n_items * per_prompt
    done = 0
    started = began = clock()
    failed_arms: dict[int, str] = {}
    answers: dict[str, list[str]] = {}  # prompt id -> the plain arm's answers to its turns so far

    def eta() -> float | None:
        counted = done
        return (clock() - started) / counted * (total - counted) if counted else None

    def event(kind: str, message: str, position: int) -> SuiteEvent:
        suite.elapsed_s = clock() - began
        return SuiteEvent(kind, message, done, total, position, n_items, eta(), suite)

    warmed = bench.warmup == 0
    for position, result in enumerate(suite.results, start=1):
        item = result.item
        if should_stop():
            break
        earlier = answers.get(item.prompt_id, [])
        if item.turn > 1 and len(earlier) < item.turn - 1:
            result.status, result.reason = "skipped", f"turn {item.turn - 1} of this prompt was not measured."
            total -= per_prompt
            yield event("status", f"Prompt {position} of {n_items} ({item.id}) skipped: {result.reason}", position)
            continue
        try:
            inputs = encode_turns(bench, target, item.turns, earlier)
        except InputError as exc:
            result.status, result.reason = "skipped", str(exc)
            total -= per_prompt
            yield event("status", f"Prompt {position} of {n_items} ({item.id}, {item.category}) skipped: {exc}", position)
            continue
        result.prompt_tokens = int(inputs["input_ids"].shape[1])
        if not warmed:
            # One warm-up per arm for the whole suite, on the first prompt that fits.
            for w in range(bench.warmup):
                for index, arm in enumerate(arms):
                    if should_stop():
                        break
                    if index in failed_arms:
                        done += 1
                        continue
                    if bench.do_sample:
                        torch.manual_seed(bench.seed + w)
                    arm.configure()
                    kwargs, criterion = stoppable(arm.kwargs, should_stop)  # a Stop ends the run within a step
                    try:
                        timed = timed_generate(target, inputs, kwargs, clock, arm.info.assisted)
                    except Exception as exc:
                        reason, oom = _failure(exc)
                        if oom:
                            models_mod.release_memory()
                        if index == 0:
                            suite.status, suite.message = "failed", f"The plain (unassisted) warm-up run {reason}"
                            raise (ResourceError if oom else AssistLabError)(suite.message) from None
                        failed_arms[index] = reason
                        done += 1
                        continue
                    if criterion.fired:
                        break  # cut short by a stop; the next check of should_stop ends the suite
                    done += 1
                    yield event("run", f"Warm-up {w + 1}/{bench.warmup}: {arm.info.name}, {timed.latency:.2f} s", position)
            warmed = True
            started = clock()  # the time left is estimated from counted runs only
            total -= done
            done = 0
        report = Report(
            request={**bench.to_dict(), "prompt": item.text},
            environment={"prompt_tokens": result.prompt_tokens},
            arms=[ArmInfo(a.info.name, a.info.strategy, a.info.spec, failed_arms.get(i), a.info.settings)
                  for i, a in enumerate(arms)],
            planned_repeats=bench.repeats,
        )
        result.report, result.status = report, "running"
        stopped, attempted = False, 0
        for repetition in range(bench.repeats):
            for index, arm in enumerate(arms):
                if should_stop():
                    stopped = True
                    break
                info = report.arms[index]
                attempted += 1
                if info.error:
                    done += 1
                    continue
                if bench.do_sample:
                    torch.manual_seed(bench.seed + repetition)
                arm.configure()
                kwargs, criterion = stoppable(arm.kwargs, should_stop)  # a Stop ends the run within a step
                try:
                    timed = timed_generate(target, inputs, kwargs, clock, arm.info.assisted)
                except Exception as exc:
                    reason, oom = _failure(exc)
                    if oom:
                        models_mod.release_memory()
                    info.error = reason
                    done += 1
                    yield event("run", f"Prompt {position} of {n_items}: {info.name} {reason}", position)
                    if index == 0:
                        break
                    continue
                if criterion.fired:  # cut short: not a measurement of the work asked for
                    stopped = True
                    break
                run = _record(index, repetition, timed, inputs, target)
                report.runs.append(run)
                report.segments[index] = explain.text_segments(target.tokenizer, run)
                done += 1
                left = eta()
                yield event(
                    "run",
                    f"Prompt {position} of {n_items} ({item.id}, {item.category}): {info.name}, repetition "
                    f"{repetition + 1}/{bench.repeats}, {timed.latency:.2f} s"
                    + (f"; about {_minutes(left)} left" if left is not None else ""),
                    position,
                )
            if stopped or report.arms[0].error:
                break
        if report.arms[0].error:
            result.status, result.reason = "failed", f"The plain run {report.arms[0].error}"
            total -= per_prompt - attempted
        elif stopped:
            result.status = "stopped"
        else:
            result.status = "measured"
        result.finish()
        plain = report.plain
        if plain:
            answers[item.prompt_id] = earlier + [plain[-1].text]
        if stopped:
            break

    measured = sum(1 for r in suite.results if r.status in ("measured", "stopped"))
    skipped = sum(1 for r in suite.results if r.status == "skipped")
    if should_stop() and any(r.status in ("pending", "stopped") for r in suite.results):
        suite.status = "stopped"
        suite.message = f"Stopped after {measured} of {n_items} prompts; the figures use what was measured."
    else:
        suite.status = "complete"
        suite.message = f"Complete: {measured} of {n_items} prompts measured" + (
            f", {skipped} skipped (see the reasons)." if skipped else "."
        )
    for result in suite.results:
        if result.status == "pending":
            result.status, result.reason = "not run", "the suite was stopped before this prompt."
    suite.elapsed_s = clock() - began
    yield SuiteEvent("done", suite.message, done, total, n_items, n_items, 0.0, suite)


def run_suite_to_report(bench: BenchRequest, selection: Selection, store: ModelStore, **kwargs) -> SuiteReport:
    """Run a suite to the end and return its report."""
    final = None
    for event in run_suite(bench, selection, store, **kwargs):
        final = event
    return final.report
