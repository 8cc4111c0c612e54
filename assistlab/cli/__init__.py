"""The command line: `python -m assistlab bench|presets|prepare|history ...`, on the same calls as the page."""

from .main import main
from .parser import build_parser, request_from_args, suite_request_from_args
from .tables import format_suite_table, format_table, settings_phrase, stopping_sentence

__all__ = [
    "build_parser",
    "format_suite_table",
    "format_table",
    "main",
    "request_from_args",
    "settings_phrase",
    "stopping_sentence",
    "suite_request_from_args",
]
