"""The settings an engine can vary, declared once by the engine: what a tuner searches and a person narrows.

Each engine lists its `Family`s (a drafting strategy of transformers, a speculative method of vLLM), each with
the `Setting`s that family reads: the name of the arm-request field, its type, the candidate values a search
tries when a person names none, the engine's own default, and the words a person reads. `space()` turns a
family into the arm requests to time, and `parse_candidates` reads the text that narrows them:

    prompt-lookup:prompt_lookup_num_tokens=3,5,10; vllm ngram:num_speculative_tokens=1,2,4,8

one family per `;`-separated part (`engine family`, or the family alone when only one engine has it), then
`:` and `name=values` pairs separated by spaces (or `&`), each a comma-separated list. A family named
without settings is searched over its declared candidate values; a setting not named keeps them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..config import ArmRequest
from ..errors import InputError

# A search bigger than this is refused with a sentence saying how to narrow it (a comparison's LIMITS['arms']).
MAX_CANDIDATES = 8


@dataclass(frozen=True)
class Setting:
    """One knob an engine can vary: `name` is the arm request's field, `values` the candidates a search tries
    when none are named (None among them means the engine's own default), `default` the value the engine uses
    when the knob is not given (None when the engine decides at run time), `words` what a person reads, `flag`
    the `bench` option that sets it, `help` that option's help and `choices` the only values it takes (empty:
    any). A setting with a flag is also a field of the page's form and a parameter of its API, named `field`
    (the flag's words joined by underscores): `label` is the box's name, `hint` the sentence under it, `empty`
    what the box left empty means (its placeholder), and `unset_at_zero` says that 0 also means 'not set'
    (the API's old number box). Texts may name the engine's run-time defaults, which the engine's
    `EngineSettings.fill` fills in where they are shown."""

    name: str
    type: type
    values: tuple = ()
    default: object = None
    words: str = ""
    flag: str | None = None
    help: str = ""
    choices: tuple = ()
    label: str = ""
    hint: str = ""
    empty: str = ""
    unset_at_zero: bool = False

    @property
    def field(self) -> str:
        """The form field's and the API parameter's name: '--vllm-lookup-min' -> 'vllm_lookup_min'."""
        return (self.flag or self.name).lstrip("-").replace("-", "_")

    def parse(self, text: str) -> object:
        """One value from text ('default' or '' is the engine's default); one sentence naming the setting if bad."""
        text = text.strip()
        if text.lower() in ("", "default", "none"):
            return None
        try:
            return self.type(text)
        except (TypeError, ValueError):
            kind = {int: "a whole number", float: "a number"}.get(self.type, "a word")
            raise InputError(f"{{candidates}}: {self.name} takes {kind}, got {text[:20]!r}.", "candidates") from None


@dataclass(frozen=True)
class Family:
    """A strategy (transformers) or method (vLLM) with the settings it reads. `build(values, assistant)` makes
    the arm request for one combination; `needs_assistant` says whether it drafts with a second model;
    `simplicity(arm)` orders ties (lower is simpler: the engine's defaults first, then the shortest draft)."""

    engine: str
    name: str
    words: str
    settings: tuple[Setting, ...]
    build: Callable[[dict, str | None], ArmRequest]
    needs_assistant: bool = False
    searched: bool = True  # searched when no --candidates names families (early exit needs a layer named)
    # Why it cannot run for a target, in a few words, where that is known cheaply (its config on this machine),
    # else None: vLLM's mtp on a target without MTP layers.
    check: Callable[[str], str | None] | None = None

    def setting(self, name: str) -> Setting:
        for s in self.settings:
            if s.name == name:
                return s
        names = ", ".join(s.name for s in self.settings) or "none"
        raise InputError(f"{{candidates}}: {self.engine} {self.name} has no setting {name!r}; its settings: {names}.",
                         "candidates")

    def space(self, assistants: Sequence[str | None], narrowed: Mapping[str, tuple] | None = None) -> list[ArmRequest]:
        """Every combination of this family's values (narrowed where named), once per assistant if it needs one."""
        narrowed = narrowed or {}
        grids = [narrowed.get(s.name, s.values) or (None,) for s in self.settings]
        helpers = list(assistants) if self.needs_assistant else [None]
        arms = []
        for helper in helpers:
            for combo in itertools.product(*grids):
                arm = self.build(dict(zip((s.name for s in self.settings), combo)), helper)
                if arm not in arms:
                    arms.append(arm)
        return arms


@dataclass(frozen=True)
class EngineSettings:
    """What one engine declares: its families and how it reads, re-times and deploys an arm of them. An engine
    subclasses it (transformers/tuning.py, vllm/tuning.py) and overrides the methods that differ from the
    defaults here; the search (measure/tune.py), the command line and the page ask these methods only."""

    engine: str
    families: tuple[Family, ...]
    title: str = ""  # the engine's name as a person reads it (empty: `engine`)

    def default_arm(self, family: Family, assistant: str | None) -> ArmRequest | None:
        """The arm that runs the engine's own defaults for a family and assistant, or None when it has none."""
        return None

    def arm_args(self, arm: ArmRequest) -> list[str]:
        """The `bench` options that choose this arm's family (and its model): bench_args' first words."""
        return []

    def closing_args(self, arm: ArmRequest) -> list[str]:
        """The `bench` options after the settings' (e.g. leaving out an arm bench adds by default)."""
        return []

    def bench_args(self, arm: ArmRequest) -> list[str]:
        """The `bench` options that time this arm alone: its family's (arm_args), each setting of its family
        that has a `bench` option and a value on the arm, written as that option, then closing_args."""
        args = list(self.arm_args(arm))
        family = self.family_of(arm)
        for setting in family.settings if family else ():
            value = getattr(arm, setting.name, None)
            if setting.flag and value is not None:
                args += [setting.flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return args + self.closing_args(arm)

    def deploy(self, arm: ArmRequest | None, target: str, info: dict | None = None,
               request: dict | None = None) -> dict:
        """The code or command line that deploys `arm` (None: plain generation), {..., "snippet"}; `info` is the
        arm's report entry and `request` the report's request, when known."""
        return {"engine": self.engine, "snippet": ""}

    def simplicity(self, arm: ArmRequest) -> tuple:
        """Lower is simpler: how ties between candidates are broken."""
        return (0,)

    def phrase(self, arm: ArmRequest) -> str:
        """The arm in a few words for the tuner's sentence: "prompt lookup with 3 tokens"."""
        return arm.label

    def plain_arm(self) -> ArmRequest | None:
        """The plain arm a request must list for this engine's candidates to have a baseline (a server
        engine's), or None when the engine times plain by itself (the host's)."""
        return None

    def fill(self, text: str) -> str:
        """The settings' texts with the defaults read at run time filled in ("<transformers:NAME>")."""
        return text

    def unavailable(self) -> str | None:
        """Why this engine's families cannot run on this server, in a few words ("vLLM is not installed on this
        server"), or None when they can; asked when a form is built, so it must be quick."""
        return None

    @property
    def possessive(self) -> str:
        """"transformers' ", "vLLM's ": the engine's name before what it owns."""
        name = self.title or self.engine
        return f"{name}'" if name.endswith("s") else f"{name}'s"

    def options(self) -> list[Setting]:
        """The settings with a `bench` option, each flag once (families may share one), in declared order: the
        command line's options for this engine, made from the declaration."""
        seen: dict[str, Setting] = {}
        for family in self.families:
            for setting in family.settings:
                if setting.flag and setting.flag not in seen:
                    seen[setting.flag] = setting
        return list(seen.values())

    def family(self, name: str) -> Family | None:
        return next((f for f in self.families if f.name == name), None)

    def family_of(self, arm: ArmRequest) -> Family | None:
        name = getattr(arm, "strategy", None) or getattr(arm, "method", None)
        return self.family(name)


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
