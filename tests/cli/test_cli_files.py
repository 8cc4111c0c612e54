"""The command line's report files are written whole or not at all: a full disk leaves neither an empty file nor
a cut one, and says so in one sentence naming the file."""

from __future__ import annotations

import errno
import importlib
from pathlib import Path

import pytest

from assistlab.errors import InputError

cli_main = importlib.import_module("assistlab.cli.main")  # assistlab.cli.main is also the function's name


def _disk_fills_after(monkeypatch, room: int) -> None:
    """Every Path.write_text writes its first `room` characters, then fails as a full disk does."""
    def write_text(self: Path, text: str, *args, **kwargs) -> int:
        with open(self, "w") as f:
            f.write(text[:room])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", write_text)


def test_a_full_disk_leaves_no_empty_or_cut_file(tmp_path, monkeypatch):
    fresh, kept = tmp_path / "fresh.json", tmp_path / "kept.json"
    kept.write_text('{"earlier": "report"}')
    _disk_fills_after(monkeypatch, 0)
    with pytest.raises(InputError) as caught:
        cli_main.write_file(fresh, '{"a": 1}')
    assert str(caught.value) == f"Cannot write {str(fresh)!r}: No space left on device."
    _disk_fills_after(monkeypatch, 3)
    with pytest.raises(InputError):
        cli_main.write_file(kept, '{"a": 1, "b": 2}')
    assert not fresh.exists() and kept.read_text() == '{"earlier": "report"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]  # no part file left beside it


def test_a_report_file_is_replaced_whole(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old and longer than the new one")
    cli_main.write_file(path, "new")
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
