"""A DFlash draft model drafts a whole block in one forward from the target's hidden states.

transformers 5.23 picks DFlashTokenCandidateGenerator for `speculation_type="dflash"` with a drafter whose
config has target_layer_ids, block_size and mask_token_id (in 5.23 the `muse_glimmer_assistant` model type):
one forward drafts block_size - 1 tokens from the target's hidden states at target_layer_ids, through the
target's own head. It never adapts and skips drafting on the first step.
"""

from __future__ import annotations

from ....errors import InputError
from .base import ArmSpec, DraftingPath, LoadedModel, kind, short_name

KEYS = ("target_layer_ids", "block_size", "mask_token_id")


def is_dflash_drafter(config) -> bool:
    return all(getattr(config, key, None) is not None for key in KEYS)


class DFlash(DraftingPath):
    name = "dflash"
    choice_label = "A model that guesses a whole block of words at once (DFlash)"
    drafts = ("a DFlash draft model (`speculation_type=\"dflash\"`; in 5.23 the `muse_glimmer_assistant` type) that "
              "drafts a whole block in one forward from the target's hidden states")
    auto_picks = "the assistant's config has `target_layer_ids`, `block_size` and `mask_token_id`"
    auto_priority = 1
    owns_checkpoints = True
    needs_assistant = True
    example = "a muse_glimmer_assistant checkpoint made for its target"
    length_knob = None
    adaptive = False

    def label(self, spec: ArmSpec) -> str:
        return f"dflash: {short_name(spec.assistant)} (block from the draft model)"

    def recognises(self, target: LoadedModel, assistant: LoadedModel | None) -> bool:
        return assistant is not None and is_dflash_drafter(assistant.model.config)

    def check(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str | None:
        if assistant is None or not is_dflash_drafter(assistant.model.config):
            what = f"{assistant.name} is a {kind(assistant)}" if assistant is not None else "no draft model was given"
            raise InputError(
                f"The 'dflash' strategy needs a DFlash draft model (a config with target_layer_ids, block_size and "
                f"mask_token_id, e.g. {self.example}), but {what}; choose one, or use 'assistant' or 'auto'."
            )
        config, text = assistant.model.config, target.model.config.get_text_config()
        deepest = max(config.target_layer_ids)
        if deepest >= target.num_layers:
            raise InputError(
                f"{assistant.name} reads the target's layer {deepest}, but {target.name} has only "
                f"{target.num_layers} layers; pair it with the target it was made for."
            )
        if getattr(config, "hidden_size", None) != getattr(text, "hidden_size", None):
            raise InputError(
                f"{assistant.name} works in hidden size {config.hidden_size}, but {target.name} has "
                f"{getattr(text, 'hidden_size', '?')}; pair it with the target it was made for."
            )
        if not 0 <= config.mask_token_id < getattr(text, "vocab_size", 0):
            raise InputError(
                f"{assistant.name} uses mask token {config.mask_token_id}, which is not in {target.name}'s "
                f"vocabulary; pair it with the target it was made for."
            )
        return (
            f"{assistant.name} is a DFlash draft model, so it drafts {config.block_size - 1} tokens per step in one "
            f"forward from {target.name}'s hidden states at layers {list(config.target_layer_ids)}."
        )

    def generate_kwargs(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> dict:
        return {"assistant_model": assistant.model, "speculation_type": "dflash"}

    def figures_unavailable(self, spec: dict) -> list[dict]:
        return [
            {"figure": "best_k", "why": "DFlash drafts its whole block in one forward, so drafting does not cost c "
             "per token as the cost model assumes, and the block size is fixed by the draft checkpoint"},
            {"figure": "num_assistant_tokens sweep", "why": "the block size of the draft checkpoint sets the draft "
             "length; num_assistant_tokens does not apply"},
            *super().figures_unavailable(spec),
        ]

    def recognises_checkpoint(self, config) -> bool:
        return is_dflash_drafter(config)

    def model_class(self, config):
        # A base model with no head of its own: it borrows the target's.
        from transformers.models.auto.modeling_auto import MODEL_MAPPING

        if is_dflash_drafter(config) and type(config) in MODEL_MAPPING:
            return MODEL_MAPPING[type(config)]
        return None


PATH = DFlash()
