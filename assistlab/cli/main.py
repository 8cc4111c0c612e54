"""Running a command: bench (one prompt, a sweep or a suite; Ctrl-C stops it), presets, prepare, history."""

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


def _suite_events(args: argparse.Namespace, request: BenchRequest, suite_request, stop: threading.Event):
    """The workload's events (after its estimate on stderr)."""
    from ..engines.transformers.models import ModelStore
    from ..measure import suite_runner
    from ..results.suite_inputs import select

    selection = select(suite_request)
    if not args.quiet:
        import torch

        device = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
        estimate = suite_runner.estimate_runs(request, selection, device)
        sys.stderr.write(f"Suite {selection.name}: {selection.rule}.\n{suite_runner.describe_estimate(estimate)}\n")
    return suite_runner.run_suite(request, selection, ModelStore(), should_stop=stop.is_set)


def _follow(events, args: argparse.Namespace, stop: threading.Event):
    """(the last event, whether an interrupt cut the events short): each event's progress line on stderr. An
    interrupt the stop flag could not catch (Ctrl-C twice, or one where no flag is read) ends the events, whose
    engines close, and the last report is kept as a stopped one; None when nothing had started."""
    from ..views.progress import progress_text

    final, said = None, None
    try:
        for event in events:
            # A loading step repeats its event every few seconds with the time updated; one line is enough here.
            if not args.quiet and event.message != said:
                sys.stderr.write(f"{progress_text(event)}\n")  # the page's progress line, word for word
                said = event.message
            final = event
    except KeyboardInterrupt:
        stop.set()
        events.close()  # its engines close (servers stopped) before anything is printed
        if final is None or final.report is None:
            raise
        return final, True
    return final, False


def write_file(path, text: str) -> None:
    """`text` into `path` whole or not at all: written beside it, then renamed over it, so a full disk never
    leaves an empty or cut file; InputError in one sentence naming the file otherwise."""
    import os

    temporary = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise InputError(f"Cannot write {str(path)!r}: {exc.strerror or exc}.") from None


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
    from ..measure import runner, suite_runner, sweep
    from ..results.suite import SuiteReport

    request = request_from_args(args)
    suite_request = suite_request_from_args(args)
    stop = threading.Event()

    received: list[int] = []
    previous = _stop_on_signals(stop, received)
    try:
        if suite_request is not None:
            events = _suite_events(args, request, suite_request, stop)
        elif args.sweep:
            events = sweep.sweep(
                request, ModelStore(), param=args.sweep,
                values=[v for v in args.sweep_values.split(",") if v.strip()],
                schedules=[s.strip() for s in args.sweep_schedules.split(",") if s.strip()],
                should_stop=stop.is_set,
            )
        else:
            events = runner.run_benchmark(request, ModelStore(), should_stop=stop.is_set)
        final, cut = _follow(events, args, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    report = final.report
    if cut and final.kind != "done":  # the last report read, its whole repetitions kept, as Stop keeps them
        report = suite_runner.interrupted(report) if isinstance(report, SuiteReport) else runner.interrupted(report)
    data = report.to_dict()
    print(format_suite_table(data) if isinstance(report, SuiteReport) else format_table(data))
    for path, text in ((args.json, report.to_json()), (args.csv, report.to_csv())):
        if path is not None:
            write_file(path, text)
    if args.save:
        history_cli.save_report(data)
    if received and received[0] != signal.SIGINT:
        sys.stderr.write(f"Stopped by {signal.Signals(received[0]).name}.\n")
        return 128 + received[0]
    if cut:
        sys.stderr.write("Stopped by an interrupt; what was measured is above.\n")
        return 128 + signal.SIGINT
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
        said = exc.worded(tune_cli.OPTIONS) if isinstance(exc, InputError) else str(exc)
        sys.stderr.write(f"error: {said}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted before anything was measured.\n")
        return 130

