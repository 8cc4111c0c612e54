"""The tests as a reader finds them: a folder per stage, fixtures in conftest.py files, helpers in helper modules,
no benchmark or script among them, and the fast tier's marker registered."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# One folder per stage of assistlab/ (browser: the page driven in Chromium); the top holds the tests of
# config.py and of the layouts.
STAGES = {"engines", "measure", "results", "views", "history", "ui", "browser", "cli"}


def test_test_folders_are_the_stages():
    nested = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
              if p.parent != TESTS and p.parent.relative_to(TESTS).parts[0] not in STAGES]
    assert not nested, f"test files outside the stage folders: {nested}"


def test_no_test_module_imports_another():
    found = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(TESTS)}: {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not found, f"fixtures belong in conftest.py and helpers in helper modules, not imported from tests: {found}"


def test_test_module_names_are_unique():
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), "pytest imports test files by their name: two with one name clash"


def test_benchmarks_and_scripts_live_outside_tests():
    assert not list(TESTS.rglob("bench_*.py")) and not (TESTS / "make_screenshots.py").exists()
    assert (ROOT / "benchmarks").is_dir() and (ROOT / "scripts").is_dir()


def test_the_slow_marker_and_the_warning_filter_are_configured_once():
    config = configparser.ConfigParser()
    config.read(ROOT / "pytest.ini")
    assert config["pytest"]["testpaths"].split() == ["tests"]
    assert any(line.startswith("slow:") for line in config["pytest"]["markers"].splitlines())
    marks = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py")
             if "filterwarnings(" in p.read_text() and p.name != Path(__file__).name]
    assert not marks, f"filterwarnings belongs in pytest.ini: {marks}"
