"""The page fits the screen it is on: every table column readable at 1440 px, Run in reach of the settings at a
desktop and a phone width, chart toolbars clear of chart titles, one thing called "Settings"."""

from __future__ import annotations

import json

import pytest
from browsing import CHROMIUM, choose, opened

from assistlab.history import History

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

# Long enough that a table that keeps it on one line, or cuts it mid-word, shows it.
LONG_PROMPT = ("write me a long essay on deep learning, its history from the perceptron to transformers, the "
               "people behind it, and what speculative decoding changes for the speed of large language models")


@pytest.fixture(scope="module")
def app_url(models_dir, store, launch_app, tmp_path_factory):
    history = History(f"sqlite:///{tmp_path_factory.mktemp('fit') / 'history.sqlite3'}", max_entries=None)
    with launch_app(models_dir, store, history=history) as url:
        yield url


# Per table: cells whose content is wider than the cell (cut or hidden), and columns that reach past the table's
# box or the window (a person would have to scroll to read them, or cannot at all).
_TABLE_FIT = """table => {
  const problems = [];
  const right = window.innerWidth;
  const box = table.parentElement.getBoundingClientRect();
  const edge = Math.min(right, box.right);
  const name = c => `${c.tagName.toLowerCase()} ${c.cellIndex + 1} "${c.innerText.trim().slice(0, 40)}"`;
  for (const cell of table.querySelectorAll('th, td')) {
    const r = cell.getBoundingClientRect();
    if (r.width === 0) continue;
    if (r.right > edge + 1) problems.push(`${name(cell)} ends at ${Math.round(r.right)} px, past ${Math.round(edge)}`);
    for (const e of [cell, ...cell.querySelectorAll('*')]) {
      if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).display !== 'inline')
        problems.push(`${name(cell)}: ${e.tagName.toLowerCase()} shows ${e.clientWidth} of ${e.scrollWidth} px`);
    }
  }
  return problems;
}"""


def _fits(page, selector: str, where: str) -> None:
    tables = page.locator(selector)
    assert tables.count() > 0, f"{where}: no table {selector}"
    for i in range(tables.count()):
        problems = tables.nth(i).evaluate(_TABLE_FIT)
        assert not problems, f"{where}: {problems[:6]}"


def _prompt_cells_read_well(page, selector: str, where: str) -> None:
    """Prompt cells start at the left and, when shortened, end at a word's end with an ellipsis; the whole
    text is the cell's title."""
    cells = page.locator(selector)
    assert cells.count() > 0, f"{where}: no prompt cells {selector}"
    for i in range(cells.count()):
        cell = cells.nth(i)
        assert cell.evaluate("c => getComputedStyle(c).textAlign") in ("left", "start"), f"{where}: not left-aligned"
        shown = cell.inner_text().strip()
        if not shown.endswith("…"):
            continue
        full = cell.get_attribute("title") or ""
        cut = shown[:-1].rstrip()
        assert full.startswith(cut) and len(full) > len(cut), f"{where}: {shown!r} is not the start of {full!r}"
        assert full[len(cut)] in " \n\t,.;:", f"{where}: {shown!r} is cut mid-word ({full!r})"


def test_every_table_column_is_readable_at_1440_px(browser, app_url, tmp_path):
    """After a real comparison and a workload with the tiny models, Ranking, Workloads, History and Leaderboard
    show every column whole inside the window, without scrolling a table sideways."""
    with opened(browser, app_url, 1440, 900) as page:
        choose(page, "target", "assistant-other", tokens=6, repeats=2)  # universal and prompt lookup: a ranking
        page.fill("#al-prompt textarea", LONG_PROMPT)
        page.click("#al-run")
        page.wait_for_selector("#al-download-json", state="visible", timeout=120_000)
        page.wait_for_selector("#al-ranking")
        _fits(page, "#al-ranking", "Ranking")
        # Reading down to the end of the results, Run stays in sight.
        page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
        page.wait_for_timeout(300)
        _in_window(page, page.locator("#al-run"), "Run, at the end of the results")

        prompts = tmp_path / "mine.jsonl"
        prompts.write_text("\n".join(json.dumps(r) for r in [
            {"category": "essay", "prompt": LONG_PROMPT},
            {"category": "fox", "prompt": "the quick brown fox jumps over the lazy dog"},
        ]))
        page.get_by_role("tab", name="Workloads").click()
        page.get_by_text("My prompts (a file)").click()
        page.locator("#al-suite-file input[type=file]").set_input_files(str(prompts))
        page.wait_for_timeout(500)
        page.click("#al-suite-run")
        page.wait_for_selector("#al-suite-download-json", state="visible", timeout=300_000)
        _fits(page, "#al-suite-table", "Workloads, per category")
        _fits(page, "#al-suite-prompts", "Workloads, every prompt")
        _prompt_cells_read_well(page, "#al-suite-prompts td.al-prompt-cell", "Workloads, every prompt")

        page.get_by_role("tab", name="History").click()
        page.get_by_role("button", name="Show saved comparisons").click()
        page.wait_for_selector("#al-history-list tr.al-history-row")
        assert page.locator("#al-history-list tr.al-history-row").count() == 2
        _fits(page, "#al-history-list table", "History")
        _prompt_cells_read_well(page, "#al-history-list td.al-prompt-cell", "History")

        page.get_by_role("tab", name="Leaderboard").click()
        page.get_by_role("button", name="Show the leaderboard").click()
        page.wait_for_selector("#al-board table")
        _fits(page, "#al-board table", "Leaderboard")


def _in_window(page, element, what: str) -> None:
    """`element` (a locator) lies wholly inside the window, and what is at its centre is itself."""
    box = element.bounding_box()
    size = page.viewport_size
    assert box is not None, f"{what} is not on the page"
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"], f"{what} is out of the window: {box}"
    centre = {"x": box["x"] + box["width"] / 2, "y": box["y"] + box["height"] / 2}
    assert element.evaluate("(e, p) => e.contains(document.elementFromPoint(p.x, p.y))", centre), (
        f"something covers {what}")


def test_run_is_in_reach_of_the_settings_at_a_desktop_width(browser, app_url):
    """At 1440 px a person opens Settings and goes down to its last box: Run is still in the window, uncovered."""
    with opened(browser, app_url, 1440, 900) as page:
        page.locator("#al-settings").get_by_text("Settings", exact=True).click()
        last = page.get_by_label("Early-exit layer")
        last.wait_for()
        last.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        _in_window(page, last, "the last box of Settings")
        _in_window(page, page.locator("#al-run"), "Run")
        # And after reading further down the page (the results column), Run stays in reach.
        page.mouse.move(1100, 600)
        page.mouse.wheel(0, 3000)
        page.wait_for_timeout(300)
        _in_window(page, page.locator("#al-run"), "Run, after scrolling down")


def test_run_and_the_tabs_come_early_on_a_phone(browser, app_url):
    """At 390 px, with nothing touched, Run and the tabs lie within the first 900 px of the page."""
    with opened(browser, app_url, 390, 844) as page:
        page.wait_for_timeout(500)
        top = page.evaluate("() => window.scrollY")
        for selector in ("#al-run", "#al-tabs [role=tablist]"):
            box = page.locator(selector).bounding_box()
            assert box is not None and box["y"] + top + box["height"] <= 900, f"{selector} ends at {box}"
        # The preset's words stop short of the dropdown's arrow.
        clear = page.get_by_label("Preset pair").evaluate("""i => {
          const arrow = i.closest('.wrap').querySelector('.icon-wrap').getBoundingClientRect();
          const box = i.getBoundingClientRect();
          return box.right - parseFloat(getComputedStyle(i).paddingRight) <= arrow.left + 1;
        }""")
        assert clear, "the preset's text runs under the dropdown's arrow"


def _overlap(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_chart_toolbars_leave_the_titles_clear_on_a_phone(browser, app_url):
    """At 390 px a person touches each chart (which shows plotly's toolbar where it is shown): no title is under it,
    and no legend entry or key runs past the chart's edge."""
    with opened(browser, app_url, 390, 844) as page:
        choose(page, "target", "assistant-other", tokens=4, repeats=1)
        page.click("#al-run")
        page.wait_for_selector("#al-download-json", state="visible", timeout=120_000)
        page.wait_for_function("document.querySelectorAll('#al-results .js-plotly-plot').length === 4", timeout=10_000)
        page.wait_for_timeout(800)
        plots = page.locator("#al-results .js-plotly-plot")
        for i in range(plots.count()):
            plot = plots.nth(i)
            plot.scroll_into_view_if_needed()
            frame = plot.bounding_box()
            page.mouse.move(frame["x"] + frame["width"] / 2, frame["y"] + frame["height"] / 2)
            page.wait_for_timeout(400)
            title = plot.locator(".gtitle").bounding_box()
            assert title is not None, f"chart {i} has no title"
            bar = plot.locator(".modebar")
            box = bar.bounding_box() if bar.count() else None
            shown = box is not None and bar.evaluate("b => getComputedStyle(b).opacity !== '0'")
            assert not (shown and _overlap(box, title)), f"chart {i}: the toolbar {box} covers the title {title}"
            # Every legend entry and key lies whole inside the chart (they were cut: "(transformers de", "◆ measured").
            cut = plot.evaluate("""p => { const r = p.getBoundingClientRect();
              return [...p.querySelectorAll('.legendtext, .annotation-text')].filter(t => {
                const b = t.getBoundingClientRect();
                return b.width > 0 && (b.left < r.left - 1 || b.right > r.right + 1);
              }).map(t => t.textContent); }""")
            assert not cut, f"chart {i}: cut at the chart's edge at 390 px: {cut}"


_CALLED = """name => [...document.querySelectorAll('body *')].filter(e => {
  const r = e.getBoundingClientRect();
  if (r.width === 0 || r.height === 0 || getComputedStyle(e).visibility === 'hidden') return false;
  const own = [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
  return own === name || (e.getAttribute('aria-label') || '').trim() === name;
}).map(e => e.outerHTML.slice(0, 120))"""


def test_only_one_thing_on_the_page_is_called_settings(browser, app_url):
    with opened(browser, app_url, 1440, 900) as page:
        page.wait_for_timeout(500)
        page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")  # the footer too
        called = page.evaluate(_CALLED, "Settings")
        assert len(called) == 1, called


# Each field of Settings brought into view as a person scrolls to it: what is on top at its centre is the field
# itself (or a part of it), and it lies inside the form's column, not beside it.
_ON_TOP = """e => {
  e.scrollIntoView({block: 'center', inline: 'nearest'});
  const r = e.getBoundingClientRect();
  const column = document.querySelector('#al-form').getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  const hit = document.elementFromPoint(x, y);
  const box = e.closest('.block') || e;
  const label = (box.querySelector('[data-testid="block-info"], .label-wrap, label') || {}).innerText || e.name || '';
  return {label: label.trim().slice(0, 50), on_top: !!hit && (box === hit || box.contains(hit)),
          hit: hit ? hit.outerHTML.slice(0, 80) : null, inside: r.left >= column.left - 1 && r.right <= column.right + 1,
          rect: [Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)]};
}"""

_SIDEWAYS = "() => { const f = document.querySelector('#al-form'); return [f.scrollWidth, f.clientWidth, f.scrollLeft]; }"


@pytest.mark.parametrize("width", [1280, 1440, 1920])
def test_settings_stay_in_sight_when_opened_on_a_desktop(browser, app_url, width):
    """At 1280, 1440 and 1920 px a person clicks Settings: its heading stays where they clicked, and every box of
    it (the Engines section's too, once opened) is on top at its own place in the form's column when scrolled to;
    the column never scrolls sideways (gradio let it wrap Settings into a second column beside the first)."""
    with opened(browser, app_url, width, 900) as page:
        heading = page.locator("#al-settings").get_by_text("Settings", exact=True)
        heading.click()
        page.get_by_label("New tokens per run").wait_for()
        page.wait_for_timeout(500)
        _in_window(page, heading, f"the Settings heading at {width} px, just clicked")
        page.locator("#al-engines").get_by_text("Engines", exact=True).click()
        page.locator("#al-load input").wait_for()
        page.wait_for_timeout(500)
        fields = page.locator("#al-settings input:visible, #al-settings textarea:visible")
        assert fields.count() >= 20, f"only {fields.count()} boxes in Settings at {width} px"
        hidden = []
        for i in range(fields.count()):
            seen = fields.nth(i).evaluate(_ON_TOP)
            if not (seen["on_top"] and seen["inside"]):
                hidden.append(seen)
        assert not hidden, f"{len(hidden)} boxes of Settings out of sight at {width} px: {hidden[:4]}"
        wide, shown, left = page.evaluate(_SIDEWAYS)
        assert wide <= shown + 1 and left == 0, f"the form's column scrolls sideways at {width} px: {wide} > {shown}"
