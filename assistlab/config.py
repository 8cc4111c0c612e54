"""What a user asks for: frozen, validated requests for one comparison."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

from .errors import InputError

# The drafting paths (strategies) are listed in one place only: assistlab/engines/transformers/paths/.
SCHEDULES = ("constant", "heuristic", "heuristic_transient")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# The engines an arm may run on: transformers' generate() in this process, or a vLLM server (engines/vllm/).
ENGINES = ("transformers", "vllm")

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
# How many repetitions run: a fixed count, until the answer is clear (the default when no count is given: "sure",
# assuming nothing), until the likely answer is in (sooner, assuming roughly normal noise), or until every speedup
# is known to a precision (assistlab/measure/stopping.py decides after each repetition).
STOP_RULES = ("fixed", "clear", "likely", "precision")
# "Careful": the precision every speedup is measured to, within DEFAULT_MAX_TIME_S of timed runs.
CAREFUL_PRECISION = 0.05
# The three rules a person chooses between, named by what they promise: (command-line and API name, the rule, the
# words the page, the command line's help, the API's description and the docs all use).
RULE_WORDS = (
    ("likely", "likely", "Likely: sooner, assumes roughly normal noise"),
    ("sure", "clear", "Sure: assumes nothing"),
    ("careful", "precision", f"Careful: every speedup within ±{CAREFUL_PRECISION:.0%}"),
)
# "clear" stops once every assisted arm's time-uniform interval excludes 1x or lies within 1 ± this band (no
# practical difference), or at these budgets of repetitions and seconds of timed runs, when they are not given.
NO_DIFFERENCE_BAND = 0.03
CLEAR_MAX_REPEATS = 30
CLEAR_MAX_TIME_S = 600.0
# A workload whose prompts each run until their answer is clear: the budget of timed runs for the whole workload
# when none is given, shared out among the prompts not yet measured.
SUITE_CLEAR_MAX_TIME_S = 1800.0

# Load levels (issue 27): how many requests a server arm is sent at once, at most this many levels, each in 1..MAX.
MAX_LOAD_LEVELS = 8
MAX_CONCURRENCY = 256
# Timed rounds per level when not given: [min, max] of 5 paired rounds is a 93.75% interval for the median.
LOAD_ROUNDS = 5
LIMITS["load_rounds"] = 20

# New tokens of a warm-up run (or max_new_tokens when fewer): enough to pay every one-time cost (the first step's
# allocations, the drafter's set-up, a verification of a whole draft) so the first counted repetition runs at
# the steady speed, without a whole run's length before the first answer (measure/runner.py).
WARMUP_TOKENS = 16
# Defaults that finish quickly on a CPU; on CUDA the reference benchmark's 256 tokens. On a CPU 32 new tokens bring
# the bundled pair's first answer (4 repetitions of three arms) within about a minute and a half on 2 cores
# (docs/benchmarks.md); 64 took about two minutes idle and far longer on a busy machine.
CPU_DEFAULTS = {"max_new_tokens": 32, "repeats": 5, "warmup": 1}
CUDA_DEFAULTS = {"max_new_tokens": 256, "repeats": 5, "warmup": 1}

DEFAULT_PROMPT = "Write me a long essay on Deep Learning"
# For a base model (no chat template), which continues a text rather than answering a request: the start of
# the text you want reads far better than an instruction.
CONTINUATION_PROMPT = "Deep learning is a branch of machine learning that"


def _as_int(name: str, value: object, low: int, high: int) -> int:
    """Coerce a user value to an int in [low, high] or raise a message naming the field."""
    if isinstance(value, bool):
        raise InputError(f"{{{name}}} must be a whole number, not {value!r}.", name)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise InputError(f"{{{name}}} must be a whole number, got {value!r}.", name)
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InputError(f"{{{name}}} must be a whole number, got {value!r}.", name) from None
    if not isinstance(value, int):
        raise InputError(f"{{{name}}} must be a whole number, got {value!r}.", name)
    if value < low or value > high:
        raise InputError(f"{{{name}}} must be between {low} and {high}, got {value}.", name)
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
        raise InputError(f"{{{name}}} must be a number, not {value!r}.", name)
    try:
        number = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{{{name}}} must be a number, got {value!r}.", name) from None
    if not math.isfinite(number):
        raise InputError(f"{{{name}}} must be a finite number, got {value!r}.", name)
    return number


def parse_levels(value: object, name: str = "concurrency") -> tuple[int, ...]:
    """Load levels from "1,2,4,8" (spaces allowed) or a list of whole numbers: sorted, each once; () for none.

    Each level is in 1..MAX_CONCURRENCY and there are at most MAX_LOAD_LEVELS; anything else is refused in one
    sentence naming the field.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        if len(value) > 256:
            raise InputError(f"{name} has {len(value):,} characters; give at most {MAX_LOAD_LEVELS} levels like 1,2,4,8.")
        parts = [p for p in value.replace(";", ",").replace(" ", ",").split(",") if p.strip()]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        parts = [value]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise InputError(f"{name} must be load levels like 1,2,4,8, got {value!r}.")
    levels = []
    for part in parts:
        try:
            levels.append(_as_int(name, part, 1, MAX_CONCURRENCY))
        except InputError:
            raise InputError(f"{name}: each load level is a whole number of requests at once from 1 to "
                             f"{MAX_CONCURRENCY}, got {str(part).strip()[:20]!r}; write levels like 1,2,4,8.") from None
    levels = tuple(sorted(set(levels)))
    if len(levels) > MAX_LOAD_LEVELS:
        raise InputError(f"{name}: at most {MAX_LOAD_LEVELS} load levels at once, got {len(levels)}; drop some "
                         f"(1,2,4,8 shows the curve's shape).")
    return levels


def _choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(f"{{{name}}} must be one of {', '.join(choices)}; got {value!r}.", name)
    return value  # type: ignore[return-value]


class ArmRequest:
    """What an engine's arm request is: a frozen dataclass validated at birth, with `label` and `to_dict()`.

    The transformers engine's is `assistlab.engines.transformers.arms.ArmSpec`; this base lets a comparison
    hold arms without knowing the engines above it.
    """

    engine: ClassVar[str]

    @property
    def assisted(self) -> bool:
        """Whether the arm drafts (a plain arm of an engine is that engine's baseline)."""
        return True


@dataclass(frozen=True)
class BenchRequest:
    """A whole comparison: the target, its assisted arms, the prompt and how to time it.

    `max_new_tokens`, `repeats` and `warmup` may be None, meaning the device default (see `resolved`).
    With `precision` (a relative half-width, 0.05 for ±5%) repetitions continue until every assisted arm's
    speedup interval lies within ±precision of its median, `max_time_s` of timed repetitions is spent, or
    `repeats` repetitions are done (then the most, not a fixed count; LIMITS['repeats'] when unset).
    Without it, a given `repeats` is a fixed count, and `max_time_s`, when given, may end the runs sooner; with
    no count the rule is "clear": stop once every assisted arm's time-uniform interval excludes 1x or lies within
    1 ± `band`, or at CLEAR_MAX_REPEATS or CLEAR_MAX_TIME_S. `stop_rule` names the rule outright (None: as just
    said); "clear" or "likely" with a count makes the count its most. "likely" stops once every assisted arm has
    its likely answer (results/likely.py, assuming roughly normal noise), or its sure answer when its sample is
    too skewed for a likely one, within the same budgets as "clear".
    """

    target: str
    arms: tuple[ArmRequest, ...] = ()
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
    # Which engines run: transformers' plain arm runs when "transformers" is listed, and every arm's engine
    # must be listed. Each engine's plain arm is the baseline of that engine's assisted arms.
    engines: tuple[str, ...] = ("transformers",)
    stop_rule: str | None = None
    band: float = NO_DIFFERENCE_BAND
    # Load levels for the server engines' arms (after the single-request rounds): () times one request at a time.
    concurrency: tuple[int, ...] = ()
    load_rounds: int = LOAD_ROUNDS
    # Where the servers take turns in blocks (no sleep mode): rounds per block at each level; None: half the
    # rounds, one cycle a level. Fewer make more blocks, the interval's units there, at a server start each.
    load_block_rounds: int | None = None

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
                f"prompt: the text has {len(self.prompt):,} characters; the limit is {LIMITS['prompt_chars']:,}. "
                "Shorten it."
            )
        check_encodable("prompt", self.prompt)
        arms = tuple(self.arms)
        if not all(isinstance(a, ArmRequest) for a in arms):
            raise InputError("Each assisted arm must be an ArmSpec.")
        if len(arms) > LIMITS["arms"]:
            raise InputError(f"At most {LIMITS['arms']} assisted arms can be compared at once; got {len(arms)}.")
        object.__setattr__(self, "arms", arms)
        engines = self.engines.split(",") if isinstance(self.engines, str) else list(self.engines or ())
        engines = tuple(dict.fromkeys(str(e).strip() for e in engines if str(e).strip()))
        if not engines:
            raise InputError(f"Choose at least one engine ({', '.join(ENGINES)}).")
        for engine in engines:
            _choice("engines", engine, ENGINES)
        for arm in arms:
            if arm.engine not in engines:
                raise InputError(f"The arm {arm.label} runs on {arm.engine}, which is not among the engines chosen "
                                 f"({', '.join(engines)}); add it to the engines or drop the arm.")
        object.__setattr__(self, "engines", engines)
        if self.do_sample is True and any(arm.engine != "transformers" for arm in arms):
            raise InputError("vLLM arms are timed greedy (temperature 0) so that their tokens can be checked; turn "
                             "sampling off, or leave the vLLM arms out.")
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
                    f"{{max_time_s}} must be more than 0 and at most {LIMITS['max_time_s']} seconds, got {value:g}.",
                    "max_time_s")
            object.__setattr__(self, "max_time_s", value)
        if self.stop_rule is not None:
            _choice("stop_rule", self.stop_rule, STOP_RULES)
            if (self.stop_rule == "precision") != (self.precision is not None):
                raise InputError("stop_rule 'precision' goes with a precision target, and a precision target with "
                                 f"stop_rule 'precision' (or none); got {self.stop_rule!r} and {self.precision!r}.")
        band = _as_float("band", self.band)
        if not 0.0 < band < 0.5:
            raise InputError(f"band is the share either side of 1x called no practical difference, between 0 and "
                             f"0.5 (0.03 means ±3%), got {band:g}.")
        object.__setattr__(self, "band", band)
        levels = parse_levels(self.concurrency)
        if levels and not any(arm.engine != "transformers" for arm in arms):
            raise InputError("concurrency: load levels time a serving engine's arms (vLLM) with many requests at "
                             "once; transformers' assisted generation runs one request at a time, so add a vLLM arm "
                             "or leave concurrency empty.")
        object.__setattr__(self, "concurrency", levels)
        object.__setattr__(self, "load_rounds", _as_int("load_rounds", self.load_rounds, 1, LIMITS["load_rounds"]))
        if self.load_block_rounds is not None:
            object.__setattr__(self, "load_block_rounds", _as_int("load_block_rounds", self.load_block_rounds, 1,
                                                                  self.load_rounds))
        _choice("device", self.device, DEVICES)
        _choice("dtype", self.dtype, DTYPES)
        for name in ("do_sample", "fixed_length", "chat_template", "device_map_auto"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}.")

    def resolved(self, device_type: str) -> BenchRequest:
        """The same request with device defaults filled in (`device_type` is 'cpu' or 'cuda').

        With a precision target, unset `repeats` becomes the most allowed and unset `max_time_s` the default
        budget, so the target, not a guess, decides how many repetitions run; with the rules "clear" and "likely"
        they become their budgets. The rule is written out, so the resolved request keeps it.
        """
        defaults = dict(CUDA_DEFAULTS if device_type == "cuda" else CPU_DEFAULTS)
        rule = self.stopping_rule
        if rule == "precision":
            defaults.update(repeats=LIMITS["repeats"], max_time_s=DEFAULT_MAX_TIME_S)
        elif rule in ("clear", "likely"):
            defaults.update(repeats=CLEAR_MAX_REPEATS, max_time_s=CLEAR_MAX_TIME_S)
        changes = {k: v for k, v in defaults.items() if getattr(self, k) is None}
        if self.stop_rule is None:
            changes["stop_rule"] = rule
        return dataclasses.replace(self, **changes) if changes else self

    @property
    def stopping_rule(self) -> str:
        """`stop_rule` when given; else 'precision' with a precision target, 'fixed' with a repetition count,
        and 'clear' (stop when the answer is clear) with neither."""
        if self.stop_rule is not None:
            return self.stop_rule
        return "precision" if self.precision is not None else "fixed" if self.repeats is not None else "clear"

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["arms"] = [a.to_dict() for a in self.arms]
        data["engines"] = list(self.engines)
        data["concurrency"] = list(self.concurrency)
        return data
