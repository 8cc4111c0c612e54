"""The command line: `python -m assistlab bench|presets|prepare|history ...`, on the same calls as the page."""

from .main import main

__all__ = ["main"]
