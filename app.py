"""Start the AssistLab web app: `python app.py`, then open http://127.0.0.1:7860.

GRADIO_SERVER_NAME, GRADIO_SERVER_PORT and GRADIO_ROOT_PATH work as in Gradio; ASSISTLAB_AUTH=user:password
asks for a login; ASSISTLAB_MODELS_DIR allows local model folders.
"""

import sys

from assistlab.engines.transformers.bundled import Preparation
from assistlab.engines.transformers.models import ModelStore
from assistlab.errors import AssistLabError


def main() -> int:
    # The bundled pair converts in the background (first start only) while gradio loads and a person reads
    # the page; a Run that needs it waits for it.
    preparation = Preparation().start()
    from assistlab import ui

    try:
        options = ui.launch_options()
    except AssistLabError as exc:
        print(f"assistlab: {exc}", file=sys.stderr)
        return 2
    ui.stop_on_sigterm()
    ui.build_app(ModelStore(), preparation=preparation).launch(**options)
    leave(0)
    return 0


def leave(code: int) -> None:
    """End the process once gradio has closed (Ctrl-C, SIGTERM): the at-exit work first (the reports' folder,
    the vLLM servers AssistLab started), then os._exit. A comparison may still run in one of gradio's threads,
    and finalizing the interpreter under it aborts inside torch ("terminate called without an active
    exception", rc -6)."""
    import atexit
    import os

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
