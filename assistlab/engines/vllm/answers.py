"""Whether one timed answer from a server is the work that was asked for, in one sentence when it is not."""

from __future__ import annotations

import json
import os

from .stream import Streamed


def vocab_size(folder: str | None) -> int | None:
    """The target's vocabulary (its config's vocab_size, a text config's for a multimodal one); None if unread."""
    try:
        with open(os.path.join(str(folder), "config.json")) as fh:
            config = json.load(fh)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(config, dict):
        return None
    value = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return value if type(value) is int and value > 0 else None


def no_token_ids(url: str) -> str:
    """Why an answer without token ids is not a measurement (they are what is checked and compared)."""
    return f"the server at {url} sent no token ids (return_token_ids); a vLLM 0.10 or later sends them"


def problem(streamed: Streamed, url: str, asked: int, fixed_length: bool, vocab: int | None) -> str | None:
    """Why `streamed` is not a measurement of `asked` new tokens of the target, or None when it is one.

    With a fixed length (ignore_eos, min_tokens) the server must send exactly `asked` tokens and finish for
    their length; otherwise at most `asked`, finishing for the length or a stop. Every id must be in `vocab`.
    """
    ids = streamed.token_ids
    if ids is None:
        return None  # the runner says that the server sent no token ids
    n = len(ids)
    if fixed_length and n != asked:
        return (f"The server at {url} sent {n} of the {asked} tokens asked (with ignore_eos), so this run is not a "
                f"measurement; it may have cut the stream short or sent too many.")
    if not fixed_length and not 0 < n <= asked:
        return f"The server at {url} sent {n} tokens for the at most {asked} asked, so this run is not a measurement."
    allowed = ("length",) if fixed_length else ("length", "stop")
    if streamed.finish_reason not in allowed:
        said = f"finish_reason {streamed.finish_reason!r}"[:80] if streamed.finish_reason else "no finish_reason"
        return (f"The server at {url} ended the answer with {said}, not {' or '.join(map(repr, allowed))}, so "
                f"this run is not a measurement (the stream may have been cut).")
    if vocab is not None:
        outside = [i for i in ids if i >= vocab]
        if outside:
            return (f"The server at {url} sent token ids outside the target's vocabulary of {vocab} (e.g. "
                    f"{outside[0]}), so it is not serving this target; this run is not a measurement.")
    return None
