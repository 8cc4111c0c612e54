"""The whole page: the form beside the result panels, the /compare API, and how the server is launched."""

# No `from __future__ import annotations`: gr.api reads the type hints of `compare` at runtime.

import os
import threading
from pathlib import Path

import gradio as gr

from .. import catalog, charts
from ..config import DEFAULT_PROMPT
from ..errors import InputError
from ..models import ModelStore
from . import compare_tab, suite_tab, sweep_tab
from . import form as form_mod
from .fields import FORM_FIELDS, _blank, request_from_form
from .form import ASSETS
from .session import GPU_GROUP, QUEUE_SIZE, Page, ReportFiles, SessionStops, _gpu_runner, user_errors
from .style import CSS, theme

AUTH_ENV = "ASSISTLAB_AUTH"


def build_app(
    store: ModelStore | None = None, reports_dir: Path | None = None, queue_max_size: int = QUEUE_SIZE
) -> gr.Blocks:
    """The whole page around one ModelStore; app.py launches it, tests drive it."""
    store = store if store is not None else ModelStore()
    stops = SessionStops()
    gpu_stream = _gpu_runner(store)

    with gr.Blocks(title="AssistLab", analytics_enabled=False, fill_width=True) as demo:
        form_mod.header()
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=340):
                form = form_mod.build()
            with gr.Column(scale=7, min_width=480):
                with gr.Tabs(elem_id="al-tabs"):
                    with gr.Tab("Compare", id="compare", elem_id="al-tab-compare"):
                        results = compare_tab.build()
                        sweeps = sweep_tab.build()
                    with gr.Tab("Workloads", id="workloads", elem_id="al-tab-workloads"):
                        suites = suite_tab.build()

        # ---- Register listeners
        page = Page(gpu_stream, stops, ReportFiles(reports_dir), form.inputs())
        form_mod.wire(form)
        compare_tab.wire(page, results)
        sweep_tab.wire(page, form, sweeps)
        suite_tab.wire(page, suites, store)

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
        suite_stream = suite_tab.suite_stream(store)

        def compare_suite(
            target: str = catalog.BUNDLED_TARGET,
            assistant: str = catalog.BUNDLED_ASSISTANT,
            strategy: str = "auto",
            suite: str = "spec-bench",
            categories: str = "",
            per_category: int | None = None,
            selection: str = "first",
            selection_seed: int = 0,
            turns: str = "first",
            prompts_text: str = "",
            prompts_filename: str = "prompts.jsonl",
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
            """Measure a workload: a Spec-Bench subset (suite='spec-bench', categories 'qa,translation', per_category)
            or your prompts (suite='file', prompts_text = the file's contents, prompts_filename for its format).
            Returns the JSON report (per-category figures under suite) and one sentence per category.
            """
            arguments = locals()
            values = {name: value for name, value in arguments.items() if name in FORM_FIELDS}
            suite_values = {
                "source": suite, "categories": categories, "per_category": per_category, "selection": selection,
                "selection_seed": selection_seed, "turns": turns,
            }
            with user_errors():
                report = suite_tab.compare_suite_api(suite_stream, values, suite_values, prompts_text, prompts_filename)
            lines = [c["best"] for c in report["suite"]["categories"]] + [report["suite"]["overall"]["best"]]
            return report, "\n".join(lines)

        gr.api(compare_suite, api_name="compare_suite", concurrency_id=GPU_GROUP, concurrency_limit=1)

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
