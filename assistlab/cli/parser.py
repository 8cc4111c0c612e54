"""The command line's options: the parser, and the requests its arguments describe."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import __version__
from ..config import (
    CLEAR_MAX_REPEATS,
    CLEAR_MAX_TIME_S,
    CPU_DEFAULTS,
    CUDA_DEFAULTS,
    DEFAULT_MAX_TIME_S,
    DEFAULT_PROMPT,
    LIMITS,
    LOAD_ROUNDS,
    MAX_CONCURRENCY,
    MAX_LOAD_LEVELS,
    MIN_PRECISION_REPEATS,
    NO_DIFFERENCE_BAND,
    SUITE_CLEAR_MAX_TIME_S,
    CAREFUL_PRECISION,
    RULE_WORDS,
    BenchRequest,
)
from ..engines import catalog, registry
from ..engines.settings import EngineSettings
from ..engines.transformers import paths
from ..engines.transformers.arms import assisted_arms
from ..engines.vllm import arms as vllm_arms_mod
from ..errors import InputError
from . import history as history_cli
from .prompt import prompt_from_args
from . import tune as tune_cli

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line on stderr starting with 'error:' and exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"error: {message} (see --help)\n")
        raise SystemExit(EXIT_USAGE)


class _Formatter(argparse.HelpFormatter):
    """Fills in the defaults the engines read at run time (transformers' from the installed transformers) when
    --help is printed, each engine through its declaration's `fill`."""

    def _get_help_string(self, action):
        text = action.help or ""
        for declared in registry.SETTINGS.values():
            text = declared.fill(text)
        return text


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m assistlab", description="Does this assistant make this target faster?")
    parser.add_argument("--version", action="version", version=f"assistlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    bench = sub.add_parser("bench", help="time plain and assisted generation and compare them", formatter_class=_Formatter)
    bench.add_argument("--target", default=catalog.BUNDLED_TARGET, help="hub id (org/name[@rev]), bundled:NAME or a folder in $ASSISTLAB_MODELS_DIR (default: %(default)s)")
    bench.add_argument("--assistant", action="append", default=None, help="assistant model; repeat to compare several (default for model strategies: %s; with prompt-lookup or early-exit each gets an auto arm of its own)" % catalog.BUNDLED_ASSISTANT)
    bench.add_argument("--strategy", choices=paths.STRATEGIES, default="auto", help="how the assistant drafts (default: %(default)s)")
    bench.add_argument("--prompt-lookup", dest="prompt_lookup", action=argparse.BooleanOptionalAction, default=True, help="also compare prompt lookup on the target (default: on)")
    prompt = bench.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default=None, help=f"the prompt (default: the preset's for the target, {catalog.default_prompt(catalog.BUNDLED_TARGET)!r} for the bundled base model, else {DEFAULT_PROMPT!r})")
    prompt.add_argument("--prompt-file", type=Path, default=None, help="read the prompt from a text file")
    bench.add_argument("--max-new-tokens", default=None, help=f"tokens each arm generates (default {CPU_DEFAULTS['max_new_tokens']} on CPU, {CUDA_DEFAULTS['max_new_tokens']} on CUDA; max {LIMITS['max_new_tokens']})")
    bench.add_argument("--stop", choices=tuple(name for name, _, _ in RULE_WORDS), default=None, help="how sure the answer must be before the runs stop, each rule named by what it promises: " + "; ".join(f"{name}: '{words}'" for name, _, words in RULE_WORDS).replace("%", "%%") + f". sure is the default (without --stop, --repeats N runs exactly N); likely stops at the first planned look that settles, 4 repetitions at the soonest, or at the sure answer for an arm too skewed for its assumption; careful is --precision {CAREFUL_PRECISION} --max-time {DEFAULT_MAX_TIME_S:g}. With --stop likely or sure, --repeats is the most to run")
    bench.add_argument("--repeats", default=None, help=f"exactly this many counted repetitions per arm (max {LIMITS['repeats']}; default: stop when the answer is clear, at most {CLEAR_MAX_REPEATS} repetitions or {CLEAR_MAX_TIME_S:g} s); with --precision, the most to run")
    bench.add_argument("--band", default=NO_DIFFERENCE_BAND, help=f"when no --repeats is given, an interval within 1 ± this share counts as no practical difference and ends the runs (default %(default)s, ±{NO_DIFFERENCE_BAND * 100:g}%%)")
    bench.add_argument("--precision", default=None, help=f"instead of a fixed count, repeat until every speedup's interval is within ±this share of its median, e.g. 0.05 for ±5%% (at least {MIN_PRECISION_REPEATS} repetitions)")
    bench.add_argument("--max-time", dest="max_time", default=None, help=f"time budget in seconds for the timed repetitions (default with --precision: {DEFAULT_MAX_TIME_S:g}; max {LIMITS['max_time_s']})")
    bench.add_argument("--warmup", default=None, help="uncounted warm-up runs per arm (default 1)")
    bench.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    bench.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    bench.add_argument("--device-map-auto", action="store_true", help="spread a large target over all GPUs (accelerate)")
    bench.add_argument("--sample", action="store_true", help="sample instead of greedy decoding (outputs then differ)")
    bench.add_argument("--seed", default=0, help="seed for sampling; repetition i uses seed+i")
    bench.add_argument("--no-fixed-length", dest="fixed_length", action="store_false", help="let EOS end generation early (arms may then do unequal work)")
    bench.add_argument("--no-chat-template", dest="chat_template", action="store_false", help="feed the prompt raw even if the target has a chat template")
    bench.add_argument("--ensemble-weight", default=None, help="ensemble verification weight in (0, 1) for the assisted arms: faster, but lossy (default: none, lossless)")
    bench.add_argument("--sweep", choices=("num_assistant_tokens", "prompt_lookup_num_tokens", "assistant_ensemble_weight"), default=None, help="instead of one setting, compare several draft lengths (or ensemble weights, next to the same arm verifying losslessly) of the first matching arm against one plain baseline")
    bench.add_argument("--sweep-values", default="1,2,3,5,8", help="draft lengths for --sweep (default: %(default)s)")
    bench.add_argument("--sweep-schedules", default="heuristic", help="adaptive schedules added to --sweep of num_assistant_tokens, comma-separated; '' for none (default: %(default)s)")
    engines = bench.add_argument_group("engines (vLLM through its OpenAI-compatible server; see docs/engines.md)")
    engines.add_argument("--engines", default=None, help="comma-separated engines to time: transformers, vllm (default: transformers, and vllm too with --vllm-method or --server)")
    engines.add_argument("--vllm-method", action="append", choices=vllm_arms_mod.METHODS[1:], default=None, help="a vLLM speculative method to add beside vLLM's plain arm; repeat for several (default with --engines ...vllm: ngram); draft_model drafts with each --assistant (one with another tokenizer drafts in the tokens both vocabularies share, where vLLM has use_heterogeneous_vocab); eagle and eagle3 with each --vllm-draft head; mtp with the target's own MTP layers; suffix needs arctic-inference in vLLM's Python")
    engines.add_argument("--vllm-draft", action="append", default=None, metavar="PATH/ID", help="an EAGLE or EAGLE-3 head trained for the target (a hub id or a folder), for --vllm-method eagle/eagle3; repeat for several")
    engines.add_argument("--server", action="append", default=None, metavar="NAME=URL", help="time a server that already runs (e.g. a multi-node deployment) instead of starting vLLM; name one 'plain', the baseline of the others")
    engines.add_argument("--server-api-key", default=None, help="API key sent to every --server (default: $ASSISTLAB_VLLM_API_KEY)")
    engines.add_argument("--concurrency", default="", metavar="LEVELS", help=f"after the usual timing, time the vLLM arms under load: this many requests at once per level, e.g. 1,2,4,8 (1..{MAX_CONCURRENCY}, at most {MAX_LOAD_LEVELS} levels; transformers arms stay at one request; default: none)")
    engines.add_argument("--load-rounds", default=LOAD_ROUNDS, help=f"timed rounds per load level, after one warm-up round (default %(default)s, max {LIMITS['load_rounds']}; 5 give a 93.75%% interval)")
    engines.add_argument("--load-block-rounds", default=None, metavar="N", help="where vLLM servers take turns in blocks (no sleep mode, too big to run together): rounds per block at each level (default: half of --load-rounds, one cycle); each block is one interval unit and costs a server start")
    for declared in registry.SETTINGS.values():  # each engine's settings, as that engine declares them
        _add_setting_options(bench, declared)
    workload = bench.add_argument_group("workloads (a suite of prompts instead of one)")
    suite_source = workload.add_mutually_exclusive_group()
    suite_source.add_argument("--suite", choices=("spec-bench",), default=None, help="measure a Spec-Bench subset, one comparison per prompt, with per-category figures")
    suite_source.add_argument("--suite-file", type=Path, default=None, help="measure your own prompts: JSON lines ({\"category\",\"prompt\"} or {\"category\",\"turns\"}), CSV with a prompt column, or text with blank lines between prompts")
    workload.add_argument("--categories", default="", help="comma-separated categories (default: Spec-Bench's single-turn ones, or all of a file's)")
    workload.add_argument("--per-category", default=None, help="prompts per category (default: 1 of Spec-Bench, all of a file)")
    workload.add_argument("--selection", choices=("first", "sample"), default="first", help="the first N of each category, or a seeded sample (default: %(default)s)")
    workload.add_argument("--selection-seed", default=0, help="seed of --selection sample (default: %(default)s)")
    workload.add_argument("--turns", choices=("first", "both"), default="first", help="multi-turn prompts: the first turn only, or every turn after the target's own answers (default: %(default)s)")
    workload.add_argument("--until-clear", action="store_true", help=f"run each prompt until its answer is clear, as a comparison without --repeats does, instead of a fixed count: at most --repeats repetitions per prompt (default {CLEAR_MAX_REPEATS}) within --max-time seconds of timed runs for the whole workload (default {SUITE_CLEAR_MAX_TIME_S:g}), shared among the prompts not yet measured")
    bench.add_argument("--json", type=Path, default=None, help="write the report as JSON here")
    bench.add_argument("--csv", type=Path, default=None, help="write one row per run as CSV here")
    bench.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    bench.add_argument("--save", action="store_true", help="keep the result in the history (see the history command)")

    tune_cli.add_parser(sub)
    sub.add_parser("presets", help="list the preset model pairs")
    sub.add_parser("prepare", help="convert the bundled models once (otherwise done on first use)")
    history_cli.add_parser(sub)
    return parser


def _add_setting_options(parser: argparse.ArgumentParser, declared: EngineSettings) -> None:
    """One engine's declared settings (engines/settings.py) as options in a group of their own: each setting's
    flag, its help and its choices; the value lands under the arm request's field name (`_setting_values`)."""
    group = parser.add_argument_group(f"{declared.title or declared.engine} settings (declared in "
                                      f"engines/{declared.engine}/tuning.py)")
    for setting in declared.options():
        group.add_argument(setting.flag, dest=setting.name, default=None, choices=setting.choices or None,
                           metavar=None if setting.choices else setting.flag.lstrip("-").upper().replace("-", "_"),
                           help=setting.help or setting.words)


def _setting_values(args: argparse.Namespace, engine: str) -> dict:
    """The values given for one engine's declared settings, by the arm request's field names (None: not given)."""
    return {s.name: getattr(args, s.name) for s in registry.SETTINGS[engine].options()}


def request_from_args(args: argparse.Namespace) -> BenchRequest:
    """The same BenchRequest the web app would build from the same choices."""
    prompt = prompt_from_args(args)
    knobs = _setting_values(args, "transformers")
    if args.ensemble_weight is not None:
        knobs["assistant_ensemble_weight"] = args.ensemble_weight
    engines = _engines(args)
    arms: tuple = ()
    if "transformers" in engines:
        assistants = args.assistant or ([catalog.BUNDLED_ASSISTANT] if args.strategy in paths.MODEL_STRATEGIES else [])
        arms = assisted_arms(args.strategy, assistants, also_prompt_lookup=args.prompt_lookup, **knobs)
    if "vllm" in engines:
        arms += _vllm_arms(args)
    return BenchRequest(
        target=args.target,
        arms=arms,
        prompt=prompt,
        max_new_tokens=args.max_new_tokens,
        repeats=args.repeats,
        warmup=args.warmup,
        precision=CAREFUL_PRECISION if args.stop == "careful" and args.precision is None else args.precision,
        max_time_s=args.max_time,
        band=args.band,
        stop_rule=_stop_rule(args),
        do_sample=args.sample,
        seed=args.seed,
        fixed_length=args.fixed_length,
        chat_template=args.chat_template,
        device=args.device,
        dtype=args.dtype,
        device_map_auto=args.device_map_auto,
        engines=engines,
        concurrency=args.concurrency,
        load_rounds=args.load_rounds,
        load_block_rounds=args.load_block_rounds,
    )


def _stop_rule(args: argparse.Namespace) -> str | None:
    """--stop (likely, sure or careful) or --until-clear as the request's rule (None: the rule follows from
    --repeats and --precision)."""
    workload = args.suite is not None or args.suite_file is not None
    if args.stop in ("likely", "sure"):
        if args.precision is not None:
            raise InputError(f"--stop {args.stop} stops once the answer is {args.stop}, --precision once every speedup "
                             "is known to a precision; choose one (--stop careful goes with --precision).")
        if workload and args.stop == "likely":
            raise InputError("--stop likely times one prompt; a workload runs each prompt until its answer is sure "
                             "with --stop sure (or --until-clear), or a fixed count with --repeats.")
        return "clear" if args.stop == "sure" else "likely"
    if args.stop == "careful":
        if workload:
            raise InputError("--stop careful times one prompt; a workload runs each prompt until its answer is sure "
                             "with --stop sure (or --until-clear), or a fixed count with --repeats.")
        return None  # --precision's rule, with CAREFUL_PRECISION when no precision is given
    if not args.until_clear:
        return None
    if args.precision is not None:
        raise InputError("--until-clear stops once the answer is clear, --precision once every speedup is known to "
                         "a precision; choose one.")
    return "clear"


def _engines(args: argparse.Namespace) -> tuple[str, ...]:
    """--engines as given, else transformers plus vllm when a vLLM method or a server is named."""
    if args.engines is not None:
        engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
        if (args.server or args.vllm_method or args.vllm_draft) and "vllm" not in engines:
            raise InputError("--vllm-method and --server add vLLM arms; add vllm to --engines (e.g. --engines transformers,vllm).")
        return engines
    return ("transformers", "vllm") if (args.server or args.vllm_method or args.vllm_draft) else ("transformers",)


def _vllm_arms(args: argparse.Namespace) -> tuple:
    if args.server:
        if args.vllm_method or args.vllm_draft:
            raise InputError("--server times servers that already run, with the methods they were started with; "
                             "leave out --vllm-method and --vllm-draft, or --server to let AssistLab start vLLM.")
        key = args.server_api_key or os.environ.get("ASSISTLAB_VLLM_API_KEY") or None
        return vllm_arms_mod.parse_servers(args.server, key)
    if args.vllm_draft and not set(args.vllm_method or ()) & set(vllm_arms_mod.HEAD_METHODS):
        raise InputError("--vllm-draft is an EAGLE head; add --vllm-method eagle or eagle3 to time it (a whole "
                         "draft model is --assistant with --vllm-method draft_model).")
    return vllm_arms_mod.vllm_arms(args.vllm_method or ["ngram"], draft_models=tuple(args.assistant or ()),
                                   heads=tuple(args.vllm_draft or ()), **_setting_values(args, "vllm"))


def suite_request_from_args(args: argparse.Namespace):
    """The SuiteRequest a --suite or --suite-file command line describes, or None for one prompt."""
    from ..results.suite_inputs import SuiteRequest

    if args.suite is None and args.suite_file is None:
        return None
    if args.sweep:
        raise InputError("--sweep compares draft lengths on one prompt; leave out --suite/--suite-file or --sweep.")
    if args.prompt is not None or args.prompt_file is not None:
        raise InputError("A suite brings its own prompts; leave out --prompt/--prompt-file, or --suite/--suite-file.")
    return SuiteRequest(
        suite="file" if args.suite_file is not None else args.suite,
        file=str(args.suite_file) if args.suite_file is not None else None,
        categories=args.categories,
        per_category=args.per_category,
        selection=args.selection,
        seed=args.selection_seed,
        turns=args.turns,
    )
