"""The prompt the command line's options give, for bench and tune alike."""

from __future__ import annotations

import argparse

from ..engines import catalog
from ..errors import InputError


def prompt_from_args(args: argparse.Namespace) -> str:
    """The prompt --prompt-file or --prompt gives, else the target's default prompt (bench and tune alike)."""
    if args.prompt_file is None:
        return args.prompt if args.prompt is not None else catalog.default_prompt(args.target)
    try:
        return args.prompt_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Cannot read the prompt file {str(args.prompt_file)!r}: {exc.strerror or exc}.") from None
