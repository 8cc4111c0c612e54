"""The registry of drafting paths: the only list of them, which requests, `auto`, the page, the CLI and the
README's table read.

A new path is one new module here defining a `DraftingPath` as `PATH`, and one entry in `PATHS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ....errors import InputError
from ..loaded import LoadedModel
from . import assistant, dflash, early_exit, ensemble, gemma4_assistant, mtp, prompt_lookup, universal
from .base import ArmSpec, DraftingPath, kind, same_tokenizer, short_name
from .ensemble import LOSSY_MARK, LOSSY_TRADE, lossless, marked_name
from .settings import (
    ASSISTLAB_DEFAULT,
    CHECKPOINT,
    DRAFTER_KNOBS,
    LOOKBEHIND_KNOBS,
    LOOKUP_KNOBS,
    SET_BY_YOU,
    TRANSFORMERS_DEFAULT,
    checkpoint_values,
    draft_length,
    threshold_adaptation_active,
    transformers_defaults,
)

# In the order the page and `--strategy` list them.
PATHS: tuple[DraftingPath, ...] = (
    assistant.PATH,
    universal.PATH,
    prompt_lookup.PATH,
    early_exit.PATH,
    gemma4_assistant.PATH,
    mtp.PATH,
    dflash.PATH,
)
BY_NAME = {path.name: path for path in PATHS}
AUTO = "auto"
AUTO_LABEL = "Auto: AssistLab picks the way that fits these models"
STRATEGIES = (AUTO, *BY_NAME)
# Strategies that take an assistant model ('auto' does when one is given).
MODEL_STRATEGIES = (AUTO, *(p.name for p in PATHS if p.needs_assistant))
# Strategies whose draft length num_assistant_tokens sets (a sweep of it needs one).
LENGTH_STRATEGIES = (AUTO, *(p.name for p in PATHS if p.length_knob == "num_assistant_tokens"))
# Strategies whose draft length the checkpoint fixes, and those that never adapt it during a run.
FIXED_LENGTH_STRATEGIES = tuple(p.name for p in PATHS if p.length_knob is None)
NON_ADAPTIVE_STRATEGIES = tuple(p.name for p in PATHS if not p.adaptive)
# `auto` asks the paths that recognise a checkpoint by its config first, then the general ones.
_AUTO_ORDER = sorted((p for p in PATHS if p.auto_priority is not None), key=lambda p: p.auto_priority)

__all__ = [
    "ASSISTLAB_DEFAULT", "CHECKPOINT", "DRAFTER_KNOBS", "LOOKBEHIND_KNOBS", "LOOKUP_KNOBS", "LOSSY_MARK",
    "LOSSY_TRADE", "SET_BY_YOU", "TRANSFORMERS_DEFAULT", "ArmSpec", "DraftingPath", "checkpoint_values", "kind",
    "analysis_drops", "draft_length", "lossless", "marked_name", "same_tokenizer", "short_name", "threshold_adaptation_active",
    "transformers_defaults",
]


def get(strategy: str) -> DraftingPath:
    """The path of a concrete strategy name (not 'auto')."""
    return BY_NAME[strategy]


def choices() -> list[tuple[str, str]]:
    """(words, strategy) for the page's list of strategies, 'auto' first."""
    return [(AUTO_LABEL, AUTO), *((p.choice_label, p.name) for p in PATHS)]


# ---------------------------------------------------------------- the request


def check_spec(spec: ArmSpec) -> None:
    """What a path refuses when the request is made (see DraftingPath.check_spec)."""
    if spec.strategy != AUTO:
        get(spec.strategy).check_spec(spec)


def label(spec: ArmSpec) -> str:
    """An arm's name in tables and charts."""
    if spec.assistant_ensemble_weight is not None:
        plain = label(dataclasses.replace(spec, assistant_ensemble_weight=None))
        return ensemble.label(plain, spec.assistant_ensemble_weight)
    if spec.strategy == AUTO:
        return "auto (no assistant)" if not spec.assistant else f"auto: {short_name(spec.assistant)} ({spec.draft_label})"
    return get(spec.strategy).label(spec)


# ---------------------------------------------------------------- which path a pairing gets


def resolve(spec: ArmSpec, target: LoadedModel, helper: LoadedModel | None) -> tuple[DraftingPath, str | None]:
    """(the path an arm runs, why it was picked or None), checking that the pairing can work.

    Raises InputError, in one sentence that says what would work, for a pairing the path cannot serve.
    """
    if spec.strategy == AUTO:
        for path in _AUTO_ORDER:
            if path.recognises(target, helper):
                why = path.check(spec, target, helper)
                return path, (f"auto picked {path.name}: {path.auto_because}{why}" if why else None)
        raise InputError(
            f"With no assistant model, 'auto' can only use the target's own MTP layers, and {target.name} has "
            f"none; choose an assistant model, or the prompt-lookup strategy."
        )
    path = get(spec.strategy)
    if helper is not None and not path.owns_checkpoints:
        owner = next((p for p in PATHS if p.recognises_checkpoint(helper.model.config)), None)
        if owner is not None and owner is not path:
            raise InputError(
                f"{helper.name} is a {kind(helper)}, which can draft only through the '{owner.name}' path; "
                f"choose that strategy (or auto)."
            )
    return path, path.check(spec, target, helper)


def resolve_strategy(spec: ArmSpec, target: LoadedModel, helper: LoadedModel | None) -> str:
    """The concrete strategy name an arm runs (see resolve)."""
    return resolve(spec, target, helper)[0].name


@dataclass
class Plan:
    """One assisted arm, ready to run: its path, name, why it was picked, settings and generate() arguments."""

    strategy: str
    name: str
    choice: str | None
    settings: dict
    kwargs: dict
    configure: Callable[[], None]


def plan(spec: ArmSpec, target: LoadedModel, helper: LoadedModel | None, do_sample: bool,
         values_of: Callable[[LoadedModel], dict], defaults: dict) -> Plan:
    """Everything an arm needs before its first run, from its spec and the loaded models.

    `values_of(model)` gives a model's checkpoint_values (read once per model by the caller); `defaults` are
    transformers_defaults(). The plan's configure() puts the arm's settings in place before every run.
    """
    path, choice = resolve(spec, target, helper)
    path.check_settings(spec, do_sample)
    resolved = dataclasses.replace(spec, strategy=path.name)
    name = label(resolved) if choice or spec.strategy != AUTO else label(spec).replace("auto:", f"{path.name}:", 1)
    ref = getattr(helper, "ref", None)
    if getattr(ref, "kind", None) == "local" and spec.assistant:
        # a local folder is named by its path inside the models folder: team1/tiny and team2/tiny stay apart
        name = name.replace(f": {short_name(spec.assistant)} (", f": {ref.text} (", 1)
    name = marked_name(name, spec.to_dict(), do_sample)  # lossy arms say so in every view
    values = path.settings(spec, values_of(path.drafter(target, helper)), defaults)
    return Plan(
        strategy=path.name,
        name=name,
        choice=choice,
        settings=values,
        kwargs={**path.generate_kwargs(spec, target, helper), **ensemble.kwargs(spec)},
        configure=lambda: path.configure(spec, target, helper, values),
    )


# ---------------------------------------------------------------- the pieces of a plan, one at a time


def check_settings(spec: ArmSpec, strategy: str, do_sample: bool) -> None:
    get(strategy).check_settings(spec, do_sample)


def arm_kwargs(spec: ArmSpec, strategy: str, target: LoadedModel, helper: LoadedModel | None) -> dict:
    """generate() arguments particular to one assisted arm."""
    return {**get(strategy).generate_kwargs(spec, target, helper), **ensemble.kwargs(spec)}


def drafting_settings(spec: ArmSpec, strategy: str, drafter_values: dict | None = None,
                      defaults: dict | None = None) -> dict:
    """The values an arm drafts with and where each came from: you, the checkpoint, or transformers.

    `drafter_values` are `checkpoint_values` of the model that drafts. The plain arm drafts nothing: {}.
    """
    if strategy == "plain":
        return {}
    defaults = transformers_defaults() if defaults is None else defaults
    return get(strategy).settings(spec, drafter_values or {}, defaults)


def configure_drafter(spec: ArmSpec, strategy: str, target: LoadedModel, helper: LoadedModel | None,
                      values: dict | None = None) -> None:
    """Put an arm's drafting values where transformers reads them; call before every run of the arm."""
    path = get(strategy)
    if values is None:
        values = drafting_settings(spec, strategy, checkpoint_values(path.drafter(target, helper)))
    path.configure(spec, target, helper, values)


# ---------------------------------------------------------------- what an arm can tell


def figures_unavailable(strategy: str, spec: dict | None) -> list[dict]:
    """[{figure, why}] for what this arm cannot give, so the report says it rather than showing a wrong number."""
    spec = spec or {}
    path = BY_NAME.get(strategy)
    return [*(path.figures_unavailable(spec) if path else []), *ensemble.figures_unavailable(spec)]


def arm_flags(strategy: str, spec: dict | None, do_sample: bool) -> dict:
    """The fields every assisted arm and comparison entry carry: lossless, why not, what it cannot give."""
    ok, why = lossless(spec, do_sample)
    return {"lossless": ok, "lossy_reason": why, "figures_unavailable": figures_unavailable(strategy, spec)}


def analysis_drops(strategy: str) -> tuple[str, ...]:
    """The cost-model figures a path cannot give (see figures_unavailable): no draft length, no best one."""
    path = BY_NAME.get(strategy)
    return ("best_k", "best_k_speedup") if path is not None and path.length_knob is None else ()


def restrict_analysis(analysis: dict, strategy: str) -> dict:
    """Drop cost-model figures a path cannot give (see figures_unavailable)."""
    for key in analysis_drops(strategy):
        analysis[key] = None
    return analysis


# ---------------------------------------------------------------- loading drafter-only checkpoints


def model_class(config):
    """The class to load a drafter-only checkpoint with (a Gemma 4 assistant, a DFlash drafter), else None."""
    return next((cls for p in PATHS if (cls := p.model_class(config)) is not None), None)


def is_drafter_only(config) -> bool:
    """A checkpoint that cannot generate on its own: it drafts from a target's hidden states."""
    return any(p.recognises_checkpoint(config) for p in PATHS)


def load_hint(config, exc: BaseException) -> str:
    """A sentence to add to a load failure that a path can explain, else ''."""
    return "".join(p.load_hint(config, exc) for p in PATHS)


# ---------------------------------------------------------------- the README's table


def arms_table() -> str:
    """The README's "Arms" table, from the registry (a test checks the README carries it as it is)."""
    rows = ["| arm | what drafts | `auto` picks it when |", "|---|---|---|"]
    rows += [f"| `{p.name}` | {p.drafts} | {p.auto_picks} |" for p in PATHS]
    return "\n".join(rows)
