"""The docs pages the page's sentences link to are answered by the server itself (ui/docs_pages.py): a page of
docs/ as HTML with GitHub's heading anchors, nothing outside that folder, no raw HTML from the Markdown."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from assistlab.ui import docs_pages
from assistlab.views.progress import progress_html


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_a_docs_page_renders_with_its_heading_anchors():
    page = docs_pages.render("models")
    assert page.startswith("<!doctype html>") and '<h2 id="bringing-a-model">' in page
    assert "<table>" in docs_pages.render("benchmarks")  # tables, as GitHub draws them
    assert docs_pages.render("no-such-page") is None
    assert docs_pages.render("../README") is None and docs_pages.render("Models") is None


def test_a_sentence_naming_a_docs_page_links_it_and_nothing_else_becomes_markup():
    shown = progress_html("X was not found; docs/models.md#bringing-a-model says how. <b>docs/x.md</b>", 1.0, "failed")
    assert '<a href="docs/models.md#bringing-a-model" target="_blank" rel="noopener">' in shown
    assert "&lt;b&gt;" in shown and "<b>" not in shown  # the text stays escaped around the link


@pytest.mark.fast
def test_the_server_answers_the_docs_pages_and_nothing_beside_them(models_dir, store, launch_app):
    with launch_app(models_dir, store) as url:
        base = url.rstrip("/")
        status, body = _get(f"{base}/docs/models.md")
        assert status == 200 and 'id="bringing-a-model"' in body
        for path in ("/docs/nothere.md", "/docs/..%2Fapp.py", "/docs/../README.md", "/docs/models.MD"):
            status, body = _get(base + path)
            assert status == 404 or "bringing-a-model" not in body, path
        assert _get(base + "/")[0] == 200  # the page itself still answers
