"""The API's parameters in one list: both routes' signatures, the form's inputs and FORM_FIELDS come from it.

The engines' settings among them (draft lengths, lookup windows) are not listed here: each engine declares them
once (engines/<engine>/tuning.py), and `setting_parameters` makes their parameters from that declaration.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engines import catalog, registry
from ..results.suite_inputs import SPEC_BENCH
from .fields import DEFAULT_VLLM_METHODS


@dataclass(frozen=True)
class ApiParameter:
    """One parameter of the API: its name, the type gradio documents for it, and its value when left out."""

    name: str
    annotation: object
    default: object


def setting_parameters(engine: str) -> tuple[ApiParameter, ...]:
    """One engine's declared settings as parameters, in declared order: each named by its field, empty (None)
    when left out, which leaves the setting to the engine's default."""
    return tuple(ApiParameter(s.field, s.type | None, None) for s in registry.SETTINGS[engine].options())


# The engines whose settings have their own places among the form's fields below (transformers' under "How drafts
# are made", vLLM's in the Engines accordion); any other engine's come last.
PLACED_ENGINES = ("transformers", "vllm")
# The form's fields in the form's (and the API's) order, each as /compare takes it; FORM_FIELDS, both API
# signatures and the form's inputs all come from this one list.
FORM_PARAMETERS = (
    ApiParameter("target", str, catalog.BUNDLED_TARGET),
    ApiParameter("assistant", str, catalog.BUNDLED_ASSISTANT),
    ApiParameter("strategy", str, "auto"),
    ApiParameter("prompt", str | None, None),
    ApiParameter("max_new_tokens", int | None, None),
    ApiParameter("repeats", int | None, None),
    ApiParameter("warmup", int | None, None),
    ApiParameter("also_prompt_lookup", bool, True),
    ApiParameter("extra_assistants", str, ""),
    ApiParameter("chat_template", bool, True),
    ApiParameter("do_sample", bool, False),
    ApiParameter("seed", int, 0),
    ApiParameter("device", str, "auto"),
    ApiParameter("dtype", str, "auto"),
    *setting_parameters("transformers"),
    ApiParameter("device_map_auto", bool, False),
    ApiParameter("measure", str, "quick"),
    # The Engines accordion; last, so that the API's earlier parameters keep their places.
    ApiParameter("engines", str, "transformers"),
    ApiParameter("vllm_methods", str, ",".join(DEFAULT_VLLM_METHODS)),
    *setting_parameters("vllm"),
    ApiParameter("servers", str, ""),
    ApiParameter("server_api_key", str, ""),
    ApiParameter("concurrency", str, ""),  # load levels for the vLLM arms, "1,2,4,8"; empty: none
    # How near 1x counts as no practical difference when the runs stop once the answer is clear; empty: 3 (%).
    ApiParameter("band_percent", float | None, None),
    # Any further engine's settings, from its declaration alone, after every parameter above keeps its place.
    *(p for engine in registry.SETTINGS if engine not in PLACED_ENGINES for p in setting_parameters(engine)),
)
FORM_FIELDS = tuple(p.name for p in FORM_PARAMETERS)
# /compare_suite's own: which workload, then the comparison's fields but the prompt (the workload brings its
# own), after the first three, so that the parameters a workload shares with /compare keep one order.
SUITE_PARAMETERS = (
    ApiParameter("suite", str, SPEC_BENCH),
    ApiParameter("categories", str, ""),
    ApiParameter("per_category", int | None, None),
    ApiParameter("selection", str, "first"),
    ApiParameter("selection_seed", int, 0),
    ApiParameter("turns", str, "first"),
    ApiParameter("prompts_text", str, ""),
    ApiParameter("prompts_filename", str, "prompts.jsonl"),
)
# /compare_suite's rule for each prompt, after every other parameter so that theirs keep their places: False runs
# the fixed count (repeats, or the suite default), True each prompt until its answer is clear.
SUITE_RULE = (ApiParameter("until_clear", bool, False),)
COMPARE_API = FORM_PARAMETERS
COMPARE_SUITE_API = (*FORM_PARAMETERS[:3], *SUITE_PARAMETERS, *(p for p in FORM_PARAMETERS[3:] if p.name != "prompt"),
                     *SUITE_RULE)
# /tune's parameters, in its order (ui/tune_fields.tune_request_from_form takes them by name): the search's own
# (assistants, candidates, the budget: repeats and max_time_s) and the form's that a search reads, each as the
# form's own description above where the form has the field.
_FORM = {p.name: p for p in FORM_PARAMETERS}
TUNE_OWN = (
    ApiParameter("assistants", str, ""),  # empty: the presets' for the target; "none": no assistant model
    ApiParameter("candidates", str, ""),  # the command line's --candidates syntax; empty: every default family
    ApiParameter("repeats", int | None, None),  # at most this many repetitions; empty: 30
    ApiParameter("max_time_s", float | None, None),  # at most this many seconds of timed runs; empty: 600
    # The page's ticks: 'engine family' names (a list, or text with commas); empty (None): the default families.
    ApiParameter("families", list[str] | None, None),
)
_OWN = {p.name: p for p in TUNE_OWN}
TUNE_API = tuple(_OWN.get(name) or _FORM[name] for name in (
    "target", "assistants", "engines", "candidates", "prompt", "max_new_tokens", "repeats", "max_time_s", "warmup",
    "band_percent", "concurrency", "device", "dtype", "chat_template", "families"))
