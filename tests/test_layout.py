"""The code map holds: every module of assistlab/ sits in a stage folder, imports only the stages below it, and
no two modules import each other, even through others or only for type names.

Read with `ast`, nothing imported. ASSISTLAB_LAYOUT_ROOT points the checks at another checkout (the tree before
the stage folders fails them: `ASSISTLAB_LAYOUT_ROOT=/path/to/old/checkout pytest tests/test_layout.py`).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("ASSISTLAB_LAYOUT_ROOT") or Path(__file__).resolve().parents[1])
PACKAGE = ROOT / "assistlab"

# Which stage may import which: the README's code map, each stage with the stages below it that it uses.
BASE = ("assistlab", "assistlab.config", "assistlab.errors", "assistlab.access")
MAY_IMPORT = {
    "base": {"base"},
    "engines": {"base", "engines"},
    "results": {"base", "engines", "results"},
    "measure": {"base", "engines", "results", "measure"},
    "history": {"base", "engines", "results", "history"},
    "views": {"base", "engines", "results", "history", "views"},
    "ui": {"base", "engines", "results", "measure", "history", "views", "ui"},
    "cli": {"base", "engines", "results", "measure", "history", "views", "cli"},
    "entry": {"cli"},
}
PATH_MODULE_LINES = 160  # "about 150 lines or less"


def module_names() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def stage(module: str) -> str | None:
    """The stage a module belongs to, or None for a module outside every stage folder."""
    if module in BASE:
        return "base"
    if module == "assistlab.__main__":
        return "entry"
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in MAY_IMPORT else None


def imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `module` imports anywhere in its file (inside functions and TYPE_CHECKING too)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name.split(".")[0] == "assistlab")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] != "assistlab":
                continue
            for alias in node.names:
                child = f"{source}.{alias.name}"
                out.add(child if child in modules else source)
    return {name for name in out if name in modules and name != module}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports(name, path, modules) for name, path in modules.items()}


def test_every_module_sits_in_a_stage(graph):
    loose = sorted(name for name in graph if stage(name) is None)
    assert not loose, f"modules outside the stage folders of the README's code map: {loose}"


def test_no_module_imports_a_later_stage(graph):
    wrong = sorted(
        f"{name} ({stage(name)}) imports {other} ({stage(other)})"
        for name, targets in graph.items()
        for other in targets
        if stage(name) and stage(other) and stage(other) not in MAY_IMPORT[stage(name)]
    )
    assert not wrong, "imports against the flow:\n" + "\n".join(wrong)


def test_no_import_cycles(graph):
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for other in sorted(graph[name]):
            if state.get(other) == 1:
                cycles.append(" -> ".join([*path[path.index(other):], other]))
            elif other not in state:
                visit(other)
        path.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_gradio_only_in_the_page_and_no_torch_in_statistics():
    for name, path in module_names().items():
        text = path.read_text()
        if stage(name) != "ui":
            assert not re.search(r"^\s*(import|from) gradio\b", text, re.M), f"{name} imports gradio"
    stats = PACKAGE / "results" / "stats.py"
    assert stats.exists() and not re.search(r"^\s*(import|from) torch\b", stats.read_text(), re.M)


def test_each_drafting_path_is_one_short_module_and_the_registry_the_only_list():
    folder = PACKAGE / "engines" / "transformers" / "paths"
    assert (folder / "__init__.py").exists(), "no registry of drafting paths"
    names = set(re.findall(r'^    name = "([a-z0-9-]+)"$', "".join(p.read_text() for p in folder.glob("*.py")), re.M))
    assert {"assistant", "universal", "prompt-lookup", "early-exit", "gemma4-assistant", "mtp", "dflash"} <= names
    for path in folder.glob("*.py"):
        if path.name != "__init__.py":
            lines = len(path.read_text().splitlines())
            assert lines <= PATH_MODULE_LINES, f"{path.name} has {lines} lines"
    # Outside the registry, no tuple, list or set spells out two or more path names: such a list would have to
    # be kept in step with the registry by hand.
    for name, path in module_names().items():
        if path.is_relative_to(folder):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                spelled = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
                assert len(spelled) < 2, f"{name} line {node.lineno} lists drafting paths by hand: {spelled}"


def test_the_docs_carry_the_registry_arms_table():
    from assistlab.engines.transformers import paths

    docs = (ROOT / "docs" / "measuring.md").read_text()
    table = "\n".join("  " + line for line in paths.arms_table().splitlines())
    assert table in docs, "docs/measuring.md's Arms table differs from paths.arms_table(); paste the table it prints"



# ---------------------------------------------------------------- one engine interface (issue 26)

MODULE_LINES = 500  # "no module over ~500 lines"
CONCRETE_ENGINES = ("assistlab.engines.transformers", "assistlab.engines.vllm")


def _is_under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_scheduler_asks_the_registry_and_never_a_concrete_engine(graph):
    wrong = sorted(
        f"{name} imports {other}"
        for name, targets in graph.items() if _is_under(name, "assistlab.measure")
        for other in targets if any(_is_under(other, engine) for engine in CONCRETE_ENGINES)
    )
    assert not wrong, "measure/ imports a concrete engine (ask assistlab.engines.registry):\n" + "\n".join(wrong)


def test_the_scheduler_names_no_engine_in_a_string():
    engine_names = {"transformers", "vllm"}
    wrong = []
    for name, path in module_names().items():
        if not _is_under(name, "assistlab.measure"):
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if node.value.strip().lower() in engine_names:
                    wrong.append(f"{name} line {node.lineno}: {node.value!r}")
    assert not wrong, "measure/ names an engine in a string (ask the registry):\n" + "\n".join(wrong)


def test_results_and_views_never_reach_into_the_transformers_engine(graph):
    wrong = sorted(
        f"{name} imports {other}"
        for name, targets in graph.items()
        if _is_under(name, "assistlab.results") or _is_under(name, "assistlab.views")
        for other in targets if _is_under(other, "assistlab.engines.transformers")
    )
    assert not wrong, "what an arm is travels on its ArmInfo; results/ and views/ read it:\n" + "\n".join(wrong)


def test_no_module_passes_about_500_lines():
    long = sorted(
        f"{name}: {lines} lines"
        for name, path in module_names().items()
        if (lines := len(path.read_text().splitlines())) > MODULE_LINES
    )
    assert not long, f"modules over {MODULE_LINES} lines (split them where their concerns part):\n" + "\n".join(long)
