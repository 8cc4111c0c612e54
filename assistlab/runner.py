"""Warm-up, then interleaved timed runs of every arm; yields after each run so callers can stream and stop."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import torch
from transformers.generation.streamers import BaseStreamer

from . import bundled, catalog, explain
from . import models as models_mod
from . import report as report_mod
from . import strategies
from .config import CONTINUATION_PROMPT, MODEL_STRATEGIES, BenchRequest
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

    `done` and `total` count runs including warm-up, for progress bars. A "status" event comes before each
    step starts (loading, converting, each run, each drafting-cost measurement) and names that step, so what
    a person reads is what is happening now, not what just finished; while a model loads it repeats every
    few seconds with the time updated.
    """

    kind: str  # "status", "run" or "done"
    message: str
    done: int
    total: int
    report: Report | None = None
    warmup: bool = False
    step: str = ""  # the step now under way, in words: "Warm-up of plain (not counted)", "Repetition 2 of 3: ..."
    elapsed_s: float | None = None  # seconds since the comparison started
    # Estimated seconds left: for the whole comparison once a run has been timed (from the runs so far); while
    # a bundled model is converted, for that conversion (a fixed measured estimate); otherwise None.
    eta_s: float | None = None


HEARTBEAT_S = 2.0  # how often a loading step reports its elapsed time while the model loads


class Pace:
    """Elapsed time, and the time left estimated from how long each arm's runs have taken so far.

    The clock is a parameter so tests can give it fixed costs; it is not the benchmark's clock.
    """

    def __init__(self, clock: Clock = time.monotonic):
        self.clock = clock
        self.start = clock()
        self.seconds: dict[int, list[float]] = {}

    def elapsed(self) -> float:
        return self.clock() - self.start

    def record(self, arm: int, seconds: float) -> None:
        self.seconds.setdefault(arm, []).append(seconds)

    def per_run(self, arm: int) -> float | None:
        """One run of `arm`: the mean of its runs after the first (the first carries start-up costs), else the first."""
        runs = self.seconds.get(arm) or []
        later = runs[1:] or runs
        return sum(later) / len(later) if later else None

    def left(self, runs_left: int, probes_left: int = 0, assisted: tuple[int, ...] = ()) -> float | None:
        """Seconds for `runs_left` runs spread over the arms and `probes_left` drafting-cost runs; None before any run."""
        known = {arm: t for arm in self.seconds if (t := self.per_run(arm)) is not None}
        if not known:
            return None
        per_run = sum(known.values()) / len(known)
        drafting = [known[a] for a in assisted if a in known]
        per_probe = sum(drafting) / len(drafting) if drafting else per_run
        return max(0, runs_left) * per_run + max(0, probes_left) * per_probe


def _while_loading(call: Callable[[], object], heartbeat: Callable[[], Event]) -> Generator[Event, None, object]:
    """Run `call` in a worker thread, yielding `heartbeat()` every few seconds until it returns; its result."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="assistlab-load") as pool:
        future = pool.submit(call)
        while True:
            try:
                return future.result(timeout=HEARTBEAT_S)
            except concurrent.futures.TimeoutError:
                yield heartbeat()


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


def uses_chat_template(request: BenchRequest, target: LoadedModel) -> bool:
    """Whether the prompt goes through the target's chat template: asked for, and the target has one."""
    return bool(request.chat_template and getattr(target.tokenizer, "chat_template", None))


def prompt_note(request: BenchRequest, target: LoadedModel) -> str | None:
    """A sentence for a person when the target continues the prompt rather than answering it; None otherwise."""
    if uses_chat_template(request, target):
        return None
    if getattr(target.tokenizer, "chat_template", None):
        why = "The chat template was turned off"
    else:
        why = f"{target.name} has no chat template (it is a base model, not a chat model)"
    return (
        f"{why}, so it continues the prompt as text rather than answering it. A prompt that begins the text you "
        f"want reads better, for example “{CONTINUATION_PROMPT}”."
    )


def encode_prompt(request: BenchRequest, target: LoadedModel) -> dict:
    """Token ids for the prompt: through the chat template when asked for and the target has one."""
    tok = target.tokenizer
    if uses_chat_template(request, target):
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


def _loading_step(role: str, text: str) -> tuple[str, str, float | None]:
    """(step, message, estimated seconds) for loading one model; the estimate only for a first conversion."""
    if bundled.is_bundled(text) and bundled.needs_conversion(text):
        estimate = bundled.lookup(text).convert_seconds
        return (
            f"Converting the bundled {role} (first use only)",
            f"Preparing the bundled {role} {text} for first use: converting it once to safetensors "
            f"(about {estimate:.0f} s on two CPU cores; later starts skip this)...",
            estimate,
        )
    return f"Loading the {role}", f"Loading the {role} {text}...", None


def _run_step(name: str, warmup: bool, repetition: int, request: BenchRequest) -> tuple[str, str]:
    """(step, message) for the run about to start."""
    if warmup:
        count = f" {repetition + 1} of {request.warmup}" if request.warmup > 1 else ""
        return f"Warm-up{count} of {name} (not counted)", f"Warming up {name} (not counted)..."
    return (f"Repetition {repetition + 1} of {request.repeats}: {name}",
            f"Timing {name}, repetition {repetition + 1} of {request.repeats}...")


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
    pace = Pace()
    messages: list[str] = []
    for text in [request.target] + [a.assistant for a in request.arms if a.assistant]:
        catalog.resolve(text)  # refuse a bad reference before loading anything

    def load(role: str, text: str, keep: set) -> Generator[Event, None, tuple[tuple, LoadedModel]]:
        """Load one model, reporting the step and its time every few seconds while it loads."""
        step, message, estimate = _loading_step(role, text)
        began = pace.elapsed()

        def status() -> Event:
            # Past the estimate, say "a few seconds" rather than nothing or a negative time.
            left = None if estimate is None else max(5.0, estimate - (pace.elapsed() - began))
            return Event("status", message, 0, 0, step=step, elapsed_s=pace.elapsed(), eta_s=left)

        yield status()
        return (yield from _while_loading(
            lambda: store.get(text, device, dtype, request.device_map_auto, progress=messages.append, keep=keep),
            status,
        ))

    target_key, target = yield from load("target", request.target, set())
    keep = {target_key}
    assistants: dict[str, LoadedModel] = {}
    for spec in request.arms:
        if spec.strategy in MODEL_STRATEGIES and spec.assistant not in assistants:
            key, assistants[spec.assistant] = yield from load("assistant", spec.assistant, keep)
            keep.add(key)

    inputs = encode_prompt(request, target)
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
    report.environment["chat_template"] = uses_chat_template(request, target)
    report.environment["prompt_note"] = prompt_note(request, target)
    report.environment["load_messages"] = messages
    total = (request.warmup + request.repeats) * len(arms)
    done = 0
    assisted = tuple(i for i, a in enumerate(arms) if a.info.assisted)

    def eta(runs_left: int, probes_left: int = len(assisted)) -> float | None:
        return pace.left(runs_left, probes_left, assisted)
    schedule = [(True, w) for w in range(request.warmup)] + [(False, r) for r in range(request.repeats)]

    for warmup, repetition in schedule:
        for index, arm in enumerate(arms):
            if should_stop():
                report.status = "stopped"
                report.message = f"Stopped after {len(report.plain)} of {request.repeats} repetitions."
                yield Event("done", report.message, done, total, report, step="Stopped",
                            elapsed_s=pace.elapsed(), eta_s=0.0)
                return
            if arm.info.error:
                done += 1
                continue
            step, message = _run_step(arm.info.name, warmup, repetition, request)
            yield Event("status", message, done, total, None, warmup, step=step, elapsed_s=pace.elapsed(),
                        eta_s=eta(total - done))
            if request.do_sample:
                torch.manual_seed(request.seed + repetition)
            arm.configure()
            began = pace.elapsed()
            outcome = _attempt(target, inputs, arm, clock)
            if not isinstance(outcome, _Failure):
                pace.record(index, pace.elapsed() - began)
            if isinstance(outcome, _Failure):
                arm.info.error = outcome.reason
                if index == 0:
                    report.status = "failed"
                    report.message = f"The plain (unassisted) run {outcome.reason}"
                    raise (ResourceError if outcome.oom else AssistLabError)(report.message)
                done += 1
                yield Event("run", f"{arm.info.name} {outcome.reason}", done, total, report, warmup, step=step,
                            elapsed_s=pace.elapsed(), eta_s=eta(total - done))
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
            yield Event("run", f"{arm.info.name}: {phase}, {outcome.latency:.2f} s", done, total, report, warmup,
                        step=step, elapsed_s=pace.elapsed(), eta_s=eta(total - done))

    # The cost model: one untimed, instrumented run per assisted arm, after every timed run.
    probing = [(index, arm) for index, arm in enumerate(arms) if arm.info.assisted and not arm.info.error]
    for count, (index, arm) in enumerate(probing, start=1):
        if should_stop():
            break
        step = f"Measuring the drafting cost, {count} of {len(probing)}: {arm.info.name} (untimed)"
        yield Event("status", f"{step}...", done, total, report, step=step, elapsed_s=pace.elapsed(),
                    eta_s=eta(0, len(probing) - count + 1))
        if request.do_sample:
            torch.manual_seed(request.seed)
        report.probes[index] = explain.probe_arm(target, inputs, arm.kwargs, arm.configure, clock)

    failed = [a.info.name for a in arms if a.info.error]
    report.status = "complete"
    report.message = "Complete." if not failed else f"Complete, but {', '.join(failed)} failed."
    yield Event("done", report.message, done, total, report, step="Complete", elapsed_s=pace.elapsed(), eta_s=0.0)


def run_to_report(request: BenchRequest, store: ModelStore, **kwargs) -> Report:
    """Run a comparison to the end and return its report."""
    final = None
    for event in run_benchmark(request, store, **kwargs):
        final = event
    return final.report
