"""Warm-up, then interleaved timed runs of every arm; yields after each run so callers can stream and stop."""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import gc
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from ..config import CONTINUATION_PROMPT, MIN_PRECISION_REPEATS, BenchRequest
from ..engines import catalog
from ..engines.transformers import bundled, generation, hooks, paths
from ..engines.transformers import models as models_mod
from ..engines.transformers.models import LoadedModel, ModelStore
from ..engines.vllm import engine as vllm_engine
from ..engines.vllm import server as vllm_server
from ..errors import AssistLabError, EngineError, InputError, ResourceError
from ..results import busy as busy_mod
from ..results import estimate, explain, stats
from ..results import report as report_mod
from ..results.events import Event
from ..results.report import ArmInfo, Report, RunRecord
from . import contention

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


HEARTBEAT_S = 2.0  # how often a loading step reports its elapsed time while the model loads


class Pace:
    """Elapsed time, and the time left estimated from how long each arm's runs have taken so far.

    Each arm's pace is the median of its runs after the first (the first carries start-up costs), so one run
    slowed by a burst of other work does not move it; and it moves by at most PACE_STEP per run (an arm's
    first pace starts from the other arms'), so the time left never leaps from one progress line to the next.
    The clock is a parameter so tests can give it fixed costs; it is not the benchmark's clock.
    """

    PACE_STEP = 1.4  # the most one run may change an arm's pace, either way

    def __init__(self, clock: Clock = time.monotonic):
        self.clock = clock
        self.start = clock()
        self.seconds: dict[int, list[float]] = {}
        self.paces: dict[int, float] = {}  # each arm's smoothed seconds per run

    def elapsed(self) -> float:
        return self.clock() - self.start

    def record(self, arm: int, seconds: float) -> None:
        runs = self.seconds.setdefault(arm, [])
        runs.append(seconds)
        later = sorted(runs[1:] or runs)
        middle = len(later) // 2
        measured = later[middle] if len(later) % 2 else (later[middle - 1] + later[middle]) / 2
        others = [p for a, p in self.paces.items() if a != arm]
        before = self.paces.get(arm, sum(others) / len(others) if others else measured)
        self.paces[arm] = min(max(measured, before / self.PACE_STEP), before * self.PACE_STEP)

    def per_run(self, arm: int) -> float | None:
        """One run of `arm`, as smoothed over its runs so far; None before its first."""
        return self.paces.get(arm)

    def left(self, runs_left: int, probes_left: int = 0, assisted: tuple[int, ...] = ()) -> float | None:
        """Seconds for `runs_left` runs spread over the arms and `probes_left` drafting-cost runs; None before any run."""
        known = {arm: t for arm in self.seconds if (t := self.per_run(arm)) is not None}
        if not known:
            return None
        per_run = sum(known.values()) / len(known)
        drafting = [known[a] for a in assisted if a in known]
        per_probe = sum(drafting) / len(drafting) if drafting else per_run
        return max(0, runs_left) * per_run + max(0, probes_left) * per_probe


def _while_loading(call: Callable[[], object], heartbeat: Callable[[], Event],
                   cancel: Callable[[], None] | None = None) -> Generator[Event, None, object]:
    """Run `call` in a worker thread, yielding `heartbeat()` every few seconds until it returns; its result.

    The worker runs in a copy of this thread's context, so it sees the GPUs this comparison holds
    (models.placed_on). When the wait is abandoned (the generator closed, Ctrl-C), `cancel()` tells the
    worker to give up before the pool waits for it.
    """
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="assistlab-load") as pool:
        future = pool.submit(context.run, call)
        try:
            while True:
                try:
                    return future.result(timeout=HEARTBEAT_S)
                except concurrent.futures.TimeoutError:
                    yield heartbeat()
        except BaseException:
            if cancel is not None:
                cancel()
            raise


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
    memory: int | None
    wall_window: tuple[float, float]  # Unix times around the call, to show that no two runs overlapped
    counts: dict | None = None  # a server's speculative-decoding counters for this run (another engine's arm)
    remote: bool = False  # timed through a server rather than generate() in this process


def timed_generate(
    target: LoadedModel,
    inputs: dict,
    kwargs: dict,
    clock: Clock,
    assisted: bool,
    monitor: contention.Monitor | None = None,
) -> Timed:
    """One generate() call between two clock readings, with the GPU drained before each.

    The garbage collector is collected before and paused during the call, so a collection never lands
    inside one arm's timing. `monitor`, when given, notes what other processes used during the call. An
    assisted run goes through its own proxy of the model (see hooks), so its draft counts are its own even
    when another run uses the same cached model.
    """
    model, device = target.model, target.device
    cuda = device.type == "cuda"
    if cuda:
        models_mod.synchronize_all()
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)
    counted = hooks.instrumented(model) if assisted else contextlib.nullcontext((model, hooks.DraftTrace()))
    watched = monitor.window() if monitor is not None else contextlib.nullcontext()
    with counted as (runnable, trace), torch.inference_mode(), _collector_paused(), watched:
        wall_start = time.time()
        start = clock()
        streamer = StepStreamer(clock, start)
        output = runnable.generate(**inputs, **kwargs, streamer=streamer)
        if cuda:
            models_mod.synchronize_all()
        latency = clock() - start
        wall_end = time.time()
    return Timed(latency, streamer, trace.drafted, trace.accepted, output, _memory_now(device), (wall_start, wall_end))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """gc.collect(), then no automatic collection until the block ends; the previous state comes back."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
    return fitted_inputs(encoded, target, request.max_new_tokens)


def fitted_inputs(encoded, target: LoadedModel, max_new_tokens: int, what: str = "The prompt") -> dict:
    """The tokenizer's output on the target's device, refused (naming `what`) when it is empty or when it and
    the new tokens do not fit the target's context."""
    inputs = {k: v.to(target.device) for k, v in encoded.items() if k in ("input_ids", "attention_mask")}
    length = int(inputs["input_ids"].shape[1])
    if length == 0:
        raise InputError(f"{what} became no tokens at all; type some text.")
    limit = target.context_length
    if limit and length + max_new_tokens > limit:
        raise InputError(
            f"{what} is {length} tokens and {max_new_tokens} new tokens are asked for, but "
            f"{target.name} reads at most {limit} tokens; shorten the prompt or lower max_new_tokens."
        )
    return inputs


@dataclass
class _Failure:
    reason: str
    oom: bool


class StopOnFlag(StoppingCriteria):
    """Ends generate() at the next step once `should_stop()` is true; `fired` says whether it cut the run short.

    transformers checks stopping criteria once per step (per verification step when assisted), so a Stop or
    a cancelled request frees the machine within one step instead of at the end of the run. Until then it
    returns False and changes nothing about what is generated.
    """

    def __init__(self, should_stop: Callable[[], bool]):
        self.should_stop = should_stop
        self.fired = False
        self._go_on: torch.Tensor | None = None  # made once: the per-step cost stays a flag check

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        if not self.fired and self.should_stop():
            self.fired = True
        if self.fired:
            return torch.ones((input_ids.shape[0],), dtype=torch.bool, device=input_ids.device)
        if self._go_on is None or self._go_on.shape[0] != input_ids.shape[0] or self._go_on.device != input_ids.device:
            self._go_on = torch.zeros((input_ids.shape[0],), dtype=torch.bool, device=input_ids.device)
        return self._go_on  # StoppingCriteriaList only ORs it into a new tensor, never writes to it


def stoppable(kwargs: dict, should_stop: Callable[[], bool]) -> tuple[dict, StopOnFlag]:
    """generate() keyword arguments with a fresh StopOnFlag added, and that criterion."""
    criterion = StopOnFlag(should_stop)
    return {**kwargs, "stopping_criteria": StoppingCriteriaList([criterion])}, criterion


def _attempt(
    target: LoadedModel,
    inputs: dict,
    arm: _Arm,
    clock: Clock,
    kwargs: dict | None = None,
    monitor: contention.Monitor | None = None,
) -> Timed | _Failure:
    """timed_generate, or a _Failure that says why; one arm failing must not lose the others' results."""
    try:
        return timed_generate(target, inputs, arm.kwargs if kwargs is None else kwargs, clock, arm.info.assisted, monitor)
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
    endpoint: vllm_engine.Endpoint | None = None  # a vLLM arm: its server, instead of generate()


def _remote_attempt(arm: _Arm, prompt_ids: list[int], request: BenchRequest, clock: Clock,
                    should_stop: Callable[[], bool], monitor: contention.Monitor | None) -> tuple[Timed | _Failure, bool]:
    """One vLLM arm's timed request as a Timed (or a _Failure), and whether a stop cut it short."""
    endpoint = arm.endpoint
    window = (lambda: monitor.window(endpoint.pids)) if monitor is not None else vllm_engine.nothing
    try:
        outcome = vllm_engine.run_once(endpoint, prompt_ids, request.max_new_tokens, clock, should_stop, window,
                                       request.fixed_length, request.seed)
    except AssistLabError as exc:
        return _Failure(str(exc), False), False
    except Exception as exc:  # noqa: BLE001 - one arm failing must not lose the others' results
        return _Failure(f"failed: {type(exc).__name__}: {str(exc)[:200]}", False), False
    streamed = outcome.streamed
    if streamed.stopped:
        return _Failure("stopped", False), True
    if streamed.token_ids is None:
        return _Failure(f"the server at {endpoint.url} sent no token ids (return_token_ids); a vLLM 0.10 or later "
                        f"sends them", False), False
    if not outcome.metrics and arm.info.assisted and vllm_engine.NO_METRICS not in arm.info.unavailable:
        arm.info.unavailable.append(vllm_engine.NO_METRICS)
    steps = StepStreamer(clock, 0.0)
    steps.times, steps.tokens = list(streamed.times), list(streamed.tokens)
    output = torch.tensor([list(prompt_ids) + list(streamed.token_ids)])
    return Timed(streamed.latency, steps, [], [], output, outcome.memory, streamed.wall_window,
                 counts=outcome.counts, remote=True), False


def build_arms(request: BenchRequest, target: LoadedModel, assistants: dict[str, LoadedModel]) -> list[_Arm]:
    """Plain first, then one arm per ArmSpec: its name, generate() kwargs, drafting settings and configure().

    `assistants` maps each ArmSpec.assistant text to its loaded model. configure() rewrites the drafter's
    generation_config with the arm's effective settings; call it before every generate() of that arm.
    """
    base = generation.base_kwargs(request, target)
    defaults = paths.transformers_defaults()
    checkpoints: dict[int, dict] = {}  # id(LoadedModel) -> checkpoint_values, read once per model

    def values_of(loaded: LoadedModel) -> dict:
        if id(loaded) not in checkpoints:
            checkpoints[id(loaded)] = paths.checkpoint_values(loaded)
        return checkpoints[id(loaded)]

    arms = [_Arm(ArmInfo("plain", "plain", settings={}), dict(base), lambda: None)] if (
        "transformers" in request.engines) else []
    for spec in request.arms:
        if spec.engine != "transformers":
            continue
        helper = assistants.get(spec.assistant) if spec.assistant else None
        plan = paths.plan(spec, target, helper, request.do_sample, values_of, defaults)
        names = {a.info.name for a in arms}
        name, copy = plan.name, 1
        while name in names:  # two arms with the same settings still need distinct names
            copy += 1
            name = f"{plan.name} #{copy}"
        info = ArmInfo(name, plan.strategy, spec.to_dict(), settings=plan.settings, choice=plan.choice)
        arms.append(_Arm(info, {**base, **plan.kwargs}, plan.configure))
    return arms


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


def _stopping_record(request: BenchRequest) -> dict:
    return {
        "rule": request.stopping_rule,
        "target": request.precision,
        "max_time_s": request.max_time_s,
        "max_repetitions": request.repeats,
        "min_repetitions": min(MIN_PRECISION_REPEATS, request.repeats) if request.precision else request.repeats,
        "reached": False,
        "repetitions": 0,
        "elapsed_s": 0.0,
        "ended_by": None,
    }


def loading_step(role: str, text: str) -> tuple[str, str, float | None]:
    """(step, message, estimated seconds left) for loading one model now; an estimate only while it converts.

    A conversion under way (this load's own, the app's background preparation, or another process's) is
    reported as it stands: its own step, and the time it has left by the measured estimate.
    """
    if bundled.is_bundled(text):
        under_way = bundled.conversion_under_way(text)
        if under_way is not None:
            return (
                f"Converting the bundled {role} (first use only): {under_way.step.rstrip('.')}",
                f"Converting the bundled {role} {text} once to safetensors (later starts skip this): "
                f"{under_way.step}",
                under_way.left(),
            )
        if bundled.needs_conversion(text):
            estimate = bundled.lookup(text).convert_seconds
            return (
                f"Converting the bundled {role} (first use only)",
                f"Preparing the bundled {role} {text} for first use: converting it once to safetensors "
                f"(about {estimate:.0f} s on two CPU cores; later starts skip this)...",
                estimate,
            )
    return f"Loading the {role}", f"Loading the {role} {text}...", None


def _convert_side_by_side(request: BenchRequest) -> None:
    """On a first use, convert the bundled assistants in the background while the target converts: each
    conversion has single-threaded steps (the tokenizer, saving) that leave a core to the other. Loading an
    assistant then waits for its conversion on the file lock; one that failed is tried again there, which says
    why."""
    if not (bundled.is_bundled(request.target) and bundled.needs_conversion(request.target)):
        return
    others = {spec.assistant for spec in request.arms if spec.engine == "transformers"  # a vLLM arm has no strategy
              and spec.strategy in paths.MODEL_STRATEGIES and spec.assistant and bundled.is_bundled(spec.assistant)}
    pending = tuple(sorted(t for t in others - {request.target} if bundled.needs_conversion(t)))
    if pending:
        bundled.Preparation(pending).start()


def wait_for_conversions(pace: Pace, should_stop: Callable[[], bool]) -> Iterator[Event]:
    """Wait while a bundled model converts (the app's background preparation of models this run does not
    use): it would take CPU from every timed run, and from this process, where the busy-machine watch cannot
    see it."""
    while not should_stop() and (under_way := bundled.conversions_under_way()):
        first = under_way[0]
        yield Event("status", f"Waiting for the conversion of the bundled {first.model.title} to finish, so that it "
                    f"does not slow the timed runs: {first.step}", 0, 0,
                    step="Waiting for a bundled model's conversion", elapsed_s=pace.elapsed(), eta_s=first.left())
        time.sleep(HEARTBEAT_S)


def _run_step(name: str, warmup: bool, repetition: int, request: BenchRequest) -> tuple[str, str]:
    """(step, message) for the run about to start; with a precision target the count is the most that may run."""
    if warmup:
        count = f" {repetition + 1} of {request.warmup}" if request.warmup > 1 else ""
        return f"Warm-up{count} of {name} (not counted)", f"Warming up {name} (not counted)..."
    of = f"of at most {request.repeats}" if request.precision else f"of {request.repeats}"
    return (f"Repetition {repetition + 1} {of}: {name}",
            f"Timing {name}, repetition {repetition + 1} {of}...")


def record_run(report: Report, index: int, repetition: int, position: int, outcome: Timed, inputs: dict,
            target: LoadedModel) -> None:
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
            engine_counts=outcome.counts,
            token_ids=new_ids,
            text=target.tokenizer.decode(new_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False),
            memory_bytes=outcome.memory,
            wall_window=outcome.wall_window,
            position=position,
        )
    )
    if not outcome.remote:  # a server's run does not say which tokens were drafted
        report.segments[index] = explain.text_segments(target.tokenizer, report.runs[-1])


def keep_whole_repetitions(report: Report, whole: int, target: LoadedModel) -> None:
    """Drop the runs of a repetition a stop cut short, so a stopped report holds whole repetitions only: every
    figure (and `counted_repetitions`) then compares the arms over the same rounds, as a finished one does."""
    if all(run.repetition < whole for run in report.runs):
        return
    report.runs = [run for run in report.runs if run.repetition < whole]
    del report.orders[whole:]
    for index in range(len(report.arms)):
        runs = report.runs_of(index)
        if runs:
            report.segments[index] = explain.text_segments(target.tokenizer, runs[-1])
        else:
            report.segments.pop(index, None)


@dataclass
class Progress:
    """Runs done out of the most that may run (warm-up included), when the timed repetitions began, and the
    pace of the runs so far, from which every event gets the time so far and an estimate of the time left."""

    done: int = 0
    total: int = 0
    started: float | None = None  # clock reading when the first counted repetition began
    pace: Pace = field(default_factory=Pace)
    assisted: tuple[int, ...] = ()  # the assisted arms' indices: each has one drafting-cost run after the timing

    # Before any run is timed: the rough estimate of every run (results.estimate) and when it was made.
    rough_s: float | None = None
    rough_at: float = 0.0
    # The busy-machine watch's live record (contention.Monitor.record): while others use the machine, the
    # time left is said to be uncertain rather than given as a figure that the next burst would overturn.
    contention: dict | None = None

    def busy(self) -> bool:
        """Whether the watch has seen others use a meaningful share of the machine during the timed runs."""
        return bool(busy_mod.reasons(self.contention))

    def eta(self, probes_left: int | None = None, runs_left: int | None = None) -> float | None:
        """Seconds left for the timed runs not yet done and the drafting-cost runs (unless told, all of each).

        With a precision target the runs left are the most that may run, so the estimate is an upper bound.
        """
        probes = len(self.assisted) if probes_left is None else probes_left
        runs = self.total - self.done if runs_left is None else runs_left
        return self.pace.left(runs, probes, self.assisted)

    def rough_left(self) -> float | None:
        """What is left of the rough estimate (never under a few seconds); None without one."""
        if self.rough_s is None:
            return None
        return max(5.0, self.rough_s - (self.pace.elapsed() - self.rough_at))

    def event(self, kind: str, message: str, report: Report | None = None, warmup: bool = False, step: str = "",
              eta_s: float | None = None, round_done: bool = False, took_s: float | None = None) -> Event:
        """An Event with the runs done, the time so far and the time left (the estimate unless `eta_s` is given):
        from the runs so far, or before any has been timed from the rough estimate, marked as such."""
        rough = False
        if eta_s is None:
            eta_s = self.eta()
            if eta_s is None and kind != "done" and self.rough_s is not None:
                eta_s, rough = self.rough_left(), True
        return Event(kind, message, self.done, self.total, report, warmup, step=step,
                     elapsed_s=self.pace.elapsed(), eta_s=eta_s, round_done=round_done, eta_rough=rough, took_s=took_s,
                     eta_busy=kind != "done" and self.busy())


def run_round(
    request: BenchRequest,
    target: LoadedModel,
    inputs: dict,
    arms: list[_Arm],
    report: Report,
    round_index: int,
    warmup: bool,
    clock: Clock,
    should_stop: Callable[[], bool],
    progress: Progress,
    monitor: contention.Monitor | None = None,
    turn: int | None = None,
) -> Generator[Event, None, bool]:
    """One warm-up round or counted repetition: every arm once, in `rotation` order, each run stoppable.

    Yields a 'status' event naming each run before it starts and a 'run' event after it; counted runs go into
    `report` (with their position) and the order into `report.orders` (or `warmup_orders`). Returns True when a
    stop ended the round: a run cut short by the stopping criterion is discarded. A failing plain run raises;
    another failing arm is marked and skipped. `turn` is the round's place in the rotation when it is not
    `round_index` (a suite keeps rotating from one prompt's repetitions to the next).
    """
    order = rotation(len(arms), round_index if turn is None else turn)
    (report.warmup_orders if warmup else report.orders).append(order)
    for position, index in enumerate(order):
        arm = arms[index]
        last = position == len(order) - 1
        if should_stop():
            return True
        if arm.info.error:
            progress.done += 1
            continue
        step, announce = _run_step(arm.info.name, warmup, round_index, request)
        yield progress.event("status", announce, None, warmup, step)
        began = progress.pace.elapsed()
        if arm.endpoint is not None:
            outcome, fired = _remote_attempt(arm, inputs["input_ids"][0].tolist(), request, clock, should_stop,
                                             None if warmup else monitor)
        else:
            if request.do_sample:
                torch.manual_seed(request.seed + round_index)
            arm.configure()
            kwargs, criterion = stoppable(arm.kwargs, should_stop)
            outcome = _attempt(target, inputs, arm, clock, kwargs, None if warmup else monitor)
            fired = criterion.fired
        if fired:
            return True  # cut short: not a measurement of the work asked for
        progress.done += 1
        if not isinstance(outcome, _Failure):
            progress.pace.record(index, progress.pace.elapsed() - began)
        if isinstance(outcome, _Failure):
            arm.info.error = outcome.reason
            if index == 0:
                report.status = "failed"
                report.message = f"The plain (unassisted) run {outcome.reason}"
                raise (ResourceError if outcome.oom else AssistLabError)(report.message)
            if not arm.info.assisted:  # another engine's baseline: its assisted arms have nothing to be timed against
                for other in arms:
                    if other.info.engine == arm.info.engine and other.info.assisted and not other.info.error:
                        other.info.error = f"its baseline, {arm.info.name}, {outcome.reason}"
            yield progress.event("run", f"{arm.info.name} {outcome.reason}", report, warmup, step, round_done=last)
            continue
        most = "at most " if request.precision else ""
        if warmup:
            phase = f"warm-up {round_index + 1}/{request.warmup}"
        else:
            record_run(report, index, round_index, position, outcome, inputs, target)
            if report.stopping is not None and progress.started is not None:
                report.stopping["elapsed_s"] = clock() - progress.started
            phase = f"repetition {round_index + 1}/{most}{request.repeats}"
        message = f"{arm.info.name}: {phase}, {outcome.latency:.2f} s"
        yield progress.event("run", message, report, warmup, step, round_done=last, took_s=outcome.latency)
    return False


def _finish_message(report: Report, request: BenchRequest) -> str:
    stop = report.stopping
    n = stop["repetitions"]
    failed = [a.name for a in report.arms if a.error]
    tail = "" if not failed else f" {', '.join(failed)} failed."
    if stop["rule"] == "precision":
        target = f"±{request.precision:.0%}"
        if stop["reached"]:
            text = f"Complete: every speedup is known to {target} after {n} repetitions."
        elif stop["ended_by"] == "time budget":
            text = (f"Complete, but the time budget of {request.max_time_s:g} s ran out after {n} repetitions "
                    f"before every speedup was known to {target}.")
        elif stop["ended_by"] == "no assisted arm":
            text = f"Complete, but no assisted arm is left to measure to {target}."
        else:
            text = (f"Complete, but {n} repetitions (the most allowed) did not pin every speedup down to "
                    f"{target}.")
    elif stop["ended_by"] == "time budget":
        text = f"Complete, but the time budget of {request.max_time_s:g} s ended the runs after {n} of {request.repeats} repetitions."
    else:
        text = "Complete."
    return text + tail


def run_benchmark(
    request: BenchRequest,
    store: ModelStore,
    clock: Clock = time.perf_counter,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[Event]:
    """Load, warm up, then time every arm in rotated order, repetition after repetition. The last event is 'done'.

    How many repetitions run is the request's stopping rule: a fixed count, or until every speedup is known
    to the precision asked for (at least MIN_PRECISION_REPEATS), the time budget is spent, or the most
    repetitions allowed are done. `should_stop` is checked between runs and, through a stopping criterion,
    at every generation step: a run cut short is discarded and the report ends 'stopped'.

    vLLM arms' servers are started after the models load and stopped when this generator ends, however it
    ends: done, stopped, an error, or closed by its caller (a cancelled request).
    """
    endpoints: list[vllm_engine.Endpoint] = []
    try:
        yield from _run_benchmark(request, store, clock, should_stop, endpoints)
    finally:
        vllm_engine.stop_all(endpoints)


def vllm_drafts(request: BenchRequest, messages: list[str], pace: Pace) -> Generator[Event, None, dict[str, LoadedModel]]:
    """The tokenizers of the vLLM draft models (loaded here only to check their vocabulary against the target's);
    an EAGLE head has no tokenizer of its own (the server reads the target's)."""
    drafts: dict[str, LoadedModel] = {}
    for spec in request.arms:
        if spec.engine == "vllm" and spec.method == "draft_model" and spec.draft_model not in drafts:
            drafts[spec.draft_model] = yield from _while_loading(
                lambda text=spec.draft_model: models_mod.tokenizer_only(text, messages.append),
                lambda: Event("status", "Reading the draft model's tokenizer...", 0, 0,
                              step="Reading the draft model's tokenizer", elapsed_s=pace.elapsed()))
    return drafts


def vllm_setup(request: BenchRequest, target: LoadedModel, drafts: dict[str, LoadedModel], dtype: str,
               endpoints: list[vllm_engine.Endpoint], pace: Pace, should_stop: Callable[[], bool],
               prompt_tokens: int | None = None) -> Generator[Event, None, dict]:
    """Check every vLLM arm, start AssistLab's servers and wait for them; what the environment records.

    An arm that cannot run keeps its sentence in `error` and the other arms still run. `prompt_tokens` is the
    longest prompt the servers will be sent (a suite's longest; the request's own prompt when None): their
    context is sized for it. Whoever calls this stops the servers in `endpoints` (`vllm_engine.stop_all`).
    """
    specs = [a for a in request.arms if a.engine == "vllm"]
    python, problem = None, None
    if any(s.url is None for s in specs):
        step = "Finding vLLM"
        yield Event("status", f"Checking the Python in {vllm_server.PYTHON_VAR} for vLLM...", 0, 0, step=step,
                    elapsed_s=pace.elapsed())
        try:
            python = yield from _while_loading(vllm_server.find_python, lambda: Event(
                "status", "Checking for vLLM...", 0, 0, step=step, elapsed_s=pace.elapsed()))
        except AssistLabError as exc:
            problem = str(exc)
    for spec in specs:
        if spec.url is not None:
            endpoints.append(vllm_engine.operator_endpoint(spec, (target.name, target.folder)))
            continue
        endpoint = vllm_engine.Endpoint(spec, spec.label, error=problem)
        helper = drafts.get(spec.draft_model) if spec.draft_model else None
        if helper is not None and not problem and not paths.same_tokenizer(target.tokenizer, helper.tokenizer):
            endpoint.error = (f"vLLM's draft_model method needs a draft model with the target's vocabulary, and "
                              f"{helper.name} has another tokenizer than {target.name}; as a transformers assistant "
                              f"it can still draft (universal assisted generation).")
        endpoints.append(endpoint)
    prompt = len(encode_prompt(request, target)["input_ids"][0]) if prompt_tokens is None else prompt_tokens
    longest = max([s.num_speculative_tokens or 0 for s in specs] + [0])
    needed = max(2048, prompt + request.max_new_tokens + longest + 16)
    max_len = min(needed, target.context_length) if target.context_length else needed
    if python is not None:
        vllm_engine.start_servers(endpoints, python, target.folder, dtype, max_len,
                                  {text: m.folder for text, m in drafts.items()}, served_name=target.name)
        step = "Starting the vLLM servers"
        began = pace.elapsed()
        waiting = {"label": ""}

        def on_wait(label: str, _seconds: float) -> None:
            waiting["label"] = label

        def status() -> Event:
            return Event("status", f"Starting the vLLM servers ({waiting['label'] or 'loading'}, "
                         f"{pace.elapsed() - began:.0f} s so far; about a minute each)...", 0, 0, step=step,
                         elapsed_s=pace.elapsed())

        yield status()
        abandoned = threading.Event()
        yield from _while_loading(
            lambda: vllm_engine.wait_all(endpoints, lambda: should_stop() or abandoned.is_set(), on_wait), status,
            cancel=abandoned.set)
    plain = next((e for e in endpoints if not e.arm.assisted), None)
    for endpoint in endpoints:
        if endpoint.arm.assisted and not endpoint.error and (plain is None or plain.error):
            endpoint.error = (f"its baseline, {plain.label}, could not run" if plain is not None else
                              "there is no vLLM plain arm to time it against; add one (--server plain=URL)")
    return {
        "vllm": None if python is None else python.vllm,
        "python": None if python is None else python.path,
        "torch": None if python is None else python.torch,
        "transformers": None if python is None else python.transformers,
        "servers": {e.label: e.settings for e in endpoints},
        "problem": problem,
    }


def add_vllm_arms(arms: list[_Arm], endpoints: list[vllm_engine.Endpoint]) -> None:
    """One arm per vLLM endpoint after `arms`, named apart from them; EngineError when no arm at all can run."""
    names = {a.info.name for a in arms}
    for endpoint in endpoints:
        name, copy = endpoint.label, 1
        while name in names:
            copy += 1
            name = f"{endpoint.label} #{copy}"
        names.add(name)
        info = ArmInfo(name, endpoint.arm.method, endpoint.arm.to_dict(), error=endpoint.error,
                       settings=endpoint.settings, engine="vllm", unavailable=list(endpoint.unavailable))
        arms.append(_Arm(info, {}, lambda: None, endpoint=endpoint))
    if arms and all(a.info.error for a in arms):
        raise EngineError(next(a.info.error for a in arms))


def _run_benchmark(
    request: BenchRequest,
    store: ModelStore,
    clock: Clock,
    should_stop: Callable[[], bool],
    endpoints: list[vllm_engine.Endpoint],
) -> Iterator[Event]:
    cap = max_run_s()
    if cap is not None:  # the operator's cap stops a comparison as Stop does, keeping what was measured
        deadline, asked = time.monotonic() + cap, should_stop
        should_stop = lambda: asked() or time.monotonic() > deadline  # noqa: E731
    device = models_mod.choose_device(request.device)
    dtype = models_mod.choose_dtype(request.dtype, device)
    request = request.resolved(device.type)
    pace = Pace()  # the time so far and left, for the person watching; not the benchmark's clock
    messages: list[str] = []
    request = catalog.canonical_request(request)  # refuses a bad reference before loading; names as shown

    def get(text: str, keep: set) -> tuple[tuple, LoadedModel]:
        # On the GPU this comparison was given: the CUDA current device belongs to a thread, not its context.
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            return store.get(text, device, dtype, request.device_map_auto, progress=messages.append, keep=keep)

    def load(role: str, text: str, keep: set) -> Generator[Event, None, tuple[tuple, LoadedModel]]:
        """Load one model in a worker thread, reporting the step and its time every few seconds while it loads."""

        def status() -> Event:
            # Asked again at every heartbeat, so a conversion reports the step it is on and the time it has left.
            step, message, estimate = loading_step(role, text)
            return Event("status", message, 0, 0, step=step, elapsed_s=pace.elapsed(), eta_s=estimate)

        yield status()
        return (yield from _while_loading(lambda: get(text, keep), status))

    _convert_side_by_side(request)
    if "transformers" in request.engines:
        target_key, target = yield from load("target", request.target, set())
    else:  # only servers run it, so only its tokenizer is needed here: the target may not fit this machine
        target_key, target = ("tokenizer only",), (yield from _while_loading(
            lambda: models_mod.tokenizer_only(request.target, messages.append),
            lambda: Event("status", f"Reading the target {request.target}'s tokenizer...", 0, 0,
                          step="Reading the target's tokenizer", elapsed_s=pace.elapsed())))
    keep = {target_key}
    assistants: dict[str, LoadedModel] = {}
    drafts = yield from vllm_drafts(request, messages, pace)  # vLLM draft models: to check their vocabulary
    for spec in request.arms:
        if spec.engine == "vllm":
            continue
        if spec.strategy in paths.MODEL_STRATEGIES and spec.assistant and spec.assistant not in assistants:
            key, assistants[spec.assistant] = yield from load("assistant", spec.assistant, keep)
            keep.add(key)

    inputs = encode_prompt(request, target)
    generation.check_context(request, inputs["input_ids"][0].tolist(), target, assistants)
    arms = build_arms(request, target, assistants)
    engines_env = {"transformers": {"version": report_mod.transformers_version(), "in_this_process": True}} if (
        "transformers" in request.engines) else {}
    if any(a.engine == "vllm" for a in request.arms):
        engines_env["vllm"] = yield from vllm_setup(request, target, drafts, models_mod.dtype_name(dtype),
                                                    endpoints, pace, should_stop)
        add_vllm_arms(arms, endpoints)
    yield from wait_for_conversions(pace, should_stop)
    for arm in arms:
        if arm.info.choice:
            yield Event("status", arm.info.choice, 0, 0, step=f"Choosing the drafter for {arm.info.name}",
                        elapsed_s=pace.elapsed())

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
    changes = generation.changes_from_transformers(request, target, {a.info.strategy for a in arms})
    changes.append({
        "what": "a stopping criterion is passed to every generate() call, and a streamer that records step times",
        "why": "Stop or a cancelled request ends generation within one step; both return without changing "
        "the tokens generated",
    })
    report.environment["changes_from_transformers"] = changes
    report.environment["engines"] = engines_env
    report.stopping = stopping = _stopping_record(request)
    progress = Progress(total=(request.warmup + request.repeats) * len(arms), pace=pace,
                        assisted=tuple(i for i, a in enumerate(arms) if a.info.assisted and a.endpoint is None))
    progress.rough_s = estimate.comparison_seconds(
        device.type, described["target"].get("parameters") or 0,
        [described[f"assistant {spec.assistant}"].get("parameters") or 0
         if getattr(spec, "strategy", None) in paths.MODEL_STRATEGIES and spec.assistant else 0
         for spec in request.arms],
        report.environment["prompt_tokens"], request.max_new_tokens, request.warmup, request.repeats,
        request.max_time_s,
    )
    progress.rough_at = pace.elapsed()  # until a run is timed, every event's time left comes from this
    monitor = contention.Monitor(device)  # one window per counted timed run; its record is live in the report
    report.environment["contention"] = progress.contention = monitor.record

    def stopped_event() -> Event:
        stopping["elapsed_s"] = 0.0 if progress.started is None else clock() - progress.started
        stopping["ended_by"] = "stopped"
        keep_whole_repetitions(report, stopping["repetitions"], target)
        report.status = "stopped"
        most = "at most " if request.precision else ""
        report.message = f"Stopped after {stopping['repetitions']} of {most}{request.repeats} repetitions."
        if cap is not None and time.monotonic() > deadline:
            report.message += f" This server stops a comparison after {cap:g} s ({MAX_RUN_ENV})."
        return progress.event("done", report.message, report, step="Stopped", eta_s=0.0)

    for w in range(request.warmup):
        if (yield from run_round(request, target, inputs, arms, report, w, True, clock, should_stop, progress)):
            monitor.close()
            yield stopped_event()
            return

    progress.started = clock()  # the time budget counts timed repetitions only
    for r in range(request.repeats):
        if (yield from run_round(request, target, inputs, arms, report, r, False, clock, should_stop, progress,
                                 monitor)):
            monitor.close()
            yield stopped_event()
            return
        count = r + 1
        elapsed = clock() - progress.started
        stopping.update(repetitions=count, elapsed_s=elapsed)
        if request.precision is not None:
            speedups = arm_speedups(report)
            if not speedups:  # every assisted arm failed (or there was none): no interval can narrow
                stopping["ended_by"] = "no assisted arm"
                break
            if count >= stopping["min_repetitions"] and precision_reached(speedups, request.precision):
                stopping.update(reached=True, ended_by="precision")
                break
        if count == request.repeats:
            stopping["ended_by"] = "repetitions"
            stopping["reached"] = request.precision is None
            break
        # Stop before a repetition that would likely overrun the budget (the mean so far predicts its length).
        if request.max_time_s is not None and elapsed + elapsed / count > request.max_time_s:
            stopping["ended_by"] = "time budget"
            break
    monitor.close()

    # The cost model: one untimed, instrumented run per assisted arm, after every timed run. Each is watched
    # like a timed run (one window around it): its drafting time is the prediction's c, so others' work
    # during it would make the prediction wrong without touching the measured speedup.
    probing = [(index, arm) for index, arm in enumerate(arms)
               if arm.info.assisted and not arm.info.error and arm.endpoint is None]
    watch = contention.Monitor(device)
    report.environment["probe_contention"] = watch.record
    try:
        for count, (index, arm) in enumerate(probing, start=1):
            if not should_stop():
                step = f"Measuring the drafting cost, {count} of {len(probing)}: {arm.info.name} (untimed)"
                left = progress.eta(len(probing) - count + 1, runs_left=0)
                yield progress.event("status", f"{step}...", report, step=step, eta_s=left)
                if request.do_sample:
                    torch.manual_seed(request.seed)
                kwargs, criterion = stoppable(arm.kwargs, should_stop)
                seen = len(watch.windows)
                with watch.window():
                    probe = explain.probe_arm(target, inputs, kwargs, arm.configure, clock)
                if criterion.fired:
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

    report.status = "complete"
    report.message = _finish_message(report, request)
    yield progress.event("done", report.message, report, step="Complete", eta_s=0.0)


def run_to_report(request: BenchRequest, store: ModelStore, **kwargs) -> Report:
    """Run a comparison to the end and return its report."""
    final = None
    for event in run_benchmark(request, store, **kwargs):
        final = event
    return final.report
