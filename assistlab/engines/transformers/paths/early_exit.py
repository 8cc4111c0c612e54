"""The target's own first N layers draft (LayerSkip-style models): `assistant_early_exit`."""

from __future__ import annotations

from ....errors import InputError
from .base import ArmSpec, DraftingPath, LoadedModel


class EarlyExit(DraftingPath):
    name = "early-exit"
    choice_label = "The target's own first layers guess (early exit)"
    drafts = "the target's own first N layers (LayerSkip-style models)"
    rewrites_drafter_config = True
    takes_layer = True

    def check_spec(self, spec: ArmSpec) -> None:
        if spec.early_exit_layer is None:
            raise InputError("early_exit_layer is required for the early-exit strategy (a layer number, e.g. 4).")

    def label(self, spec: ArmSpec) -> str:
        return f"early-exit (layer {spec.early_exit_layer}, {spec.draft_label})"

    def check(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str | None:
        if spec.early_exit_layer >= target.num_layers:
            raise InputError(
                f"early_exit_layer is {spec.early_exit_layer}, but the target has only {target.num_layers} layers; "
                f"choose a layer from 1 to {target.num_layers - 1}."
            )
        return None

    def drafter(self, target: LoadedModel, assistant: LoadedModel | None) -> LoadedModel:
        return target

    def generate_kwargs(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> dict:
        return {"assistant_early_exit": spec.early_exit_layer}


PATH = EarlyExit()
