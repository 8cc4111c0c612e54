"""A search's space from the engines' declarations (engines/settings.py): the text that narrows it,

    prompt-lookup:prompt_lookup_num_tokens=3,5,10; vllm ngram:num_speculative_tokens=1,2,4,8

one family per `;`-separated part (`engine family`, or the family alone when only one engine has it), then
`:` and `name=values` pairs separated by spaces (or `&`), each a comma-separated list. A family named
without settings is searched over its declared candidate values; a setting not named keeps them. Also the
page's ticks (families by key), the families that cannot run here, and the docs' table of every setting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..config import ArmRequest
from ..errors import InputError
from .settings import EngineSettings, Family

# A search bigger than this is refused with a sentence saying how to narrow it (a comparison's LIMITS['arms']).
MAX_CANDIDATES = 8


def parse_candidates(text: str | None, declared: Sequence[EngineSettings]) -> dict[tuple[str, str], dict]:
    """The families a person named, each with the values named per setting: {(engine, family): {name: values}}.

    Empty or None: {} (every family the engines search by default). Unknown names are refused in one sentence.
    """
    if text is None or not text.strip():
        return {}
    if len(text) > 1000:
        raise InputError("{candidates} is longer than 1,000 characters; name fewer values.", "candidates")
    chosen: dict[tuple[str, str], dict] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        head, _, rest = part.partition(":")
        words = head.split()
        if len(words) == 2:
            engines = [e for e in declared if e.engine == words[0]]
            if not engines:
                known = ", ".join(e.engine for e in declared)
                raise InputError(f"{{candidates}}: no engine {words[0]!r} is in this search; engines: {known}.", "candidates")
            family_name = words[1]
        elif len(words) == 1:
            engines, family_name = list(declared), words[0]
        else:
            raise InputError(f"{{candidates}}: each part reads 'family:setting=values' or 'engine family:setting="
                             f"values'; got {part[:60]!r}.", "candidates")
        matches = [(e, e.family(family_name)) for e in engines if e.family(family_name) is not None]
        if not matches:
            known = "; ".join(f"{e.engine}: {', '.join(f.name for f in e.families)}" for e in engines)
            raise InputError(f"{{candidates}}: no family {family_name!r}; the families are {known}.", "candidates")
        if len(matches) > 1:
            raise InputError(f"{{candidates}}: {family_name!r} is a family of several engines; write the engine "
                             f"first, as in '{matches[-1][0].engine} {family_name}:...'.", "candidates")
        engine, family = matches[0]
        values: dict[str, tuple] = {}
        for pair in rest.replace("&", " ").split():
            name, sep, listed = pair.partition("=")
            if not sep:
                raise InputError(f"{{candidates}}: write each setting as name=values, as in "
                                 f"num_speculative_tokens=1,2,4; got {pair[:40]!r}.", "candidates")
            setting = family.setting(name.strip())
            values[setting.name] = tuple(dict.fromkeys(setting.parse(v) for v in listed.split(",")))
        chosen[(engine.engine, family.name)] = values
    return chosen


def family_key(family: Family) -> str:
    """A family as the page's ticks and the API's `families` name it: 'transformers prompt-lookup'."""
    return f"{family.engine} {family.name}"


def tickable(declared: Sequence[EngineSettings]) -> list[Family]:
    """The families a person can tick: those whose every setting has candidate values to try (early exit needs
    a layer named, so it is reached through the candidates text only)."""
    return [f for engine in declared for f in engine.families if all(s.values for s in f.settings)]


def engines_unavailable(declared: Sequence[EngineSettings]) -> dict[str, str | None]:
    """Each engine's reason its families cannot run on this server (None: they can); asked once, it may probe."""
    return {engine.engine: engine.unavailable() for engine in declared}


def unavailable_families(declared: Sequence[EngineSettings], target: str | None = None,
                         engines: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The tickable families that cannot run here, by key, with why: their engine's reason (`engines`, when
    already asked), else, for `target`, the family's own check."""
    reasons = engines_unavailable(declared) if engines is None else engines
    found = {}
    for family in tickable(declared):
        why = reasons.get(family.engine) or (family.check(target) if family.check and target else None)
        if why:
            found[family_key(family)] = why
    return found


def _ticked(families: Sequence[str] | None, declared: Sequence[EngineSettings]) -> set[str] | None:
    """The families named ('engine family', or the family alone where one engine has it) as keys; None: all."""
    if families is None:
        return None
    every = [f for engine in declared for f in engine.families]
    wanted = set()
    for name in (" ".join(str(n).split()) for n in families):
        if not name:
            continue
        matches = [f for f in every if name in (family_key(f), f.name)]
        if len(matches) != 1:
            known = ", ".join(family_key(f) for f in tickable(declared))
            why = "several engines have it; write the engine first" if matches else "no such family here"
            raise InputError(f"{{families}}: {name[:60]!r}: {why}; the families are {known}.", "families")
        wanted.add(family_key(matches[0]))
    return wanted


def search_space(declared: Sequence[EngineSettings], assistants: Sequence[str], candidates: str | None = None,
                 limit: int = MAX_CANDIDATES, families: Sequence[str] | None = None) -> list[ArmRequest]:
    """The arm requests a search times: every searched family of every engine given (or those `candidates`
    names, narrowed), once per assistant where a family drafts with one. `families` ('engine family', the page's
    ticks, each a family of `declared`) replaces the families searched by default, and a family the candidates
    name must be among them. Refused, in one sentence, when empty or larger than `limit`."""
    chosen = parse_candidates(candidates, declared)
    ticked = _ticked(families, declared)
    if ticked is not None:
        for engine, name in chosen:
            if f"{engine} {name}" not in ticked:
                raise InputError(f"{{candidates}} names {engine} {name}, which {{families}} leaves out; tick it or "
                                 "leave it out of {candidates}.", "candidates", ("families",))
    arms: list[ArmRequest] = []
    for engine in declared:
        for family in engine.families:
            key = (engine.engine, family.name)
            if chosen and key not in chosen:
                continue
            if not chosen and not (family.searched if ticked is None else family_key(family) in ticked):
                continue
            if family.needs_assistant and not assistants:
                if key in chosen:
                    raise InputError(f"{{candidates}}: {engine.engine} {family.name} drafts with an assistant "
                                     "model; give one with {assistants}.", "candidates", ("assistants",))
                continue
            arms += [a for a in family.space(assistants, chosen.get(key)) if a not in arms]
    if not arms and ticked is not None and not chosen:
        raise InputError("{families} leaves nothing to search: tick at least one family of the engines searched "
                         "(one that drafts with an assistant model needs one in {assistants}).", "families",
                         ("assistants",))
    if not arms:
        raise InputError("{candidates} leaves nothing to search; name a family, as in 'prompt-lookup:"
                         "prompt_lookup_num_tokens=3,5,10'.", "candidates")
    if len(arms) > limit:
        raise InputError(f"The search has {len(arms)} candidates; at most {limit} can be timed side by side. Narrow "
                         "it with {candidates}, as in 'prompt-lookup:prompt_lookup_num_tokens=3,10'.", "candidates")
    return arms


def settings_table(declared: Sequence[EngineSettings]) -> str:
    """The Markdown table of every engine's families and settings, as docs/tune.md shows it (a test checks)."""
    rows = ["| engine | family | setting | searched by default | default | what it is |", "|---|---|---|---|---|---|"]
    for engine in declared:
        for family in engine.families:
            searched = "yes" if family.searched else "when named"
            if not family.settings:
                rows.append(f"| {engine.engine} | `{family.name}` | | {searched} | | {family.words} |")
            for s in family.settings:
                values = ", ".join("default" if v is None else str(v) for v in s.values) or "(name them)"
                default = "the engine's own, read at run time" if s.default is None else str(s.default)
                rows.append(f"| {engine.engine} | `{family.name}` | `{s.name}` | {values if family.searched else searched}"
                            f" | {default} | {s.words} |")
    return "\n".join(rows)
