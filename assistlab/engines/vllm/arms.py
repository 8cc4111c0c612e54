"""An arm of the vLLM engine as a person asks for it: frozen, validated at birth."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import urlsplit

from ...config import LIMITS, ArmRequest, _as_int, _choice, capped_text
from ...errors import InputError
from .schedule import FIELD, Schedule

# What AssistLab can start a server for (vLLM 0.32's speculative_config methods; its model-specific MTP names,
# deepseek_mtp and the like, are deprecated aliases of mtp); "server" is an operator's server, whose method
# the server decides.
METHODS = ("plain", "ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix")
DRAFT_METHODS = ("draft_model", "eagle", "eagle3")  # a second checkpoint drafts: a whole model or an EAGLE head
HEAD_METHODS = ("eagle", "eagle3")  # the draft is an EAGLE head trained for the target (--vllm-draft)
SERVER = "server"
PLAIN_SERVER = "plain"  # the operator's server of this name is the vLLM baseline
DEFAULT_SPECULATIVE_TOKENS = 5
# Per method where vLLM's own practice differs: DeepSeek-V3 and GLM-4.5 have one MTP layer (more tokens run
# it again, which vLLM warns lowers acceptance); suffix decoding treats k as a cap, 24 being its tree depth.
METHOD_SPECULATIVE_TOKENS = {"mtp": 1, "suffix": 24}
# Suffix decoding's global tree caches past answers; every repetition asks the same prompt, so a cache would
# learn each answer from the repetitions before it. 0 keeps only the prompt's own tree (vLLM's option).
SUFFIX_CACHED_REQUESTS = 0
# vLLM's own ngram defaults are 5..5 when neither is given; AssistLab's choice reads more drafts on short prompts.
DEFAULT_LOOKUP = (2, 4)


@dataclass(frozen=True)
class VllmArm(ArmRequest):
    """One vLLM arm: a server AssistLab starts for `method`, or an operator's server at `url` named `name`.

    `num_speculative_tokens`, `prompt_lookup_min/max` are vLLM's speculative_config fields of the same names;
    `draft_model` is the model reference of an assistant (method draft_model; one with another tokenizer drafts
    in the tokens both vocabularies share, draft_model.py) or of an EAGLE head trained for the target (eagle,
    eagle3); mtp drafts with the target's own MTP layers, suffix from suffix trees of the prompt (arctic-inference).
    `api_key` is sent to an operator's server and never written into a report.
    `schedule` (keyword only) is a draft length per batch size, a Schedule (or its ((first, last, K), ...)), vLLM's
    num_speculative_tokens_per_batch_size (schedule.py); num_speculative_tokens is then its largest K.
    """

    engine: ClassVar[str] = "vllm"

    method: str = "plain"
    num_speculative_tokens: int | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    draft_model: str | None = None
    url: str | None = None
    name: str | None = None
    api_key: str | None = field(default=None, repr=False, compare=False)
    schedule: Schedule | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        key = self.api_key
        if key is not None and (not isinstance(key, str) or len(key) > 4096
                                or any(c.isspace() or not c.isprintable() for c in key)):
            # Never echoed: the sentence names the field, not the value.
            raise InputError("The servers' API key must be one word of printable characters (no spaces or line "
                             "breaks), at most 4096; check what was pasted (it is not shown here).")
        if self.url is not None:
            object.__setattr__(self, "url", check_url(self.url, self.name))
            name = (self.name or "").strip()
            if not name or len(name) > 64 or any(c in name for c in "=\n\r"):
                raise InputError("Each --server needs a short NAME, as in --server plain=http://host:8000.")
            object.__setattr__(self, "name", name)
            object.__setattr__(self, "method", "plain" if name == PLAIN_SERVER else SERVER)
            if self.schedule is not None:
                raise InputError(f"The server {name} was started with its own draft lengths; a schedule is for the "
                                 f"servers AssistLab starts (a --vllm-method).")
            for knob in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "draft_model"):
                object.__setattr__(self, knob, None)  # the operator's server was started with its own
            return
        _choice("vllm method", self.method, METHODS)
        object.__setattr__(self, "name", None)
        if self.method == "plain":
            if self.schedule is not None:
                raise InputError("vLLM plain does not draft, so it takes no schedule of draft lengths; give the "
                                 "schedule to a speculative method (ngram, draft_model, eagle, eagle3, mtp, suffix).")
            for knob in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "draft_model"):
                object.__setattr__(self, knob, None)
            return
        k = self.num_speculative_tokens
        if self.schedule is not None:
            plan = Schedule.checked(self.schedule)
            object.__setattr__(self, "schedule", plan)
            most = plan.largest
            if k is not None and _as_int("num_speculative_tokens", k, 1, LIMITS["num_assistant_tokens"]) != most:
                raise InputError(f"num_speculative_tokens ({k}) must be the schedule's largest K ({most}), as vLLM "
                                 f"cuts every K to it; leave it empty.")
            k = most
        if k is None:
            k = METHOD_SPECULATIVE_TOKENS.get(self.method, DEFAULT_SPECULATIVE_TOKENS)
        object.__setattr__(self, "num_speculative_tokens",
                           _as_int("num_speculative_tokens", k, 1, LIMITS["num_assistant_tokens"]))
        if self.method == "ngram":
            low = DEFAULT_LOOKUP[0] if self.prompt_lookup_min is None else self.prompt_lookup_min
            high = DEFAULT_LOOKUP[1] if self.prompt_lookup_max is None else self.prompt_lookup_max
            low = _as_int("prompt_lookup_min", low, 1, 64)
            high = _as_int("prompt_lookup_max", high, 1, 64)
            if low > high:
                raise InputError(f"prompt_lookup_min ({low}) must not be more than prompt_lookup_max ({high}).")
            object.__setattr__(self, "prompt_lookup_min", low)
            object.__setattr__(self, "prompt_lookup_max", high)
            object.__setattr__(self, "draft_model", None)
            return
        object.__setattr__(self, "prompt_lookup_min", None)
        object.__setattr__(self, "prompt_lookup_max", None)
        if self.method not in DRAFT_METHODS:  # mtp drafts with the target's own layers, suffix from its trees
            object.__setattr__(self, "draft_model", None)
            return
        draft = capped_text("assistant", self.draft_model)
        if not isinstance(draft, str) or not draft.strip():
            if self.method in HEAD_METHODS:
                raise InputError(f"The vLLM {self.method} method needs its draft head (--vllm-draft): an "
                                 f"{'EAGLE-3' if self.method == 'eagle3' else 'EAGLE'} checkpoint trained for the target.")
            raise InputError("The vLLM draft_model method needs a draft model (--assistant): a small model of the "
                             "target's family, or one with another tokenizer (it then drafts in the shared tokens).")
        object.__setattr__(self, "draft_model", draft.strip())

    @property
    def assisted(self) -> bool:
        return self.method != "plain"

    @property
    def label(self) -> str:
        return self.named()

    def named(self, drafting: str | None = None) -> str:
        """The arm's name in tables and charts; a draft model's says `drafting`, the kind of drafting that ran
        ("same vocabulary", "vocabulary intersection of 288 tokens"), once it is known (draft_model.py)."""
        if self.url is not None:
            return f"vllm {self.name}"
        if self.method == "plain":
            return "vllm plain"
        k = (f"k={self.num_speculative_tokens}" if self.schedule is None else self.schedule.words())
        if self.method == "ngram":
            return f"vllm ngram ({k}, lookup {self.prompt_lookup_min}-{self.prompt_lookup_max})"
        if self.draft_model is None:
            return f"vllm {self.method} ({k})"
        short = self.draft_model.rsplit("/", 1)[-1].removeprefix("bundled:")
        return f"vllm {self.method}: {short} ({k}{f', {drafting}' if drafting else ''})"

    def speculative_config(self, draft_folder: str | None = None) -> dict | None:
        """vLLM's --speculative-config for this arm (None for plain), as vLLM 0.32's SpeculativeConfig reads it;
        `draft_folder` is where the draft model or EAGLE head lies (a folder, or a hub id vLLM fetches)."""
        if self.method == "plain" or self.url is not None:
            return None
        config = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.schedule is not None:
            config[FIELD] = self.schedule.as_list()
        if self.method == "ngram":
            config.update(prompt_lookup_min=self.prompt_lookup_min, prompt_lookup_max=self.prompt_lookup_max)
        elif self.method in DRAFT_METHODS:
            config["model"] = draft_folder or self.draft_model
        elif self.method == "suffix":
            config["suffix_decoding_max_cached_requests"] = SUFFIX_CACHED_REQUESTS
        return config  # mtp: vLLM takes the target's own checkpoint as the draft when no model is given

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["engine"] = self.engine
        data["api_key"] = "set" if self.api_key else None  # a secret never goes into a report
        data["schedule"] = None if self.schedule is None else self.schedule.as_list()  # as JSON reads back
        return data


def check_url(url: object, name: object = None) -> str:
    """An http(s) base URL without credentials, path cut to its root ('' or '/v1' allowed); else one sentence."""
    text = str(url or "").strip()
    what = f"The server {name}'s URL" if name else "A server URL"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{what} must look like http://host:8000 (http or https, with a host); got {text[:100]!r}.")
    try:
        port = parts.port
    except ValueError:  # urlsplit's port is a number from 0 to 65535, or this
        port = 0
    if port == 0 or parts.netloc.endswith(":"):
        raise InputError(f"{what} has a port that is not a number from 1 to 65535; got {text[:100]!r}.")
    if parts.username or parts.password:
        raise InputError(f"{what} must not carry a user or password; give the API key on its own instead "
                         f"(--server-api-key, or the page's “Servers' API key”).")
    path = parts.path.rstrip("/")
    if path not in ("", "/v1"):
        raise InputError(f"{what} is the server's base URL (http://host:8000 or http://host:8000/v1); got the path {path!r}.")
    return f"{parts.scheme}://{parts.netloc}"


def parse_servers(values: list[str] | tuple[str, ...], api_key: str | None = None,
                  where: str = "--server") -> tuple[VllmArm, ...]:
    """`NAME=URL` texts (the CLI's --server, the page's server lines) as arms; one named 'plain' is the baseline
    of the others. `where` names the place a person wrote them in, for the sentences."""
    arms = []
    for value in values:
        name, sep, url = str(value).partition("=")
        if not sep or not name.strip():
            raise InputError(f"{where} takes NAME=URL, as in plain=http://127.0.0.1:8000; got {str(value)[:120]!r}.")
        arms.append(VllmArm(url=url, name=name, api_key=api_key))
    names = [a.name for a in arms]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise InputError(f"Each server needs a name of its own; two are named {twice!r}.")
    if arms and PLAIN_SERVER not in names:
        raise InputError("Name one server 'plain' (plain=URL): it is the baseline the other servers are timed "
                         "against.")
    return tuple(sorted(arms, key=lambda a: a.name != PLAIN_SERVER))


def vllm_arms(methods: list[str] | tuple[str, ...], *, draft_models: tuple[str, ...] = (),
              num_speculative_tokens: int | None = None, prompt_lookup_min: int | None = None,
              prompt_lookup_max: int | None = None, heads: tuple[str, ...] = ()) -> tuple[VllmArm, ...]:
    """The vLLM arms a form or command line describes: plain first, then one per method (a draft_model arm per
    draft model, an eagle or eagle3 arm per draft head in `heads`)."""
    arms = [VllmArm("plain")]
    for method in dict.fromkeys(m for m in methods if m != "plain"):
        _choice("vllm method", method, METHODS)
        if method == "draft_model":
            if not draft_models:
                raise InputError("--vllm-method draft_model needs a draft model: give one with --assistant.")
            arms += [VllmArm("draft_model", num_speculative_tokens, draft_model=d) for d in draft_models]
        elif method in HEAD_METHODS:
            if not heads:
                raise InputError(f"--vllm-method {method} needs its draft head: give the "
                                 f"{'EAGLE-3' if method == 'eagle3' else 'EAGLE'} checkpoint trained for the target "
                                 f"with --vllm-draft (a hub id or a folder).")
            arms += [VllmArm(method, num_speculative_tokens, draft_model=h) for h in heads]
        else:
            arms.append(VllmArm(method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max))
    return tuple(arms)
