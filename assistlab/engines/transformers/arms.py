"""An assisted arm of the transformers engine as a person asks for it: frozen, validated at birth."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ...config import LIMITS, PROMPT_LOOKUP_DEFAULT, SCHEDULES, ArmRequest, _as_int, _choice
from ...errors import InputError
from . import paths


@dataclass(frozen=True)
class ArmSpec(ArmRequest):
    """One assisted arm: how candidate tokens are drafted for the target to verify.

    A drafting knob left at None takes transformers' default for `generate(assistant_model=...)` (read from
    transformers at run time, see paths/settings.py); prompt_lookup_num_tokens, which transformers has no
    default for, takes PROMPT_LOOKUP_DEFAULT.
    """

    engine: ClassVar[str] = "transformers"

    strategy: str = "auto"
    assistant: str | None = None
    num_assistant_tokens: int | None = None
    num_assistant_tokens_schedule: str | None = None
    assistant_confidence_threshold: float | None = None
    prompt_lookup_num_tokens: int | None = None
    early_exit_layer: int | None = None
    # In (0, 1): ensemble verification, which makes the arm lossy (paths/ensemble.py). None keeps it lossless.
    assistant_ensemble_weight: float | None = None

    def __post_init__(self) -> None:
        _choice("strategy", self.strategy, paths.STRATEGIES)
        if self.num_assistant_tokens_schedule is not None:
            _choice("num_assistant_tokens_schedule", self.num_assistant_tokens_schedule, SCHEDULES)
        for name in ("num_assistant_tokens", "prompt_lookup_num_tokens"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _as_int(name, getattr(self, name), 1, LIMITS[name]))
        if self.strategy in paths.MODEL_STRATEGIES and not (self.strategy == paths.AUTO and not self.assistant):
            if not self.assistant or not str(self.assistant).strip():
                raise InputError(f"The {self.strategy!r} strategy needs an assistant model; choose one or use prompt-lookup.")
            object.__setattr__(self, "assistant", str(self.assistant).strip())
        else:
            object.__setattr__(self, "assistant", None)
        if not (self.strategy != paths.AUTO and paths.get(self.strategy).takes_layer):
            object.__setattr__(self, "early_exit_layer", None)
        elif self.early_exit_layer is not None:
            object.__setattr__(self, "early_exit_layer", _as_int("early_exit_layer", self.early_exit_layer, 1, 1000))
        threshold = self.assistant_confidence_threshold
        if threshold is not None:
            if isinstance(threshold, bool):
                raise InputError(f"assistant_confidence_threshold must be a number, got {threshold!r}.")
            try:
                threshold = float(threshold)
            except (TypeError, ValueError):
                raise InputError(f"assistant_confidence_threshold must be a number, got {threshold!r}.") from None
            if not 0.0 <= threshold < 1.0:
                raise InputError(f"assistant_confidence_threshold must be in [0, 1), got {threshold}.")
            object.__setattr__(self, "assistant_confidence_threshold", threshold)
        object.__setattr__(self, "assistant_ensemble_weight", _ensemble_weight(self.assistant_ensemble_weight))
        paths.check_spec(self)

    @property
    def lookup_tokens(self) -> int:
        """prompt_lookup_num_tokens as it will run: the one given, else AssistLab's default."""
        return self.prompt_lookup_num_tokens if self.prompt_lookup_num_tokens is not None else PROMPT_LOOKUP_DEFAULT

    @property
    def label(self) -> str:
        """A short, unique-enough name for charts and tables; says when transformers' defaults apply."""
        return paths.label(self)

    @property
    def draft_label(self) -> str:
        """Only the knobs someone set; none set reads 'transformers defaults'."""
        parts = []
        if self.num_assistant_tokens is not None:
            parts.append(f"k={self.num_assistant_tokens}")
        if self.num_assistant_tokens_schedule is not None and (
            self.num_assistant_tokens_schedule != "constant" or self.num_assistant_tokens is None
        ):
            parts.append(self.num_assistant_tokens_schedule)
        if self.assistant_confidence_threshold is not None:
            parts.append(f"threshold {self.assistant_confidence_threshold:g}")
        return ", ".join(parts) if parts else "transformers defaults"

    @property
    def uses_transformers_defaults(self) -> bool:
        """True when no drafting knob is set, so the arm runs what generate() does by default."""
        return (self.num_assistant_tokens, self.num_assistant_tokens_schedule, self.assistant_confidence_threshold) == (
            None, None, None
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _ensemble_weight(value: object) -> float | None:
    """None, or a weight strictly between 0 and 1 (whether the path can mix probabilities is its own check)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        weight = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"assistant_ensemble_weight must be a number between 0 and 1, got {value!r}.") from None
    if not 0.0 < weight < 1.0:
        raise InputError(
            f"assistant_ensemble_weight must be strictly between 0 and 1 (leave it empty for lossless "
            f"verification), got {weight:g}."
        )
    return weight


def assisted_arms(
    strategy: str,
    assistants: tuple[str, ...] | list[str] = (),
    *,
    also_prompt_lookup: bool = True,
    early_exit_layer: int | None = None,
    **knobs,
) -> tuple[ArmSpec, ...]:
    """The arms a form or a command line describes, shared by the web app and the CLI.

    The chosen strategy comes first, with every assistant when it drafts with a model; when it needs no
    model, each assistant still gets an arm of its own with 'auto'. Prompt lookup comes last when asked for.
    """
    assistants = [a for a in assistants if a and str(a).strip()]
    if len(assistants) > LIMITS["arms"]:  # before any arm is built from them
        raise InputError(f"At most {LIMITS['arms']} assisted arms can be compared at once; got {len(assistants)} assistants.")
    if strategy in paths.MODEL_STRATEGIES:
        arms = [ArmSpec(strategy, a, **knobs) for a in assistants] or [ArmSpec(strategy, None, **knobs)]
    else:
        arms = [ArmSpec(strategy, early_exit_layer=early_exit_layer, **knobs)]
        arms += [ArmSpec("auto", a, **knobs) for a in assistants]
    if also_prompt_lookup and strategy != "prompt-lookup":
        lookup = knobs.get("prompt_lookup_num_tokens")
        arms.append(ArmSpec("prompt-lookup", prompt_lookup_num_tokens=lookup))
    return tuple(arms)
