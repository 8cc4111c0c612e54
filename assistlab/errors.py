"""One family of errors whose messages are written for the person using AssistLab."""

from __future__ import annotations

from collections.abc import Callable


class AssistLabError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""


class InputError(AssistLabError, ValueError):
    """A setting, prompt or model reference that cannot be used as given.

    `field` is the request field it concerns, when one does. The message names that field, and the others in
    `mentions`, as `{name}`; each front end names them its own way (`worded`: the command line's options, the
    page's labels); plain str() gives the bare names, as the API calls its parameters.
    """


    def __init__(self, message: str, field: str | None = None, mentions: tuple[str, ...] = ()):
        self.template, self.field = message, field
        self.mentions = tuple(n for n in (field, *mentions) if n)
        super().__init__(self.worded({}))

    def worded(self, names: dict[str, str] | Callable[[str, bool], str]) -> str:
        """The message with each field it names as a front end names it: `names` maps a field to its name there
        (else the bare name), or is called with the field and whether the message begins with it."""
        text = self.template
        for field in self.mentions:
            token = "{" + field + "}"
            if callable(names):
                text = (names(field, True) + text[len(token):] if text.startswith(token) else text)
                text = text.replace(token, names(field, False))
            else:
                text = text.replace(token, names.get(field, field))
        return text


class ModelLoadError(AssistLabError):
    """A model or tokenizer could not be found, trusted or loaded."""


class ResourceError(AssistLabError):
    """The machine ran out of memory, or a model would not fit."""


class BusyError(AssistLabError):
    """The server is at capacity; try again later."""


class StoppedError(AssistLabError):
    """The run was stopped before anything was measured."""


class EngineError(AssistLabError):
    """A second engine (a vLLM server) is missing, failed to start, cannot be reached or cannot serve the arm."""
