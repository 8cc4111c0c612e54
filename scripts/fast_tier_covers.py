"""Whether the fast tier covers every module: each module of assistlab/ runs code inside at least one fast test.

Run: python scripts/fast_tier_covers.py            (runs `pytest -m "not slow"` under coverage, minutes)
     python scripts/fast_tier_covers.py DATA_FILE  (reads a coverage file made with dynamic_context = test_function)
Needs `pip install coverage`. Lines run while pytest imports the test files count for no test; a module that
defines no function (only names, constants and classes without methods) has nothing to run later and is listed
apart. Exits 1 when a module with functions runs in no fast test.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parents[1]


def measured(data_file: str | None) -> coverage.CoverageData:
    if data_file:
        data = coverage.CoverageData(basename=data_file)
        data.read()
        return data
    import pytest

    cov = coverage.Coverage(source=["assistlab"], data_file=None, config_file=False)
    cov.set_option("run:dynamic_context", "test_function")
    cov.start()
    try:
        code = pytest.main(["-m", "not slow", "-q", "-p", "no:cacheprovider", str(ROOT / "tests")])
    finally:
        cov.stop()
    if code not in (0, 5):
        print(f"the fast tier failed (pytest exit {code}); coverage below is of what ran")
    return cov.get_data()


def has_functions(path: Path) -> bool:
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(ast.parse(path.read_text())))


def main() -> int:
    data = measured(sys.argv[1] if len(sys.argv) > 1 else None)
    files = {str(Path(f).resolve()): f for f in data.measured_files()}
    missing, data_only = [], []
    for path in sorted((ROOT / "assistlab").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        recorded = files.get(str(path.resolve()))
        contexts = set()
        if recorded:
            for names in (data.contexts_by_lineno(recorded) or {}).values():
                contexts.update(c for c in names if c)
        if contexts:
            continue
        (missing if has_functions(path) else data_only).append(name)
    if data_only:
        print("no code to run inside a test (names and classes only):", ", ".join(data_only))
    if missing:
        print("modules that run in no fast test:", ", ".join(missing))
        return 1
    print("every module of assistlab/ with code runs inside at least one fast test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
