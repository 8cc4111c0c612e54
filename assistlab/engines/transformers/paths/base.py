"""What every drafting path answers, and the checks several paths share.

A path is one way transformers' `generate()` drafts tokens for the target to verify. Each module of this
folder defines one `DraftingPath`; the registry (`__init__.py`) lists them, and the page, the command line,
`auto` and the README's table read from it.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from ....errors import InputError
from ..loaded import LoadedModel
from . import settings


class ArmSpec(Protocol):
    """What a path reads of an arm's request (assistlab.engines.transformers.arms.ArmSpec has it all)."""

    strategy: str
    assistant: str | None
    num_assistant_tokens: int | None
    num_assistant_tokens_schedule: str | None
    assistant_confidence_threshold: float | None
    prompt_lookup_num_tokens: int | None
    early_exit_layer: int | None
    assistant_ensemble_weight: float | None

    @property
    def draft_label(self) -> str: ...

    @property
    def lookup_tokens(self) -> int: ...


class DraftingPath:
    """One drafting path. Subclasses set the class attributes and override what differs from the default."""

    name: ClassVar[str]  # the strategy name in requests, the CLI, the API and the report
    choice_label: ClassVar[str]  # the page's words for it in the strategy list
    drafts: ClassVar[str]  # what drafts, for the README's table
    auto_picks: ClassVar[str] = "never (chosen by name)"  # when `auto` picks it, for the README's table
    # Where `auto` asks this path (lowest first; None: never): paths that know a checkpoint by its config come
    # before the general ones, since 'universal' takes any assistant.
    auto_priority: ClassVar[int | None] = None
    auto_because: ClassVar[str] = ""  # what `auto` says before the path's own reason
    # Whether this path's drafters are checkpoints no other path can use (they cannot generate alone).
    owns_checkpoints: ClassVar[bool] = False
    needs_assistant: ClassVar[bool] = False  # a second model drafts
    example: ClassVar[str] = ""  # a pairing that works, named in the sentence that refuses one that does not
    # The setting that sets the draft length; None where the checkpoint fixes it (MTP, DFlash).
    length_knob: ClassVar[str | None] = "num_assistant_tokens"
    # Whether schedules and the confidence threshold can change the draft length during a run.
    adaptive: ClassVar[bool] = True
    # Whether the drafts carry probabilities, so ensemble verification has something to mix.
    has_draft_probabilities: ClassVar[bool] = True
    # Whether the arm names a layer of the target to exit at (early_exit_layer).
    takes_layer: ClassVar[bool] = False
    # Whether AssistLab rewrites the drafting model's generation_config before every run (see settings.py).
    rewrites_drafter_config: ClassVar[bool] = False

    # ------------------------------------------------------------ the request

    def check_spec(self, spec: ArmSpec) -> None:
        """Refuse, when the request is made, a spec this path can never run (no models needed to tell)."""

    def label(self, spec: ArmSpec) -> str:
        """The arm's short name in tables and charts; says when transformers' defaults apply."""
        return f"{self.name}: {short_name(spec.assistant)} ({spec.draft_label})"

    # ------------------------------------------------------------ the pairing

    def recognises(self, target: LoadedModel, assistant: LoadedModel | None) -> bool:
        """Whether `auto` should pick this path for the pairing, from the checkpoints' configs."""
        return False

    def check(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str | None:
        """Raise InputError, in one sentence that says what would work, for a pairing this path cannot serve.

        Returns why this path fits (shown while the arm runs and kept as the arm's `choice`), or None when
        there is nothing worth saying.
        """
        if self.needs_assistant and assistant is None:
            raise InputError(f"The {self.name!r} strategy needs an assistant model.")
        return None

    def check_settings(self, spec: ArmSpec, do_sample: bool) -> None:
        """Refuse settings that would silently change nothing on this path."""

    # ------------------------------------------------------------ running it

    def drafter(self, target: LoadedModel, assistant: LoadedModel | None) -> LoadedModel:
        """The model whose generation_config holds the drafting knobs."""
        return assistant if assistant is not None else target

    def generate_kwargs(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> dict:
        """The generate() keyword arguments of this path (ensemble verification is added by the registry)."""
        return {"assistant_model": assistant.model}

    def settings(self, spec: ArmSpec, drafter_values: dict, defaults: dict) -> dict:
        """The values this path drafts with and where each came from (the report's `settings`)."""
        return settings.effective(spec, settings.DRAFTER_KNOBS, drafter_values, defaults, adapts=False)

    def configure(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None, values: dict) -> None:
        """Before every run: put the arm's values where transformers reads them."""
        if self.rewrites_drafter_config:
            settings.write(self.drafter(target, assistant), values)

    # ------------------------------------------------------------ what it can tell

    def figures_unavailable(self, spec: dict) -> list[dict]:
        """[{figure, why}] for what this path cannot give, so the report says it rather than a wrong number."""
        if self.adaptive or not (
            spec.get("num_assistant_tokens_schedule", "constant") != "constant"
            or spec.get("assistant_confidence_threshold")
        ):
            return []
        return [{"figure": "schedule", "why": f"the {self.name} path drafts a fixed number of tokens every step, "
                 "so the schedule and the confidence threshold change nothing"}]

    # ------------------------------------------------------------ loading drafter-only checkpoints

    def recognises_checkpoint(self, config) -> bool:
        """Whether a checkpoint's config is a drafter that only this path can use (it cannot generate alone)."""
        return False

    def model_class(self, config):
        """The class to load such a checkpoint with, or None to let the loader choose."""
        return None

    def load_hint(self, config, exc: BaseException) -> str:
        """A sentence to add to a load failure this path can explain, else ''."""
        return ""


def short_name(reference: str | None) -> str:
    """The last part of a model reference: 'Qwen/Qwen2.5-0.5B-Instruct' -> 'Qwen2.5-0.5B-Instruct'."""
    return str(reference).rstrip("/").split("/")[-1].split(":")[-1]


def kind(model: LoadedModel) -> str:
    """A loaded model's class and model type, as a refusal names them."""
    return f"{type(model.model).__name__} ({getattr(model.model.config, 'model_type', '?')})"


def same_tokenizer(a, b) -> bool:
    """Two tokenizers are interchangeable when they map the same strings to the same ids."""
    if a is b:
        return True
    return a.get_vocab() == b.get_vocab() and a.all_special_ids == b.all_special_ids
