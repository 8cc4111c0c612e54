"""The one place that reads Gradio's private state; a Gradio upgrade that moves it fails tests/ui/test_cancelled_requests.py."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import weakref
from contextvars import ContextVar
from pathlib import Path

import gradio as gr


def client_gone(blocks: gr.Blocks, session_hash: str) -> bool:
    """Whether Gradio has marked this session's running event as abandoned (its client disconnected).

    Gradio notices a departed client on the event stream and sets `alive = False` on its events, but a
    function that is not a generator is never told; it can only look.
    """
    queue = getattr(blocks, "_queue", None)
    # Called from a run's own thread too: copies, as gradio's loop may change these lists meanwhile.
    for job_set in list(getattr(queue, "active_jobs", None) or []):
        for event in list(job_set or []):
            if getattr(event, "session_hash", None) == session_hash and not getattr(event, "alive", True):
                return True
    return False


def remove_copies_at_exit(blocks: gr.Blocks) -> None:
    """At the process's exit, however it got there (Ctrl-C, SIGTERM made KeyboardInterrupt, a normal return),
    remove the copies Gradio made of the files this app handed it (report downloads) and their emptied folders.

    Gradio removes them in its server's shutdown, which a process ending on a signal does not wait for.
    """
    atexit.register(_remove_copies, weakref.ref(blocks))


def _remove_copies(ref: weakref.ref) -> None:
    blocks = ref()
    if blocks is None:
        return
    for files in list(getattr(blocks, "temp_file_sets", None) or []):
        for name in list(files):
            path = Path(name)
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
                os.rmdir(path.parent)  # its hash folder, once empty; a folder still holding others stays
            files.discard(name)


# Gradio's queue looks for new work every millisecond while it has none, and for progress to send every 10 ms:
# on a CPU each wake-up takes the GIL from the timed generate() running on another thread of this process. An
# idle server used 4% of a core that way, and plain runs took 9-13% longer than with no server in the process
# (benchmarks/bench_page_vs_cli.py). Admitting a request or sending progress 50 and 100 ms later costs nothing here.
QUEUE_POLL_S = 0.05
PROGRESS_POLL_S = 0.1


def quiet_queue(blocks: gr.Blocks) -> None:
    """Make Gradio's queue poll at QUEUE_POLL_S and PROGRESS_POLL_S instead of every 1 and 10 ms."""
    queue = blocks._queue
    for name, value in (("sleep_when_free", QUEUE_POLL_S), ("progress_update_sleep_when_free", PROGRESS_POLL_S)):
        if not hasattr(queue, name):
            raise RuntimeError(f"gradio's queue has no {name!r}: check gradio_private against this gradio version")
        setattr(queue, name, value)


# ---------------------------------------------------------------- what a login covers
# Gradio checks the login on its data routes only; /gradio_api/cancel, /reset, /heartbeat/* and a few others
# answer anyone. LoginGate refuses every route to a request without a login, except what the login page itself
# is built from: the page, Gradio's own scripts, styles and fonts, and the login and logout routes.
LOGIN_PAGE_PATHS = frozenset({
    "/", "/login", "/login/", "/logout", "/logout/", "/theme.css", "/favicon.ico", "/robots.txt", "/manifest.json",
    "/gradio_api/login_check", "/gradio_api/login_check/",
    "/gradio_api/startup-events",  # launch() calls it once, without a login, before it returns
})
LOGIN_PAGE_PREFIXES = ("/assets/", "/static/", "/svelte/")


def _logged_in(app, scope) -> bool:
    from starlette.requests import HTTPConnection

    cookies = HTTPConnection(scope).cookies
    cookie_id = getattr(app, "cookie_id", None)
    tokens = getattr(app, "tokens", None)
    if cookie_id is None or tokens is None:
        raise RuntimeError("gradio's app has no cookie_id/tokens: check gradio_private against this gradio version")
    token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
    return token is not None and tokens.get(token) is not None


# The address of the client whose request is being answered: Gradio calls `auth(username, password)` with nothing
# else, so LoginGate sets this around each request for the login throttle (a ContextVar: one value per request).
_CLIENT: ContextVar[str | None] = ContextVar("assistlab_client", default=None)


def login_client() -> str | None:
    """The address of the client whose login is being checked (uvicorn's, after a trusted proxy's header)."""
    return _CLIENT.get()


class LoginGate:
    """ASGI middleware for the app Gradio builds: without a login, only the login page answers (401 otherwise)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        client = scope.get("client")
        token = _CLIENT.set(str(client[0]) if client else None)
        try:
            await self._gate(scope, receive, send)
        finally:
            _CLIENT.reset(token)

    async def _gate(self, scope, receive, send) -> None:
        gradio_app = scope.get("app")
        if scope["type"] in ("http", "websocket") and getattr(gradio_app, "auth", None) is not None:
            path = scope.get("path", "")
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):] or "/"
            if not (path in LOGIN_PAGE_PATHS or path.startswith(LOGIN_PAGE_PREFIXES)) and not _logged_in(gradio_app, scope):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                from starlette.responses import JSONResponse

                await JSONResponse({"detail": "Not authenticated"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _route(scope) -> str:
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return (path[len(root):] or "/") if root and path.startswith(root) else path


class QueuedCancel:
    """ASGI middleware: a cancel sent before its client knew the event's id still removes that queued event.

    gradio_client sends /gradio_api/cancel with event_id null when it cancels a job whose id it has not yet
    heard (2 s after submit on a busy machine); Gradio refuses that body (422), and the comparison, still
    queued, later ran and was saved. Here such a cancel removes the session's queued events of that function.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if not (scope["type"] == "http" and scope.get("method") == "POST"
                and _route(scope).rstrip("/") == "/gradio_api/cancel"):
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False) and message.get("type") == "http.request"
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            data = None
        if isinstance(data, dict) and not data.get("event_id") and isinstance(data.get("session_hash"), str):
            blocks = getattr(scope.get("app"), "get_blocks", lambda: None)()
            queue = getattr(blocks, "_queue", None)
            for event in _queued(queue, data["session_hash"], data.get("fn_index")):
                await queue.remove_from_queue(event._id)
            if isinstance(data.get("fn_index"), int):  # and one already started stops, as Gradio's cancel does
                from gradio.utils import cancel_tasks

                await cancel_tasks({f"{data['session_hash']}_{data['fn_index']}"})
            from starlette.responses import JSONResponse

            await JSONResponse({"success": True})(scope, receive, send)
            return
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _queued(queue, session_hash: str, fn_index) -> list:
    """The events of one session (and function, when given) still waiting in Gradio's queue."""
    found = []
    for waiting in list(getattr(queue, "event_queue_per_concurrency_id", {}).values()):
        for event in list(getattr(waiting, "queue", [])):
            fn_id = getattr(getattr(event, "fn", None), "_id", None)
            if event.session_hash == session_hash and (fn_index is None or fn_id == fn_index):
                found.append(event)
    return found


def app_kwargs(login: bool) -> dict:
    """launch()'s app_kwargs: QueuedCancel always; with a login, LoginGate in front of every route as well; the docs
    pages (docs_pages.DocsPages) behind both."""
    from starlette.middleware import Middleware

    from .docs_pages import DocsPages

    return {"middleware": [Middleware(QueuedCancel), *([Middleware(LoginGate)] if login else []),
                           Middleware(DocsPages)]}


def login_gate_kwargs() -> dict:
    """launch()'s app_kwargs that put LoginGate in front of every route of the app Gradio builds."""
    return app_kwargs(login=True)
