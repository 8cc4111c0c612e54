"""The API key never reaches a message in part or in another form: redacted before any cut, in its JSON-escaped,
URL-encoded and base64 forms, and a leading part of it left at a cut masked (engines/vllm/redaction.py)."""

import base64
import json
import urllib.parse

import pytest

from assistlab.engines.vllm.redaction import MASK, PARTIAL, clip, redact

KEY = 'sk-"odd\\key-1234567890'


def _leaks(text: str) -> bool:
    """True when any run of PARTIAL or more characters of the key, or of one of its forms, is in `text`."""
    forms = [KEY, json.dumps(KEY)[1:-1], urllib.parse.quote(KEY, safe=""), urllib.parse.quote_plus(KEY)]
    return any(form[i:i + PARTIAL] in text for form in forms for i in range(len(form) - PARTIAL + 1))


@pytest.mark.parametrize("echo", [KEY, json.dumps(KEY)[1:-1], urllib.parse.quote(KEY, safe=""),
                                  urllib.parse.quote_plus(KEY)], ids=["raw", "json", "url", "url-plus"])
def test_every_encoding_of_the_key_is_masked(echo):
    text = redact(f"error: the key {echo} is not valid", KEY)
    assert MASK in text and not _leaks(text)


def test_base64_of_basic_auth_is_masked():
    token = base64.b64encode(f"user:{KEY}".encode()).decode()
    assert token not in redact(f"Authorization: Basic {token}", KEY)


@pytest.mark.parametrize("offset", range(300 - len(KEY), 301))
def test_a_key_placed_across_the_cut_never_shows_in_part(offset):
    body = "x" * offset + KEY + " and more text after it" * 20
    text = clip(body, KEY, 300)
    assert not _leaks(text), text


def test_the_old_order_leaked_all_but_the_tail():
    """Cutting first, then redacting (the old order), leaves the key's leading part at the cut."""
    body = "x" * (300 - len(KEY) + 1) + KEY
    assert _leaks(redact(body[:300], KEY)) and not _leaks(clip(body, KEY, 300))


@pytest.mark.parametrize("kept", range(PARTIAL, len(KEY)))
@pytest.mark.parametrize("longer", [False, True], ids=["within-the-limit", "across-the-cut"])
def test_an_echo_the_server_already_cut_never_shows_the_keys_leading_part(kept, longer):
    """A server that cut its own echo sends only the key's first characters, which no full form matches: they are
    masked at the end whether the message fits (nothing cut here) or this cut falls after them."""
    body = "error: the key " + KEY[:kept]
    text = clip(body + " (cut)", KEY, len(body), "…") if longer else clip(body, KEY, 300)
    assert not _leaks(text) and text.removesuffix("…").endswith(MASK), text
    # A sentence that merely ends like the key's first characters, shorter than PARTIAL, is left as it is.
    assert clip("error: the key " + KEY[:PARTIAL - 1], KEY, 300).endswith(KEY[:PARTIAL - 1])
