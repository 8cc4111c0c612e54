"""The transformers engine's settings, declared once (engines/settings.py): what a tuner searches, how the
winner is re-timed with `bench`, and the generate(...) call that deploys it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...config import LIMITS, PROMPT_LOOKUP_DEFAULT, SCHEDULES
from ...errors import AssistLabError
from .. import catalog
from ..settings import EngineSettings, Family, Setting
from . import bundled
from .arms import ArmSpec

ENGINE = "transformers"

DRAFT_LENGTH = Setting(
    "num_assistant_tokens", int, (None, 3, 8), None,
    "tokens the assistant drafts per step (empty: transformers' default)", "--num-assistant-tokens",
    "tokens drafted per step (default: transformers' default, <transformers:num_assistant_tokens>)",
    label="Draft length (num_assistant_tokens)",
    hint="How many tokens (word pieces) the assistant guesses before the target checks them: the draft length, k "
         "in an arm's name (transformers calls it num_assistant_tokens). Empty = transformers' default "
         f"(<transformers:num_assistant_tokens>), at most {LIMITS['num_assistant_tokens']}.",
    empty="transformers' default (<transformers:num_assistant_tokens>)")
SCHEDULE = Setting(
    "num_assistant_tokens_schedule", str, (None,), None,
    f"how the draft length changes within a run: {', '.join(SCHEDULES)}", "--schedule",
    "draft length schedule (default: transformers' default, <transformers:num_assistant_tokens_schedule>; "
    "'heuristic' adapts within a run)", SCHEDULES,
    label="Draft length schedule",
    hint="Whether the draft length stays as set (constant) or adapts as the text goes (heuristic: two longer after "
         "a draft the target kept whole, one shorter after a miss). The first choice leaves it to transformers "
         "(<transformers:num_assistant_tokens_schedule>).",
    empty="transformers' default (<transformers:num_assistant_tokens_schedule>)")
THRESHOLD = Setting(
    "assistant_confidence_threshold", float, (None,), None,
    "the assistant stops drafting below this probability", "--confidence-threshold",
    "assistant stops drafting below this probability, 0 to 1; 0 turns it off (default: transformers' default, "
    "<transformers:assistant_confidence_threshold>)",
    label="Confidence threshold",
    hint="The assistant stops guessing early when it is less sure of its next word than this (0 to 1). Empty = "
         "transformers' default (<transformers:assistant_confidence_threshold>); 0 switches it off.",
    empty="transformers' default (<transformers:assistant_confidence_threshold>)")
LOOKUP = Setting(
    "prompt_lookup_num_tokens", int, (None, 3, 5), PROMPT_LOOKUP_DEFAULT,
    "tokens prompt lookup proposes per step (empty: AssistLab's 10; transformers has none)",
    "--prompt-lookup-num-tokens",
    f"tokens prompt lookup proposes per step (default: {PROMPT_LOOKUP_DEFAULT}, AssistLab's choice: transformers "
    "has none)",
    label="Prompt lookup tokens",
    hint="How many tokens prompt lookup copies from the prompt per guess (prompt_lookup_num_tokens). Empty = "
         f"AssistLab's default ({PROMPT_LOOKUP_DEFAULT}; transformers has none), at most "
         f"{LIMITS['prompt_lookup_num_tokens']}.",
    empty=f"AssistLab's default ({PROMPT_LOOKUP_DEFAULT})")
LAYER = Setting(
    "early_exit_layer", int, (), None, "the target's layer whose output drafts (early exit)", "--early-exit-layer",
    "layer to exit at for --strategy early-exit",
    label="Early-exit layer",
    hint="For early exit: how many of the target's own first layers make the guesses (e.g. 4, of a model trained "
         "for it, such as LayerSkip). Empty or 0 = not set.",
    empty="not set", unset_at_zero=True)


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _drafting(strategy: str):
    def build(values: dict, assistant: str | None) -> ArmSpec:
        return ArmSpec(strategy, assistant, **values)
    return build


FAMILIES = (
    Family(ENGINE, "auto", "an assistant model drafts (AssistLab picks the way that fits the pair)",
           (DRAFT_LENGTH, SCHEDULE, THRESHOLD), _drafting("auto"), needs_assistant=True),
    Family(ENGINE, "prompt-lookup", "prompt lookup: the target's own prompt proposes the next tokens", (LOOKUP,),
           _drafting("prompt-lookup")),
    Family(ENGINE, "early-exit", "early exit: the target's own first layers draft", (LAYER, DRAFT_LENGTH),
           _drafting("early-exit"), searched=False),
)


def deployed_model(text: str) -> tuple[str, str | None, str]:
    """A model reference as a deployment loads it: (what from_pretrained takes, its revision, a comment line).
    A bundled model is the folder AssistLab converted it into on this machine; a hub id stays a hub id (with
    its revision); a folder is its path here. A reference that no longer resolves is kept as it was written."""
    try:
        ref = catalog.resolve(text)
    except AssistLabError:
        return text, None, ""
    if ref.kind == "bundled":
        folder = bundled.converted_dir(bundled.lookup(ref.text))
        return str(folder), None, f"# {ref.text}: AssistLab's own copy, converted into this folder on this machine"
    if ref.kind == "hub":
        return ref.location, ref.revision, ""
    return ref.location, None, ""


def _loaded(what: str, text: str, comments: list[str], options: str = "") -> str:
    """`AutoX.from_pretrained(...)` of a model reference as deployed, its comment kept once."""
    where, revision, comment = deployed_model(text)
    if comment and comment not in comments:
        comments.append(comment)
    return f"{what}.from_pretrained({where!r}{f', revision={revision!r}' if revision else ''}{options})"


def _generate_kwargs(arm: ArmSpec | None, effective: dict) -> dict:
    """The generate(...) keyword arguments of `arm` (None: plain): its own settings, and the ones it left empty
    that the run resolved (`effective`, the report's settings) unless they were transformers' defaults."""
    kwargs: dict = {}
    if arm is not None and arm.strategy == "prompt-lookup":
        kwargs["prompt_lookup_num_tokens"] = arm.lookup_tokens
    elif arm is not None:
        for name in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"):
            value = getattr(arm, name)
            if value is None and name in effective and (effective.get("source") or {}).get(name) != "transformers default":
                value = effective[name]
            if value is not None:
                kwargs[name] = value
        if arm.early_exit_layer is not None:
            kwargs["assistant_early_exit"] = arm.early_exit_layer
    return kwargs


def _input_lines(prompt: object, chat_template: bool, to: str) -> list[str]:
    """The snippet's lines that define the searched prompt and tokenise it as the search did."""
    if not isinstance(prompt, str):
        return ["inputs = tokenizer(prompt, return_tensors=\"pt\")"]
    lines = [f"prompt = {prompt!r}"]
    if chat_template:
        lines += ["if tokenizer.chat_template:  # as the search asked it: one user turn through the chat template",
                  "    messages = [{\"role\": \"user\", \"content\": prompt}]",
                  "    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, "
                  "return_dict=True, return_tensors=\"pt\")",
                  "else:",
                  "    inputs = tokenizer(prompt, return_tensors=\"pt\")"]
    else:
        lines.append("inputs = tokenizer(prompt, return_tensors=\"pt\")")
    return lines + ([f"inputs = inputs{to}"] if to else [])


def deploy(arm: ArmSpec | None, target: str, info: dict | None = None, request: dict | None = None) -> dict:
    """The generate(...) keyword arguments the winner ran with, and a snippet that runs as pasted: it loads the
    models from where they are (deployed_model), defines the searched prompt, puts it through the chat template
    as the search did, and generates the searched number of new tokens. `arm` None is plain generation.

    `info` is the arm's report entry (its resolved strategy and effective settings), when the run got that far;
    `request` is the report's request (prompt, max_new_tokens, chat_template, do_sample, dtype, and the device
    it ran on), without which the snippet leaves the prompt to the reader and generates 256 tokens.
    """
    info = info or {}
    strategy = "plain" if arm is None else info.get("strategy") or arm.strategy
    helper = None if arm is None else arm.assistant
    kwargs = _generate_kwargs(arm, info.get("settings") or {})
    request = request or {}
    device = request.get("device") if request.get("device") in ("cuda",) else None
    dtype = request.get("dtype") if request.get("dtype") not in (None, "auto") else None
    to = f'.to("{device}")' if device else ""
    options = f", dtype={dtype!r}" if dtype else ""
    comments: list[str] = []
    lines = [f"tokenizer = {_loaded('AutoTokenizer', target, comments)}",
             f"target = {_loaded('AutoModelForCausalLM', target, comments, options)}{to}"]
    extra = ""
    if helper:
        lines.append(f"assistant = {_loaded('AutoModelForCausalLM', helper, comments, options)}{to}")
        extra = "assistant_model=assistant, "
        if strategy == "universal":
            lines.append(f"assistant_tokenizer = {_loaded('AutoTokenizer', helper, comments)}")
            extra += "tokenizer=tokenizer, assistant_tokenizer=assistant_tokenizer, "
    settings = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    prompt = request.get("prompt")
    lines += _input_lines(prompt, request.get("chat_template", True), to)
    length = request.get("max_new_tokens") or 256
    sampling = f"do_sample={bool(request.get('do_sample'))}, " if "do_sample" in request or prompt else ""
    lines.append(f"output = target.generate(**inputs, {extra}{settings}{', ' if settings else ''}{sampling}"
                 f"max_new_tokens={length})")
    if isinstance(prompt, str):
        lines.append("print(tokenizer.decode(output[0, inputs[\"input_ids\"].shape[1]:], skip_special_tokens=True))")
    head = ["from transformers import AutoModelForCausalLM, AutoTokenizer", "", *comments]
    return {"engine": ENGINE, "strategy": strategy, "generate_kwargs": kwargs,
            "assistant": helper, "snippet": "\n".join(head + lines)}


@dataclass(frozen=True)
class TransformersSettings(EngineSettings):
    """transformers' declaration: its families, and how an arm of them is re-timed, deployed and said."""

    def default_arm(self, family: Family, assistant: str | None) -> ArmSpec | None:
        """The arm that runs transformers' own defaults (AssistLab's 10 tokens for prompt lookup), or None."""
        if family.name == "early-exit":
            return None  # no layer is a default
        return ArmSpec(family.name, assistant if family.needs_assistant else None)

    def arm_args(self, arm: ArmSpec) -> list[str]:
        return ["--strategy", arm.strategy, *(["--assistant", arm.assistant] if arm.assistant else [])]

    def closing_args(self, arm: ArmSpec) -> list[str]:
        return [] if arm.strategy == "prompt-lookup" else ["--no-prompt-lookup"]  # bench adds it by default

    def deploy(self, arm: ArmSpec | None, target: str, info: dict | None = None,
               request: dict | None = None) -> dict:
        return deploy(arm, target, info, request)

    def simplicity(self, arm: ArmSpec) -> tuple:
        """Lower is simpler: the engine's defaults first, then the shortest draft."""
        if arm.strategy == "prompt-lookup":
            return (0 if arm.prompt_lookup_num_tokens is None else 1, arm.lookup_tokens)
        from .paths import transformers_defaults

        length = arm.num_assistant_tokens if arm.num_assistant_tokens is not None else transformers_defaults()[
            "num_assistant_tokens"]
        return (0 if arm.uses_transformers_defaults else 1, length)

    def phrase(self, arm: ArmSpec) -> str:
        """The arm in a few words: 'prompt lookup with 3 tokens', 'smollm2-135m-instruct drafting 8 tokens'."""
        if arm.strategy == "prompt-lookup":
            return f"prompt lookup with {arm.lookup_tokens} token{'' if arm.lookup_tokens == 1 else 's'}"
        if arm.assistant:
            short = arm.assistant.rsplit("/", 1)[-1].removeprefix("bundled:")
            return f"{short} as assistant ({arm.draft_label})"
        return arm.label

    def fill(self, text: str) -> str:
        """The texts above with transformers' defaults, read from the installed transformers, filled in."""
        if "<transformers:" not in text:
            return text
        from .paths import transformers_defaults

        defaults = transformers_defaults()
        return re.sub(r"<transformers:(\w+)>", lambda m: _shown(defaults[m.group(1)]), text)


SETTINGS = TransformersSettings(ENGINE, FAMILIES)
