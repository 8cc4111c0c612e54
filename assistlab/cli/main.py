"""Running a command: bench (one prompt, a sweep or a suite; Ctrl-C stops it), tune, presets, prepare, history."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from ..config import BenchRequest
from ..engines import catalog
from ..engines.transformers import bundled
from ..errors import AssistLabError, InputError
from . import history as history_cli
from . import tune as tune_cli
from .parser import EXIT_USAGE, build_parser, request_from_args, suite_request_from_args
from .tables import format_suite_table, format_table

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _suite(args: argparse.Namespace, request: BenchRequest, suite_request, stop: threading.Event) -> int:
    from ..engines.transformers.models import ModelStore
    from ..measure import suite_runner
    from ..results.suite_inputs import select
    from ..views.progress import progress_text

    selection = select(suite_request)
    if not args.quiet:
        import torch

        device = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
        estimate = suite_runner.estimate_runs(request, selection, device)
        sys.stderr.write(f"Suite {selection.name}: {selection.rule}.\n{suite_runner.describe_estimate(estimate)}\n")
    final = None
    for event in suite_runner.run_suite(request, selection, ModelStore(), should_stop=stop.is_set):
        if not args.quiet:
            sys.stderr.write(f"{progress_text(event)}\n")  # the page's progress line, word for word
        final = event
    print(format_suite_table(final.report.to_dict()))
    for path, text in ((args.json, final.report.to_json()), (args.csv, final.report.to_csv())):
        if path is not None:
            try:
                path.write_text(text)
            except OSError as exc:
                raise InputError(f"Cannot write {str(path)!r}: {exc.strerror}.") from None
    return 0


def _stop_on_signals(stop: threading.Event, received: list[int]) -> dict:
    """Ctrl-C, SIGTERM and SIGHUP set `stop` (a second one aborts); the handlers they replace, to restore."""

    def on_interrupt(sig, _frame):
        # SIGTERM (timeout, systemd, a CI cancel, Kubernetes) and SIGHUP (a closed terminal) stop as Ctrl-C does:
        # the run in progress is dropped, the launched vLLM servers are stopped, the table is still printed.
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        received.append(sig)
        name = signal.Signals(sig).name
        again = "Ctrl-C again to abort" if sig == signal.SIGINT else f"{name} again to abort"
        sys.stderr.write(f"\n{name}: stopping at the next generation step and ending the vLLM servers AssistLab "
                         f"started; the run it cuts short is not counted ({again})...\n")

    return {sig: signal.signal(sig, on_interrupt) for sig in STOP_SIGNALS}


def _tune(args: argparse.Namespace) -> int:
    """The tune command; a stop keeps what was measured and says the search is not settled."""
    stop, received = threading.Event(), []
    previous = _stop_on_signals(stop, received)
    try:
        code = tune_cli.run(args, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received and received[0] != signal.SIGINT:
        return 128 + received[0]
    return code


def _bench(args: argparse.Namespace) -> int:
    from ..engines.transformers.models import ModelStore
    from ..measure import sweep
    from ..measure.runner import run_benchmark
    from ..views.progress import progress_text

    request = request_from_args(args)
    suite_request = suite_request_from_args(args)
    stop = threading.Event()
    received: list[int] = []
    previous = _stop_on_signals(stop, received)
    final = None
    try:
        if suite_request is not None:
            return _suite(args, request, suite_request, stop)
        store = ModelStore()
        if args.sweep:
            events = sweep.sweep(
                request, store, param=args.sweep,
                values=[v for v in args.sweep_values.split(",") if v.strip()],
                schedules=[s.strip() for s in args.sweep_schedules.split(",") if s.strip()],
                should_stop=stop.is_set,
            )
        else:
            events = run_benchmark(request, store, should_stop=stop.is_set)
        said = None
        for event in events:
            # A loading step repeats its event every few seconds with the time updated; one line is enough here.
            if not args.quiet and event.message != said:
                sys.stderr.write(f"{progress_text(event)}\n")  # the page's progress line, word for word
                said = event.message
            final = event
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    data = final.report.to_dict()
    print(format_table(data))
    for path, text in ((args.json, final.report.to_json()), (args.csv, final.report.to_csv())):
        if path is not None:
            try:
                path.write_text(text)
            except OSError as exc:
                raise InputError(f"Cannot write {str(path)!r}: {exc.strerror}.") from None
    if args.save:
        history_cli.save_report(data)
    if received and received[0] != signal.SIGINT:
        sys.stderr.write(f"Stopped by {signal.Signals(received[0]).name}.\n")
        return 128 + received[0]
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "presets":
            machine = catalog.this_machine()
            for p in catalog.PRESETS:
                helper = p.assistant or "(none: the target drafts for itself)"
                print(f"{p.label} [{catalog.fit(p, machine).tag}]\n  target:    {p.target}\n  assistant: {helper}\n"
                      f"  strategy:  {p.strategy}\n  {catalog.describe(p, machine)}")
            return 0
        if args.command == "prepare":
            for name in bundled.BUNDLED:
                print(bundled.ensure_converted(bundled.PREFIX + name, progress=print))
            return 0
        if args.command == "history":
            return history_cli.run(args)
        if args.command == "tune":
            return _tune(args)
        return _bench(args)
    except AssistLabError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130

