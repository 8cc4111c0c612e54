"""N-grams of the prompt draft: no second model (`prompt_lookup_num_tokens`)."""

from __future__ import annotations

from ....errors import InputError
from . import settings
from .base import ArmSpec, DraftingPath, LoadedModel


class PromptLookup(DraftingPath):
    name = "prompt-lookup"
    choice_label = "Copy from the prompt (prompt lookup, no second model)"
    drafts = "n-grams from the prompt, no second model"
    auto_picks = "never (chosen by name, or as the extra arm)"
    has_draft_probabilities = False
    length_knob = "prompt_lookup_num_tokens"

    def check_spec(self, spec: ArmSpec) -> None:
        if spec.assistant_ensemble_weight is not None:
            raise InputError(
                "Prompt lookup proposes tokens without probabilities, so ensemble verification has nothing to "
                "mix; leave assistant_ensemble_weight empty, or use it with an assistant, early-exit, mtp or "
                "dflash arm."
            )

    def label(self, spec: ArmSpec) -> str:
        return f"prompt-lookup (k={spec.lookup_tokens})"

    def check(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str | None:
        return None

    def drafter(self, target: LoadedModel, assistant: LoadedModel | None) -> LoadedModel:
        return target

    def generate_kwargs(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> dict:
        return {"prompt_lookup_num_tokens": spec.lookup_tokens}

    def settings(self, spec: ArmSpec, drafter_values: dict, defaults: dict) -> dict:
        # transformers has no default for the lookup length (generate() looks up only when given one); the
        # n-gram size is no arm setting, so it comes from the checkpoint or transformers.
        where = settings.SET_BY_YOU if spec.prompt_lookup_num_tokens is not None else settings.ASSISTLAB_DEFAULT
        return settings.effective(
            spec, settings.LOOKUP_KNOBS, drafter_values, defaults, adapts=False,
            fixed={"prompt_lookup_num_tokens": (spec.lookup_tokens, where)},
        )


PATH = PromptLookup()
