"""The whole page: the form beside the result panels, the /compare API, and how the server is launched."""

# No `from __future__ import annotations`: gr.api reads the type hints of `compare` at runtime.

import os
import threading
from pathlib import Path

import gradio as gr

from .. import catalog, charts
from ..errors import InputError
from ..history import History
from ..models import ModelStore
from . import compare_tab, history_tab, sweep_tab
from . import form as form_mod
from .fields import FORM_FIELDS, _blank, request_from_form
from .form import ASSETS
from .session import GPU_GROUP, QUEUE_SIZE, Page, ReportFiles, SessionStops, _gpu_runner, user_errors
from .style import CSS, theme

AUTH_ENV = "ASSISTLAB_AUTH"


def build_app(
    store: ModelStore | None = None, reports_dir: Path | None = None, queue_max_size: int = QUEUE_SIZE,
    history: History | None = None,
) -> gr.Blocks:
    """The whole page around one ModelStore and one history; app.py launches it, tests drive it."""
    store = store if store is not None else ModelStore()
    history = history if history is not None else History()
    stops = SessionStops()
    gpu_stream = _gpu_runner(store)

    with gr.Blocks(title="AssistLab", analytics_enabled=False, fill_width=True) as demo:
        form_mod.header()
        with gr.Row(equal_height=False, elem_id="al-main"):
            with gr.Column(scale=4, min_width=340):
                form = form_mod.build()
            with gr.Column(scale=7, min_width=320):
                with gr.Tabs(elem_id="al-tabs") as tabs:
                    with gr.Tab("Compare", id="compare", elem_id="al-tab-compare"):
                        results = compare_tab.build()
                        sweeps = sweep_tab.build()
                    with gr.Tab("History", id="history", elem_id="al-tab-history") as history_page:
                        saved = history_tab.build_history()
                    with gr.Tab("Leaderboard", id="leaderboard", elem_id="al-tab-leaderboard") as board_page:
                        board = history_tab.build_board()

        # ---- Register listeners
        page = Page(gpu_stream, stops, ReportFiles(reports_dir), form.inputs(), history)
        form_mod.wire(form)
        compare_tab.wire(page, results)
        sweep_tab.wire(page, form, sweeps)
        view = history_tab.HistoryView(**saved, **board)
        history_tab.wire(page, history, view, tabs, demo)
        history_page.select(history_tab.listing_of(history), [view.target, view.assistant, view.device, view.page],
                            [view.listing, view.chosen], queue=False, api_visibility="private")
        board_page.select(history_tab.board_of(history), [view.board_target, view.board_device], view.board,
                          queue=False, api_visibility="private")

        def forget_session(request: gr.Request):
            stops.forget(request.session_hash)  # a closed tab stops its run at the next boundary

        demo.unload(forget_session)

        def compare(
            target: str = catalog.BUNDLED_TARGET,
            assistant: str = catalog.BUNDLED_ASSISTANT,
            strategy: str = "auto",
            prompt: str | None = None,
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
            request: gr.Request = None,
        ) -> tuple[dict, str]:
            """Compare a target with and without assistance; returns the JSON report and its headline.

            max_new_tokens, repeats and warmup left empty (None) take the device defaults; a prompt left empty
            (None) is the target's preset prompt (a continuation for the bundled base model), else the reference
            prompt. The comparison is saved to the history; report["saved"] holds its id (for /report and
            ?run=<id>) or why it was not.
            """
            values = {name: value for name, value in locals().items() if name in FORM_FIELDS}
            if values["prompt"] is None:
                values["prompt"] = catalog.default_prompt(target)
            with user_errors():
                bench = request_from_form(**values)
                final = None
                for final in gpu_stream(bench, threading.Event()):
                    pass
                report = final.report.to_dict()
            result = history.save(report, owner=getattr(request, "username", None) or None)
            report["saved"] = {"id": result.id, "warning": result.warning}
            return report, charts.headline(report)

        gr.api(compare, api_name="compare", concurrency_id=GPU_GROUP, concurrency_limit=1)

        def history_list(target: str = "", assistant: str = "", device: str = "", page: int = 1,
                         page_size: int = 20) -> dict:
            """Saved comparisons, newest first: {total, page, page_size, entries}; filters match parts of names."""
            with user_errors():
                found = history.list(target=target, assistant=assistant, device=device, page=page, page_size=page_size)
            return {"total": found.total, "page": found.page, "page_size": found.page_size,
                    "entries": [e.to_dict() for e in found.entries]}

        def saved_report(run_id: str) -> dict:
            """The whole JSON report of one saved comparison (the id from /history or a ?run=<id> link)."""
            with user_errors():
                return history.get(run_id)[1]

        def leaderboard(target: str = "", device: str = "") -> list:
            """Per target and device, the pairings tried ranked by measured speedup, with intervals and counts."""
            with user_errors():
                return [s.to_dict() for s in history.leaderboard(target=target, device=device)]

        gr.api(history_list, api_name="history", concurrency_limit=4)
        gr.api(saved_report, api_name="report", concurrency_limit=4)
        gr.api(leaderboard, api_name="leaderboard", concurrency_limit=4)

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
