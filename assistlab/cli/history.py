"""The `history` command and `bench --save`: list, show, delete and rank saved comparisons from a terminal."""

from __future__ import annotations

import argparse
import json
import sys

from .. import history
from ..errors import InputError
from ..history.derive import PLAIN
from ..views.history_html import PLAIN_NOTE, UNSETTLED, best_words, board_lines, latest_words, plain_line, section_title
from .tables import format_table


def add_parser(sub) -> None:
    """Add `history` (list by default; show ID, delete ID, leaderboard) to the command's subparsers."""
    parser = sub.add_parser(
        "history", help="list saved comparisons (bench --save, the page and the API save them)",
        description=f"Saved comparisons, newest first. They live in {history.DB_FILENAME} under ${history.DATA_DIR_ENV} "
                    f"(default ~/.local/share/assistlab), or in ${history.DATABASE_URL_ENV} when set.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--target", default="", help="only comparisons whose target contains this")
    parser.add_argument("--assistant", default="", help="only comparisons with an assistant containing this")
    parser.add_argument("--device", default="", help="only comparisons on a device containing this (e.g. cpu, H200)")
    parser.add_argument("--page", type=int, default=1, help="page of results (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=20, help="comparisons per page (default: %(default)s)")
    actions = parser.add_subparsers(dest="history_command", parser_class=type(parser))
    show = actions.add_parser("show", help="print one saved comparison")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="print its whole JSON report")
    delete = actions.add_parser("delete", help="delete one saved comparison")
    delete.add_argument("id")
    board = actions.add_parser("leaderboard", help="pairings ranked by measured speedup over their engine's plain, per "
                               "target, device and engine")
    board.add_argument("--json", action="store_true", help="print JSON instead of a table")
    board.add_argument("--target", default="", help="only targets containing this")
    board.add_argument("--device", default="", help="only devices containing this")


def save_report(data: dict, store: history.History | None = None) -> int:
    """`bench --save`: keep the report; a failure is a warning on stderr, never a failed command."""
    try:
        store = store or history.History()
    except InputError as exc:  # a bad ASSISTLAB_HISTORY_MAX must not turn a finished run into a failure
        result = history.SaveResult(warning=f"This comparison was not saved to the history: {exc}")
    else:
        result = store.save(data, log_warning=False)
    if result.saved:
        sys.stderr.write(f"Saved to the history as {result.id} (python -m assistlab history show {result.id}).\n")
        if result.note:
            sys.stderr.write(f"{result.note}\n")
    else:
        sys.stderr.write(f"warning: {result.warning}\n")
    return 0


def _speed(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def run(args: argparse.Namespace, store: history.History | None = None) -> int:
    """Run `history ...`; HistoryError and InputError reach the caller, which prints them as one line."""
    store = store or history.History()
    command = args.history_command
    if command == "show":
        entry, report = store.get(args.id)
        if args.json:
            print(json.dumps(report, indent=2))
            return 0
        who = f" by {entry.owner}" if entry.owner else ""
        print(f"Comparison {entry.id}, saved {entry.created_at:%Y-%m-%d %H:%M} UTC{who} ({entry.status}); "
              f"target {entry.target} on {entry.device_name} with {entry.engines}.")
        print(format_table(report))
        return 0
    if command == "delete":
        store.delete(args.id)
        print(f"Deleted comparison {history.check_id(args.id)}.")
        return 0
    if command == "leaderboard":
        sections = store.leaderboard(target=args.target, device=args.device)
        if args.json:
            print(json.dumps([s.to_dict() for s in sections], indent=2))
            return 0
        if not sections:
            print("Nothing saved yet: run `python -m assistlab bench --save`.")
        for section in sections:
            measured = f" ({section.measured})" if section.measured else ""
            print(f"\n{section_title(section)}{measured}: {section.note}")
            shown = lambda rank: "-" if rank is None else str(rank)  # noqa: E731 - a board with no answer ranks none
            rows = [
                [shown(rank), plain_line(section), "1.00×", "-", PLAIN_NOTE, "", ""] if r is None else
                [shown(rank), r.label, _speed(r.speedup), str(r.comparisons), latest_words(r),
                 f"{r.latest_at:%Y-%m-%d}", r.latest_id]
                for rank, r in board_lines(section)
            ]
            print(_table(["rank", "pairing", "median speedup", "comparisons", "latest comparison (speedup, interval)",
                          "latest", "id"], rows))
        return 0
    page = store.list(target=args.target, assistant=args.assistant, device=args.device, page=args.page,
                      page_size=args.limit)
    if args.json:
        print(json.dumps({"total": page.total, "page": page.page, "page_size": page.page_size,
                          "entries": [e.to_dict() for e in page.entries]}, indent=2))
        return 0
    if not page.entries:
        print("No saved comparisons match." if page.total or args.target or args.assistant or args.device
              else "No saved comparisons yet: run `python -m assistlab bench --save`.")
        return 0
    rows = [
        [e.id, f"{e.created_at:%Y-%m-%d %H:%M}", e.owner or "-", e.status, e.target, e.assistants or "-",
         e.engines, e.device_name,
         best_words(e) if e.best_arm == PLAIN or e.status == UNSETTLED else _speed(e.best_speedup)]
        for e in page.entries
    ]
    print(_table(["id", "saved (UTC)", "who", "status", "target", "assistants", "engines", "device", "best"], rows))
    first = (page.page - 1) * page.page_size + 1
    print(f"{first}-{first + len(page.entries) - 1} of {page.total}, newest first.")
    return 0
