"""The Gradio page: choose a pair, run and watch, understand the result, keep the report.

Only this module imports gradio. It builds a BenchRequest from the form, iterates the runner and renders
what the report says; AssistLabError becomes gr.Error here and nowhere else.
"""

# No `from __future__ import annotations`: gr.api reads the type hints of `compare` at runtime.

import contextlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from . import catalog, charts, sweep
from .config import (
    CPU_DEFAULTS,
    CUDA_DEFAULTS,
    DEFAULT_PROMPT,
    DEVICES,
    DTYPES,
    LIMITS,
    MODEL_STRATEGIES,
    SCHEDULES,
    BenchRequest,
    assisted_arms,
)
from .errors import AssistLabError, InputError
from .models import ModelStore
from .panels import (
    environment_markdown,
    event_progress,
    headline_html,
    numbers_html,
    progress_html,
    ranking_html,
    sweep_html,
    texts_html,
    why_html,
)
from .report import Report
from .runner import Event, run_benchmark

log = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parent.parent / "assets"
AUTH_ENV = "ASSISTLAB_AUTH"
QUEUE_SIZE = 16  # people waiting beyond this are told the queue is full instead of waiting for ever
GPU_GROUP = "gpu"  # every event that runs a model shares this group, so one benchmark owns the device
REPORT_FILES_MAX_AGE_S = 24 * 3600

STRATEGY_CHOICES = [
    ("Auto: pick from the tokenizers", "auto"),
    ("Assistant model (same tokenizer)", "assistant"),
    ("Universal (different tokenizers)", "universal"),
    ("Prompt lookup (no second model)", "prompt-lookup"),
    ("Early exit (the target's own first layers)", "early-exit"),
]

EXAMPLES = [
    ("Essay (the reference prompt)", DEFAULT_PROMPT),
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
    "warmup": (
        f"Untimed runs first, so start-up costs are not counted; {CPU_DEFAULTS['warmup']} is usually enough, "
        f"0 = none, at most {LIMITS['warmup']}."
    ),
    "do_sample": "Greedy writes the same text every time, so plain and assisted outputs can be checked for "
    "equality. Sampling draws at random from the seed.",
    "seed": "Makes sampling repeatable.",
    "device": "auto = the GPU when there is one, else the CPU.",
    "dtype": "auto = bfloat16 on a GPU that supports it, else float32.",
    "device_map_auto": "For a target larger than one GPU: accelerate places its layers over every GPU (device_map=auto).",
    "num_assistant_tokens": "How many tokens the assistant drafts before the target checks them (k).",
    "schedule": "constant keeps k; heuristic grows k after a fully accepted draft and shrinks it after a miss.",
    "confidence": "Stop a draft early when the assistant is less sure than this (0 to 1). 0 = transformers' "
    "default.",
    "prompt_lookup_num_tokens": "How many tokens prompt lookup copies from the prompt per guess.",
    "sweep_values": "Whole numbers, comma-separated; each becomes one arm of the sweep.",
    "early_exit_layer": "For early exit: draft with the target's first N layers (e.g. 4). 0 = not set.",
    "target": "The model whose speed you care about: a preset, a hub id (org/name) or a folder in the "
    "operator's models directory.",
    "assistant": "The small model that drafts tokens; used by the auto, assistant and universal strategies.",
    "extra_assistants": "More assistants to compare in the same run, one per line or comma-separated.",
    "chat_template": "Wrap the prompt as a chat message when the target has a chat template.",
}

SWEEP_VALUES = "1,2,3,5,8"
SWEEP_SCHEDULES = ("heuristic",)  # the adaptive point added to a draft-length sweep
SWEEP_INTRO = (
    "Try several draft lengths in one comparison, against one shared plain baseline, with the settings above. "
    "**Sweep draft length** varies num_assistant_tokens of the first arm with an assistant (plus the adaptive "
    "'heuristic' schedule); **Sweep prompt-lookup length** varies prompt_lookup_num_tokens."
)

INTRO = (
    "Pick a target and an assistant, then press **Run**. AssistLab times the target on its own (plain) and "
    "with each kind of assistance, alternating runs so both see the same machine, and shows how much faster "
    "(or slower) assistance was, with every run as a point."
)

CSS = """
.gradio-container { max-width: 1760px !important; margin: 0 auto !important; }
#al-header { display: flex; align-items: center; gap: 14px; padding: 6px 2px 2px; }
#al-header svg { width: 46px; height: 46px; flex: none; }
#al-header h1 { margin: 0; font-size: 1.55rem; font-weight: 650; letter-spacing: -0.01em; }
#al-header p { margin: 2px 0 0; color: var(--body-text-color-subdued); }
.al-progress { padding: 2px 2px 6px; }
.al-track { height: 8px; border-radius: 999px; background: var(--neutral-200); overflow: hidden; }
.al-fill { height: 100%; border-radius: 999px; background: var(--primary-500); transition: width .4s ease; }
.al-progress.al-idle .al-fill { background: transparent; }
.al-progress.al-done .al-fill { background: #0d9488; }
.al-progress.al-stopped .al-fill, .al-progress.al-failed .al-fill { background: #d97706; }
.al-progress.al-failed .al-fill { background: #dc2626; }
.al-progress.al-busy .al-fill { width: 35% !important; animation: al-slide 1.3s ease-in-out infinite; }
@keyframes al-slide { from { margin-left: -35%; } to { margin-left: 100%; } }
.al-label { font-size: .9rem; margin-top: 6px; color: var(--body-text-color-subdued); }
.al-headline { border-radius: 12px; padding: 14px 18px; background: var(--primary-50);
  border: 1px solid var(--primary-200); }
.al-headline p { margin: 4px 0; line-height: 1.45; }
.al-headline p.al-arm { font-size: 1.08rem; font-weight: 560; }
.al-headline p.al-note { color: var(--body-text-color-subdued); font-size: .92rem; }
.al-dot { display: inline-block; width: 10px; height: 10px; border-radius: 50%; margin-right: 7px; }
.al-table { width: 100%; border-collapse: collapse; font-size: .88rem; border: none !important; margin: 0 !important; }
.al-table tr { border: none !important; }
.al-table th, .al-table td { padding: 6px 7px !important; border: none !important;
  border-bottom: 1px solid var(--border-color-primary) !important; text-align: right; white-space: nowrap;
  background: transparent !important; }
.al-table th:first-child, .al-table td:first-child { text-align: left; white-space: normal; min-width: 140px; }
.al-table th { font-weight: 600; color: var(--body-text-color-subdued); white-space: normal; vertical-align: bottom; }
.al-sub { color: var(--body-text-color-subdued); font-size: .8rem; }
.al-wrap { overflow-x: auto; }
.al-texts { display: grid; grid-template-columns: repeat(auto-fit, minmax(260px, 1fr)); gap: 12px; }
.al-text-card { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 10px 12px;
  background: var(--background-fill-primary); min-width: 0; }
.al-text-card h4 { margin: 0 0 6px; font-size: .95rem; display: flex; align-items: center; flex-wrap: wrap; gap: 6px; }
.al-badge { font-size: .75rem; font-weight: 500; border-radius: 999px; padding: 1px 8px; }
.al-same { background: #ccfbf1; color: #115e59; }
.al-differs { background: #fef3c7; color: #92400e; }
.al-failed-badge { background: #fee2e2; color: #991b1b; }
.al-text { white-space: pre-wrap; word-break: break-word; font-family: var(--font-mono); font-size: .85rem;
  max-height: 320px; overflow-y: auto; margin: 0; line-height: 1.5; }
.al-text mark { background: transparent; color: inherit; text-decoration: underline 2px #dc2626;
  text-underline-offset: 3px; text-decoration-skip-ink: none; }
.al-text del { color: #b91c1c; background: #fee2e2; text-decoration: line-through; }
.al-o-draft { background: #ccfbf1 !important; }
.al-o-target { background: #e0e7ff !important; }
.al-text .al-o-draft, .al-text .al-o-target { border-radius: 2px; }
.al-legend { display: flex; flex-wrap: wrap; gap: 6px 18px; font-size: .84rem; margin: 2px 0 10px;
  color: var(--body-text-color-subdued); }
.al-legend > span { display: inline-flex; align-items: center; gap: 6px; }
.al-legend mark { background: transparent; color: inherit; text-decoration: underline 2px #dc2626;
  text-underline-offset: 3px; }
.al-legend del { color: #b91c1c; background: #fee2e2; }
.al-swatch { display: inline-block; width: 14px; height: 14px; border-radius: 3px; flex: none;
  border: 1px solid rgba(15, 23, 42, .12); }
.al-text-card > .al-sub { display: block; margin: -2px 0 6px; }
.al-why { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 12px; }
.al-why-card { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 10px 14px;
  background: var(--background-fill-primary); }
.al-why-card h4 { margin: 0 0 8px; font-size: .95rem; }
.al-why-nums { display: flex; gap: 28px; margin-bottom: 6px; }
.al-big { font-size: 1.25rem; font-weight: 620; }
.al-kv { border-collapse: collapse; font-size: .86rem; margin: 4px 0 !important; border: none !important; }
.al-kv tr { border: none !important; }
.al-kv th, .al-kv td { padding: 2px 10px 2px 0 !important; border: none !important; background: transparent !important;
  text-align: left; vertical-align: top; }
.al-kv th { font-style: italic; font-weight: 600; }
.al-kv td:nth-child(2) { font-variant-numeric: tabular-nums; text-align: right; }
.al-kv td:last-child { color: var(--body-text-color-subdued); }
.al-limit { margin: 6px 0 2px; font-size: .9rem; line-height: 1.45; }
.al-formula { margin-top: 8px !important; }
.al-h { margin: 14px 0 6px; font-size: .95rem; }
.al-ranking th:first-child, .al-ranking td:first-child { min-width: 0; width: 1%; text-align: center; }
.al-ranking th:nth-child(2), .al-ranking td:nth-child(2) { text-align: left; white-space: normal !important;
  min-width: 150px; }
.al-ranking th:last-child, .al-ranking td:last-child { white-space: normal !important; text-align: left;
  min-width: 260px; width: 42%; font-size: .84rem; }
.al-sweep-best { font-weight: 560; margin: 6px 0 !important; }
.al-env, .al-env p { font-size: .88rem !important; color: var(--body-text-color-subdued) !important; }
"""


# ---------------------------------------------------------------- from the form to a request


def _blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _unset(value) -> bool:
    """Empty or 0: number boxes cannot be empty, so 0 stands for 'not set' where 0 is no useful value."""
    return _blank(value) or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0)


def _optional_count(value):
    """Token and repetition counts: empty means the device default; 0 is refused by the request, as in the CLI."""
    return None if _blank(value) else value


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
    num_assistant_tokens=5,
    schedule="constant",
    confidence_threshold=None,
    prompt_lookup_num_tokens=10,
    early_exit_layer=None,
    device_map_auto=False,
) -> BenchRequest:
    """The request the form (or the API) describes; the dataclasses check every value."""
    knobs = {
        "num_assistant_tokens": num_assistant_tokens,
        "num_assistant_tokens_schedule": schedule or "constant",
        "assistant_confidence_threshold": None if _unset(confidence_threshold) else confidence_threshold,
        "prompt_lookup_num_tokens": prompt_lookup_num_tokens,
    }
    strategy = strategy or "auto"
    # The assistant box always holds the preset's model; only a strategy that drafts with a model uses it.
    main = [assistant if isinstance(assistant, str) else ""] if strategy in MODEL_STRATEGIES else []
    arms = assisted_arms(
        strategy, main + _split_refs(extra_assistants), also_prompt_lookup=bool(also_prompt_lookup),
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
    values = tuple(part for part in re.split(r"[,;\s]+", "" if values_text is None else str(values_text)) if part)
    return SweepPlan(param, values, SWEEP_SCHEDULES if param == "num_assistant_tokens" else ())


def gpu_seconds(request: BenchRequest, plan: SweepPlan | None = None) -> int:
    """A generous guess at how long a request holds the GPU, for ZeroGPU's per-call duration."""
    resolved = (plan.apply(request) if plan is not None else request).resolved("cuda")
    runs = (resolved.warmup + resolved.repeats) * (1 + len(resolved.arms))
    # ~0.1 s per token covers a 27B target in bfloat16; loading is the fixed part.
    return int(min(1800, 60 + runs * resolved.max_new_tokens * 0.1))


def _events(request: BenchRequest, store: ModelStore, plan: SweepPlan | None, should_stop) -> Iterator[Event]:
    if plan is None:
        return run_benchmark(request, store, should_stop=should_stop)
    return sweep.sweep(request, store, plan.param, plan.values, plan.schedules, should_stop=should_stop)


Stream = Callable[[BenchRequest, threading.Event, SweepPlan | None], Iterator[Event]]


def _gpu_runner(store: ModelStore) -> Stream:
    """The runner (or a sweep) bound to the app's store; on a ZeroGPU Space, inside spaces.GPU."""

    def stream(request: BenchRequest, stop: threading.Event, plan: SweepPlan | None = None) -> Iterator[Event]:
        yield from _events(request, store, plan, stop.is_set)

    try:
        import spaces  # only present on Hugging Face Spaces
    except ImportError:
        return stream

    # ZeroGPU runs the call in another process and pickles its arguments, so the stop flag cannot go along:
    # there a run ends when it is done, when gradio stops reading it, or when its GPU time is up.
    def zero_stream(request: BenchRequest, plan: SweepPlan | None = None) -> Iterator[Event]:
        yield from _events(request, store, plan, lambda: False)

    on_gpu = spaces.GPU(duration=gpu_seconds)(zero_stream)
    return lambda request, stop, plan=None: on_gpu(request, plan)


# ---------------------------------------------------------------- per-session stop flags and report files


class SessionStops:
    """One stop flag per browser session: Stop sets it, a closed tab sets it, Run clears it."""

    def __init__(self) -> None:
        self._flags: dict[str, threading.Event] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self, session: str) -> Iterator[threading.Event]:
        """Mark the session's run as in progress while the block runs; yields its stop flag."""
        with self._lock:
            self._running.add(session)
        try:
            yield self.flag(session)
        finally:
            with self._lock:
                self._running.discard(session)

    def is_running(self, session: str) -> bool:
        with self._lock:
            return session in self._running

    def flag(self, session: str) -> threading.Event:
        with self._lock:
            return self._flags.setdefault(session, threading.Event())

    def arm(self, session: str) -> None:
        self.flag(session).clear()

    def stop(self, session: str) -> None:
        self.flag(session).set()

    def forget(self, session: str) -> None:
        with self._lock:
            flag = self._flags.pop(session, None)
        if flag is not None:
            flag.set()


class ReportFiles:
    """The app's own folder of downloadable reports, one subfolder per finished run."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="assistlab-reports-"))
        self.root.mkdir(parents=True, exist_ok=True)

    def write(self, report: Report) -> tuple[str, str]:
        self._prune()
        folder = self.root / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        json_path, csv_path = folder / "assistlab-report.json", folder / "assistlab-runs.csv"
        json_path.write_text(report.to_json(), encoding="utf-8")
        csv_path.write_text(report.to_csv(), encoding="utf-8")
        return str(json_path), str(csv_path)

    def _prune(self) -> None:
        cutoff = time.time() - REPORT_FILES_MAX_AGE_S
        for old in self.root.iterdir():
            if old.is_dir() and old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """The one place package errors become messages on the page; nothing else shows a traceback."""
    try:
        yield
    except gr.Error:
        raise
    except AssistLabError as exc:
        raise gr.Error(str(exc), title="Could not run the comparison", print_exception=False) from None
    except Exception as exc:  # a bug, not the user's doing: log it, keep serving, say so plainly
        log.exception("unexpected error in a comparison")
        raise gr.Error(
            f"Something unexpected went wrong ({type(exc).__name__}). The server log has the details; "
            f"the app is still running, so you can try again.",
            title="Unexpected error",
            print_exception=False,
        ) from None


# ---------------------------------------------------------------- layout


@dataclass
class Form:
    """The input components, in the order `request_from_form` takes them."""

    target: gr.Dropdown
    assistant: gr.Dropdown
    strategy: gr.Radio
    prompt: gr.Textbox
    max_new_tokens: gr.Number
    repeats: gr.Number
    warmup: gr.Number
    also_prompt_lookup: gr.Checkbox
    extra_assistants: gr.Textbox
    chat_template: gr.Checkbox
    do_sample: gr.Checkbox
    seed: gr.Number
    device: gr.Dropdown
    dtype: gr.Dropdown
    num_assistant_tokens: gr.Slider
    schedule: gr.Dropdown
    confidence_threshold: gr.Number
    prompt_lookup_num_tokens: gr.Slider
    early_exit_layer: gr.Number
    device_map_auto: gr.Checkbox
    preset: gr.Dropdown
    preset_note: gr.Markdown

    def inputs(self) -> list:
        return [getattr(self, name) for name in FORM_FIELDS]


FORM_FIELDS = (
    "target", "assistant", "strategy", "prompt", "max_new_tokens", "repeats", "warmup", "also_prompt_lookup",
    "extra_assistants", "chat_template", "do_sample", "seed", "device", "dtype", "num_assistant_tokens",
    "schedule", "confidence_threshold", "prompt_lookup_num_tokens", "early_exit_layer", "device_map_auto",
)


@dataclass
class Results:
    """The output components a run updates, and the buttons that start and stop it."""

    run: gr.Button
    stop: gr.Button
    intro: gr.Markdown
    progress: gr.HTML
    panel: gr.Column
    headline: gr.HTML
    latency: gr.Plot
    speedup: gr.Plot
    timeline: gr.Plot
    acceptance: gr.Plot
    why: gr.HTML
    ranking: gr.HTML
    numbers: gr.HTML
    texts: gr.HTML
    environment: gr.Markdown
    environment_json: gr.JSON
    download_json: gr.DownloadButton
    download_csv: gr.DownloadButton

    def outputs(self) -> list:
        return [getattr(self, name) for name in self.__dataclass_fields__ if name not in ("run", "stop")]


@dataclass
class Sweeps:
    """The draft-length sweep: its settings, buttons and outputs."""

    values: gr.Textbox
    draft_length: gr.Button
    lookup_length: gr.Button
    stop: gr.Button
    progress: gr.HTML
    panel: gr.Column
    plot: gr.Plot
    summary: gr.HTML
    apply: gr.Button
    download_json: gr.DownloadButton
    best: gr.State

    def outputs(self) -> list:
        return [self.progress, self.panel, self.plot, self.summary, self.apply, self.download_json, self.best]


def _local_folders() -> list[str]:
    """Model folders in the operator's models directory, offered next to the presets."""
    root = catalog.models_dir()
    if root is None or not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "config.json").is_file())


def _unique(items) -> list[str]:
    return list(dict.fromkeys(items))


def _header() -> None:
    logo = (ASSETS / "logo.svg").read_text(encoding="utf-8") if (ASSETS / "logo.svg").is_file() else ""
    gr.HTML(
        f'<div id="al-header">{logo}<div><h1>AssistLab</h1>'
        f"<p>Does an assistant model make this target model faster? By how much, and why?</p></div></div>"
    )


def _form_panel() -> Form:
    default = catalog.PRESETS[0]
    local = _local_folders()
    gr.Markdown("### 1 · Choose")
    preset = gr.Dropdown(
        [p.label for p in catalog.PRESETS], value=default.label, label="Preset pair",
        info="Fills in the target and assistant; you can still type any other model below.",
    )
    preset_note = gr.Markdown(default.note, elem_classes="al-env")
    target = gr.Dropdown(
        _unique([p.target for p in catalog.PRESETS] + local), value=default.target, label="Target model",
        allow_custom_value=True, info=HINTS["target"], elem_id="al-target",
    )
    assistant = gr.Dropdown(
        _unique([p.assistant for p in catalog.PRESETS] + local), value=default.assistant, label="Assistant model",
        allow_custom_value=True, info=HINTS["assistant"], elem_id="al-assistant",
    )
    strategy = gr.Radio(STRATEGY_CHOICES, value="auto", label="How the assistant helps")
    with gr.Row():
        also_prompt_lookup = gr.Checkbox(True, label="Also compare prompt lookup", min_width=200)
        chat_template = gr.Checkbox(True, label="Use the chat template", info=None, min_width=200)
    extra_assistants = gr.Textbox(
        label="Also compare these assistants (optional)", lines=1, max_lines=4, info=HINTS["extra_assistants"],
        placeholder="e.g. Qwen/Qwen2.5-0.5B-Instruct",
    )
    prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=4, max_lines=14, elem_id="al-prompt",
                        max_length=LIMITS["prompt_chars"])
    gr.Examples([[text] for _, text in EXAMPLES], inputs=[prompt], example_labels=[name for name, _ in EXAMPLES],
                label="Example prompts")
    with gr.Accordion("Settings", open=False, elem_id="al-settings"):
        gr.Markdown("**How much to measure**")
        with gr.Row():
            # No minimum/maximum here: gradio's own range message would not name the field; the request's does.
            max_new_tokens = gr.Number(None, label="New tokens per run", precision=0, placeholder="device default",
                                       info=HINTS["max_new_tokens"], min_width=150)
            repeats = gr.Number(None, label="Repetitions", precision=0, placeholder="device default",
                                info=HINTS["repeats"], min_width=150)
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
        num_assistant_tokens = gr.Slider(1, LIMITS["num_assistant_tokens"], value=5, step=1,
                                         label="Draft length (num_assistant_tokens)",
                                         info=HINTS["num_assistant_tokens"], elem_id="al-draft-tokens")
        with gr.Row():
            schedule = gr.Dropdown(list(SCHEDULES), value="constant", label="Draft length schedule",
                                   info=HINTS["schedule"], min_width=150)
            confidence_threshold = gr.Number(0, label="Confidence threshold", step=0.05, info=HINTS["confidence"],
                                             min_width=150)
        prompt_lookup_num_tokens = gr.Slider(1, LIMITS["prompt_lookup_num_tokens"], value=10, step=1,
                                             label="Prompt lookup tokens", info=HINTS["prompt_lookup_num_tokens"],
                                             elem_id="al-lookup-tokens")
        early_exit_layer = gr.Number(0, label="Early-exit layer", precision=0, info=HINTS["early_exit_layer"])
    return Form(
        target, assistant, strategy, prompt, max_new_tokens, repeats, warmup, also_prompt_lookup,
        extra_assistants, chat_template, do_sample, seed, device, dtype, num_assistant_tokens, schedule,
        confidence_threshold, prompt_lookup_num_tokens, early_exit_layer, device_map_auto, preset, preset_note,
    )


def _results_panel() -> Results:
    gr.Markdown("### 2 · Run, watch and understand")
    with gr.Row():
        run = gr.Button("Run", variant="primary", elem_id="al-run", scale=3)
        stop = gr.Button("Stop", variant="stop", elem_id="al-stop", scale=1)
    progress = gr.HTML(progress_html("Ready. Press Run to start.", 0.0, "idle"), elem_id="al-progress")
    intro = gr.Markdown(INTRO)
    with gr.Column(visible=False, elem_id="al-results") as panel:
        headline = gr.HTML()
        with gr.Row(equal_height=True):
            speedup = gr.Plot(show_label=False, min_width=360, elem_id="al-plot-speedup")
            latency = gr.Plot(show_label=False, min_width=360, elem_id="al-plot-latency")
        with gr.Row(equal_height=True):
            timeline = gr.Plot(show_label=False, min_width=360, elem_id="al-plot-timeline")
            acceptance = gr.Plot(show_label=False, min_width=360, elem_id="al-plot-acceptance")
        gr.Markdown("#### Why this speed")
        why = gr.HTML()
        ranking = gr.HTML()
        gr.Markdown("#### All the numbers")
        numbers = gr.HTML()
        gr.Markdown("#### Generated texts")
        texts = gr.HTML()
        environment = gr.Markdown(elem_classes="al-env")
        with gr.Accordion("Environment details", open=False):
            environment_json = gr.JSON(show_label=False)
        with gr.Row():
            download_json = gr.DownloadButton("Download report (JSON)", visible=False, elem_id="al-download-json")
            download_csv = gr.DownloadButton("Download runs (CSV)", visible=False, elem_id="al-download-csv")
    return Results(run, stop, intro, progress, panel, headline, latency, speedup, timeline, acceptance, why, ranking,
                   numbers, texts, environment, environment_json, download_json, download_csv)


def _sweep_panel() -> Sweeps:
    gr.Markdown("### 3 · Tune the draft length")
    gr.Markdown(SWEEP_INTRO, elem_classes="al-env")
    values = gr.Textbox(SWEEP_VALUES, label="Lengths to try", info=HINTS["sweep_values"], max_lines=1,
                        elem_id="al-sweep-values")
    with gr.Row():
        draft_length = gr.Button("Sweep draft length", variant="secondary", elem_id="al-sweep-k", scale=2)
        lookup_length = gr.Button("Sweep prompt-lookup length", variant="secondary", elem_id="al-sweep-lookup",
                                  scale=2)
        stop = gr.Button("Stop", variant="stop", elem_id="al-sweep-stop", scale=1)
    progress = gr.HTML(progress_html("No sweep yet.", 0.0, "idle"), elem_id="al-sweep-progress")
    with gr.Column(visible=False, elem_id="al-sweep-results") as panel:
        plot = gr.Plot(show_label=False, elem_id="al-plot-sweep")
        summary = gr.HTML()
        with gr.Row():
            apply = gr.Button("Apply best", variant="primary", visible=False, elem_id="al-sweep-apply")
            download_json = gr.DownloadButton("Download sweep report (JSON)", visible=False,
                                              elem_id="al-sweep-download")
    return Sweeps(values, draft_length, lookup_length, stop, progress, panel, plot, summary, apply, download_json,
                  gr.State(None))


def _report_updates(results: Results, report: dict) -> dict:
    """Every results component, redrawn from one report dict."""
    return {
        results.intro: gr.update(visible=False),
        results.panel: gr.update(visible=True),
        results.headline: headline_html(report),
        results.latency: charts.latency_figure(report),
        results.speedup: charts.speedup_figure(report),
        results.timeline: charts.timeline_figure(report),
        results.acceptance: charts.acceptance_figure(report),
        results.why: why_html(report),
        results.ranking: ranking_html(report),
        results.numbers: numbers_html(report),
        results.texts: texts_html(report),
        results.environment: environment_markdown(report),
        results.environment_json: report.get("environment", {}),
    }


def _sweep_updates(view: Sweeps, report: dict) -> dict:
    """The sweep's chart and table, redrawn from its report dict (with 'sweep' set)."""
    return {
        view.panel: gr.update(visible=True),
        view.plot: charts.sweep_figure(report),
        view.summary: sweep_html(report),
    }


def best_setting_updates(best: dict | None) -> tuple:
    """What Apply best writes into the settings: (num_assistant_tokens, schedule, prompt_lookup_num_tokens, note)."""
    if not best or best.get("value") is None:
        return gr.update(), gr.update(), gr.update(), gr.update()
    if best["param"] == "prompt_lookup_num_tokens":
        note = f"Applied prompt-lookup length {best['value']} to the settings."
        return gr.update(), gr.update(), best["value"], progress_html(note, 1.0, "done")
    note = f"Applied draft length {best['value']} with the {best['schedule']} schedule to the settings."
    return best["value"], best["schedule"], gr.update(), progress_html(note, 1.0, "done")


# ---------------------------------------------------------------- the app


def build_app(
    store: ModelStore | None = None, reports_dir: Path | None = None, queue_max_size: int = QUEUE_SIZE
) -> gr.Blocks:
    """The whole page around one ModelStore; app.py launches it, tests drive it."""
    store = store if store is not None else ModelStore()
    files = ReportFiles(reports_dir)
    stops = SessionStops()
    gpu_stream = _gpu_runner(store)
    presets = {p.label: p for p in catalog.PRESETS}

    with gr.Blocks(title="AssistLab", analytics_enabled=False, fill_width=True) as demo:
        _header()
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=340):
                form = _form_panel()
            with gr.Column(scale=7, min_width=480):
                results = _results_panel()
                sweeps = _sweep_panel()

        # ---- Register listeners

        def choose_preset(label: str):
            preset = presets.get(label)
            if preset is None:
                return gr.update(), gr.update(), gr.update()
            return preset.target, preset.assistant, preset.note

        names = {component: name for name, component in zip(FORM_FIELDS, form.inputs())}

        def form_request(data: dict) -> BenchRequest:
            return request_from_form(**{names[c]: value for c, value in data.items() if c in names})

        def streamed(session: str, progress: gr.HTML, events: Callable, render: Callable):
            """Run `events(stop)` for one session, yielding `render(event)`; a failure ends in the progress bar."""
            event = None
            try:
                with user_errors(), stops.running(session) as stop:
                    if stop.is_set():  # Stop was pressed while this run waited in the queue
                        yield {progress: progress_html("Stopped before it started.", 0.0, "stopped")}
                        return
                    for event in events(stop):
                        yield render(event)
            except gr.Error as exc:
                done, total = (event.done, event.total) if event is not None else (0, 0)
                yield {progress: progress_html(f"Failed: {exc.message}", done / total if total else 0.0, "failed")}
                raise

        def waiting_for_slot(session: str, progress: gr.HTML, hidden: tuple) -> dict:
            """Clear the session's stop flag and say it is queued, hiding what the previous run offered."""
            stops.arm(session)
            return {
                progress: progress_html("Waiting for a free slot: one comparison runs at a time...", None),
                **{component: gr.update(visible=False) for component in hidden},
            }

        def arm_run(request: gr.Request):
            return waiting_for_slot(
                request.session_hash, results.progress, (results.download_json, results.download_csv)
            )

        def run_stream(data: dict, request: gr.Request):
            """Stream one comparison into the page, redrawing after every counted run."""

            def render(event: Event) -> dict:
                update = {results.progress: event_progress(event)}
                if event.report is not None and (event.kind == "done" or not event.warmup):
                    report = event.report.to_dict()
                    if report["counted_repetitions"] or event.kind == "done":
                        update.update(_report_updates(results, report))
                if event.kind == "done" and event.report is not None and event.report.runs:
                    json_path, csv_path = files.write(event.report)
                    update[results.download_json] = gr.update(value=json_path, visible=True)
                    update[results.download_csv] = gr.update(value=csv_path, visible=True)
                return update

            yield from streamed(request.session_hash, results.progress,
                                lambda stop: gpu_stream(form_request(data), stop), render)

        def arm_sweep(request: gr.Request):
            return waiting_for_slot(request.session_hash, sweeps.progress, (sweeps.download_json, sweeps.apply))

        def sweep_stream(param: str, data: dict, request: gr.Request):
            """Stream one sweep into its panel; when done, offer its best setting and its report."""

            def events(stop: threading.Event) -> Iterator[Event]:
                bench, plan = form_request(data), sweep_plan(param, data[sweeps.values])
                plan.apply(bench)  # refuse a bad value before waiting for models
                return gpu_stream(bench, stop, plan)

            def render(event: Event) -> dict:
                update = {sweeps.progress: event_progress(event)}
                if event.report is not None and (event.kind == "done" or not event.warmup):
                    report = event.report.to_dict()
                    report.setdefault("sweep", sweep.summarize_sweep(report, param))
                    if report["counted_repetitions"] or event.kind == "done":
                        update.update(_sweep_updates(sweeps, report))
                    if event.kind == "done" and event.report.runs:
                        best = report["sweep"].get("best")
                        update[sweeps.best] = {**best, "param": param} if best else None
                        update[sweeps.apply] = gr.update(visible=best is not None)
                        json_path, _csv = files.write(event.report)
                        update[sweeps.download_json] = gr.update(value=json_path, visible=True)
                return update

            yield from streamed(request.session_hash, sweeps.progress, events, render)

        def sweep_draft_length(data: dict, request: gr.Request):
            yield from sweep_stream("num_assistant_tokens", data, request)

        def sweep_lookup_length(data: dict, request: gr.Request):
            yield from sweep_stream("prompt_lookup_num_tokens", data, request)

        def request_stop(request: gr.Request):
            running = stops.is_running(request.session_hash)
            stops.stop(request.session_hash)  # also when queued: the run then ends before it starts
            if running:
                return progress_html("Stopping after the current run...", None)
            return gr.update()

        heavy = {"concurrency_id": GPU_GROUP, "concurrency_limit": 1, "api_visibility": "private"}
        form.preset.change(choose_preset, form.preset, [form.target, form.assistant, form.preset_note],
                           queue=False, api_visibility="private")
        started = results.run.click(arm_run, None, [results.progress, results.download_json, results.download_csv],
                                    queue=False, api_visibility="private")
        started.then(
            run_stream,
            set(form.inputs()),  # a set: gradio passes one {component: value} dict
            results.outputs(),
            show_progress="full",
            show_progress_on=[results.progress],
            **heavy,
        )
        for button, handler in ((sweeps.draft_length, sweep_draft_length), (sweeps.lookup_length, sweep_lookup_length)):
            button.click(arm_sweep, None, [sweeps.progress, sweeps.download_json, sweeps.apply], queue=False,
                         api_visibility="private").then(
                handler,
                {*form.inputs(), sweeps.values},
                sweeps.outputs(),
                show_progress="full",
                show_progress_on=[sweeps.progress],
                **heavy,
            )
        # No `cancels=` on Stop: cancelling would free the GPU group while generate() is still running in its
        # thread and lose the partial report; the flag ends the run cleanly between runs instead.
        for button, progress in ((results.stop, results.progress), (sweeps.stop, sweeps.progress)):
            button.click(request_stop, None, progress, queue=False, api_visibility="private")
        sweeps.apply.click(
            best_setting_updates, sweeps.best,
            [form.num_assistant_tokens, form.schedule, form.prompt_lookup_num_tokens, sweeps.progress],
            queue=False, api_visibility="private",
        )

        def forget_session(request: gr.Request):
            stops.forget(request.session_hash)  # a closed tab stops its run at the next boundary

        demo.unload(forget_session)

        def compare(
            target: str = catalog.BUNDLED_TARGET,
            assistant: str = catalog.BUNDLED_ASSISTANT,
            strategy: str = "auto",
            prompt: str = DEFAULT_PROMPT,
            max_new_tokens: int | None = None,
            repeats: int | None = None,
            warmup: int | None = None,
            also_prompt_lookup: bool = True,
            extra_assistants: str = "",
            chat_template: bool = True,
            do_sample: bool = False,
            seed: int = 0,
            device: str = "auto",
            dtype: str = "auto",
            num_assistant_tokens: int = 5,
            schedule: str = "constant",
            confidence_threshold: float | None = None,
            prompt_lookup_num_tokens: int = 10,
            early_exit_layer: int | None = None,
            device_map_auto: bool = False,
        ) -> tuple[dict, str]:
            """Compare a target with and without assistance; returns the JSON report and its headline.

            max_new_tokens, repeats and warmup left empty (None) take the device defaults.
            """
            values = {name: value for name, value in locals().items() if name in FORM_FIELDS}
            with user_errors():
                bench = request_from_form(**values)
                final = None
                for final in gpu_stream(bench, threading.Event()):
                    pass
                report = final.report.to_dict()
            return report, charts.headline(report)

        gr.api(compare, api_name="compare", concurrency_id=GPU_GROUP, concurrency_limit=1)

    demo.queue(max_size=queue_max_size, default_concurrency_limit=1)
    return demo


# ---------------------------------------------------------------- launching


def parse_auth(text: str | None) -> list[tuple[str, str]] | None:
    """ASSISTLAB_AUTH='user:password[,user2:password2]' as gradio's auth list; None when unset."""
    if _blank(text):
        return None
    pairs = []
    for item in str(text).split(","):
        user, sep, password = item.strip().partition(":")
        if not sep or not user or not password:
            raise InputError(
                f"{AUTH_ENV} must look like user:password[,user2:password2]; one entry is {item.strip()!r}."
            )
        pairs.append((user, password))
    return pairs


def theme() -> gr.themes.Base:
    return gr.themes.Soft(primary_hue="indigo", secondary_hue="teal", neutral_hue="slate")


def launch_options(environ: dict | None = None) -> dict:
    """Keyword arguments for demo.launch(): look, server address from the GRADIO_* variables, optional login."""
    env = os.environ if environ is None else environ
    options = {
        "theme": theme(),
        "css": CSS,
        "server_name": env.get("GRADIO_SERVER_NAME") or "127.0.0.1",
        "show_error": False,  # unexpected exceptions stay in the server log; user_errors writes the page's text
    }
    if (ASSETS / "logo.png").is_file():
        options["favicon_path"] = str(ASSETS / "logo.png")
    if env.get("GRADIO_SERVER_PORT"):
        try:
            options["server_port"] = int(env["GRADIO_SERVER_PORT"])
        except ValueError:
            raise InputError(f"GRADIO_SERVER_PORT must be a port number, got {env['GRADIO_SERVER_PORT']!r}.") from None
    if env.get("GRADIO_ROOT_PATH"):
        options["root_path"] = env["GRADIO_ROOT_PATH"]
    auth = parse_auth(env.get(AUTH_ENV))
    if auth:
        options["auth"] = auth
        options["auth_message"] = "This AssistLab server asks for a login."
    return options
