"""The "Find the best setting" tab's own fields and how they, with the form's, become a search's request.

No gradio here: the tab, the `/tune` API and the tests all build the request through `tune_request_from_form`;
the parameters, in the API's order, are TUNE_PARAMETERS in api_parameters.py.
"""

from __future__ import annotations


from ..config import CLEAR_MAX_REPEATS, CLEAR_MAX_TIME_S, FIELD_CHARS, BenchRequest, capped_text
from ..engines import catalog, registry
from ..engines.search_space import MAX_CANDIDATES, engines_unavailable, family_key, tickable, unavailable_families
from ..errors import InputError
from ..measure.tune import default_assistants, tune_request
from .fields import _band, _blank, _engines, _optional_count, _split_refs

# What an assistants box that asks for no assistant model at all says.
NO_ASSISTANTS = "none"
INTRO = (
    "Which setting should you deploy? AssistLab times plain generation and every candidate setting side by side, "
    "drops each candidate as soon as it is clearly slower than plain or than the leader, and stops when one is "
    "clearly best, when those left make no practical difference (then it picks the simplest), or at the budget. "
    "It reads the target, prompt, engines and settings of the form; the boxes below narrow the search."
)
DETAILS = (
    "**Candidates** are written as `family:setting=values`, parts separated by `;` and values by `,`, as the "
    "command line's `--candidates`: `prompt-lookup:prompt_lookup_num_tokens=3,5,10` or "
    "`auto:num_assistant_tokens=3,8; prompt-lookup`. A family named alone keeps the values AssistLab tries; "
    "`default` is the engine's own value. Left empty, every family the engines search by default is tried "
    f"(at most {MAX_CANDIDATES} candidates). " + "; ".join(
        f"{declared.possessive} families: " + ", ".join(
            f"`{family.name}`" + (f" ({', '.join(f'`{s.name}`' for s in family.settings)})" if family.settings else "")
            for family in declared.families)
        for declared in registry.SETTINGS.values()) + ". "
    "Candidates leave on the likely rule (it assumes roughly normal noise; the report names the assumption), and "
    "the pick is then checked against its nearest rival by the rule that assumes nothing when the budget allows."
)
LABELS = {
    "assistants": "Assistant models to try",
    "candidates": "Candidates to try",
    "families": "Families to try",
    "repeats": "Most repetitions",
    "max_time_s": "Most seconds of timed runs",
}
HINTS = {
    "assistants": (f"One per line or comma-separated. Empty = the presets' assistants for this target (for the "
                   f"bundled target: {catalog.BUNDLED_ASSISTANT}) and up to two models this server already has "
                   f"that fit it (at most a quarter of its size); '{NO_ASSISTANTS}' = only settings that need no "
                   "assistant model (prompt lookup, vLLM ngram)."),
    "candidates": "Empty = every setting the engines try by default; e.g. prompt-lookup:prompt_lookup_num_tokens=3,5,10",
    "families": ("Untick a family to leave it out; each ticked one is tried with the values AssistLab tries (the "
                 "box below names others). A family of an engine not chosen under Engines is passed over."),
    "repeats": f"The budget: at most this many repetitions of every candidate still in. Empty = {CLEAR_MAX_REPEATS}.",
    "max_time_s": f"The budget: at most this many seconds of timed runs. Empty = {CLEAR_MAX_TIME_S:g}.",
}
# What the label of a family that cannot run on this server adds (the info line says why).
NOT_HERE = "cannot run on this server"
def _label(field: str, at_start: bool) -> str:
    """A field as the tab names it in a message: its box's label, in quotes inside a sentence."""
    if field not in LABELS:
        return field
    return LABELS[field] if at_start else f"“{LABELS[field]}”"


def assistants_from_text(text, target: str) -> list[str] | None:
    """The assistants box: None (empty: the package's pick for the target), [] ('none'), or the models named."""
    if isinstance(text, str) and len(text) > FIELD_CHARS["extra_assistants"]:
        raise InputError(f"{{assistants}} has {len(text):,} characters; the limit is "
                         f"{FIELD_CHARS['extra_assistants']:,}. Name fewer models.", "assistants")
    if _blank(text):
        return None
    if str(text).strip().lower() == NO_ASSISTANTS:
        return []
    refs = _split_refs(text)
    for ref in refs:
        catalog.resolve_field("assistants", ref)
    return refs


def cannot_run(target: str | None = None, engines: dict[str, str | None] | None = None) -> dict[str, str]:
    """The families that cannot run here, by key, with why: each engine says (vLLM not installed; `engines`, its
    answers when already asked), and for `target` each family that can tell cheaply (mtp: no MTP layers)."""
    return unavailable_families(list(registry.SETTINGS.values()), target if isinstance(target, str) else None,
                                engines)


def family_choices(reasons: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """The ticks: every family a person can tick, of every engine, as (what it reads, 'engine family'); one that
    cannot run on this server (`reasons`, cannot_run's) says so in its label."""
    reasons = cannot_run() if reasons is None else reasons

    def words(family) -> str:
        title = registry.SETTINGS[family.engine].title or family.engine
        text = family.words[0].upper() + family.words[1:] if family.words[:2].islower() else family.words
        text = text if title.lower() in text.lower() else f"{text} ({title})"
        return f"{text}: {NOT_HERE}" if family_key(family) in reasons else text

    return [(words(f), family_key(f)) for f in tickable(list(registry.SETTINGS.values()))]


def engine_reasons() -> dict[str, str | None]:
    """Each engine's word on whether its families can run on this server, asked once per page (it may probe)."""
    return engines_unavailable(list(registry.SETTINGS.values()))


def _searched() -> list[str]:
    return [family_key(f) for f in tickable(list(registry.SETTINGS.values())) if f.searched]


def default_families(reasons: dict[str, str] | None = None) -> list[str]:
    """The families ticked when the page opens: those each engine searches by default that can run here."""
    reasons = cannot_run() if reasons is None else reasons
    return [key for key in _searched() if key not in reasons]


def families_hint(reasons: dict[str, str]) -> str:
    """The ticks' info line: the hint, then why the families that cannot run here cannot, one sentence per
    reason: 'vLLM families: ...' when it is every family of an engine, else the families named."""
    why: dict[str, list[str]] = {}
    for key, reason in reasons.items():
        why.setdefault(reason, []).append(key)
    said = []
    for reason, keys in why.items():
        engine = keys[0].split()[0]
        title = registry.SETTINGS[engine].title or engine
        every = [family_key(f) for f in tickable([registry.SETTINGS[engine]])]
        names = f"{title} families" if sorted(keys) == sorted(every) else ", ".join(
            f"{title} {key.split(maxsplit=1)[1]}" for key in keys)
        said.append(f"{names}: {reason}.")
    return " ".join([HINTS["families"], *said])


def families_from_ticks(ticks, engines: tuple[str, ...]) -> list[str] | None:
    """The ticks (a list, or text with commas from the API) as the search's `families`: None when they are the
    default ones, those the page opens with or those each engine searches by default (then a family the
    candidates box names needs no tick), else those of the engines searched."""
    if ticks is None:
        return None
    if isinstance(ticks, str):
        if len(ticks) > 1000:
            raise InputError("{families} is longer than 1,000 characters; name fewer families.", "families")
        ticks = ticks.split(",")
    if not isinstance(ticks, (list, tuple)) or len(ticks) > 64:
        raise InputError("{families} must be a list of families, as in ['transformers prompt-lookup'].", "families")
    names = [" ".join(str(t).split()) for t in ticks if str(t).strip()]
    if sorted(names) == sorted(_searched()) or sorted(names) == sorted(default_families()):
        return None
    return [n for n in names if n.split()[0] in engines or n.split()[0] not in registry.SETTINGS]


def default_assistants_text(target: str) -> str:
    """What the empty assistants box will use for this target, for its placeholder."""
    helpers = default_assistants(target) if isinstance(target, str) else []
    return ", ".join(helpers) if helpers else "none for this target"


def tune_request_from_form(target=catalog.BUNDLED_TARGET, assistants="", engines="transformers", candidates="",
                           prompt=None, max_new_tokens=None, repeats=None, max_time_s=None, warmup=None,
                           band_percent=None, concurrency="", device="auto", dtype="auto",
                           chat_template=True, families=None) -> BenchRequest:
    """The search the tab (or the API) describes (measure.tune.tune_request); the request checks every value.

    `assistants` empty takes the presets' assistants for the target and the models here that fit it
    (measure.tune.default_assistants), 'none' none; `candidates` narrows the
    search in the command line's --candidates syntax and `families` (the ticks; None: the default ones) to those
    families; `repeats` and `max_time_s` are the budget (empty: 30
    repetitions, 600 s of timed runs); a `prompt` left empty (None or blank) is the target's preset prompt.
    """
    capped_text("target", target)
    target = target.strip() if isinstance(target, str) and target.strip() else catalog.BUNDLED_TARGET
    chosen = _engines(engines)
    return tune_request(
        target,
        assistants=assistants_from_text(assistants, target),
        engines=chosen,
        candidates=None if _blank(candidates) else str(candidates),
        families=families_from_ticks(families, chosen),
        repeats=_optional_count(repeats),
        max_time_s=None if _blank(max_time_s) else (max_time_s.strip() if isinstance(max_time_s, str) else max_time_s),
        prompt=catalog.default_prompt(target) if _blank(prompt) else prompt,
        max_new_tokens=_optional_count(max_new_tokens),
        warmup=None if _blank(warmup) else warmup,
        band=_band(band_percent),
        concurrency=() if _blank(concurrency) else concurrency,
        device=device or "auto",
        dtype=dtype or "auto",
        chat_template=bool(chat_template),
    )


def checked(build, page: bool = True):
    """`build()`, its refusal naming the field it concerns as the tab's box (page) or the API's parameter."""
    try:
        return build()
    except InputError as exc:
        raise InputError(exc.worded(_label if page else {}), exc.field) from None
