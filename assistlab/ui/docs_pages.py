"""The docs pages on the server, so a sentence that names one ('docs/models.md#bringing-a-model') is a link a person
can open from the page: GET <page>/docs/NAME.md answers that page of the repository's docs/ folder as HTML.

Only the pages in that folder are served, by a name of letters, digits and hyphens; anything else falls through
to Gradio (its 404). The Markdown is rendered without raw HTML, with GitHub's heading anchors.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = re.compile(r"(?:^|/)docs/([a-z0-9][a-z0-9-]*)\.md$")
STYLE = ("body{font:16px/1.55 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1f2937}"
         "table{border-collapse:collapse;display:block;overflow-x:auto}td,th{border:1px solid #d1d5db;"
         "padding:.3rem .5rem;vertical-align:top}code{background:#f3f4f6;padding:0 .2rem}"
         "pre{background:#f3f4f6;padding:.6rem;overflow-x:auto}")


def slug(text: str) -> str:
    """GitHub's anchor for a heading's text: lower case, punctuation dropped, spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@lru_cache(maxsize=32)
def render(name: str) -> str | None:
    """docs/NAME.md as a whole HTML page, or None when there is no such page."""
    path = DOCS / f"{name}.md"
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name) or not path.is_file():
        return None
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type == "heading_open":
            words = [child.content for child in inline.children or [] if child.type in ("text", "code_inline")]
            base = slug("".join(words))
            count = seen.get(base, 0)
            seen[base] = count + 1
            opening.attrSet("id", base if count == 0 else f"{base}-{count}")
    body = md.renderer.render(tokens, md.options, {})
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>AssistLab · {html.escape(name)}</title>'
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


class DocsPages:
    """ASGI middleware: GET …/docs/NAME.md answers the rendered page; every other request goes on to Gradio."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        found = PAGE.search(scope.get("path", "")) if scope["type"] == "http" and scope.get("method") == "GET" else None
        page = render(found.group(1)) if found else None
        if page is None:
            await self.app(scope, receive, send)
            return
        body = page.encode("utf-8")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/html; charset=utf-8"),
                                (b"content-length", str(len(body)).encode()),
                                (b"x-content-type-options", b"nosniff")]})
        await send({"type": "http.response.body", "body": body})
