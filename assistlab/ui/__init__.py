"""The Gradio page, one module per part: the form's fields, session plumbing, the form, each tab, the app.

Only this package imports gradio. It builds a BenchRequest from the form, iterates the runner and renders what
the report says; AssistLabError becomes gr.Error here (session.user_errors) and nowhere else.
"""

from .api_parameters import FORM_FIELDS
from .app import AUTH_ENV, build_app, launch_options, parse_auth, stop_on_sigterm
from .fields import LABELS, SweepPlan, request_from_form, sweep_plan
from .session import GPU_GROUP, QUEUE_SIZE, ReportFiles, SessionStops, _gpu_runner, gpu_seconds, user_errors
from .style import CSS, theme
from .sweep_tab import best_setting_updates

__all__ = [
    "AUTH_ENV", "CSS", "FORM_FIELDS", "GPU_GROUP", "LABELS", "QUEUE_SIZE", "ReportFiles", "SessionStops",
    "SweepPlan", "best_setting_updates", "build_app", "gpu_seconds", "launch_options", "parse_auth",
    "request_from_form", "stop_on_sigterm", "sweep_plan", "theme", "user_errors", "_gpu_runner",
]
