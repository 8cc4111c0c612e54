"""The one place that reads Gradio's private state; a Gradio upgrade that moves it fails tests/ui/test_cancelled_requests.py."""

from __future__ import annotations

import gradio as gr


def client_gone(blocks: gr.Blocks, session_hash: str) -> bool:
    """Whether Gradio has marked this session's running event as abandoned (its client disconnected).

    Gradio notices a departed client on the event stream and sets `alive = False` on its events, but a
    function that is not a generator is never told; it can only look.
    """
    queue = getattr(blocks, "_queue", None)
    for job_set in getattr(queue, "active_jobs", None) or []:
        for event in job_set or []:
            if getattr(event, "session_hash", None) == session_hash and not getattr(event, "alive", True):
                return True
    return False


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


class LoginGate:
    """ASGI middleware for the app Gradio builds: without a login, only the login page answers (401 otherwise)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
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


def login_gate_kwargs() -> dict:
    """launch()'s app_kwargs that put LoginGate in front of every route of the app Gradio builds."""
    from starlette.middleware import Middleware

    return {"middleware": [Middleware(LoginGate)]}
