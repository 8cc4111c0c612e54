"""Whether a server's drafting figures could be true of the work it was asked, in one sentence when they cannot.

A request that generated n tokens with a draft length k made at most n verify steps, drafted at most n * k
tokens and accepted at most what it drafted (and at most n); its positions are 0 .. k-1. A figure past these
(a huge claim, a counter that went backwards after a restart) is refused before anything is built from it.
"""

from __future__ import annotations

import math

COUNTS = ("drafts", "draft_tokens", "accepted_tokens")


def draft_length(k: int | None, generated: int) -> int:
    """The most drafts one step can make: the arm's num_speculative_tokens, else (no fixed k, an operator's
    server) the tokens generated."""
    return k if type(k) is int and k >= 1 else max(1, generated)


def _refused(url: str, figure: str) -> str:
    return f"The server at {url} reported {figure}, which cannot be true, so this run is not a measurement."


def reading_problem(reading: dict | None, url: str, k: int) -> str | None:
    """Why a /metrics reading cannot be true: a counter that is not a finite number, or a position no step of draft
    length `k` has (positions 0 .. k-1); None when it can."""
    if not reading:
        return None
    values = [reading.get(key) for key in COUNTS] + list((reading.get("per_position") or {}).values())
    odd = next((v for v in values if v is not None and not math.isfinite(v)), None)
    if odd is not None:
        return _refused(url, f"a speculative-decoding counter of {odd} on /metrics")
    far = [p for p in reading.get("per_position") or {} if p >= k]
    if far:
        return _refused(url, f"accepted tokens at draft position {max(far)} on /metrics, past the draft length "
                             f"of {k}")
    return None


def counts_problem(counts: dict | None, url: str, generated: int, k: int, source: str) -> str | None:
    """Why `counts` (drafts, draft_tokens, accepted_tokens, accepted_per_position) cannot be those of requests
    that generated `generated` tokens at draft length `k`, or None when they can; `source` names where they came
    from ("/metrics", "its per-request metrics")."""
    if counts is None:
        return None
    drafts, drafted, accepted = (counts.get(key) or 0 for key in COUNTS)
    per = counts.get("accepted_per_position") or []
    where = f"in {source}"
    for key, value in zip(COUNTS, (drafts, drafted, accepted)):
        if value < 0:
            return _refused(url, f"{key} {value} {where}: a counter went backwards (was the server restarted?)")
    if drafts > generated:
        return _refused(url, f"{drafts} drafting steps {where} for {generated} tokens generated")
    if drafted > generated * k:
        return _refused(url, f"{drafted} drafted tokens {where} for {generated} tokens generated at a draft "
                             f"length of {k}")
    if accepted > drafted:
        return _refused(url, f"{accepted} accepted tokens {where} of {drafted} drafted")
    if accepted > generated:
        return _refused(url, f"{accepted} accepted tokens {where} for {generated} tokens generated")
    if len(per) > k:
        return _refused(url, f"accepted tokens at draft position {len(per) - 1} {where}, past the draft length of {k}")
    bad = next((v for v in per if not 0 <= v <= accepted), None)
    if bad is not None:
        return _refused(url, f"{bad} accepted tokens at one draft position {where} of {accepted} accepted in all")
    return None


def request_problem(spec: dict | None, url: str, generated: int, k: int) -> str | None:
    """Why a request's own figures (stream._spec's) cannot be true of `generated` tokens at draft length `k`:
    checked before the per-position list (num_spec_tokens long) is built from them."""
    if spec is None:
        return None
    source = "its per-request metrics"
    if spec["num_spec_tokens"] > k:
        return _refused(url, f"num_spec_tokens {spec['num_spec_tokens']} in {source}, past the draft length of {k}")
    histogram = spec["acceptance_histogram"]
    if len(histogram) > k + 1:
        return _refused(url, f"an acceptance histogram of {len(histogram)} entries in {source}, past the "
                             f"{k + 1} of a draft length of {k}")
    if any(v > spec["num_spec_steps"] for v in histogram):
        return _refused(url, f"more verify steps in one acceptance histogram entry than the {spec['num_spec_steps']} "
                             f"steps in {source}")
    counts = {"drafts": spec["num_spec_steps"], "draft_tokens": spec["num_draft_tokens"],
              "accepted_tokens": spec["num_accepted_draft_tokens"], "accepted_per_position": []}
    return counts_problem(counts, url, generated, k, source)
