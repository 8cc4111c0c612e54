"""The form's fields in one place: choices, hints, labels, and how the form's values become a request.

No gradio here: the form, the API and the tests all build requests through `request_from_form`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config import (
    CONTINUATION_PROMPT,
    CPU_DEFAULTS,
    CUDA_DEFAULTS,
    DEFAULT_MAX_TIME_S,
    DEFAULT_PROMPT,
    LIMITS,
    PROMPT_LOOKUP_DEFAULT,
    SCHEDULES,
    BenchRequest,
    capped_text,
)
from ..engines import catalog
from ..engines.transformers import paths
from ..engines.transformers.arms import assisted_arms
from ..engines.transformers.paths import transformers_defaults
from ..errors import InputError
from ..measure import sweep

# What an empty drafting box means, read from the installed transformers (as the runner reads it).
TRANSFORMERS_DEFAULTS = transformers_defaults()
DRAFT_DEFAULT_TEXT = {
    "num_assistant_tokens": f"transformers' default ({TRANSFORMERS_DEFAULTS['num_assistant_tokens']})",
    "schedule": f"transformers' default ({TRANSFORMERS_DEFAULTS['num_assistant_tokens_schedule']})",
    "confidence_threshold": f"transformers' default ({TRANSFORMERS_DEFAULTS['assistant_confidence_threshold']:g})",
    "prompt_lookup_num_tokens": f"AssistLab's default ({PROMPT_LOOKUP_DEFAULT})",
}
# How sure a comparison should be, in the page's words. "careful" is the command line's
# `--precision 0.05 --max-time 300`; a workload always runs its fixed count per prompt.
CAREFUL_PRECISION = 0.05
MEASURES = ("quick", "careful")
MEASURE_CHOICES = [
    (f"Quick: a fixed number of timed runs of plain and of each assistant ({CPU_DEFAULTS['repeats']} on a CPU, "
     f"{CUDA_DEFAULTS['repeats']} on a GPU, or the number set in Settings)", "quick"),
    (f"Careful: repeat until every speedup is known to ±{CAREFUL_PRECISION:.0%}, for at most "
     f"{DEFAULT_MAX_TIME_S / 60:.0f} minutes of timed runs", "careful"),
]
# The schedule box: its first choice (value "") leaves the schedule to transformers.
SCHEDULE_CHOICES = [(DRAFT_DEFAULT_TEXT["schedule"], ""), *((name, name) for name in SCHEDULES)]

STRATEGY_CHOICES = paths.choices()  # the registry of drafting paths is the only list of them

EXAMPLES = [
    ("Start of a text (for base models)", CONTINUATION_PROMPT),
    ("Essay (the reference prompt, for chat models)", DEFAULT_PROMPT),
    (
        "Summarise a pasted text",
        "Summarise the following text in three sentences.\n\n"
        "Speculative decoding speeds up text generation by letting a small, fast assistant model guess the next "
        "few tokens. The large target model then checks all of the guesses in a single forward pass and keeps "
        "the longest prefix it agrees with. Because checking several tokens costs about the same as generating "
        "one, every accepted guess saves time, and the output is exactly what the target would have written on "
        "its own. The method works best when the assistant often agrees with the target, for example on "
        "predictable text, code, or when the answer repeats parts of the prompt.",
    ),
    (
        "Edit some code",
        "Rename the variable `x` to `total`, add type hints and a docstring, and return the code.\n\n"
        "```python\n"
        "def add_all(items):\n"
        "    x = 0\n"
        "    for item in items:\n"
        "        x += item\n"
        "    return x\n"
        "\n"
        "def mean(items):\n"
        "    x = add_all(items)\n"
        "    return x / len(items)\n"
        "```",
    ),
]

HINTS = {
    "max_new_tokens": (
        f"Empty = the device default ({CPU_DEFAULTS['max_new_tokens']} on a CPU, {CUDA_DEFAULTS['max_new_tokens']} "
        f"on a GPU), at most {LIMITS['max_new_tokens']}. Every run writes exactly this many, so arms do equal work."
    ),
    "repeats": (
        f"Timed runs per arm. Empty = the device default ({CPU_DEFAULTS['repeats']} on a CPU, "
        f"{CUDA_DEFAULTS['repeats']} on a GPU), at most {LIMITS['repeats']}. More runs narrow the interval."
    ),
    "measure": (
        "Quick gives a first answer. Careful keeps measuring until every speedup is known to within "
        f"±{CAREFUL_PRECISION:.0%} (its confidence interval), so small differences can be told apart; the "
        "progress bar counts against the most that may run."
    ),
    "warmup": (
        f"Untimed runs first, so start-up costs are not counted; {CPU_DEFAULTS['warmup']} is usually enough, "
        f"0 = none, at most {LIMITS['warmup']}."
    ),
    "do_sample": "Greedy writes the same text every time, so plain and assisted outputs can be checked for "
    "equality. Sampling draws at random from the seed.",
    "seed": "Makes sampling repeatable.",
    "device": "auto = the GPU when there is one, else the CPU.",
    "dtype": "How precisely the models' numbers are kept. auto = bfloat16 (half the memory) on a GPU that "
    "supports it, else float32.",
    "device_map_auto": "For a target too big for one GPU: its layers are spread over every GPU (accelerate's "
    "device_map=auto).",
    "num_assistant_tokens": "How many tokens (word pieces) the assistant guesses before the target checks them: "
    "the draft length, k in an arm's name (transformers calls it num_assistant_tokens). Empty = "
    f"{DRAFT_DEFAULT_TEXT['num_assistant_tokens']}, at most {LIMITS['num_assistant_tokens']}.",
    "schedule": "Whether the draft length stays as set (constant) or adapts as the text goes (heuristic: two "
    "longer after a draft the target kept whole, one shorter after a miss). "
    f"The first choice leaves it to transformers ({TRANSFORMERS_DEFAULTS['num_assistant_tokens_schedule']}).",
    "confidence": "The assistant stops guessing early when it is less sure of its next word than this (0 to 1). "
    "Empty = "
    f"{DRAFT_DEFAULT_TEXT['confidence_threshold']}; 0 switches it off.",
    "prompt_lookup_num_tokens": "How many tokens prompt lookup copies from the prompt per guess "
    "(prompt_lookup_num_tokens). Empty = "
    f"AssistLab's default ({PROMPT_LOOKUP_DEFAULT}; transformers has none), at most "
    f"{LIMITS['prompt_lookup_num_tokens']}.",
    "sweep_values": "Whole numbers, comma-separated; each becomes one arm of the sweep.",
    "early_exit_layer": "For early exit: how many of the target's own first layers make the guesses (e.g. 4, "
    "of a model trained for it, such as LayerSkip). 0 = not set.",
    "target": "The big model whose speed you care about. Choose one, or type a model's name on Hugging Face as "
    "its page address shows it (huggingface.co/Qwen/Qwen2.5-7B-Instruct: type Qwen/Qwen2.5-7B-Instruct; "
    "this is its hub id, org/name), or a folder the operator shared.",
    "assistant": "A small, fast model that guesses the target's next few words (drafts tokens) for the target to "
    "check; used by Auto and the two “Assistant model” ways.",
    "extra_assistants": "More assistants to compare in the same run, one per line or comma-separated.",
    "strategy": "The assistant guesses a few words ahead; the target checks all the guesses in one step and keeps "
    "those it would have written itself (speculative decoding). The text stays the same; only the time changes. "
    "Choose how the guesses are made, or leave it to Auto.",
    "also_prompt_lookup": "Also time guesses copied from the prompt itself: no second model, often good when the "
    "answer repeats the prompt.",
    "chat_template": "Wrap the prompt as a chat message when the target has a chat template. A base model "
    "without one (like the bundled Gemma 3 270M) continues the prompt as text instead of answering it, so give "
    "it the start of the text you want.",
}

SWEEP_VALUES = "1,2,3,5,8"
SWEEP_SCHEDULES = ("heuristic",)  # the adaptive point added to a draft-length sweep
SWEEP_INTRO = (
    "How many words should the assistant guess at a time? Try several lengths in one go, each timed against the "
    "same plain run, with the settings above. **Sweep draft length** tries them for the first assistant model "
    "(and one length that adapts as it goes); **Sweep prompt-lookup length** tries them for prompt lookup."
)
# One click away from SWEEP_INTRO: the settings a sweep varies, by their transformers names.
SWEEP_DETAILS = (
    "**Sweep draft length** varies `num_assistant_tokens` of the first arm with an assistant model, and adds "
    "transformers' adaptive `heuristic` schedule (two tokens longer after a draft kept whole, one shorter after "
    "a miss). **Sweep prompt-lookup length** varies `prompt_lookup_num_tokens`. Each value is one arm; all share "
    "one plain baseline, and the best is named only when it is clearly ahead of the others."
)

INTRO = (
    "Pick a big model (the target) and a small assistant, then press **Run**. The assistant guesses the "
    "target's next few words and the target checks them all at once, so the text stays the same but may come "
    "sooner. AssistLab times the target on its own (plain) and with each kind of help, alternating runs so both "
    "see the same machine, and shows how much faster (or slower) the help was, with every run as a point."
)

# ---------------------------------------------------------------- from the form to a request


def _blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _unset(value) -> bool:
    """Empty or 0: number boxes cannot be empty, so 0 stands for 'not set' where 0 is no useful value."""
    return _blank(value) or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0)


def _optional_count(value):
    """Counts (tokens, repetitions, draft lengths): empty means the default (the device's, or transformers'
    for drafting); 0 is refused by the request, as in the CLI.

    The page's boxes for these are text boxes (a number box turns empty into 0 when it is shown), so a typed
    value arrives as text; the request parses it and names the field if it is not a whole number.
    """
    if _blank(value):
        return None
    return value.strip() if isinstance(value, str) else value


def _stripped(value):
    return value.strip() if isinstance(value, str) else value


def _split_refs(text) -> list[str]:
    if _blank(text):
        return []
    return [part.strip() for line in str(text).splitlines() for part in line.split(",") if part.strip()]


def request_from_form(
    target,
    assistant,
    strategy,
    prompt,
    max_new_tokens=None,
    repeats=None,
    warmup=None,
    also_prompt_lookup=True,
    extra_assistants="",
    chat_template=True,
    do_sample=False,
    seed=0,
    device="auto",
    dtype="auto",
    num_assistant_tokens=None,
    schedule=None,
    confidence_threshold=None,
    prompt_lookup_num_tokens=None,
    early_exit_layer=None,
    device_map_auto=False,
    measure="quick",
) -> BenchRequest:
    """The request the form (or the API) describes; the dataclasses check every value.

    A drafting setting left empty (None or blank) is left to transformers, as the command line leaves it:
    num_assistant_tokens, schedule and confidence_threshold take transformers' defaults (a confidence of 0
    switches early stopping of drafts off), prompt_lookup_num_tokens AssistLab's default. `measure` is how sure
    to be: "quick" runs a fixed number of repetitions, "careful" repeats until every speedup is known to
    CAREFUL_PRECISION or DEFAULT_MAX_TIME_S of timed runs are spent (Repetitions then caps the count).
    """
    measure = "quick" if _blank(measure) else measure
    if measure not in MEASURES:
        raise InputError(f"How sure (measure) must be one of {', '.join(MEASURES)}; got {measure!r}.")
    for name, text in (("target", target), ("assistant", assistant), ("extra_assistants", extra_assistants)):
        capped_text(name, text)  # before anything splits or parses them
    knobs = {
        "num_assistant_tokens": _optional_count(num_assistant_tokens),
        "num_assistant_tokens_schedule": None if _blank(schedule) else schedule,
        "assistant_confidence_threshold": None if _blank(confidence_threshold) else _stripped(confidence_threshold),
        "prompt_lookup_num_tokens": _optional_count(prompt_lookup_num_tokens),
    }
    strategy = strategy or "auto"
    # The assistant box always holds the preset's model; only a strategy that drafts with a model uses it.
    main = [assistant if isinstance(assistant, str) else ""] if strategy in paths.MODEL_STRATEGIES else []
    extras = _split_refs(extra_assistants)
    for ref in extras:  # a bad one is named by its own box, not by the assistant box it would be run as
        catalog.resolve_field("extra_assistants", ref)
    arms = assisted_arms(
        strategy, main + extras, also_prompt_lookup=bool(also_prompt_lookup),
        early_exit_layer=None if _unset(early_exit_layer) else early_exit_layer, **knobs,
    )
    return BenchRequest(
        target=target if isinstance(target, str) else "",
        arms=arms,
        prompt=prompt if prompt is not None else "",
        max_new_tokens=_optional_count(max_new_tokens),
        repeats=_optional_count(repeats),
        warmup=None if _blank(warmup) else warmup,
        do_sample=bool(do_sample),
        seed=0 if _blank(seed) else seed,
        chat_template=bool(chat_template),
        device=device or "auto",
        dtype=dtype or "auto",
        device_map_auto=bool(device_map_auto),
        precision=CAREFUL_PRECISION if measure == "careful" else None,
        max_time_s=DEFAULT_MAX_TIME_S if measure == "careful" else None,
    )


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep varies: the setting, the values to try, and the adaptive schedules added beside them."""

    param: str
    values: tuple[str, ...]
    schedules: tuple[str, ...] = ()

    def apply(self, request: BenchRequest) -> BenchRequest:
        """The request the sweep really runs: one arm per setting (raises InputError on a bad value)."""
        return sweep.sweep_request(request, self.param, self.values, self.schedules)


def sweep_plan(param: str, values_text) -> SweepPlan:
    """The sweep a button asks for, from the values box ('1,2,3,5,8')."""
    if param not in sweep.PARAMS:
        raise InputError(f"The swept setting must be one of {', '.join(sweep.PARAMS)}; got {param!r}.")
    capped_text("sweep_values", values_text)
    values = tuple(part for part in re.split(r"[,;\s]+", "" if values_text is None else str(values_text)) if part)
    return SweepPlan(param, values, SWEEP_SCHEDULES if param == "num_assistant_tokens" else ())


FORM_FIELDS = (
    "target", "assistant", "strategy", "prompt", "max_new_tokens", "repeats", "warmup", "also_prompt_lookup",
    "extra_assistants", "chat_template", "do_sample", "seed", "device", "dtype", "num_assistant_tokens",
    "schedule", "confidence_threshold", "prompt_lookup_num_tokens", "early_exit_layer", "device_map_auto",
    "measure",
)

# What the page calls each field, so a message can name the box a person sees rather than a code identifier.
LABELS = {
    "target": "Target model",
    "assistant": "Assistant model",
    "strategy": "How the assistant helps",
    "prompt": "Prompt",
    "max_new_tokens": "New tokens per run",
    "repeats": "Repetitions",
    "warmup": "Warm-up runs",
    "also_prompt_lookup": "Also compare prompt lookup",
    "extra_assistants": "Also compare these assistants",
    "chat_template": "Use the chat template",
    "do_sample": "Sample instead of greedy",
    "seed": "Seed",
    "device": "Device",
    "dtype": "Number format (dtype)",
    "num_assistant_tokens": "Draft length (num_assistant_tokens)",
    "schedule": "Draft length schedule",
    "confidence_threshold": "Confidence threshold",
    "prompt_lookup_num_tokens": "Prompt lookup tokens",
    "early_exit_layer": "Early-exit layer",
    "device_map_auto": "Spread the target over all GPUs",
    "measure": "How sure",
}
# Names the request (and so its messages) uses where the form's field has another name.
REQUEST_NAMES = {
    "num_assistant_tokens_schedule": "schedule",
    "assistant_confidence_threshold": "confidence_threshold",
}
_IDENTIFIER = re.compile(
    r"\b(" + "|".join(sorted({*LABELS, *REQUEST_NAMES}, key=len, reverse=True)) + r")\b"
)
# Identifiers that are also ordinary words in a sentence ("the prompt", "the target") are left alone:
# only names with an underscore are code, and only they are replaced.


def in_page_words(message: str) -> str:
    """A message from the package with each code identifier replaced by the label the page shows for it.

    'max_new_tokens must be between 1 and 2048, got 0.' -> 'New tokens per run must be between 1 and 2048, got 0.'
    'target: 'x!!' is not a hub id ...' -> 'Target model: 'x!!' is not a hub id ...'
    """

    def label(match: re.Match) -> str:
        name = match.group(1)
        if match.start() == 0 and message[match.end():match.end() + 1] == ":":
            return LABELS[REQUEST_NAMES.get(name, name)]  # 'target: ...' names the field the message is about
        if "_" not in name:
            return name
        text = LABELS[REQUEST_NAMES.get(name, name)]
        before = message[:match.start()].rstrip()
        # A sentence may start with the label; inside one, quotes show where the box's name begins and ends.
        return text if not before or before.endswith((".", ":", ";")) else f"“{text}”"

    return _IDENTIFIER.sub(label, message)
