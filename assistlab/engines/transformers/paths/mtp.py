"""The target's own multi-token-prediction layers draft, one token each: `generate(use_mtp=True)`.

transformers 5.23 builds MTPCandidateGenerator from the target's config (`num_mtp_layers`, alias
`num_nextn_predict_layers`) and reads the MTP weights from the target's checkpoint files on every generate()
call; the first step drafts nothing (it needs one target forward first).
"""

from __future__ import annotations

from ....errors import InputError
from .base import ArmSpec, DraftingPath, LoadedModel


def mtp_layers(config) -> int:
    """How many MTP layers a target's config declares (0 when none)."""
    return int(getattr(config.get_text_config(), "num_mtp_layers", 0) or 0)


class Mtp(DraftingPath):
    name = "mtp"
    choice_label = "Guessing layers built into the target, no assistant (multi-token prediction, MTP)"
    drafts = "the target's own multi-token-prediction layers (`generate(use_mtp=True)`), no second model"
    auto_picks = (
        "no assistant is given (the API or page with the assistant empty, or `--assistant ''`) and the target's "
        "config declares MTP layers (GLM-4 MoE, DeepSeek V3, Step 3.7, ...)"
    )
    auto_priority = 2
    auto_because = "no assistant model was given and "
    example = "zai-org/GLM-4.5"
    length_knob = None
    adaptive = False

    def label(self, spec: ArmSpec) -> str:
        return "mtp (target's own MTP layers)"

    def recognises(self, target: LoadedModel, assistant: LoadedModel | None) -> bool:
        return assistant is None and bool(mtp_layers(target.model.config))

    def check(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str | None:
        layers = mtp_layers(target.model.config)
        if not layers:
            raise InputError(
                f"{target.name} has no MTP layers (its config sets no num_mtp_layers or num_nextn_predict_layers), "
                f"so 'mtp' has nothing to draft with; choose a target that ships them (e.g. {self.example}), or use "
                f"an assistant model or prompt-lookup."
            )
        from transformers.modeling_layers import MtpModel

        try:
            MtpModel.get_mtp_weights_regex(target.model)
        except (ValueError, AttributeError, TypeError):
            raise InputError(
                f"{target.name} declares {layers} MTP layer(s), but transformers knows no layout for the MTP weights "
                f"of a {type(target.model).__name__} checkpoint, so it cannot load them; use an assistant model or "
                f"prompt-lookup with this target."
            ) from None
        return f"{target.name} carries {layers} MTP layer(s), so it drafts for itself with no second model (use_mtp=True)."

    def drafter(self, target: LoadedModel, assistant: LoadedModel | None) -> LoadedModel:
        return target

    def generate_kwargs(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> dict:
        return {"use_mtp": True}

    def figures_unavailable(self, spec: dict) -> list[dict]:
        return [
            {"figure": "best_k", "why": "the draft length is the target's number of MTP layers, fixed by the "
             "checkpoint, so the cost model's best draft length is not a setting you can apply"},
            {"figure": "num_assistant_tokens sweep", "why": "MTP drafts one token per MTP layer; "
             "num_assistant_tokens does not apply"},
            {"figure": "c", "why": "the drafting cost leaves out loading the MTP layers, which transformers does on "
             "every generate() call (see the probe's setup_s; it is in the timed latency)"},
            *super().figures_unavailable(spec),
        ]


PATH = Mtp()
