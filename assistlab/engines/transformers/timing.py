"""One timed generate() call of the transformers engine, stoppable at every step; and the untimed drafting-cost run."""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from ...errors import AssistLabError
from ..base import Clock, RunFailure, Watch, unwatched
from . import hooks, models
from .models import LoadedModel

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


def timed_generate(
    target: LoadedModel,
    inputs: dict,
    kwargs: dict,
    clock: Clock,
    assisted: bool,
    watch: Watch = unwatched,
) -> Timed:
    """One generate() call between two clock readings, with the GPU drained before each.

    The garbage collector is collected before and paused during the call, so a collection never lands
    inside one arm's timing. `watch()` (the busy-machine watch) notes what other processes used during the call. An
    assisted run goes through its own proxy of the model (see hooks), so its draft counts are its own even
    when another run uses the same cached model.
    """
    model, device = target.model, target.device
    cuda = device.type == "cuda"
    if cuda:
        models.synchronize_all()
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)
    counted = hooks.instrumented(model) if assisted else contextlib.nullcontext((model, hooks.DraftTrace()))
    with counted as (runnable, trace), torch.inference_mode(), _collector_paused(), watch():
        wall_start = time.time()
        start = clock()
        streamer = StepStreamer(clock, start)
        output = runnable.generate(**inputs, **kwargs, streamer=streamer)
        if cuda:
            models.synchronize_all()
        latency = clock() - start
        wall_end = time.time()
    return Timed(latency, streamer, trace.drafted, trace.accepted, output, _memory_now(device), (wall_start, wall_end))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The young generations collected, then no automatic collection until the block ends; the previous state
    comes back.

    Not a full gc.collect(): with gradio, torch and transformers loaded it walks half a million objects, 0.33 s
    in a fresh app process and more in a long-lived one, before every run. That is outside the timed block but
    made a comparison of 60-token runs on the tiny models take 0.5 s of wall time per 0.1 s run. The old
    generation is left to the collector's own schedule, between runs."""
    was_enabled = gc.isenabled()
    gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


def attempt(
    target: LoadedModel,
    inputs: dict,
    kwargs: dict,
    assisted: bool,
    clock: Clock,
    watch: Watch = unwatched,
) -> Timed | RunFailure:
    """timed_generate, or a RunFailure that says why; one arm failing must not lose the others' results."""
    try:
        return timed_generate(target, inputs, kwargs, clock, assisted, watch)
    except Exception as exc:
        if isinstance(exc, AssistLabError):
            failure = RunFailure(str(exc), False)
        elif _is_oom(exc):
            failure = RunFailure(
                "ran out of memory; lower max_new_tokens, use a smaller model or dtype, or free the GPU.", True
            )
        else:
            detail = str(exc).splitlines()[0][:200] if str(exc) else ""
            failure = RunFailure(f"failed: {type(exc).__name__}: {detail}", False)
    # Outside the except block the traceback, and the tensors its frames hold, are gone.
    if failure.oom:
        models.release_memory()
    return failure


def probe_arm(
    target: LoadedModel,
    inputs: dict,
    kwargs: dict,
    configure: Callable[[], None] = lambda: None,
    clock: Clock = time.perf_counter,
) -> dict:
    """One extra, untimed generate() of an assisted arm, timing each drafting call and verification forward.

    Run it after the timed runs: its clock readings slow generation a little, which is why its latency is
    never compared. Drafting is timed around the candidate generator's get_candidates, so for universal
    assisted generation it includes re-tokenisation. `step_s` is each step from the start of its drafting
    to the start of the next (the last to the end of the call): drafting, verification and the loop's own
    work. Returns raw per-step lists, or {"error": ...}: a failed diagnostic must not cost the benchmark
    its results.
    """
    try:
        configure()
        with hooks.instrumented(target.model, clock, models.synchronize_all) as (runnable, trace), torch.inference_mode():
            models.synchronize_all()
            start = clock()
            output = runnable.generate(**inputs, **kwargs)
            models.synchronize_all()
            end = clock()
    except Exception as exc:  # noqa: BLE001 - reported in the result instead
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        return {"error": f"the cost-model run failed: {type(exc).__name__}: {first}"}
    bounds = trace.draft_starts + [end]
    return {
        "generator": trace.generator,
        "setup_s": trace.setup_s,
        "latency_s": end - start,
        "new_tokens": int(output.shape[1] - inputs["input_ids"].shape[1]),
        "draft_s": trace.draft_s,
        "verify_s": trace.verify_s,
        "verify_tokens": trace.verify_tokens,
        "step_s": [b - a for a, b in zip(bounds, bounds[1:])],
        "drafted": trace.drafted,
        "accepted": trace.accepted,
    }
