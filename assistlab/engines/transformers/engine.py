"""The transformers engine: generate() in this process. It holds the target, so it tokenises every prompt."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator

import torch

from ...config import BenchRequest
from .. import base
from ..base import Arm, ArmInfo, Clock, Host, RunFailure, RunResult, Status, Watch, while_loading
from . import bundled, generation, machine, models, paths, prompt, timing
from .models import LoadedModel


class TransformersArm(Arm):
    """One arm run by generate(): its keyword arguments and the configure() that puts its drafter's settings in
    place before every run (a cached model may have been left with another arm's)."""

    def __init__(self, info: ArmInfo, kwargs: dict, configure: Callable[[], None], engine: TransformersEngine):
        self.info, self.kwargs, self.configure, self.engine = info, kwargs, configure, engine
        self.probes = info.assisted

    def run(self, prompt_ids: list[int], round_index: int, clock: Clock, should_stop: Callable[[], bool],
            watch: Watch) -> RunResult | RunFailure:
        return self._generate(prompt_ids, round_index, clock, should_stop, watch, self.kwargs)

    def warm_up(self, prompt_ids: list[int], round_index: int, clock: Clock, should_stop: Callable[[], bool],
                tokens: int) -> RunResult | RunFailure:
        kwargs = {**self.kwargs, "max_new_tokens": min(tokens, self.kwargs["max_new_tokens"])}
        return self._generate(prompt_ids, round_index, clock, should_stop, base.unwatched, kwargs)

    def _generate(self, prompt_ids: list[int], round_index: int, clock: Clock, should_stop: Callable[[], bool],
                  watch: Watch, generate_kwargs: dict) -> RunResult | RunFailure:
        request, target = self.engine.preparation.request, self.engine.target
        inputs = self.engine.inputs(prompt_ids)
        if request.do_sample:
            torch.manual_seed(request.seed + round_index)
        self.configure()
        kwargs, criterion = timing.stoppable(generate_kwargs, should_stop)
        timed = timing.attempt(target, inputs, kwargs, self.info.assisted, clock, watch)
        if criterion.fired:
            return RunFailure("stopped", stopped=True)
        if isinstance(timed, RunFailure):
            return timed
        return RunResult(
            latency=timed.latency,
            times=timed.streamer.times,
            tokens=timed.streamer.tokens,
            token_ids=timed.output[0, len(prompt_ids):].tolist(),
            memory=timed.memory,
            wall_window=timed.wall_window,
            drafted=timed.drafted,
            accepted=timed.accepted,
        )

    def probe(self, prompt_ids: list[int], clock: Clock, should_stop: Callable[[], bool], watch: Watch) -> dict | None:
        request = self.engine.preparation.request
        if request.do_sample:
            torch.manual_seed(request.seed)
        kwargs, criterion = timing.stoppable(self.kwargs, should_stop)
        with watch():
            probe = timing.probe_arm(self.engine.target, self.engine.inputs(prompt_ids), kwargs, self.configure, clock)
        return None if criterion.fired else probe  # a probe cut short would describe a shorter run: keep none


class TransformersEngine(Host):
    """generate() in this process. The registry's host: it loads the target (only its tokenizer when no arm of
    its own runs: then the target may not even fit this machine), so it tokenises and decodes for every engine."""

    name = "transformers"

    def __init__(self, preparation):
        super().__init__(preparation)
        self.target: LoadedModel | None = None
        self.assistants: dict[str, LoadedModel] = {}
        self._inputs: tuple[tuple[int, ...], dict] | None = None

    @classmethod
    def wanted(cls, request) -> bool:
        return cls.name in request.engines

    @staticmethod
    def place(request: BenchRequest) -> tuple[torch.device, torch.dtype]:
        """The device and dtype the request asks for, resolved against this machine."""
        device = models.choose_device(request.device)
        return device, models.choose_dtype(request.dtype, device)

    # ------------------------------------------------------------------ preparing

    def _get(self, text: str, keep: set) -> tuple[tuple, LoadedModel]:
        prep = self.preparation
        # On the GPU this comparison was given: the CUDA current device belongs to a thread, not its context.
        with torch.cuda.device(prep.device) if prep.device.type == "cuda" else contextlib.nullcontext():
            return prep.store.get(text, prep.device, prep.dtype, prep.request.device_map_auto,
                                  progress=prep.messages.append, keep=keep)

    def _load(self, role: str, text: str, keep: set) -> Generator[Status, None, tuple[tuple, LoadedModel]]:
        """Load one model in a worker thread, reporting the step and its time every few seconds while it loads."""

        def status() -> Status:
            # Asked again at every heartbeat, so a conversion reports the step it is on and the time it has left.
            step, message, estimate = loading_step(role, text)
            return Status(message, step, estimate)

        yield status()
        return (yield from while_loading(lambda: self._get(text, keep), status))

    def prepare(self) -> Generator[Status, None, None]:
        request, prep = self.preparation.request, self.preparation
        convert_side_by_side(request)
        if self.wanted(request):
            target_key, self.target = yield from self._load("target", request.target, set())
        else:  # only servers run it, so only its tokenizer is needed here: the target may not fit this machine
            target_key, self.target = ("tokenizer only",), (yield from while_loading(
                lambda: models.tokenizer_only(request.target, prep.messages.append),
                lambda: Status(f"Reading the target {request.target}'s tokenizer...", "Reading the target's tokenizer")))
        keep = {target_key}
        for spec in request.arms:
            if spec.engine != self.name:
                continue
            if spec.strategy in paths.MODEL_STRATEGIES and spec.assistant and spec.assistant not in self.assistants:
                key, self.assistants[spec.assistant] = yield from self._load("assistant", spec.assistant, keep)
                keep.add(key)

    def settle(self, should_stop: Callable[[], bool]) -> Generator[Status, None, None]:
        """Wait while a bundled model converts (the app's background preparation of models this run does not
        use): it would take CPU from every timed run, and from this process, where the busy-machine watch
        cannot see it."""
        while not should_stop() and (under_way := bundled.conversions_under_way()):
            first = under_way[0]
            yield Status(f"Waiting for the conversion of the bundled {first.model.title} to finish, so that it "
                         f"does not slow the timed runs: {first.step}", "Waiting for a bundled model's conversion",
                         first.left())
            time.sleep(base.HEARTBEAT_S)

    def arms(self) -> list[Arm]:
        return build_arms(self.preparation.request, self.target, self.assistants, self) if self.wanted(
            self.preparation.request) else []

    def environment(self) -> dict:
        return {"version": machine.transformers_version(), "in_this_process": True}

    def close(self) -> None:
        self._inputs = None  # the models stay in the store for the next comparison

    # ------------------------------------------------------------------ the host's part: the target's tokens

    @property
    def tokenizer(self):
        return self.target.tokenizer

    def encode(self, request: BenchRequest) -> list[int]:
        """The prompt's token ids (through the chat template when asked for), refused when it does not fit."""
        return prompt.encode_prompt(request, self.target)["input_ids"][0].tolist()

    def encode_turns(self, bench: BenchRequest, turns: tuple[str, ...], answers: list[str]) -> list[int]:
        """A conversation's token ids: the user's turns with the target's own earlier answers between them."""
        return prompt.encode_turns(bench, self.target, turns, answers)["input_ids"][0].tolist()

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def inputs(self, prompt_ids: list[int]) -> dict:
        """generate()'s inputs for these ids on the target's device; made once per prompt, outside any timing."""
        key = tuple(prompt_ids)
        if self._inputs is None or self._inputs[0] != key:
            ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.target.device)
            self._inputs = key, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        return self._inputs[1]

    def check(self, request: BenchRequest, prompt_ids: list[int]) -> None:
        """Refuse a prompt that, with the new tokens, does not fit every model's context window."""
        generation.check_context(request, prompt_ids, self.target, self.assistants)

    def prompt_facts(self, request: BenchRequest) -> dict:
        return {"chat_template": prompt.uses_chat_template(request, self.target),
                "prompt_note": prompt.prompt_note(request, self.target)}

    def described(self) -> dict:
        out = {"target": self.target.describe()}
        for text, helper in self.assistants.items():
            out[f"assistant {text}"] = helper.describe()
        return out

    def machine(self, described: dict) -> dict:
        """Versions and hardware a result depends on, read here, where the runs happen."""
        prep = self.preparation
        return machine.environment(prep.device, models.dtype_name(prep.dtype), described)

    def dtype_name(self) -> str:
        return models.dtype_name(self.preparation.dtype)

    def assistant_parameters(self, request: BenchRequest, described: dict) -> list[int]:
        """Per arm of the request, its assistant model's parameters (0 for none), for the rough time estimate."""
        return [described[f"assistant {spec.assistant}"].get("parameters") or 0
                if spec.engine == self.name and spec.strategy in paths.MODEL_STRATEGIES and spec.assistant else 0
                for spec in request.arms]

    def changes(self, request: BenchRequest, strategies: set[str]) -> list[dict]:
        """What AssistLab does differently from a bare generate() call, and why."""
        changes = generation.changes_from_transformers(request, self.target, strategies)
        changes.append({
            "what": "a stopping criterion is passed to every generate() call, and a streamer that records step times",
            "why": "Stop or a cancelled request ends generation within one step; both return without changing "
            "the tokens generated",
        })
        return changes


def build_arms(request: BenchRequest, target: LoadedModel, assistants: dict[str, LoadedModel],
               engine: TransformersEngine) -> list[TransformersArm]:
    """Plain first, then one arm per ArmSpec: its name, generate() kwargs, drafting settings and configure().

    `assistants` maps each ArmSpec.assistant text to its loaded model. configure() rewrites the drafter's
    generation_config with the arm's effective settings; it runs before every generate() of that arm. What
    the arm is (lossless, what it cannot give) is decided here, from its plan, and travels on its ArmInfo.
    """
    base = generation.base_kwargs(request, target)
    defaults = paths.transformers_defaults()
    checkpoints: dict[int, dict] = {}  # id(LoadedModel) -> checkpoint_values, read once per model

    def values_of(loaded: LoadedModel) -> dict:
        if id(loaded) not in checkpoints:
            checkpoints[id(loaded)] = paths.checkpoint_values(loaded)
        return checkpoints[id(loaded)]

    arms = [TransformersArm(ArmInfo("plain", "plain", settings={}), dict(base), lambda: None, engine)]
    for spec in request.arms:
        if spec.engine != TransformersEngine.name:
            continue
        helper = assistants.get(spec.assistant) if spec.assistant else None
        plan = paths.plan(spec, target, helper, request.do_sample, values_of, defaults)
        described = spec.to_dict()
        info = ArmInfo(plan.name, plan.strategy, described, settings=plan.settings, choice=plan.choice,
                       flags=paths.arm_flags(plan.strategy, described, request.do_sample),
                       analysis_drops=paths.analysis_drops(plan.strategy))
        arms.append(TransformersArm(info, {**base, **plan.kwargs}, plan.configure, engine))
    return arms


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


def convert_side_by_side(request: BenchRequest) -> None:
    """On a first use, convert the bundled assistants in the background while the target converts: each
    conversion has single-threaded steps (the tokenizer, saving) that leave a core to the other. Loading an
    assistant then waits for its conversion on the file lock; one that failed is tried again there, which says
    why."""
    if not (bundled.is_bundled(request.target) and bundled.needs_conversion(request.target)):
        return
    others = {spec.assistant for spec in request.arms if spec.engine == TransformersEngine.name  # a vLLM arm has no strategy
              and spec.strategy in paths.MODEL_STRATEGIES and spec.assistant and bundled.is_bundled(spec.assistant)}
    pending = tuple(sorted(t for t in others - {request.target} if bundled.needs_conversion(t)))
    if pending:
        bundled.Preparation(pending).start()
