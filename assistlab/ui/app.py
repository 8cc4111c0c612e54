"""The whole page: the form beside the result panels, the /compare API, and how the server is launched."""

# No `from __future__ import annotations`: gr.api reads the type hints of the endpoints at runtime.

import asyncio
import atexit
import inspect
import math
import os
import signal
from pathlib import Path

import gradio as gr

from ..access import LoginThrottle
from ..config import LIMITS
from ..engines import catalog
from ..engines.transformers.bundled import Preparation
from ..engines.transformers.models import ModelStore
from ..errors import InputError, ResourceError
from ..history import History
from ..measure import slots
from ..measure.slots import Finished, SlotPool, Waiting
from ..results.suite import summary_sentences
from ..views import answers, progress
from . import compare_tab, gradio_private, history_tab, suite_tab, sweep_tab, tune_tab
from . import form as form_mod
from .api_parameters import COMPARE_API, COMPARE_SUITE_API, SUITE_PARAMETERS, TUNE_API, ApiParameter
from .fields import _blank, request_from_form
from .form import ASSETS
from .session import (GPU_GROUP, HEARTBEAT_S, QUEUE_SIZE, Page, ReportFiles, SessionStops, TunePlan, _gpu_runner,
                      user_errors)
from .tune_fields import checked, tune_request_from_form
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
    history: History | None = None,
    preparation: Preparation | None = None,
) -> gr.Blocks:
    """The whole page around one ModelStore, one slot per visible GPU and one history; app.py launches it.

    `preparation` is the bundled models' background conversion (app.py starts it before building the page);
    while it runs the page says so, with its step and estimate, refreshed every few seconds.
    """
    store = store if store is not None else ModelStore()
    pool = pool if pool is not None else SlotPool(slots.visible_gpus())
    history = history if history is not None else History()
    stops = SessionStops()
    gpu_stream = _gpu_runner(store)

    with gr.Blocks(title="AssistLab", analytics_enabled=False, fill_width=True, delete_cache=CACHE_SWEEP) as demo:
        form_mod.header()
        preparing = _preparation_panel(preparation)
        with gr.Row(equal_height=False, elem_id="al-main"):
            with gr.Column(scale=4, min_width=340, elem_id="al-form"):
                form = form_mod.build()
            with gr.Column(scale=7, min_width=320, elem_id="al-output"):
                with gr.Tabs(elem_id="al-tabs", overflow_behavior="wrap") as tabs:  # every tab stays in sight
                    with gr.Tab("Compare", id="compare", elem_id="al-tab-compare"):
                        results = compare_tab.build()
                        sweeps = sweep_tab.build()
                    with gr.Tab("Workloads", id="workloads", elem_id="al-tab-workloads"):
                        suites = suite_tab.build()
                    with gr.Tab("Find the best setting", id="tune", elem_id="al-tab-tune"):
                        tuner = tune_tab.build()
                    with gr.Tab("History", id="history", elem_id="al-tab-history") as history_page:
                        # A shared server (logins on) keeps its path to itself; its operator chooses it.
                        saved = history_tab.build_history(None if os.environ.get(AUTH_ENV) else history.where)
                    with gr.Tab("Leaderboard", id="leaderboard", elem_id="al-tab-leaderboard") as board_page:
                        board = history_tab.build_board()

        # ---- Register listeners
        page = Page(gpu_stream, stops, ReportFiles(reports_dir), form.inputs(), pool, history,
                    run_buttons=(results.run, sweeps.draft_length, sweeps.lookup_length, suites.run, tuner.run),
                    client_gone=lambda session: gradio_private.client_gone(demo, session))
        form_mod.wire(form)
        compare_tab.wire(page, results)
        sweep_tab.wire(page, form, sweeps)
        suite_tab.wire(page, suites)
        tune_tab.wire(page, form, tuner)
        view = history_tab.HistoryView(**saved, **board)
        history_tab.wire(page, history, view, tabs, demo, elsewhere=(
            history_tab.Elsewhere("workload", "workloads", suite_tab.saved_outputs(suites),
                                  lambda run_id, report: suite_tab.saved_updates(suites, run_id, report)),
            history_tab.Elsewhere("tune", "tune", tune_tab.saved_outputs(tuner),
                                  lambda run_id, report: tune_tab.saved_updates(tuner, run_id, report))))
        history_page.select(history_tab.listing_of(history), [view.target, view.assistant, view.device, view.page],
                            [view.listing, view.chosen], queue=False, api_visibility="private")
        board_page.select(history_tab.board_of(history), [view.board_target, view.board_device], view.board,
                          queue=False, api_visibility="private")

        def forget_session(request: gr.Request):
            stops.forget(request.session_hash)  # a closed tab stops its run at the next boundary

        demo.unload(forget_session)
        if preparing is not None:
            _wire_preparation(demo, preparation, *preparing)

        async def finish_job(job, request: gr.Request | None, seen: list | None = None):
            """Wait for a job's last event without holding a thread; a cancel or a departed client stops it.

            `seen` holds the last event read, for whoever takes over when this is cancelled.
            """
            session = request.session_hash if request is not None else None
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
                        if seen is not None:
                            seen[:] = [item]  # the last one is all that is needed
            finally:
                job.stop()
            if final is None or final.report is None:
                raise ResourceError("The comparison stopped before it started; try again.")
            return final

        async def _save_once(job, report: dict, owner: str | None) -> dict:
            """Save a request's report unless the server's shutdown already saved it (Page.claim). Off the event
            loop: a stalled or locked database delays this answer only, never the server."""
            done = page.claim(job)
            if done is None:
                return {"id": None, "warning": "Saved as stopped when the server was shut down."}
            try:
                result = await asyncio.to_thread(history.save, report, owner=owner)
            finally:
                done.set()
            return {"id": result.id, "warning": result.warning}

        @api_endpoint(COMPARE_API)
        async def compare(values: dict, request: gr.Request | None) -> tuple[dict, str]:
            """Compare a target with and without assistance; returns the JSON report and its headline.

            max_new_tokens and warmup left empty (None) take the device defaults, repeats left empty stops once the
            answer is clear (95% sure at every look, at most 30 repetitions; a number runs exactly that many); a
            prompt left empty
            (None) is the target's preset prompt (a continuation for the bundled base model), else the reference
            prompt. num_assistant_tokens, schedule and confidence_threshold left empty (None) take transformers'
            defaults (a confidence of 0 switches it off), prompt_lookup_num_tokens AssistLab's. measure is how sure
            the answer must be, each named by what it promises: 'likely' (Likely: sooner, assumes roughly normal
            noise) stops at the likely answer, 4 repetitions at the soonest (repeats then caps the count); 'quick'
            (Sure: assumes nothing, the default) as just said; 'careful' (Careful: every speedup within ±5%)
            repeats until every speedup is known to ±5% (at most 5 minutes of timed runs; repeats then caps the
            count). The comparison is saved to the history; report["saved"] holds its id (for /report and
            ?run=<id>) or why it was not. engines='vllm' or 'both' adds vLLM arms: servers ('plain=URL' lines,
            with server_api_key, never written into the report) that already run and that the operator allowed in
            ASSISTLAB_VLLM_URLS, else the servers AssistLab
            starts for vLLM's plain arm and each of vllm_methods ('ngram,draft_model'; draft_model drafts with the
            assistant), with vllm_speculative_tokens, vllm_lookup_min and vllm_lookup_max (empty: 5, 2, 4).
            concurrency ('1,2,4,8'; empty: one request at a time only) also times the vLLM arms at each level, that
            many requests at once, into report["load"] and report["load_summary"]. band_percent (empty: 3) is how
            near 1x, in percent either side, a speedup known at every look counts as no practical difference when
            the runs stop once the answer is clear.
            """
            if values["prompt"] is None:
                values["prompt"] = catalog.default_prompt(values["target"])
            owner = getattr(request, "username", None) or None
            with user_errors():
                job, seen = page.start_job(request_from_form(**values), lambda: False, owner=owner), []
                try:
                    final = await finish_job(job, request, seen)
                except asyncio.CancelledError:  # a cancelled comparison is saved as a stopped one would be
                    page.save_when_over(job, owner, seen[-1] if seen else None)
                    raise
                report = final.report.to_dict()
            report["saved"] = await _save_once(job, report, owner)
            return report, answers.headline(report)

        gr.api(compare, api_name="compare", concurrency_id=GPU_GROUP, concurrency_limit=pool.size)

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

        @api_endpoint(COMPARE_SUITE_API)
        async def compare_suite(values: dict, request: gr.Request | None) -> tuple[dict, str]:
            """Measure a workload: a Spec-Bench subset (suite='spec-bench', categories 'qa,translation', per_category)
            or your prompts (suite='file', prompts_text = the file's contents, prompts_filename for its format).
            Returns the JSON report (per-category figures under suite) and one sentence per category and overall,
            then the busy-machine warning when others used the machine during the timed runs. A measured workload
            is saved to the history (report["saved"] holds its id, for /report and ?run=<id>). The comparison's
            parameters mean what they mean for /compare, with the same defaults (transformers' own for the
            drafting knobs); the suite's own defaults fill new tokens and repetitions. vLLM arms (engines,
            vllm_methods, ..., servers, server_api_key, as for /compare) are served by the same servers for every
            prompt: AssistLab starts its own once, before the first prompt, and stops them at the end.
            concurrency ('1,2,4,8') adds load levels for the vLLM arms, as for /compare. until_clear=True runs each
            prompt until its answer is clear (as /compare with repeats empty) instead of a fixed count: at most
            repeats repetitions per prompt (30 if empty), within 1800 s of timed runs for the whole workload, shared
            among the prompts not yet measured; report["stopping"] says what ended each prompt.
            """
            suite_names = {p.name for p in SUITE_PARAMETERS}
            suite = {name: values.pop(name) for name in list(values) if name in suite_names}
            until_clear = values.pop("until_clear")
            prompts_text, prompts_filename = suite.pop("prompts_text"), suite.pop("prompts_filename")
            suite_values = {"source": suite.pop("suite"), **suite}
            owner = getattr(request, "username", None) or None
            with user_errors():
                bench, plan = suite_tab.suite_plan_from_api(values, suite_values, prompts_text, prompts_filename,
                                                            until_clear)
                job, seen = page.start_job(bench, lambda: False, plan, owner=owner), []
                try:
                    final = await finish_job(job, request, seen)
                except asyncio.CancelledError:  # a cancelled workload is saved as a stopped one, as /compare's is
                    page.save_when_over(job, owner, seen[-1] if seen else None)
                    raise
                report = final.report.to_dict()
            if report["suite"]["overall"]["prompts"]:
                report["saved"] = await _save_once(job, report, owner)
            else:
                report["saved"] = {"id": None, "warning": "Nothing was measured, so nothing was saved."}
            return report, "\n".join(summary_sentences(report))

        gr.api(compare_suite, api_name="compare_suite", concurrency_id=GPU_GROUP, concurrency_limit=pool.size)

        @api_endpoint(TUNE_API)
        async def tune(values: dict, request: gr.Request | None) -> tuple[dict, str]:
            """Find the drafting setting to deploy: plain and every candidate timed side by side, each candidate
            dropped as soon as it is clearly slower than plain or the leader. Returns the JSON report (its "tune"
            block: candidates with left_at and why, recommendation with its speedup and interval, over_default,
            bench_args, deploy with the snippet, runs_used, settled) and its sentence. assistants (one per line or
            comma-separated) left empty are the presets' for the target, 'none' none; candidates narrows the
            search in the command line's --candidates syntax ('prompt-lookup:prompt_lookup_num_tokens=3,5,10');
            repeats and max_time_s are the budget (empty: 30 repetitions, 600 s of timed runs); a search the
            budget ends is "not settled". The other parameters mean what they mean for /compare, with the same
            defaults. The search is saved to the history; report["saved"] holds its id or why it was not.
            """
            owner = getattr(request, "username", None) or None
            with user_errors():
                bench = checked(lambda: tune_request_from_form(**values), page=False)
                job, seen = page.start_job(bench, lambda: False, TunePlan()), []
                try:
                    final = await finish_job(job, request, seen)
                except asyncio.CancelledError:  # a cancelled search is saved as a stopped one would be
                    page.save_when_over(job, owner, seen[-1] if seen else None)
                    raise
                report = final.report.to_dict()
            result = await asyncio.to_thread(history.save, report, owner=owner)
            report["saved"] = {"id": result.id, "warning": result.warning}
            return report, (report.get("tune") or {}).get("sentence") or final.message

        gr.api(tune, api_name="tune", concurrency_id=GPU_GROUP, concurrency_limit=pool.size)

    demo.queue(max_size=queue_max_size, default_concurrency_limit=1)
    gradio_private.quiet_queue(demo)
    gradio_private.remove_copies_at_exit(demo)
    # At the process's exit (SIGTERM and Ctrl-C close gradio first): what is still running is stopped and saved as
    # stopped, as Stop keeps it, before the report folder goes (registered later, so it runs earlier).
    atexit.register(page.save_unfinished)
    return demo


def api_endpoint(parameters: tuple[ApiParameter, ...]):
    """Make `body(values, request)` an endpoint whose signature, the one gr.api documents, is `parameters`.

    Gradio calls an endpoint with its values in signature order and reads the signature and type hints to
    describe it (in /info and the client's view_api); `body` gets the values by name, in the same order.
    """
    listed = [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default,
                                annotation=p.annotation) for p in parameters]
    signature = inspect.Signature(
        [*listed, inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                    annotation=gr.Request)],
        return_annotation=tuple[dict, str],
    )

    def decorate(body):
        async def endpoint(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            values = dict(bound.arguments)
            request = values.pop("request")
            return await body(values, request)

        endpoint.__name__ = endpoint.__qualname__ = body.__name__
        endpoint.__doc__ = body.__doc__
        endpoint.__signature__ = signature
        endpoint.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        endpoint.__annotations__["return"] = signature.return_annotation
        return endpoint

    return decorate


PREPARATION_TICK_S = 2.0  # how often the page re-reads the background conversion while it runs


def _preparation_panel(preparation: Preparation | None) -> tuple[gr.HTML, gr.Timer] | None:
    """A line under the header while the bundled models convert in the background, and the timer that
    refreshes it; nothing when there is nothing to convert."""
    if preparation is None or not preparation.needed:
        return None
    status = preparation.status()
    box = gr.HTML(progress.preparation_html(status), elem_id="al-preparation")
    return box, gr.Timer(PREPARATION_TICK_S, active=status.state == "converting")


def _wire_preparation(demo: gr.Blocks, preparation: Preparation, box: gr.HTML, timer: gr.Timer) -> None:
    def refresh():
        status = preparation.status()
        return progress.preparation_html(status), gr.Timer(active=status.state == "converting")

    timer.tick(refresh, None, [box, timer], queue=False, api_visibility="private")
    demo.load(refresh, None, [box, timer], queue=False, api_visibility="private")


# ---------------------------------------------------------------- launching


def stop_on_sigterm() -> None:
    """Make SIGTERM (systemd, docker stop, kill) close the server as Ctrl-C does.

    Gradio closes on KeyboardInterrupt, removing its copies of served files, and the report folder goes when
    the process exits; SIGTERM's default would end the process with both left on disk.
    """
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


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
        client = gradio_private.login_client()
        if throttle.check(username, password, client):
            return True
        await asyncio.sleep(FAILED_LOGIN_DELAY_S)
        refusal = throttle.refusal(username, client)  # after the delay, so its "try again in N s" is true
        if refusal is not None:
            from fastapi import HTTPException

            # Still a 400, the status Gradio's login page answers with "Incorrect credentials"; a script reads why.
            raise HTTPException(status_code=400, detail=refusal.message(),
                                headers={"Retry-After": str(max(1, math.ceil(refusal.wait_s)))})
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
        # Gradio's footer without its "Settings" link: the form's Settings is the only thing of that name.
        "footer_links": ["api", "gradio"],
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
    options["app_kwargs"] = gradio_private.app_kwargs(login=False)  # a cancel before its event's id still counts
    auth = parse_auth(env.get(AUTH_ENV))
    if auth:
        options["auth"] = throttled_auth(auth)
        options["auth_message"] = "This AssistLab server asks for a login."
        options["app_kwargs"] = gradio_private.login_gate_kwargs()  # Gradio leaves some routes open
    return options
