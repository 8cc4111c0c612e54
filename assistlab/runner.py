"""Warm-up, then interleaved timed runs of every arm; yields after each run so callers can stream and stop."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from transformers.generation.streamers import BaseStreamer

from . import bundled, catalog, explain
from . import models as models_mod
from . import report as report_mod
from . import strategies
from .config import MODEL_STRATEGIES, BenchRequest
from .errors import AssistLabError, InputError, ResourceError
from .models import LoadedModel, ModelStore
from .report import ArmInfo, Report, RunRecord

Clock = Callable[[], float]


# Warnings transformers repeats on every call for settings we chose on purpose: eos_token_id=-1 (fixed
# length, like the reference benchmark) and the assistant's own generation config during drafting.
# Universal assisted generation decodes drafts with the tokenizer's defaults, which warns once per tokenizer.
_EXPECTED_WARNINGS = (
    "should consist of positive integers",
    "Passing `generation_config` together with",
    "Ignoring clean_up_tokenization_spaces",
)


class _QuietExpected(logging.Filter):
    """Drop transformers' per-call warnings about settings AssistLab chose deliberately."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(part in message for part in _EXPECTED_WARNINGS)


for _name in ("generation.utils", "generation.configuration_utils", "tokenization_utils_tokenizers"):
    logging.getLogger(f"transformers.{_name}").addFilter(_QuietExpected())


@dataclass
class Event:
    """What the runner reports: a status line, or a finished run with the report so far.

    `done` and `total` count runs including warm-up, for progress bars.
    """

    kind: str  # "status", "run" or "done"
    message: str
    done: int
    total: int
    report: Report | None = None
    warmup: bool = False


class StepStreamer(BaseStreamer):
    """Records when each group of tokens arrives. The first put() is the prompt and is skipped.

    On CUDA each put() follows a copy to the host, which waits for the GPU, so the clock reading is honest.
    """

    def __init__(self, clock: Clock, start: float):
        self.clock, self.start = clock, start
        self.times: list[float] = []
        self.tokens: list[int] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(self.clock() - self.start)
        self.tokens.append(int(value.numel()))

    def end(self) -> None:
        pass


@contextlib.contextmanager
def observe_drafts(model) -> Iterator[tuple[list[int], list[int]]]:
    """Count drafted and accepted tokens per verification step without changing what is generated.

    transformers calls `update_candidate_strategy(input_ids, scores, num_matches)` once per step on its
    candidate generator; `scores` holds one row per candidate plus the bonus token, in target tokens.
    """
    drafted: list[int] = []
    accepted: list[int] = []
    original = model._get_candidate_generator

    def wrapped(*args, **kwargs):
        generator = original(*args, **kwargs)
        update = generator.update_candidate_strategy

        def counting_update(input_ids, scores, num_matches):
            drafted.append(int(scores.shape[1]) - 1)
            accepted.append(int(num_matches))
            return update(input_ids, scores, num_matches)

        generator.update_candidate_strategy = counting_update
        return generator

    model._get_candidate_generator = wrapped
    try:
        yield drafted, accepted
    finally:
        del model._get_candidate_generator  # the instance attribute; the class method shows through again


def _memory_now(device: torch.device) -> int:
    if device.type == "cuda":
        return sum(int(torch.cuda.max_memory_allocated(i)) for i in range(torch.cuda.device_count()))
    import psutil

    return int(psutil.Process().memory_info().rss)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


@dataclass
class Timed:
    """What one timed generate() call produced."""

    latency: float
    streamer: StepStreamer
    drafted: list[int]
    accepted: list[int]
    output: torch.Tensor
    memory: int
    wall_window: tuple[float, float]  # Unix times around the call, to show that no two runs overlapped


def timed_generate(target: LoadedModel, inputs: dict, kwargs: dict, clock: Clock, assisted: bool) -> Timed:
    """One generate() call between two clock readings, with the GPU drained before each."""
    model, device = target.model, target.device
    cuda = device.type == "cuda"
    if cuda:
        models_mod.synchronize_all()
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)
    observer = observe_drafts(model) if assisted else contextlib.nullcontext(([], []))
    with observer as (drafted, accepted), torch.inference_mode():
        wall_start = time.time()
        start = clock()
        streamer = StepStreamer(clock, start)
        output = model.generate(**inputs, **kwargs, streamer=streamer)
        if cuda:
            models_mod.synchronize_all()
        latency = clock() - start
        wall_end = time.time()
    return Timed(latency, streamer, drafted, accepted, output, _memory_now(device), (wall_start, wall_end))


def encode_prompt(request: BenchRequest, target: LoadedModel) -> dict:
    """Token ids for the prompt: through the chat template when asked for and the target has one."""
    tok = target.tokenizer
    if request.chat_template and getattr(tok, "chat_template", None):
        encoded = tok.apply_chat_template(
            [{"role": "user", "content": request.prompt}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
        )
    else:
        encoded = tok(request.prompt, return_tensors="pt")
    inputs = {k: v.to(target.device) for k, v in encoded.items() if k in ("input_ids", "attention_mask")}
    length = int(inputs["input_ids"].shape[1])
    if length == 0:
        raise InputError("The prompt became no tokens at all; type some text.")
    limit = target.context_length
    if limit and length + request.max_new_tokens > limit:
        raise InputError(
            f"The prompt is {length} tokens and {request.max_new_tokens} new tokens are asked for, but "
            f"{target.name} reads at most {limit} tokens; shorten the prompt or lower max_new_tokens."
        )
    return inputs


@dataclass
class _Failure:
    reason: str
    oom: bool


def _attempt(target: LoadedModel, inputs: dict, arm: _Arm, clock: Clock) -> Timed | _Failure:
    """timed_generate, or a _Failure that says why; one arm failing must not lose the others' results."""
    try:
        return timed_generate(target, inputs, arm.kwargs, clock, arm.info.assisted)
    except Exception as exc:
        if isinstance(exc, AssistLabError):
            failure = _Failure(str(exc), False)
        elif _is_oom(exc):
            failure = _Failure(
                "ran out of memory; lower max_new_tokens, use a smaller model or dtype, or free the GPU.", True
            )
        else:
            detail = str(exc).splitlines()[0][:200] if str(exc) else ""
            failure = _Failure(f"failed: {type(exc).__name__}: {detail}", False)
    # Outside the except block the traceback, and the tensors its frames hold, are gone.
    if failure.oom:
        models_mod.release_memory()
    return failure


@dataclass
class _Arm:
    info: ArmInfo
    kwargs: dict
    configure: Callable[[], None]


def _loading_message(role: str, text: str) -> str:
    if bundled.is_bundled(text) and bundled.needs_conversion(text):
        return (
            f"Preparing the bundled {role} {text} for first use: converting it once to safetensors "
            f"(a minute or two on a CPU; later starts skip this)..."
        )
    return f"Loading the {role} {text}..."


def run_benchmark(
    request: BenchRequest,
    store: ModelStore,
    clock: Clock = time.perf_counter,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[Event]:
    """Load, warm up, then time every arm `repeats` times, interleaved. The last event is 'done'."""
    device = models_mod.choose_device(request.device)
    dtype = models_mod.choose_dtype(request.dtype, device)
    request = request.resolved(device.type)
    messages: list[str] = []
    request = catalog.canonical_request(request)  # refuses a bad reference before loading; names as shown

    def load(text: str, keep: set) -> tuple[tuple, LoadedModel]:
        return store.get(text, device, dtype, request.device_map_auto, progress=messages.append, keep=keep)

    yield Event("status", _loading_message("target", request.target), 0, 0)
    target_key, target = load(request.target, set())
    keep = {target_key}
    assistants: dict[str, LoadedModel] = {}
    for spec in request.arms:
        if spec.strategy in MODEL_STRATEGIES and spec.assistant not in assistants:
            yield Event("status", _loading_message("assistant", spec.assistant), 0, 0)
            key, assistants[spec.assistant] = load(spec.assistant, keep)
            keep.add(key)

    inputs = encode_prompt(request, target)
    strategies.check_context(request, inputs["input_ids"][0].tolist(), target, assistants)
    base = strategies.base_kwargs(request, target)
    arms = [_Arm(ArmInfo("plain", "plain"), dict(base), lambda: None)]
    for spec in request.arms:
        helper = assistants.get(spec.assistant) if spec.assistant else None
        strategy = strategies.resolve_strategy(spec, target, helper)
        name = spec.label if spec.strategy != "auto" else spec.label.replace("auto:", f"{strategy}:", 1)
        names = {a.info.name for a in arms}
        base_name, copy = name, 1
        while name in names:  # two arms with the same settings still need distinct names
            copy += 1
            name = f"{base_name} #{copy}"
        kwargs = {**base, **strategies.arm_kwargs(spec, strategy, target, helper)}
        arms.append(
            _Arm(
                ArmInfo(name, strategy, spec.to_dict()),
                kwargs,
                lambda s=spec, st=strategy, h=helper: strategies.configure_drafter(s, st, target, h),
            )
        )

    described = {"target": target.describe()}
    for text, helper in assistants.items():
        described[f"assistant {text}"] = helper.describe()
    report = Report(
        request=request.to_dict(),
        environment=report_mod.environment(device, models_mod.dtype_name(dtype), described),
        arms=[a.info for a in arms],
        planned_repeats=request.repeats,
    )
    report.environment["prompt_tokens"] = int(inputs["input_ids"].shape[1])
    report.environment["load_messages"] = messages
    total = (request.warmup + request.repeats) * len(arms)
    done = 0
    schedule = [(True, w) for w in range(request.warmup)] + [(False, r) for r in range(request.repeats)]

    for warmup, repetition in schedule:
        for index, arm in enumerate(arms):
            if should_stop():
                report.status = "stopped"
                report.message = f"Stopped after {len(report.plain)} of {request.repeats} repetitions."
                yield Event("done", report.message, done, total, report)
                return
            if arm.info.error:
                done += 1
                continue
            if request.do_sample:
                torch.manual_seed(request.seed + repetition)
            arm.configure()
            outcome = _attempt(target, inputs, arm, clock)
            if isinstance(outcome, _Failure):
                arm.info.error = outcome.reason
                if index == 0:
                    report.status = "failed"
                    report.message = f"The plain (unassisted) run {outcome.reason}"
                    raise (ResourceError if outcome.oom else AssistLabError)(report.message)
                done += 1
                yield Event("run", f"{arm.info.name} {outcome.reason}", done, total, report, warmup)
                continue
            done += 1
            if not warmup:
                prompt_len = inputs["input_ids"].shape[1]
                new_ids = outcome.output[0, prompt_len:].tolist()
                times = outcome.streamer.times
                report.runs.append(
                    RunRecord(
                        arm=index,
                        repetition=repetition,
                        latency_s=outcome.latency,
                        new_tokens=len(new_ids),
                        ttft_s=times[0] if times else None,
                        step_times=times,
                        step_tokens=outcome.streamer.tokens,
                        drafted=outcome.drafted,
                        accepted=outcome.accepted,
                        token_ids=new_ids,
                        text=target.tokenizer.decode(
                            new_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
                        ),
                        memory_bytes=outcome.memory,
                        wall_window=outcome.wall_window,
                    )
                )
                report.segments[index] = explain.text_segments(target.tokenizer, report.runs[-1])
            phase = f"warm-up {repetition + 1}/{request.warmup}" if warmup else f"repetition {repetition + 1}/{request.repeats}"
            yield Event("run", f"{arm.info.name}: {phase}, {outcome.latency:.2f} s", done, total, report, warmup)

    # The cost model: one untimed, instrumented run per assisted arm, after every timed run.
    for index, arm in enumerate(arms):
        if arm.info.assisted and not arm.info.error and not should_stop():
            yield Event("status", f"Measuring the drafting cost of {arm.info.name} (untimed)...", done, total, report)
            if request.do_sample:
                torch.manual_seed(request.seed)
            report.probes[index] = explain.probe_arm(target, inputs, arm.kwargs, arm.configure, clock)

    failed = [a.info.name for a in arms if a.info.error]
    report.status = "complete"
    report.message = "Complete." if not failed else f"Complete, but {', '.join(failed)} failed."
    yield Event("done", report.message, done, total, report)


def run_to_report(request: BenchRequest, store: ModelStore, **kwargs) -> Report:
    """Run a comparison to the end and return its report."""
    final = None
    for event in run_benchmark(request, store, **kwargs):
        final = event
    return final.report
