"""The whole page: the form beside the result panels, the /compare API, and how the server is launched."""

# No `from __future__ import annotations`: gr.api reads the type hints of `compare` at runtime.

import asyncio
import os
from pathlib import Path

import gradio as gr

from .. import catalog, charts, slots
from ..access import LoginThrottle
from ..config import DEFAULT_PROMPT, LIMITS
from ..errors import InputError, ResourceError
from ..models import ModelStore
from ..slots import Finished, SlotPool, Waiting
from . import compare_tab, gradio_private, sweep_tab
from . import form as form_mod
from .fields import FORM_FIELDS, _blank, request_from_form
from .form import ASSETS
from .session import GPU_GROUP, HEARTBEAT_S, QUEUE_SIZE, Page, ReportFiles, SessionStops, _gpu_runner, user_errors
from .style import CSS, theme

AUTH_ENV = "ASSISTLAB_AUTH"
FAILED_LOGIN_DELAY_S = 0.5  # what each wrong password costs its sender, without holding up anyone else
# Gradio's copies of files it serves (report downloads) are swept every 10 minutes once an hour old, and all
# removed when the server stops.
CACHE_SWEEP = (600, 3600)


def build_app(
    store: ModelStore | None = None,
    reports_dir: Path | None = None,
    queue_max_size: int = QUEUE_SIZE,
    pool: SlotPool | None = None,
) -> gr.Blocks:
    """The whole page around one ModelStore and one slot per visible GPU; app.py launches it, tests drive it."""
    store = store if store is not None else ModelStore()
    pool = pool if pool is not None else SlotPool(slots.visible_gpus())
    stops = SessionStops()
    gpu_stream = _gpu_runner(store)

    with gr.Blocks(title="AssistLab", analytics_enabled=False, fill_width=True, delete_cache=CACHE_SWEEP) as demo:
        form_mod.header()
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=340):
                form = form_mod.build()
            with gr.Column(scale=7, min_width=480):
                with gr.Tabs(elem_id="al-tabs"):
                    with gr.Tab("Compare", id="compare", elem_id="al-tab-compare"):
                        results = compare_tab.build()
                        sweeps = sweep_tab.build()

        # ---- Register listeners
        page = Page(gpu_stream, stops, ReportFiles(reports_dir), form.inputs(), pool)
        form_mod.wire(form)
        compare_tab.wire(page, results)
        sweep_tab.wire(page, form, sweeps)

        def forget_session(request: gr.Request):
            stops.forget(request.session_hash)  # a closed tab stops its run at the next boundary

        demo.unload(forget_session)

        async def compare(
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
            request: gr.Request = None,
        ) -> tuple[dict, str]:
            """Compare a target with and without assistance; returns the JSON report and its headline.

            max_new_tokens, repeats and warmup left empty (None) take the device defaults.
            """
            values = {name: value for name, value in locals().items() if name in FORM_FIELDS}
            session = request.session_hash if request is not None else None
            with user_errors():
                job = page.start_job(request_from_form(**values), lambda: False)
                final = None
                try:  # a cancel raises CancelledError at the sleep; the job is stopped on the way out
                    while True:
                        try:
                            item = job.get(timeout=0)
                        except Finished:
                            break
                        if item is None:
                            if session and gradio_private.client_gone(demo, session):
                                job.stop()
                            await asyncio.sleep(HEARTBEAT_S)
                        elif not isinstance(item, Waiting):
                            final = item
                finally:
                    job.stop()
                if final is None or final.report is None:
                    raise ResourceError("The comparison stopped before it started; try again.")
                report = final.report.to_dict()
            return report, charts.headline(report)

        gr.api(compare, api_name="compare", concurrency_id=GPU_GROUP, concurrency_limit=pool.size)

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


def throttled_auth(pairs: list[tuple[str, str]]):
    """Gradio's `auth=` callable: the accounts, with failed logins slowed and repeated ones locked out.

    `.throttle` is the LoginThrottle behind it.
    """
    throttle = LoginThrottle(dict(pairs))

    async def auth(username: str, password: str) -> bool:
        if throttle.check(username, password):
            return True
        await asyncio.sleep(FAILED_LOGIN_DELAY_S)
        return False

    auth.throttle = throttle
    return auth


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
    options["max_file_size"] = LIMITS["upload_bytes"]
    auth = parse_auth(env.get(AUTH_ENV))
    if auth:
        options["auth"] = throttled_auth(auth)
        options["auth_message"] = "This AssistLab server asks for a login."
    return options
