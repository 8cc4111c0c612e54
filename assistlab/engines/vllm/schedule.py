"""A draft length per batch size: vLLM's num_speculative_tokens_per_batch_size, checked, built from measured
levels, read and written in words.

vLLM 0.32 (`vllm/v1/spec_decode/dynamic/utils.py`) takes a list of inclusive ranges `(first batch size, last
batch size, K)`: the first must start at 1, ranges must not overlap, K is at least 0, gaps carry the previous K
forward, and the last K runs on to the server's --max-num-seqs. A 0 does not make the server plain at those sizes
(its scheduler asks for no drafts, but the model runner still runs the drafter and keeps the speculative path:
0.90x plain at 16 requests, measured on vLLM 0.32's CPU build), so AssistLab asks for a K of 1 or more. Each K is
clamped to the config's num_speculative_tokens, so AssistLab sets that to the schedule's largest K. Every method
vLLM's model runner drafts with reads it (ngram, draft_model, eagle, eagle3, mtp, suffix); data parallelism
turns it off. AssistLab asks more than vLLM does: ranges that follow each other with no gap, so that what a
person reads is what the server runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...config import LIMITS, MAX_CONCURRENCY
from ...errors import InputError

FIELD = "num_speculative_tokens_per_batch_size"
MAX_RANGES = 64
# The last range may reach past the levels measured, to a deployment's --max-num-seqs.
MAX_BATCH = 65536
SINCE = (0, 32)  # the first vLLM release with FIELD
RULE = ("each batch size takes the K of the nearest measured level on a log scale: the boundary between two "
        "measured levels a < b lies at their geometric midpoint √(a·b), a size n going to a when n² ≤ a·b; "
        "sizes below the lowest level take its K, sizes above the highest take the highest's")


@dataclass(frozen=True)
class Schedule:
    """A draft length per batch size, checked at birth: `ranges`, ((first batch size, last batch size, K), ...),
    follow each other from batch size 1 with no gap or overlap, K 1..num_assistant_tokens' limit (a 0 would not
    serve plain: the module's docstring). `checked` names what it is in its sentences; vLLM's JSON is `as_list`."""

    ranges: tuple[tuple[int, int, int], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranges", _ranges(self.ranges, "schedule"))

    @classmethod
    def checked(cls, value: object, what: str = "schedule") -> Schedule:
        """`value` (a Schedule, or a list of (first, last, K) triples) as a Schedule, or InputError in one sentence
        naming `what`."""
        return value if isinstance(value, Schedule) else cls(_ranges(value, what))

    @classmethod
    def from_levels(cls, best: dict[int, int], max_batch: int | None = None) -> Schedule:
        """The schedule covering batch sizes 1..`max_batch` (default: the highest level) from each measured level's
        best K (`best`: {level: K}, each 1 or more), by RULE; neighbouring ranges with the same K are merged.
        Levels 1 and 4 with K 4 and 2 give ((1, 2, 4), (3, max_batch, 2))."""
        if not isinstance(best, dict) or not best:
            raise InputError("A schedule needs the best K of at least one measured load level.")
        levels = sorted(_whole("levels", level) for level in best)
        if levels[0] < 1 or levels[-1] > MAX_CONCURRENCY:
            raise InputError(f"The measured levels must be from 1 to {MAX_CONCURRENCY}; got {levels}.")
        ks = {level: _whole("levels' K", best[level]) for level in levels}
        top = levels[-1] if max_batch is None else _whole("largest batch size", max_batch)
        if top < levels[-1] or top > MAX_BATCH:
            raise InputError(f"The schedule's largest batch size must be from the highest level measured "
                             f"({levels[-1]}) to {MAX_BATCH}; got {top}.")
        ranges: list[list[int]] = []
        start = 1
        for a, b in zip(levels, levels[1:] + [None]):
            # The largest n with n * n <= a * b; at least a, as a < b, so every level keeps a range of its own.
            end = top if b is None else math.isqrt(a * b)
            if ranges and ranges[-1][2] == ks[a]:
                ranges[-1][1] = end
            else:
                ranges.append([start, end, ks[a]])
            start = end + 1
        return cls.checked([tuple(r) for r in ranges], "schedule built from the measured levels")

    @classmethod
    def parse(cls, text: object) -> Schedule:
        """'1-2:4,3-16:2' (a command line's or a form's words: FIRST-LAST:K, comma-separated) as a Schedule."""
        raw = str(text or "").strip()
        entries = []
        for part in [p.strip() for p in raw.split(",") if p.strip()]:
            sizes, sep, k = part.partition(":")
            if not sep:
                raise InputError(f"The schedule's range {part[:40]!r} needs its K after a colon, as in 1-2:4.")
            first, dash, last = sizes.partition("-")
            try:
                entries.append((int(first), int(last if dash else first), int(k)))
            except ValueError:
                raise InputError(f"The schedule is FIRST-LAST:K ranges separated by commas, as in 1-2:4,3-16:2; "
                                 f"got {part[:40]!r}.") from None
        return cls.checked(entries)

    @property
    def largest(self) -> int:
        """The largest K: the num_speculative_tokens vLLM must be given, as it clamps each K to it."""
        return max(k for _, _, k in self.ranges)

    def k_at(self, batch: int) -> int:
        """The K the server drafts at `batch` requests at once (the last range's K past its end, as vLLM does)."""
        for first, last, k in self.ranges:
            if first <= batch <= last:
                return k
        return self.ranges[-1][2]

    def words(self) -> str:
        """'k=4 for 1-2, 2 for 3-16 at once': the schedule as a label reads it."""
        parts = [f"{k} for {first}-{last}" if last > first else f"{k} for {first}" for first, last, k in self.ranges]
        return "k=" + ", ".join(parts) + " at once"

    def text(self) -> str:
        """The form `parse` reads: '1-2:4,3-16:2'."""
        return ",".join(f"{first}-{last}:{k}" for first, last, k in self.ranges)

    def as_list(self) -> list[list[int]]:
        """[[first, last, K], ...]: FIELD's value in vLLM's --speculative-config, and the schedule in a report."""
        return [list(r) for r in self.ranges]


def _ranges(value: object, what: str) -> tuple[tuple[int, int, int], ...]:
    """`value`'s ranges, checked (Schedule's rules), or InputError in one sentence naming `what`."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
        raise InputError(f"The {what} must be a list of ranges (first batch size, last batch size, K), as in "
                         f"[[1, 2, 4], [3, 16, 2]].")
    if len(value) > MAX_RANGES:
        raise InputError(f"The {what} has {len(value)} ranges; at most {MAX_RANGES}.")
    out, expected = [], 1
    for entry in value:
        if isinstance(entry, (str, bytes)) or not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise InputError(f"Each range of the {what} is three whole numbers (first batch size, last batch size, "
                             f"K); got {str(entry)[:60]!r}.")
        first, last, k = (_whole(what, x) for x in entry)
        if first != expected:
            said = "start at batch size 1" if expected == 1 else f"start at {expected}, right after the one before"
            raise InputError(f"The {what}'s range {first}-{last} should {said}: ranges must follow each other "
                             f"with no gap or overlap.")
        if last < first or last > MAX_BATCH:
            raise InputError(f"The {what}'s range {first}-{last} must end at or after its start and at most at "
                             f"batch size {MAX_BATCH}.")
        if k == 0:
            raise InputError(f"A K of 0 for batch sizes {first}-{last} in the {what} does not make vLLM serve "
                             f"plain there (its drafter still runs, 0.90x plain at 16 requests, measured); give "
                             f"those sizes a K from 1 to {LIMITS['num_assistant_tokens']}, or serve a plain server "
                             f"for those loads.")
        if not 1 <= k <= LIMITS["num_assistant_tokens"]:
            raise InputError(f"The {what}'s K for batch sizes {first}-{last} must be from 1 to "
                             f"{LIMITS['num_assistant_tokens']}; got {k}.")
        out.append((first, last, k))
        expected = last + 1
    return tuple(out)


def _whole(what: str, x: object) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x != int(x):
        raise InputError(f"The {what}'s batch sizes and K are whole numbers; got {x!r}.")
    return int(x)


def too_old(version: str | None) -> bool:
    """Whether a vLLM of `version` ('0.31.2', '0.32.1+cpu') is known to lack FIELD: True only for a release
    number below SINCE; one that does not read as a release (unknown, a development name) is tried."""
    parts = str(version or "").strip().split(".")
    try:
        return (int(parts[0]), int(parts[1])) < SINCE
    except (ValueError, IndexError):
        return False


def refusal(method: str, schedule: Schedule, failure: str) -> str | None:
    """The sentence for a server that would not start with the schedule, when its words show vLLM refused the
    schedule itself (`failure`: the server's failure with its last log lines); None for other failures."""
    signs = (FIELD, "Batch-size range", "batch-size range", "dynamic speculative", "Dynamic SD")
    if not any(s in failure for s in signs):
        return None
    return (f"vLLM refused the schedule of draft lengths ({FIELD} {schedule.text()}) for the {method} method, so "
            f"this arm was not timed: {failure}")
