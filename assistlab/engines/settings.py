"""The settings an engine can vary, declared once by the engine: what a tuner searches and a person narrows.

Each engine lists its `Family`s (a drafting strategy of transformers, a speculative method of vLLM), each with
the `Setting`s that family reads: the name of the arm-request field, its type, the candidate values a search
tries when a person names none, the engine's own default, and the words a person reads; and it subclasses
`EngineSettings`, whose methods re-time, deploy and say an arm. `Family.space()` turns a family into the arm
requests to time; engines/search_space.py reads the text that narrows them and builds a search's space.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..config import ArmRequest
from ..errors import InputError

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
