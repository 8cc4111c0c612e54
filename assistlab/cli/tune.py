"""`python -m assistlab tune`: find the setting to deploy (measure/tune.py), print its sentence first, then the
candidates, what to deploy (plain generation when no setting was clearly faster than plain) and the `bench`
command that re-times the pick."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from ..config import CLEAR_MAX_REPEATS, CLEAR_MAX_TIME_S, CPU_DEFAULTS, LIMITS, LOAD_ROUNDS, NO_DIFFERENCE_BAND
from ..engines import catalog
from ..errors import InputError
from ..results.tune_interval import best_bounds
from .prompt import prompt_from_args

CANDIDATES_HELP = ("narrow the search: 'family:setting=values' parts separated by ';', values by ',', e.g. "
                   "\"prompt-lookup:prompt_lookup_num_tokens=3,5,10; vllm ngram:num_speculative_tokens=1,2,4,8\" "
                   "('default' is the engine's own value; a family named without settings keeps its declared "
                   "values; see docs/tune.md for every engine's families and settings)")


# The search's fields as this command names them in a refusal (errors.InputError.worded).
OPTIONS = {"candidates": "--candidates", "families": "--families", "assistants": "--assistant"}


def add_parser(sub) -> None:
    """The `tune` command's options, named as `bench` names the same things."""
    tune = sub.add_parser("tune", help="find the drafting setting to deploy: candidates leave as soon as they are "
                                       "clearly behind")
    tune.add_argument("--target", default=catalog.BUNDLED_TARGET, help="hub id, bundled:NAME or a folder in "
                      "$ASSISTLAB_MODELS_DIR (default: %(default)s)")
    tune.add_argument("--assistant", action="append", default=None, help="an assistant model to try; repeat for "
                      "several (default: the presets' assistants for this target, then up to two models this machine has that "
                      "fit it: causal LMs at most a quarter of its size)")
    tune.add_argument("--no-assistants", dest="no_assistants", action="store_true",
                      help="search only the settings that need no assistant model (prompt lookup, vLLM ngram)")
    tune.add_argument("--engines", default="transformers", help="comma-separated engines whose settings to search: "
                      "transformers, vllm (default: %(default)s)")
    tune.add_argument("--candidates", default=None, help=CANDIDATES_HELP)
    tune.add_argument("--families", default=None, help="comma-separated families to search instead of those each "
                      "engine searches by default, e.g. \"transformers prompt-lookup, vllm ngram\" (the page's ticks; "
                      "a family --candidates names must be among them)")
    prompt = tune.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default=None, help="the prompt (default: the preset's for the target)")
    prompt.add_argument("--prompt-file", type=Path, default=None, help="read the prompt from a text file")
    tune.add_argument("--max-new-tokens", default=None, help=f"tokens each arm generates (default "
                      f"{CPU_DEFAULTS['max_new_tokens']} on CPU; max {LIMITS['max_new_tokens']})")
    tune.add_argument("--repeats", default=None, help=f"the most repetitions the search may run (default "
                      f"{CLEAR_MAX_REPEATS}, max {LIMITS['repeats']})")
    tune.add_argument("--max-time", dest="max_time", default=None, help=f"time budget in seconds for the timed "
                      f"repetitions (default {CLEAR_MAX_TIME_S:g})")
    tune.add_argument("--warmup", default=None, help="uncounted warm-up runs per arm (default 1)")
    tune.add_argument("--band", default=NO_DIFFERENCE_BAND, help="candidates whose latencies are all within 1 ± this "
                      "share of each other count as no practical difference: then the simplest is picked (default "
                      "%(default)s)")
    tune.add_argument("--concurrency", default="", metavar="LEVELS", help="load levels for the vLLM candidates "
                      "after the search, as bench's --concurrency (default: none)")
    tune.add_argument("--load-rounds", default=LOAD_ROUNDS, help=f"timed rounds per load level, as bench's "
                      f"(default %(default)s, max {LIMITS['load_rounds']})")
    tune.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    tune.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    tune.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                      help="feed the prompt raw even if the target has a chat template")
    tune.add_argument("--json", type=Path, default=None, help="write the report, with its tune block, as JSON here")
    tune.add_argument("--csv", type=Path, default=None, help="write one row per run as CSV here")
    tune.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def request_from_args(args: argparse.Namespace):
    """The search's BenchRequest (measure.tune.tune_request) from the command line."""
    from ..measure.tune import tune_request

    prompt = prompt_from_args(args)
    if args.no_assistants and args.assistant:
        raise InputError("--no-assistants searches without assistant models; leave out --assistant or it.")
    assistants = [] if args.no_assistants else args.assistant
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    families = None if args.families is None else [f for f in args.families.split(",") if f.strip()]
    return tune_request(args.target, assistants=assistants, engines=engines, candidates=args.candidates,
                        families=families,
                        repeats=args.repeats, max_time_s=args.max_time, prompt=prompt,
                        max_new_tokens=args.max_new_tokens, warmup=args.warmup, band=args.band,
                        concurrency=args.concurrency, load_rounds=args.load_rounds, device=args.device,
                        dtype=args.dtype, chat_template=args.chat_template)


def _span(candidate: dict) -> str:
    """A candidate's interval as the page shows it ('0.48–1.76×, 99.1%'), or, in a report from before the
    summary had one, its sure interval else its likely one."""
    if candidate.get("interval") is not None:
        return candidate["interval"]["text"] or "—"
    low, high, _kind = best_bounds(candidate["speedup"])
    return f"{low:.2f}–{high:.2f}" if low is not None else "—"


def format_summary(summary: dict) -> str:
    """The sentence first, then each candidate, then what to deploy (the pick only when it is clearly faster
    than plain, else plain generation, with why) and how to re-time the pick."""
    lines = [summary["sentence"], ""]
    lines.append(f"{'candidate':<44} {'speedup':>8}  {'interval':<24} {'runs':>4}  left")
    for c in summary["candidates"]:
        s = c["speedup"] or {}
        median = f"{s['median']:.2f}×" if s.get("median") else "—"
        left = c["why"] or "still in"
        lines.append(f"{c['arm'][:44]:<44} {median:>8}  {_span(c):<24} {c['runs']:>4}  {left}")
    confirmed = {True: "yes", False: "no: the rule that assumes nothing disagrees", None: "not tried or not yet "
                 "decided"}[summary["confirmed"]]
    lines += ["", f"Settled: {'yes' if summary['settled'] else 'no'} ({summary['outcome']}) after "
                  f"{summary['repetitions']} repetitions; runs used {summary['runs_used']} of "
                  f"{summary['runs_without_elimination']} without elimination. Confirmed: {confirmed}.",
              f"How sure: {summary['level']:.0%} for the whole search, {summary['assumption']}."]
    over = (summary.get("budget") or {}).get("sentence")
    if over:
        lines.append(over)
    schedule, checked = summary.get("schedule"), summary.get("schedule_check")
    if schedule:
        lines += ["", schedule["sentence"], *(f"  {row['sentence']}" for row in (checked or {}).get("levels", []))]
        if checked and checked.get("all_within_band") is not False and not checked.get("refused"):
            lines.append(f"  --speculative-config '{json.dumps(schedule['speculative_config'])}'")
    deploy, rec = summary.get("deploy"), summary["recommendation"]
    if deploy:
        lines += ["", deploy.get("sentence") or "Deploy it:", deploy["snippet"]]
    if rec:
        lines += ["", "Re-time it:" if deploy and not deploy.get("plain") else "Re-time the best candidate:",
                  rec["bench_command"]]
    return "\n".join(lines)


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    """Run the search, printing progress on stderr; the summary on stdout; the report where asked."""
    from ..engines.transformers.models import ModelStore
    from ..measure.tune import tune
    from ..views.progress import progress_text

    request = request_from_args(args)
    if not args.quiet:
        sys.stderr.write(f"Searching {sum(1 for a in request.arms if a.assisted)} candidates: "
                         f"{', '.join(a.label for a in request.arms if a.assisted)}\n")
    final, said = None, None
    for event in tune(request, ModelStore(), should_stop=stop.is_set):
        if not args.quiet and event.message != said:
            sys.stderr.write(f"{progress_text(event)}\n")
            said = event.message
        final = event
    print(format_summary(final.report.tune.to_dict()))
    for path, text in ((args.json, final.report.to_json()), (args.csv, final.report.to_csv())):
        if path is not None:
            try:
                path.write_text(text)
            except OSError as exc:
                raise InputError(f"Cannot write {str(path)!r}: {exc.strerror}.") from None
    return 0
