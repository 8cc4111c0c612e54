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
    assert len(readme.splitlines()) <= 200
    linked = {Path(link.partition("#")[0]).name for link in relative_links(ROOT / "README.md")}
    assert {p.name for p in PAGES[1:]} <= linked, "a docs page the README does not link"


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
