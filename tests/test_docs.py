"""The README and docs/ hold together: every relative link resolves, and the README's commands are CI's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.I)


def _prose(text: str) -> str:
    """The page without its fenced code blocks and inline code, where a bracket is not a link."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor in `page`, numbered as GitHub numbers repeats (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    text = _prose(page.read_text())
    links = LINK.findall(text) + HTML_LINK.findall(text)
    return [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:", link, re.I)]


def test_the_slug_follows_githubs_rules():
    assert slug("What it measures, and how") == "what-it-measures-and-how"
    assert slug("Why it is (or is not) faster") == "why-it-is-or-is-not-faster"
    assert slug("Workloads: speedup per kind of task") == "workloads-speedup-per-kind-of-task"
    assert slug("A workload's report") == "a-workloads-report"
    assert slug("The `bench` options") == "the-bench-options"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves_to_a_file_and_its_heading(page):
    assert page.exists()
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / unquote(path)).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_docs_page_and_stays_short():
    readme = (ROOT / "README.md").read_text()
    assert readme.startswith("---\ntitle: AssistLab\n")  # the Space's front matter stays on top
    assert len(readme.splitlines()) <= 100, "the README is a front page: 100 lines at most, front matter included"
    linked = {Path(link.partition("#")[0]).name for link in relative_links(ROOT / "README.md")}
    assert {p.name for p in PAGES[1:]} <= linked, "a docs page the README does not link"


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# A measured figure: a time, a ratio (×), a share (%) or a throughput.
FIGURE = re.compile(
    r"\b\d+(?:[.,]\d+)*\s?(?:ms|min|s|h)\b|\b\d+(?:\.\d+)?\s?[×%]|\b\d+(?:\.\d+)?\s(?:output\s)?tokens/s"
)
# The reference benchmark's own figures, from its own machine: the only figures the README may give.
REFERENCE_FIGURES = {"23.9 s", "20.5 s", "14%"}


def measurement_claims(text: str) -> list[str]:
    """What in a page reads as a measurement: any date, any figure but the reference benchmark's own, and any
    sentence that says "measured" beside a figure (the prose only: a command's numbers are settings)."""
    claims = DATE.findall(text)
    for sentence in re.split(r"(?<=[.!?])\s+", _prose(text)):
        figures = FIGURE.findall(sentence)
        claims += [f for f in figures if f not in REFERENCE_FIGURES]
        if figures and re.search(r"\bmeasured\b", sentence, re.I):
            claims.append(sentence.strip())
    return claims


def test_the_measurement_check_finds_what_the_readme_once_held():
    once = ("The first answer of the default comparison came after 249 s (7 repetitions) on an idle 2-core CPU "
            "(2026-12-03); `--stop likely` after 119 and 114 s, 0.84 and 0.82 of the fixed run's time.")
    assert {"2026-12-03", "249 s", "114 s"} <= set(measurement_claims(once))
    assert measurement_claims("Measured here: 23.9 s plain against 20.5 s assisted.")  # own figures, "measured"
    assert measurement_claims("It helps at every level: 3.17× alone, 1.74× at 8.") == ["3.17×", "1.74×"]
    assert not measurement_claims("Run `bench --max-new-tokens 16 --repeats 5` on a 2-core CPU.")


def test_the_readme_holds_no_dated_figure_only_the_reference_benchmarks_own():
    claims = measurement_claims((ROOT / "README.md").read_text())
    assert not claims, f"measurements belong in docs/benchmarks.md, with their date, machine and command: {claims}"


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip()[1:-1])]


def test_the_benchmarks_page_is_one_table_of_dated_measurements():
    lines = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    table = [i for i, line in enumerate(lines) if line.startswith("|")]
    assert table and table == list(range(table[0], table[-1] + 1)), "one table, its rows together"
    header, rule, *rows = (lines[i] for i in table)
    assert _cells(header) == ["date", "machine", "idle or busy", "command", "figure"]
    assert all(set(cell) <= set("-:") and cell for cell in _cells(rule)) and len(_cells(rule)) == 5
    assert rows, "no measurement in the table"
    for row in rows:
        cells = _cells(row)
        assert len(cells) == 5 and all(cells), row
        assert re.fullmatch(r"20\d\d-\d\d-\d\d", cells[0]), f"a row without its date: {row}"
        assert re.search(r"\d", cells[4]), f"a row without a figure: {row}"


def test_the_missing_model_sentence_names_a_heading_of_the_models_page():
    from assistlab.engines.transformers import models

    path, _, anchor = models.BRING_A_MODEL.partition("#")
    assert path == "docs/models.md" and anchor in anchors(ROOT / path)
    assert models.BRING_A_MODEL in models.not_cached_words("foo/definitely-not-a-model")


def _commands(script: str) -> list[list[str]]:
    """The shell commands of a script's top level, as words: comments, blank lines and blocks left out."""
    out, depth = [], 0
    for line in script.replace("\\\n", " ").splitlines():  # a line continued with a backslash is one command
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] in ("if", "for", "while"):
            depth += 1
        if depth == 0 and words[0] not in ("set", "cd", "export", "packages=()"):
            out.append(words)
        if words[0] in ("fi", "done"):
            depth -= 1
    return out


def _plain(words: list[str]) -> list[str]:
    return [w for w in words if w != "-q"]  # CI installs quietly; the same command otherwise


def test_the_readmes_two_commands_are_the_ones_ci_runs():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"^## Start and test\n.*?^```bash\n(.*?)^```", readme, re.M | re.S)
    assert block, "the README's Start and test section has no bash block"
    start, test = [line for line in block.group(1).splitlines() if line.strip()]
    steps = [shlex.split(step) for step in start.split("&&")]
    ci = _commands((ROOT / ".ci" / "run").read_text())
    installs = [_plain(words) for words in ci if words[:4] == ["python3", "-m", "pip", "install"]]
    assert installs and [_plain(s) for s in steps[:-1]] == installs  # what CI installs, nothing else
    assert steps[-1] == ["python3", "app.py"] and (ROOT / "app.py").exists()
    assert shlex.split(test) == ci[-1] == ["python3", "-m", "pytest", "-q"]  # CI's last command, word for word
