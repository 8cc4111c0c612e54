"""What a user asks for: frozen, validated requests for one comparison."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .errors import InputError

STRATEGIES = ("auto", "assistant", "universal", "prompt-lookup", "early-exit")
# Strategies that need a second model.
MODEL_STRATEGIES = ("auto", "assistant", "universal")
# Drafters transformers ships beside the classic paths; assistlab/drafters.py picks and checks them.
DRAFTER_STRATEGIES = ("gemma4-assistant", "mtp", "dflash")
STRATEGIES = (*STRATEGIES, *DRAFTER_STRATEGIES)
MODEL_STRATEGIES = (*MODEL_STRATEGIES, "gemma4-assistant", "dflash")
SCHEDULES = ("constant", "heuristic", "heuristic_transient")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")

# Upper limits, in the spirit of TGI's --max-input-tokens: a shared server must not accept unbounded work.
LIMITS = {
    "max_new_tokens": 2048,
    "repeats": 50,
    "warmup": 10,
    "prompt_chars": 32_000,
    "num_assistant_tokens": 64,
    "prompt_lookup_num_tokens": 64,
    "arms": 8,
    "max_time_s": 3600,
    "upload_bytes": 2_000_000,  # the largest file the server accepts from a browser or client (Gradio's max_file_size)
}

# Longest text accepted in each free-text field, checked before the text is split or parsed, so a megabyte
# pasted into a small box is refused at once rather than turned into thousands of arms first.
FIELD_CHARS = {
    "target": 512,
    "assistant": 512,
    "extra_assistants": 4096,
    "sweep_values": 256,
}

# prompt_lookup_num_tokens has no transformers default (generate() only looks up when it is given), so
# AssistLab chooses one; every other drafting knob left unset takes transformers' own default at run time.
PROMPT_LOOKUP_DEFAULT = 10
# A precision target is judged only from this many repetitions on (fewer give no interval worth the name).
MIN_PRECISION_REPEATS = 5
# The time budget for the timed repetitions when a precision target is given without one.
DEFAULT_MAX_TIME_S = 300.0

# Defaults that finish quickly on a CPU; on CUDA the reference benchmark's 256 tokens.
CPU_DEFAULTS = {"max_new_tokens": 64, "repeats": 5, "warmup": 1}
CUDA_DEFAULTS = {"max_new_tokens": 256, "repeats": 5, "warmup": 1}

DEFAULT_PROMPT = "Write me a long essay on Deep Learning"
# For a base model (no chat template), which continues a text rather than answering a request: the start of
# the text you want reads far better than an instruction.
CONTINUATION_PROMPT = "Deep learning is a branch of machine learning that"


def _as_int(name: str, value: object, low: int, high: int) -> int:
    """Coerce a user value to an int in [low, high] or raise a message naming the field."""
    if isinstance(value, bool):
        raise InputError(f"{name} must be a whole number, not {value!r}.")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise InputError(f"{name} must be a whole number, got {value!r}.")
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InputError(f"{name} must be a whole number, got {value!r}.") from None
    if not isinstance(value, int):
        raise InputError(f"{name} must be a whole number, got {value!r}.")
    if value < low or value > high:
        raise InputError(f"{name} must be between {low} and {high}, got {value}.")
    return value


def capped_text(field: str, value: object) -> object:
    """`value` unchanged when it is not text or is short enough for `field` (see FIELD_CHARS); else an error."""
    limit = FIELD_CHARS[field]
    if isinstance(value, str) and len(value) > limit:
        raise InputError(
            f"{field} has {len(value):,} characters; the limit is {limit:,}. Shorten it (one model reference is "
            f"at most {FIELD_CHARS['target']} characters)."
        )
    return value


def check_encodable(field: str, text: str) -> None:
    """Refuse text a tokenizer cannot encode: lone surrogates (half of an emoji's UTF-16 pair) have no UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"The {field} contains a character that is not valid text (a lone surrogate, {text[exc.start]!r}, at "
            f"character {exc.start + 1}); remove it or paste the text again from its source."
        ) from None


def _as_float(name: str, value: object) -> float:
    """Coerce a user value to a finite float or raise a message naming the field."""
    if isinstance(value, bool):
        raise InputError(f"{name} must be a number, not {value!r}.")
    try:
        number = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {value!r}.") from None
    if not math.isfinite(number):
        raise InputError(f"{name} must be a finite number, got {value!r}.")
    return number


def _choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)}; got {value!r}.")
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class ArmSpec:
    """One assisted arm: how candidate tokens are drafted for the target to verify.

    A drafting knob left at None takes transformers' default for `generate(assistant_model=...)` (read from
    transformers at run time, see strategies.drafting_settings); prompt_lookup_num_tokens, which transformers
    has no default for, takes PROMPT_LOOKUP_DEFAULT.
    """

    strategy: str = "auto"
    assistant: str | None = None
    num_assistant_tokens: int | None = None
    num_assistant_tokens_schedule: str | None = None
    assistant_confidence_threshold: float | None = None
    prompt_lookup_num_tokens: int | None = None
    early_exit_layer: int | None = None
    # In (0, 1): ensemble verification, which makes the arm lossy (see drafters.py). None keeps it lossless.
    assistant_ensemble_weight: float | None = None

    def __post_init__(self) -> None:
        _choice("strategy", self.strategy, STRATEGIES)
        if self.num_assistant_tokens_schedule is not None:
            _choice("num_assistant_tokens_schedule", self.num_assistant_tokens_schedule, SCHEDULES)
        for name in ("num_assistant_tokens", "prompt_lookup_num_tokens"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _as_int(name, getattr(self, name), 1, LIMITS[name]))
        if self.strategy in MODEL_STRATEGIES and not (self.strategy == "auto" and not self.assistant):
            if not self.assistant or not str(self.assistant).strip():
                raise InputError(f"The {self.strategy!r} strategy needs an assistant model; choose one or use prompt-lookup.")
            object.__setattr__(self, "assistant", str(self.assistant).strip())
        else:
            object.__setattr__(self, "assistant", None)
        if self.strategy == "early-exit":
            if self.early_exit_layer is None:
                raise InputError("early_exit_layer is required for the early-exit strategy (a layer number, e.g. 4).")
            object.__setattr__(self, "early_exit_layer", _as_int("early_exit_layer", self.early_exit_layer, 1, 1000))
        else:
            object.__setattr__(self, "early_exit_layer", None)
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
        object.__setattr__(
            self, "assistant_ensemble_weight", _ensemble_weight(self.strategy, self.assistant_ensemble_weight)
        )

    @property
    def lookup_tokens(self) -> int:
        """prompt_lookup_num_tokens as it will run: the one given, else AssistLab's default."""
        return self.prompt_lookup_num_tokens if self.prompt_lookup_num_tokens is not None else PROMPT_LOOKUP_DEFAULT

    @property
    def label(self) -> str:
        """A short, unique-enough name for charts and tables; says when transformers' defaults apply."""
        if (
            self.strategy in DRAFTER_STRATEGIES
            or self.assistant_ensemble_weight is not None
            or (self.strategy == "auto" and not self.assistant)
        ):
            return _drafter_label(self)
        if self.strategy == "prompt-lookup":
            return f"prompt-lookup (k={self.lookup_tokens})"
        if self.strategy == "early-exit":
            return f"early-exit (layer {self.early_exit_layer}, {self._draft_label})"
        short = str(self.assistant).rstrip("/").split("/")[-1].split(":")[-1]
        return f"{self.strategy}: {short} ({self._draft_label})"

    @property
    def _draft_label(self) -> str:
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


def _ensemble_weight(strategy: str, value: object) -> float | None:
    """None, or a weight strictly between 0 and 1 on a path whose drafts carry probabilities."""
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
    if strategy == "prompt-lookup":
        raise InputError(
            "Prompt lookup proposes tokens without probabilities, so ensemble verification has nothing to mix; "
            "leave assistant_ensemble_weight empty, or use it with an assistant, early-exit, mtp or dflash arm."
        )
    return weight


def _drafter_label(spec: ArmSpec) -> str:
    """Labels for the drafters paths, an 'auto' arm with no assistant, and the ensemble mark on any path."""
    if spec.assistant_ensemble_weight is not None:
        plain = dataclasses.replace(spec, assistant_ensemble_weight=None).label
        head, _, tail = plain.rpartition(")")
        return f"{head}, ensemble w={spec.assistant_ensemble_weight:g}){tail}" if head else (
            f"{plain} (ensemble w={spec.assistant_ensemble_weight:g})"
        )
    if spec.strategy == "mtp":
        return "mtp (target's own MTP layers)"
    if spec.strategy == "auto" and not spec.assistant:
        return "auto (no assistant)"
    short = str(spec.assistant).rstrip("/").split("/")[-1].split(":")[-1]
    if spec.strategy == "dflash":
        return f"dflash: {short} (block from the draft model)"
    return f"{spec.strategy}: {short} ({spec._draft_label})"


@dataclass(frozen=True)
class BenchRequest:
    """A whole comparison: the target, its assisted arms, the prompt and how to time it.

    `max_new_tokens`, `repeats` and `warmup` may be None, meaning the device default (see `resolved`).
    With `precision` (a relative half-width, 0.05 for ±5%) repetitions continue until every assisted arm's
    speedup interval lies within ±precision of its median, `max_time_s` of timed repetitions is spent, or
    `repeats` repetitions are done (then the most, not a fixed count; LIMITS['repeats'] when unset).
    Without it `repeats` is a fixed count, and `max_time_s`, when given, may end the runs sooner.
    """

    target: str
    arms: tuple[ArmSpec, ...] = ()
    prompt: str = DEFAULT_PROMPT
    max_new_tokens: int | None = None
    repeats: int | None = None
    warmup: int | None = None
    do_sample: bool = False
    seed: int = 0
    fixed_length: bool = True
    chat_template: bool = True
    device: str = "auto"
    dtype: str = "auto"
    device_map_auto: bool = False
    precision: float | None = None
    max_time_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not self.target.strip():
            raise InputError("Choose a target model (a hub id like org/name, a bundled name, or a local folder).")
        object.__setattr__(self, "target", self.target.strip())
        if not isinstance(self.prompt, str):
            raise InputError("The prompt must be a single piece of text (batch inputs are not supported).")
        if not self.prompt.strip():
            raise InputError("The prompt is empty; type a prompt or pick an example.")
        if len(self.prompt) > LIMITS["prompt_chars"]:
            raise InputError(
                f"The prompt has {len(self.prompt):,} characters; the limit is {LIMITS['prompt_chars']:,}. Shorten it."
            )
        check_encodable("prompt", self.prompt)
        arms = tuple(self.arms)
        if not all(isinstance(a, ArmSpec) for a in arms):
            raise InputError("Each assisted arm must be an ArmSpec.")
        if len(arms) > LIMITS["arms"]:
            raise InputError(f"At most {LIMITS['arms']} assisted arms can be compared at once; got {len(arms)}.")
        object.__setattr__(self, "arms", arms)
        for name, low in (("max_new_tokens", 1), ("repeats", 1), ("warmup", 0)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _as_int(name, value, low, LIMITS[name]))
        object.__setattr__(self, "seed", _as_int("seed", self.seed, 0, 2**31 - 1))
        if self.precision is not None:
            value = _as_float("precision", self.precision)
            if not 0.0 < value < 1.0:
                raise InputError(
                    f"precision is a relative half-width between 0 and 1 (0.05 means ±5%), got {value:g}."
                )
            object.__setattr__(self, "precision", value)
        if self.max_time_s is not None:
            value = _as_float("max_time_s", self.max_time_s)
            if not 0.0 < value <= LIMITS["max_time_s"]:
                raise InputError(
                    f"max_time_s must be more than 0 and at most {LIMITS['max_time_s']} seconds, got {value:g}."
                )
            object.__setattr__(self, "max_time_s", value)
        _choice("device", self.device, DEVICES)
        _choice("dtype", self.dtype, DTYPES)
        for name in ("do_sample", "fixed_length", "chat_template", "device_map_auto"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}.")

    def resolved(self, device_type: str) -> BenchRequest:
        """The same request with device defaults filled in (`device_type` is 'cpu' or 'cuda').

        With a precision target, unset `repeats` becomes the most allowed and unset `max_time_s` the default
        budget, so the target, not a guess, decides how many repetitions run.
        """
        defaults = dict(CUDA_DEFAULTS if device_type == "cuda" else CPU_DEFAULTS)
        if self.precision is not None:
            defaults.update(repeats=LIMITS["repeats"], max_time_s=DEFAULT_MAX_TIME_S)
        changes = {k: v for k, v in defaults.items() if getattr(self, k) is None}
        return dataclasses.replace(self, **changes) if changes else self

    @property
    def stopping_rule(self) -> str:
        """'precision' when a precision target decides the repetitions, else 'fixed'."""
        return "fixed" if self.precision is None else "precision"

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["arms"] = [a.to_dict() for a in self.arms]
        return data


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
    if strategy in MODEL_STRATEGIES:
        arms = [ArmSpec(strategy, a, **knobs) for a in assistants] or [ArmSpec(strategy, None, **knobs)]
    else:
        arms = [ArmSpec(strategy, early_exit_layer=early_exit_layer, **knobs)]
        arms += [ArmSpec("auto", a, **knobs) for a in assistants]
    if also_prompt_lookup and strategy != "prompt-lookup":
        lookup = knobs.get("prompt_lookup_num_tokens")
        arms.append(ArmSpec("prompt-lookup", prompt_lookup_num_tokens=lookup))
    return tuple(arms)
