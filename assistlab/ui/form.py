"""The form: which models, which arms, which prompt, and the settings of a comparison."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ..config import CPU_DEFAULTS, DEVICES, DTYPES, LIMITS, NO_DIFFERENCE_BAND
from ..engines import catalog
from .api_parameters import FORM_FIELDS, PLACED_ENGINES
from .fields import (
    DEFAULT_VLLM_METHODS,
    ENGINE_CHOICES,
    EXAMPLES,
    HINTS,
    LABELS,
    MEASURE_CHOICES,
    SETTING_EMPTY,
    SETTING_FIELDS,
    STRATEGY_CHOICES,
    VLLM_METHOD_CHOICES,
    setting_choices,
)
from .session import LIGHT

# The engines that declare settings with a form field, in declaration order.
SETTING_ENGINES = tuple(dict.fromkeys(declared.engine for declared, _ in SETTING_FIELDS.values()))
ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"
# What the preset box says once the model boxes hold a pair that is not the chosen preset's.
CUSTOM = "Custom"
CUSTOM_NOTE = "Your own pair: the target and assistant boxes no longer match a preset."


@dataclass
class Form:
    """The input components, in the order `request_from_form` takes them; the engines' declared settings (their
    boxes made from each engine's declaration, `setting_boxes`) are in `settings`, by field name."""

    target: gr.Dropdown
    assistant: gr.Dropdown
    strategy: gr.Radio
    prompt: gr.Textbox
    max_new_tokens: gr.Textbox
    repeats: gr.Textbox
    warmup: gr.Number
    also_prompt_lookup: gr.Checkbox
    extra_assistants: gr.Textbox
    chat_template: gr.Checkbox
    do_sample: gr.Checkbox
    seed: gr.Number
    device: gr.Dropdown
    dtype: gr.Dropdown
    device_map_auto: gr.Checkbox
    measure: gr.Radio
    preset: gr.Dropdown
    preset_note: gr.Markdown
    # The Engines accordion (engines_accordion)
    engines: gr.Radio
    vllm_methods: gr.CheckboxGroup
    servers: gr.Textbox
    server_api_key: gr.Textbox
    concurrency: gr.Textbox
    band_percent: gr.Textbox
    settings: dict

    def inputs(self) -> list:
        return [self.settings[name] if name in self.settings else getattr(self, name) for name in FORM_FIELDS]


def _local_folders() -> list[str]:
    """Model folders in the operator's models directory, offered next to the presets."""
    root = catalog.models_dir()
    if root is None or not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "config.json").is_file())


def _unique(items) -> list[str]:
    return list(dict.fromkeys(items))


def header() -> None:
    logo = (ASSETS / "logo.svg").read_text(encoding="utf-8") if (ASSETS / "logo.svg").is_file() else ""
    gr.HTML(
        f'<div id="al-header">{logo}<div><h1>AssistLab</h1>'
        f"<p>Does an assistant model make this target model faster? By how much, and why?</p></div></div>"
    )


def build() -> Form:
    default = catalog.PRESETS[0]
    local = _local_folders()
    machine = catalog.this_machine()
    gr.Markdown("### 1 · Choose")
    # Each preset says whether it fits this machine; the value stays the preset's label.
    preset = gr.Dropdown(
        [(preset_choice(p, machine), p.label) for p in catalog.PRESETS] + [CUSTOM], value=default.label,
        label="Preset pair", elem_id="al-preset",
        info="A big model to speed up and a small assistant, chosen for you; you can still type others below.",
    )
    preset_note = gr.Markdown(catalog.describe(default, machine, markdown=True), elem_classes="al-env")
    target = gr.Dropdown(
        _unique([p.target for p in catalog.PRESETS] + local), value=default.target, label="Target model",
        allow_custom_value=True, info=HINTS["target"], elem_id="al-target",
    )
    assistant = gr.Dropdown(
        _unique([p.assistant for p in catalog.PRESETS] + local), value=default.assistant, label="Assistant model",
        allow_custom_value=True, info=HINTS["assistant"], elem_id="al-assistant",
    )
    # No max_length: the box would cut a longer paste without a word; the request refuses it, naming the box.
    prompt = gr.Textbox(default.prompt, label="Prompt", lines=4, max_lines=14, elem_id="al-prompt",
                        info=f"At most {LIMITS['prompt_chars']:,} characters.")
    with gr.Accordion("Example prompts", open=False, elem_id="al-examples"):
        gr.Examples([[text] for _, text in EXAMPLES], inputs=[prompt], example_labels=[name for name, _ in EXAMPLES],
                    label=None)
    # Everything past the models and the prompt is folded into Settings, so Run and the tabs come right after
    # them on a phone, and the form stays short beside the results on a desktop.
    with gr.Accordion("Settings", open=False, elem_id="al-settings"):
        gr.Markdown("**What to compare**")
        strategy = gr.Radio(STRATEGY_CHOICES, value="auto", label="How the assistant helps", info=HINTS["strategy"])
        with gr.Row():
            also_prompt_lookup = gr.Checkbox(True, label="Also compare prompt lookup",
                                             info=HINTS["also_prompt_lookup"], min_width=200)
            chat_template = gr.Checkbox(True, label="Use the chat template", info=HINTS["chat_template"],
                                        min_width=200)
        extra_assistants = gr.Textbox(
            label="Also compare these assistants (optional)", lines=1, max_lines=4, info=HINTS["extra_assistants"],
            placeholder="e.g. Qwen/Qwen2.5-0.5B-Instruct",
        )
        gr.Markdown("**How much to measure**")
        measure = gr.Radio(MEASURE_CHOICES, value="quick", label="How sure", info=HINTS["measure"],
                           elem_id="al-measure")
        # Text, empty by default: empty is the default band, which the placeholder shows.
        band_percent = gr.Textbox("", label=LABELS["band_percent"], placeholder=f"{NO_DIFFERENCE_BAND * 100:g}",
                                  max_lines=1, info=HINTS["band_percent"], elem_id="al-band")
        with gr.Row():
            # Text boxes, not number boxes: a number box shows an empty value as 0 once the accordion opens, and
            # empty must stay empty here (it means the device default). The request parses what is typed and
            # names the field when it is not a whole number in range.
            max_new_tokens = gr.Textbox("", label="New tokens per run", placeholder="device default", max_lines=1,
                                        info=HINTS["max_new_tokens"], min_width=150, elem_id="al-max-new-tokens")
            repeats = gr.Textbox("", label="Repetitions", placeholder="device default", max_lines=1,
                                 info=HINTS["repeats"], min_width=150, elem_id="al-repeats")
            warmup = gr.Number(CPU_DEFAULTS["warmup"], label="Warm-up runs", precision=0, info=HINTS["warmup"],
                               min_width=150)
        gr.Markdown("**How the text is generated**")
        with gr.Row():
            do_sample = gr.Checkbox(False, label="Sample instead of greedy", info=HINTS["do_sample"], min_width=200)
            seed = gr.Number(0, label="Seed", precision=0, info=HINTS["seed"], min_width=150)
        with gr.Row():
            device = gr.Dropdown(list(DEVICES), value="auto", label="Device", info=HINTS["device"], min_width=150)
            dtype = gr.Dropdown(list(DTYPES), value="auto", label="Number format (dtype)", info=HINTS["dtype"],
                                min_width=150)
        device_map_auto = gr.Checkbox(False, label="Spread the target over all GPUs", info=HINTS["device_map_auto"])
        gr.Markdown("**How drafts are made**")
        settings = setting_boxes("transformers")
        engines = engines_accordion()  # inside Settings: one closed section holds every choice past the prompt
    settings.update(engines.pop("settings"))
    return Form(
        target, assistant, strategy, prompt, max_new_tokens, repeats, warmup, also_prompt_lookup,
        extra_assistants, chat_template, do_sample, seed, device, dtype, device_map_auto, measure, preset,
        preset_note, **engines, band_percent=band_percent, settings=settings,
    )


def setting_boxes(*engines: str) -> dict:
    """The boxes of these engines' declared settings (engines/<engine>/tuning.py), two to a row, by field name.

    Text boxes, empty by default: empty leaves the setting to its engine, as the command line does (a number box
    or slider would always send a number); the placeholder says what empty means. A setting with fixed choices
    is a list whose first choice is the engine's default. Each box's elem_id is "al-" and its field's name.
    """
    names = [name for name, (declared, _) in SETTING_FIELDS.items() if declared.engine in engines]
    boxes = {}
    for row in range(0, len(names), 2):
        with gr.Row():
            for name in names[row:row + 2]:
                common = {"label": LABELS[name], "info": HINTS[name], "min_width": 150,
                          "elem_id": "al-" + name.replace("_", "-")}
                _, setting = SETTING_FIELDS[name]
                boxes[name] = (gr.Dropdown(setting_choices(name), value="", **common) if setting.choices else
                               gr.Textbox("", max_lines=1, placeholder=SETTING_EMPTY[name], **common))
    return boxes


def engines_accordion() -> dict:
    """The Engines accordion: which engines, the vLLM arms AssistLab starts, or the operator's servers.

    Text boxes, empty by default, as for the drafting settings: empty means vLLM's arm defaults.
    """
    with gr.Accordion("Engines", open=False, elem_id="al-engines"):
        engines = gr.Radio(ENGINE_CHOICES, value="transformers", label=LABELS["engines"], info=HINTS["engines"],
                           elem_id="al-engines-choice")
        vllm_methods = gr.CheckboxGroup(VLLM_METHOD_CHOICES, value=list(DEFAULT_VLLM_METHODS),
                                        label=LABELS["vllm_methods"], info=HINTS["vllm_methods"],
                                        elem_id="al-vllm-methods")
        # vLLM's declared settings, then any other engine's (api_parameters.PLACED_ENGINES).
        settings = setting_boxes("vllm", *(e for e in SETTING_ENGINES if e not in PLACED_ENGINES))
        servers = gr.Textbox("", label=LABELS["servers"], lines=2, max_lines=8, info=HINTS["servers"],
                             placeholder="plain=http://127.0.0.1:8000\nngram=http://127.0.0.1:8001",
                             elem_id="al-vllm-servers")
        # A password box: the browser does not show it, and the report and the history keep only "set".
        server_api_key = gr.Textbox("", label=LABELS["server_api_key"], type="password", max_lines=1,
                                    info=HINTS["server_api_key"], elem_id="al-vllm-api-key")
        # Text, empty by default: empty is no load phase; the request parses the levels and names the box.
        concurrency = gr.Textbox("", label=LABELS["concurrency"], max_lines=1, placeholder="1,2,4,8",
                                 info=HINTS["concurrency"], elem_id="al-load")
    return {"engines": engines, "vllm_methods": vllm_methods, "servers": servers, "server_api_key": server_api_key,
            "concurrency": concurrency, "settings": settings}



def preset_choice(preset: catalog.Preset, machine: catalog.Machine) -> str:
    """A preset as the list shows it: its label and whether it fits this machine ('… · runs here')."""
    return f"{preset.label} · {catalog.fit(preset, machine).tag}"


def matching_preset(chosen: str | None, target: str | None, assistant: str | None) -> str:
    """The preset the model boxes hold: the chosen one while they still match it, else another that matches
    them, else CUSTOM."""
    pair = ((target or "").strip(), (assistant or "").strip())
    matches = [p.label for p in catalog.PRESETS if (p.target, p.assistant) == pair]
    if chosen in matches:
        return chosen
    return matches[0] if matches else CUSTOM


def wire(form: Form) -> None:
    """The form's own listeners: a preset fills in its pair; typing another pair makes the preset Custom."""
    presets = {p.label: p for p in catalog.PRESETS}
    machine = catalog.this_machine()
    notes = {p.label: catalog.describe(p, machine, markdown=True) for p in catalog.PRESETS}

    starting_prompts = {p.prompt for p in catalog.PRESETS}

    def choose_preset(label: str, prompt: str):
        preset = presets.get(label)
        if preset is None:
            return gr.update(), gr.update(), gr.update(), gr.update()
        # A prompt the person wrote stays; one a preset put there follows the new preset.
        new_prompt = preset.prompt if prompt in starting_prompts or not (prompt or "").strip() else gr.update()
        return preset.target, preset.assistant, notes[label], new_prompt

    form.preset.change(choose_preset, [form.preset, form.prompt],
                       [form.target, form.assistant, form.preset_note, form.prompt], **LIGHT)

    def follow_boxes(chosen: str, target: str, assistant: str):
        label = matching_preset(chosen, target, assistant)
        if label == chosen:
            return gr.update(), gr.update()
        return label, notes.get(label, CUSTOM_NOTE)

    # `.input`, not `.change`: only what a person types, not the preset filling the boxes in, can make it Custom.
    for box in (form.target, form.assistant):
        box.input(follow_boxes, [form.preset, form.target, form.assistant], [form.preset, form.preset_note], **LIGHT)
