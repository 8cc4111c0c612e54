"""Under load in a real browser at 1440 and 390 px: the Load field in the Engines accordion, and a saved comparison
with load levels drawing both load charts, its sentence and its table, without the page scrolling sideways."""

from __future__ import annotations

import pytest
from browsing import CHROMIUM, opened, typed
from sample_reports import load_section

from assistlab.history import History

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

QUICK = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "prompt": "deep learning",
         "max_new_tokens": 8, "repeats": 1, "warmup": 0}
WIDTHS = (1440, 390)


@pytest.fixture(scope="module")
def saved(models_dir, store, launch_app, tmp_path_factory):
    """The app with one saved comparison: a real one on the tiny models, given the sample load levels (its two
    arms as the plain and the assisted arm), as a comparison with load would be saved."""
    from gradio_client import Client

    history = History(f"sqlite:///{tmp_path_factory.mktemp('load') / 'h.sqlite3'}", max_entries=None)
    with launch_app(models_dir, store, history=history) as url:
        report = Client(url, verbose=False).predict(**QUICK, api_name="/compare")[0]
        report.pop("saved", None)
        plain, assisted = (arm["name"] for arm in report["arms"])
        result = history.save({**report, **load_section(plain, assisted)})
        assert result.saved, result.warning
        yield url, result.id


def _no_sideways_scroll(page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width + 1


@pytest.mark.parametrize("width", WIDTHS)
def test_the_load_field_sits_in_the_engines_accordion(browser, saved, width):
    url, _ = saved
    with opened(browser, url, width, 900) as page:
        page.locator("#al-settings").get_by_text("Settings", exact=True).click()
        engines = page.locator("#al-engines")
        engines.get_by_text("Engines", exact=True).click()
        box = engines.get_by_label("Load (requests at once)")
        box.wait_for()
        assert box.get_attribute("placeholder") == "1,2,4,8"
        engines.get_by_text("Applies to vLLM arms only", exact=False).wait_for()
        area = box.bounding_box()
        assert area["x"] >= 0 and area["x"] + area["width"] <= width + 1 and area["width"] > 200
        typed(page, box, "1,2,4,8")
        _no_sideways_scroll(page, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_saved_comparison_with_load_draws_both_charts(browser, saved, width):
    url, run_id = saved
    # A saved run's link opens its panels; on a phone the Run bar is hidden once they show, so the page is
    # ready when they are.
    with opened(browser, f"{url}?run={run_id}", width, 900, ready="#al-saved-left-speedup .js-plotly-plot") as page:
        summary = page.locator("#al-saved-left-load-summary")
        summary.get_by_text("helps up to 2 concurrent requests", exact=False).wait_for()
        for part in ("speedup", "pareto"):
            plot = page.locator(f"#al-saved-left-load-{part} .js-plotly-plot")
            plot.wait_for()
            plot.scroll_into_view_if_needed()
            area = plot.bounding_box()
            assert area["x"] >= -1 and area["x"] + area["width"] <= width + 1 and area["width"] >= 300, part
        speedup = page.locator("#al-saved-left-load-speedup .js-plotly-plot")
        drawn = speedup.evaluate("""el => ({
            lines: el.data.filter(t => (t.mode || '').includes('lines')).length,
            bars: el.querySelectorAll('g.errorbar').length,
            one: el.layout.shapes.filter(s => s.y0 === 1 && s.y1 === 1).length,
            title: el.layout.title.subtitle.text})""")
        assert drawn["lines"] == 1 and drawn["bars"] >= 3 and drawn["one"] == 1, drawn
        assert "intervals over 5 rounds" in drawn["title"]
        pareto = page.locator("#al-saved-left-load-pareto .js-plotly-plot")
        labels = pareto.evaluate("el => el.data.map(t => (t.text || []).join(','))")
        assert labels == ["1,2,4,8", "1,2,4"]
        table = summary.locator("table.al-load-table")
        assert table.locator("tbody tr").count() == 8
        _no_sideways_scroll(page, width)  # a wide table scrolls in its own box on a phone


def test_levels_for_transformers_only_are_refused_in_one_sentence_naming_the_box(browser, saved):
    url, _ = saved
    with opened(browser, url, 1440, 900) as page:
        page.locator("#al-settings").get_by_text("Settings", exact=True).click()
        engines = page.locator("#al-engines")
        engines.get_by_text("Engines", exact=True).click()
        box = engines.get_by_label("Load (requests at once)")
        typed(page, box, "1,4")
        page.click("#al-run")
        page.wait_for_selector("#al-progress .al-failed")
        progress = page.inner_text("#al-progress")
        assert "Load (requests at once): load levels time a serving engine's arms (vLLM)" in progress
        assert "Traceback" not in progress
