"""The one CSV writer the app uses: text that a spreadsheet would run as a formula is written as text."""

from __future__ import annotations

import csv
import re

# What makes Excel, LibreOffice or Sheets treat a cell as a formula (OWASP's list for CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def cell(value: object) -> object:
    """`value` as a CSV cell: text starting a formula gets a leading single quote; numbers stay numbers.

    A text that is itself a plain number ('-1.5', as a CSV read back gives it) is a number, not a formula.
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


class Writer:
    """csv.writer whose every row goes through `cell`."""

    def __init__(self, out) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row) -> None:
        self._writer.writerow([cell(value) for value in row])
