"""The page's boxes and the API's parameters for the engines' settings come from each engine's declaration
(engines/<engine>/tuning.py), as the command line's options do: a declared setting is a form field and an API
parameter with its declared label, hint and placeholder, its value reaches the arm field it names, and a third
engine's declaration alone brings its box and its parameter."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assistlab.engines import registry
from assistlab.engines.vllm.arms import VllmArm
from assistlab.ui import fields
from assistlab.ui.api_parameters import COMPARE_API, FORM_FIELDS

ROOT = Path(__file__).resolve().parents[2]
DECLARED = [(declared, s) for declared in registry.SETTINGS.values() for s in declared.options()]


@pytest.mark.parametrize("declared, setting", DECLARED, ids=[s.field for _, s in DECLARED])
def test_each_declared_setting_is_a_parameter_and_a_labelled_box(declared, setting):
    parameters = {p.name: p for p in COMPARE_API}
    assert setting.field in parameters and setting.field in FORM_FIELDS
    assert parameters[setting.field].annotation == (setting.type | None) and parameters[setting.field].default is None
    assert fields.LABELS[setting.field] == setting.label
    assert fields.HINTS[setting.field] == declared.fill(setting.hint)
    assert "<transformers:" not in fields.HINTS[setting.field] + fields.SETTING_EMPTY[setting.field]


def _value(setting):
    return setting.choices[-1] if setting.choices else {int: "3", float: "0.25"}[setting.type]


@pytest.mark.parametrize("declared, setting", DECLARED, ids=[s.field for _, s in DECLARED])
def test_a_value_typed_in_a_settings_box_reaches_the_arm_field_it_names(declared, setting):
    strategy = "early-exit" if setting.name == "early_exit_layer" else (
        "prompt-lookup" if setting.name == "prompt_lookup_num_tokens" else "auto")
    request = fields.request_from_form("bundled:gemma-3-270m", "bundled:smollm2-135m-instruct", strategy, "hi",
                                       engines="both", **{setting.field: _value(setting)})
    mine = [a for a in request.arms if isinstance(a, VllmArm) == (declared.engine == "vllm")
            and getattr(a, "method", "ngram") == "ngram"]
    expected = setting.type(_value(setting))
    assert any(getattr(a, setting.name) == expected for a in mine), [a.label for a in mine]


def test_a_box_left_empty_leaves_the_setting_to_its_engine_and_a_name_nobody_declares_is_refused():
    values = fields.setting_values({"num_assistant_tokens": "  ", "early_exit_layer": 0, "vllm_lookup_min": None})
    assert values["transformers"]["num_assistant_tokens"] is None and values["transformers"]["early_exit_layer"] is None
    assert values["vllm"]["prompt_lookup_min"] is None
    with pytest.raises(TypeError, match="draft_depth"):
        fields.request_from_form("t", "a", "auto", "hi", draft_depth=3)


THIRD_ENGINE = """
import json
from assistlab.engines import registry
from assistlab.engines.settings import EngineSettings, Family, Setting

knob = Setting("draft_depth", int, (None, 2), None, "how deep it drafts", "--fake-draft-depth", "draft depth",
               label="Fake draft depth", hint="How deep the fake engine drafts. Empty = its own.", empty="its own")
registry.SETTINGS["fake"] = EngineSettings(
    "fake", (Family("fake", "tree", "a tree of drafts", (knob,), lambda v, a: None),))

import gradio as gr
from assistlab.ui import api_parameters, fields, form

with gr.Blocks():
    built = form.build()
box = built.settings["fake_draft_depth"]
print(json.dumps({"fields": list(api_parameters.FORM_FIELDS), "label": box.label, "placeholder": box.placeholder,
                  "elem_id": box.elem_id, "inputs": len(built.inputs()), "hint": fields.HINTS["fake_draft_depth"]}))
"""


def test_a_third_engines_declaration_alone_brings_its_box_and_its_parameter():
    """Registered before the page is built, a fake engine's one setting becomes the last API parameter (the
    others keep their places) and a box in the Engines accordion with its declared words; no line of the ui
    names it."""
    done = subprocess.run([sys.executable, "-c", THIRD_ENGINE], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["fields"] == [*FORM_FIELDS, "fake_draft_depth"]
    assert found["inputs"] == len(FORM_FIELDS) + 1
    assert (found["label"], found["placeholder"], found["elem_id"]) == ("Fake draft depth", "its own",
                                                                        "al-fake-draft-depth")
    assert found["hint"] == "How deep the fake engine drafts. Empty = its own."
