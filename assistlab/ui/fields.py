"""The form's fields in one place: choices, hints, labels, and how the form's values become a request.

No gradio here: the form, the API and the tests all build requests through `request_from_form`; the API's
parameters, in the form's order, are in api_parameters.py. The engines' settings (draft lengths, lookup
windows) are declared by each engine (engines/<engine>/tuning.py): their labels, hints and placeholders come
from there (SETTING_FIELDS), and so do the values request_from_form hands each engine's arms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..access import check_allowed_server
from ..config import (
    CLEAR_MAX_REPEATS,
    CONTINUATION_PROMPT,
    CPU_DEFAULTS,
    CUDA_DEFAULTS,
    DEFAULT_MAX_TIME_S,
    DEFAULT_PROMPT,
    LIMITS,
    MAX_CONCURRENCY,
    MAX_LOAD_LEVELS,
    NO_DIFFERENCE_BAND,
    CAREFUL_PRECISION,
    RULE_WORDS,
    BenchRequest,
    capped_text,
)
from ..engines import catalog, registry
from ..engines.settings import EngineSettings, Setting
from ..engines.transformers import paths
from ..engines.transformers.arms import assisted_arms
from ..engines.vllm import arms as vllm_arms_mod
from ..errors import InputError
from ..measure import sweep

# Every engine's declared settings that have a form field, by the field's name (Setting.field).
SETTING_FIELDS: dict[str, tuple[EngineSettings, Setting]] = {
    s.field: (declared, s) for declared in registry.SETTINGS.values() for s in declared.options()}
# What each setting's box left empty means (its placeholder), with run-time defaults filled in (as the runner
# reads them: transformers' from the installed transformers).
SETTING_EMPTY = {name: declared.fill(s.empty) for name, (declared, s) in SETTING_FIELDS.items()}


def setting_choices(name: str) -> list[tuple[str, str]]:
    """A setting with fixed choices as a list to pick from: first the engine's default (value ""), then each."""
    _, setting = SETTING_FIELDS[name]
    return [(SETTING_EMPTY[name], ""), *((choice, choice) for choice in setting.choices)]


# How sure a comparison should be, in the page's words (config.RULE_WORDS, which the command line's --stop and
# the docs use too). The API's values: "likely" is the rule "likely"; "quick" (Sure) with no count the rule
# "clear" (stop when the answer is clear), with a count that many; "careful" the command line's
# `--precision 0.05 --max-time 300`. A workload runs its fixed count per prompt, or each until clear.
MEASURES = ("likely", "quick", "careful")
MEASURE_VALUES = {"likely": "likely", "sure": "quick", "careful": "careful"}  # --stop's names -> the API's values
MEASURE_CHOICES = [(words, MEASURE_VALUES[name]) for name, _rule, words in RULE_WORDS]

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
        f"Empty = the device default ({CPU_DEFAULTS['max_new_tokens']} on a CPU, short so the first answer comes "
        f"within a minute or two; {CUDA_DEFAULTS['max_new_tokens']} on a GPU), at most {LIMITS['max_new_tokens']}. "
        "Every run writes exactly this many, so arms do equal work; more tokens read closer to a long generation."
    ),
    "repeats": (
        f"Timed runs per arm, exactly this many. Empty = until the answer is clear (at most {CLEAR_MAX_REPEATS}), "
        f"at most {LIMITS['repeats']}. More runs narrow the interval."
    ),
    "measure": (
        "Likely stops sooner, from 4 runs of each arm, once each assistant is likely faster, slower or within "
        f"±{NO_DIFFERENCE_BAND:.0%} of plain, if the timing noise is roughly normal (it waits for Sure's answer when "
        "the runs are too lopsided for that). Sure assumes nothing: it stops once each assistant is clearly faster or "
        "slower than plain, or within the band of no practical difference of it "
        f"(±{NO_DIFFERENCE_BAND:.0%} unless set below), 95% sure at every look (each arm run at most "
        f"{CLEAR_MAX_REPEATS} times), or runs exactly the count set above. Careful keeps measuring until every "
        f"speedup is known to within ±{CAREFUL_PRECISION:.0%} (its confidence interval), for at most "
        f"{DEFAULT_MAX_TIME_S / 60:.0f} minutes of timed runs, so small differences can be told apart; the "
        "progress bar counts the runs that will most likely run, with the most that may beside them."
    ),
    "band_percent": (
        f"When the runs stop once the answer is clear (Likely, or Sure with no count set): an assistant whose speedup is "
        f"known to lie within ± this many percent of plain is called no practical difference, and its runs end. "
        f"Empty = {NO_DIFFERENCE_BAND:.0%}."
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
    "sweep_values": "Whole numbers, comma-separated; each becomes one arm of the sweep.",
    "target": "The big model to speed up: pick one, type a name from its Hugging Face page address "
    "(Qwen/Qwen2.5-7B-Instruct: its hub id), or a folder the operator shared.",
    "assistant": "A small, fast model that guesses the target's next words (drafts tokens) for it to check.",
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

# The Engines accordion: which engines time the pair, the vLLM arms AssistLab starts, or the operator's servers.
ENGINE_CHOICES = [("transformers (generate() here)", "transformers"), ("vLLM (its OpenAI-compatible server)", "vllm"),
                  ("both, side by side", "both")]
VLLM_METHOD_CHOICES = [
    ("ngram (prompt lookup in vLLM)", "ngram") if m == "ngram" else
    ("draft_model (the assistant boxes' models; another tokenizer drafts in the shared tokens)", m)
    if m == "draft_model" else (m, m)
    for m in vllm_arms_mod.METHODS if m != "plain"
]
DEFAULT_VLLM_METHODS = ("ngram",)
HINTS.update({
    "engines": "Which engines time the pair: transformers' generate() in this process, vLLM through its server, "
    "or both side by side (each engine's assisted arms are timed against its own plain arm).",
    "vllm_methods": "The vLLM speculative methods AssistLab starts a server for, beside vLLM's plain arm (always "
    "added); needs the operator's ASSISTLAB_VLLM_PYTHON. Not used when servers are listed below.",
    "servers": "vLLM (or other OpenAI-compatible) servers that already run, one name=URL per line, one named "
    "plain (the baseline of the others), e.g. plain=http://10.0.0.5:8000. AssistLab then starts none.",
    "server_api_key": "Sent to the servers above as a bearer token; never written into a report or the history.",
    "concurrency": "Also time the vLLM arms under load: at each level, that many requests at once against each "
    "arm's server, to see where the assistant stops paying off. Applies to vLLM arms only (transformers runs one "
    f"request at a time). Comma-separated, at most {MAX_LOAD_LEVELS} levels from 1 to {MAX_CONCURRENCY}; empty = "
    "one request at a time only.",
})
# Each engine's settings say under their boxes what their declaration says.
HINTS.update({name: declared.fill(s.hint or s.words) for name, (declared, s) in SETTING_FIELDS.items()})

SWEEP_VALUES = "1,2,3,5,8"
SWEEP_SCHEDULES = ("heuristic",)  # the adaptive point added to a draft-length sweep
SWEEP_INTRO = (
    "**Why:** an assistant that guesses too few words saves little, and one that guesses too many wastes time on "
    "guesses the target throws away; the best length depends on the pair and the text. Use this after a run, to "
    "find the length that makes your pair fastest, then **Apply best**. "
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
    device_map_auto=False,
    measure="quick",
    engines="transformers",
    vllm_methods=DEFAULT_VLLM_METHODS,
    servers="",
    server_api_key="",
    concurrency="",
    band_percent=None,
    **settings,
) -> BenchRequest:
    """The request the form (or the API) describes; the dataclasses check every value.

    `settings` are the engines' declared settings by their fields' names (SETTING_FIELDS: num_assistant_tokens,
    schedule, confidence_threshold, prompt_lookup_num_tokens, early_exit_layer, vllm_speculative_tokens, ...);
    one left empty (None or blank) is left to its engine, as the command line leaves it: num_assistant_tokens,
    schedule and confidence_threshold take transformers' defaults (a confidence of 0 switches early stopping of
    drafts off), prompt_lookup_num_tokens AssistLab's default. `measure` is how sure
    to be (MEASURE_CHOICES): "likely" stops at the likely answer (the rule "likely"; Repetitions then caps the
    count), "quick" (Sure) stops when the answer is clear or runs exactly Repetitions when set, "careful" repeats
    until every speedup is known to CAREFUL_PRECISION or DEFAULT_MAX_TIME_S of timed runs are spent
    (Repetitions then caps the count).

    `engines` is transformers, vllm or both (or a comma-separated list). With vLLM, `servers` (name=URL lines,
    with `server_api_key`) are the operator's servers; without them AssistLab starts vLLM's plain arm and one
    per `vllm_methods` (a draft_model arm per model in the assistant boxes). The vLLM boxes are not read when
    vLLM is not among the engines, as the assistant box is not read by a strategy without an assistant.
    `concurrency` ("1,2,4,8"; empty: none) adds load levels for the vLLM arms; the request parses and checks it.
    `band_percent` (empty: NO_DIFFERENCE_BAND) is the band, in percent either side of 1x, that the rule "clear"
    calls no practical difference.
    """
    measure = "quick" if _blank(measure) else measure
    if measure not in MEASURES:
        raise InputError(f"How sure (measure) must be one of {', '.join(MEASURES)} (Likely, Sure, Careful); got "
                         f"{measure!r}.")
    for name, text in (("target", target), ("assistant", assistant), ("extra_assistants", extra_assistants)):
        capped_text(name, text)  # before anything splits or parses them
    values = setting_values(settings)
    strategy = strategy or "auto"
    chosen = _engines(engines)
    extras = _split_refs(extra_assistants)
    for ref in extras:  # a bad one is named by its own box, not by the assistant box it would be run as
        catalog.resolve_field("extra_assistants", ref)
    arms: tuple = ()
    if "transformers" in chosen:
        # The assistant box always holds the preset's model; only a strategy that drafts with a model uses it.
        main = [assistant if isinstance(assistant, str) else ""] if strategy in paths.MODEL_STRATEGIES else []
        arms = assisted_arms(strategy, main + extras, also_prompt_lookup=bool(also_prompt_lookup),
                             **values["transformers"])
    if "vllm" in chosen:
        drafts = [assistant.strip()] if isinstance(assistant, str) and assistant.strip() else []
        arms += _vllm_arms(vllm_methods, tuple(dict.fromkeys(drafts + extras)), servers, server_api_key,
                           values["vllm"])
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
        stop_rule="likely" if measure == "likely" else None,
        engines=chosen,
        concurrency=() if _blank(concurrency) else concurrency,
        band=_band(band_percent),
    )


def _band(percent) -> float:
    """The band-of-no-difference box, in percent (3 means ±3%), as the request's share of 1x; empty: the default."""
    if _blank(percent):
        return NO_DIFFERENCE_BAND
    try:  # a bool is not a number of percent, though float(True) is 1.0
        value = float("nan") if isinstance(percent, bool) else float(percent.strip() if isinstance(percent, str) else percent)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 < value < 50.0:  # also refuses nan
        raise InputError(f"band_percent must be a number of percent above 0 and below 50 (3 means within ±3% of "
                         f"plain), got {percent!r}.")
    return value / 100.0


def _engines(value) -> tuple[str, ...]:
    """The Engines choice: transformers, vllm, both, or a comma-separated list (the API)."""
    if _blank(value):
        return ("transformers",)
    parts = value if isinstance(value, (list, tuple)) else str(value).split(",")
    chosen = [str(p).strip().lower() for p in parts if str(p).strip()]
    if "both" in chosen:
        chosen = ["transformers", "vllm"]
    wrong = [p for p in chosen if p not in ("transformers", "vllm")]
    if wrong or not chosen:
        raise InputError(f"Engines must be transformers, vllm or both; got {str(value)[:80]!r}.")
    return tuple(dict.fromkeys(chosen))


def setting_values(given: dict) -> dict[str, dict]:
    """The settings' boxes as each engine's arms take them: {engine: {the arm request's field: value}}, None
    where a box is empty (or 0 where 0 means not set); a name no engine declares is a programming error."""
    unknown = sorted(set(given) - set(SETTING_FIELDS))
    if unknown:
        raise TypeError(f"request_from_form() got unexpected keyword arguments: {', '.join(unknown)}")
    out: dict[str, dict] = {declared.engine: {} for declared in registry.SETTINGS.values()}
    for name, (declared, setting) in SETTING_FIELDS.items():
        value = given.get(name)
        empty = _unset(value) if setting.unset_at_zero else _blank(value)
        out[declared.engine][setting.name] = None if empty else _stripped(value)
    return out


def _vllm_arms(methods, draft_models: tuple[str, ...], servers, api_key, settings: dict) -> tuple:
    """The vLLM arms of the Engines boxes: the operator's servers when any are listed, else the methods', with
    `settings` (setting_values' for vLLM)."""
    if len(str(servers or "")) > 8192 or len(str(api_key or "")) > 4096:  # before anything splits them
        raise InputError("servers (at most 8,192 characters) or server_api_key (at most 4,096) is too long; "
                         "list at most a few servers, one name=URL a line.")
    lines = [line.strip() for line in str(servers or "").splitlines() if line.strip()]
    if len(lines) > LIMITS["arms"]:
        raise InputError(f"servers lists {len(lines)} servers; at most {LIMITS['arms']} arms can be compared at once.")
    if lines:
        key = api_key.strip() if isinstance(api_key, str) and api_key.strip() else None
        arms = vllm_arms_mod.parse_servers(lines, key, where=f"Each line of “{LABELS['servers']}”")
        for arm in arms:
            check_allowed_server(arm.url, LABELS["servers"])
        return arms
    if isinstance(methods, str):
        methods = [m for m in re.split(r"[,\s]+", methods) if m]
    methods = [str(m).strip() for m in (methods or ()) if str(m).strip()]
    if "draft_model" in methods and not draft_models:
        raise InputError("The vLLM draft_model method drafts with the model in the assistant box; put a small model "
                         "there (one with another tokenizer drafts in the tokens both vocabularies share), or leave "
                         "draft_model out of vllm_methods.")
    return vllm_arms_mod.vllm_arms(methods, draft_models=draft_models, **settings)


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
    "device_map_auto": "Spread the target over all GPUs",
    "measure": "How sure",
    "engines": "Engines",
    "vllm_methods": "vLLM arms to add",
    "servers": "Servers that already run",
    "server_api_key": "Servers' API key",
    "concurrency": "Load (requests at once)",
    "band_percent": "No practical difference within (±%)",
}
LABELS.update({name: s.label or name for name, (_, s) in SETTING_FIELDS.items()})  # as each engine declares them
# Names the request (and so its messages) uses where the form's field has another name: the engines' settings,
# whose arm-request names their declarations map to their fields.
REQUEST_NAMES = {s.name: name for name, (_, s) in SETTING_FIELDS.items() if s.name != name}
_IDENTIFIER = re.compile(
    r"\b(" + "|".join(sorted({*LABELS, *REQUEST_NAMES}, key=len, reverse=True)) + r")\b"
)
# Identifiers that are also ordinary words in a sentence ("the prompt", "the target") are left alone:
# only names with an underscore are code, and only they are replaced.


def in_page_words(message: str) -> str:
    """A message from the package with each code identifier replaced by the label the page shows for it.

    'max_new_tokens must be between 1 and 2048, got 0.' -> 'New tokens per run must be between 1 and 2048, got 0.'
    'repeats must be a whole number, got 'five'.' -> 'Repetitions must be a whole number, got 'five'.'
    'target: 'x!!' is not a hub id ...' -> 'Target model: 'x!!' is not a hub id ...'
    """

    def label(match: re.Match) -> str:
        name = match.group(1)
        if match.start() == 0 and message[match.end():].startswith((":", " must ")):
            # 'target: ...' or 'repeats must be ...' names the field the message is about
            return LABELS[REQUEST_NAMES.get(name, name)]
        if "_" not in name:
            return name
        text = LABELS[REQUEST_NAMES.get(name, name)]
        before = message[:match.start()].rstrip()
        # A sentence may start with the label; inside one, quotes show where the box's name begins and ends.
        return text if not before or before.endswith((".", ":", ";")) else f"“{text}”"

    return _IDENTIFIER.sub(label, message)
