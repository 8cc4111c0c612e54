"""The machine a comparison runs on, described where the run happens: versions, processor, GPU, threads."""

from __future__ import annotations

import platform
import sys


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def environment(device, dtype: str, models: dict) -> dict:
    """Versions and hardware a result depends on."""
    import torch
    import transformers

    from ... import __version__

    env = {
        "device": device.type,
        "dtype": dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "assistlab": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "memory_measure": "peak CUDA memory allocated" if device.type == "cuda" else "process RSS after the run",
        "models": models,
    }
    if device.type == "cuda":
        env["gpu_name"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


