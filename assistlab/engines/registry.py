"""The engines, listed in one place: a new engine is one folder under engines/ and one line here.

The scheduler (measure/) asks this registry, never a concrete engine: which engines a request wants, the host
that holds the target's tokenizer, the engine whose arms a sweep varies, the one whose arms take a schedule, and
the models this machine has that could assist a target.
"""

from __future__ import annotations

from .base import Engine, Host
from .settings import EngineSettings
from .transformers import cached as transformers_cached
from .transformers import sweep as transformers_sweep
from .transformers import tuning as transformers_tuning
from .transformers.engine import TransformersEngine
from .vllm import tuning as vllm_tuning
from .vllm.engine import VllmEngine
from .vllm.schedule_plan import VllmSchedules

# In the order their arms appear in a comparison: the host's (its plain arm first), then each other engine's.
ENGINES: dict[str, type[Engine]] = {
    TransformersEngine.name: TransformersEngine,
    VllmEngine.name: VllmEngine,
}
HOST: type[Host] = TransformersEngine  # prepared for every request: it tokenises and decodes for every engine
SWEEPS = transformers_sweep  # the engine whose arms a sweep varies (engines/transformers/sweep.py)
# The engine whose arms carry a draft length per batch size, and its check of one (engines/vllm/schedule_plan.py).
SCHEDULES: VllmSchedules = VllmSchedules()
# The models this machine has that could assist a target (the host loads assistants): a tuner's defaults.
CACHED_ASSISTANTS = transformers_cached.cached_assistants
# The settings each engine declares (engines/settings.py): what a tuner searches, re-times and deploys.
SETTINGS: dict[str, EngineSettings] = {
    transformers_tuning.ENGINE: transformers_tuning.SETTINGS,
    vllm_tuning.ENGINE: vllm_tuning.SETTINGS,
}


def engines_for(request) -> list[type[Engine]]:
    """The engines a request needs, host first (it is always prepared), then those with arms, in ENGINES order."""
    return [HOST, *(cls for cls in ENGINES.values() if cls is not HOST and cls.wanted(request))]
