"""One family of errors whose messages are written for the person using AssistLab."""


class AssistLabError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""


class InputError(AssistLabError, ValueError):
    """A setting, prompt or model reference that cannot be used as given."""


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
