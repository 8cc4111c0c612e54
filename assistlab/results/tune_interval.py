"""The one interval every view of a tuner's candidate shows (the sentence, the page, the command line, the
leaderboard): which of its intervals to quote, and its words. Reports saved before the summary had `interval`
are read through `best_bounds` too, so the rule is written once."""

from __future__ import annotations

from . import sequential
from .verdicts import level_words

# What an interval rests on, as `interval.kind` says: the rule that assumes nothing, or the likely rule.
SURE, LIKELY, NO_INTERVAL = sequential.TIME_UNIFORM, "likely", "none"


def _excludes_one(low: float | None, high: float | None) -> bool:
    return low is not None and high is not None and (low > 1.0 or high < 1.0)


def decided(looks: list[list[float | None]]) -> tuple[float | None, float | None]:
    """The interval the search decided on, over every look so far: the intersection of its intervals at each
    repetition (`looks`), which hold at every look at once at one comparison's level (results/tune.Levels)."""
    lows = [lo for lo, _ in looks if lo is not None]
    highs = [hi for _, hi in looks if hi is not None]
    return (max(lows) if lows else None), (min(highs) if highs else None)


def best_bounds(speedup: dict | None, search: tuple[float | None, float | None] = (None, None)
                ) -> tuple[float | None, float | None, str]:
    """(low, high, kind) of the interval to quote: the sure one once bounded (SURE), else the likely one (LIKELY);
    the search's own (LIKELY) where it alone excludes 1x (a look's likely interval decided what the sure one
    does not), so the outcome, the interval shown and what to deploy always agree; (None, None, NO_INTERVAL)."""
    speedup = speedup or {}
    sure = speedup.get("ci_low"), speedup.get("ci_high")
    if _excludes_one(*search) and not _excludes_one(*sure):
        return search[0], search[1], LIKELY
    if sure[0] is not None and sure[1] is not None:
        return sure[0], sure[1], SURE
    if speedup.get("likely_low") is not None and speedup.get("likely_high") is not None:
        return speedup["likely_low"], speedup["likely_high"], LIKELY
    return None, None, NO_INTERVAL


def one_interval(speedup: dict | None, search: tuple[float | None, float | None] = (None, None)) -> dict:
    """The one interval every view shows of a candidate's speedup over plain, in the fields of every speedup
    (median, ci_low, ci_high, level, n, and `interval`, its kind): the sure one once bounded, else the likely
    one ('likely', `assumption` saying what it assumes), or the search's own (`search`: `decided`) where only it
    excludes 1x; `text` its words, '0.48–1.76×, 99.1% at every look' (the level as verdicts.level_words writes
    every level: all of them at the search's one comparison level)."""
    speedup = speedup or {}
    low, high, kind = best_bounds(speedup, search)
    said = ", assuming roughly normal noise" if kind == LIKELY else ""
    level = speedup.get("level")
    shown = {"median": speedup.get("median"), "ci_low": low, "ci_high": high, "level": level,
             "n": speedup.get("n", 0), "interval": NO_INTERVAL, "assumption": "", "text": ""}
    if low is None:
        return shown
    # The sure interval holds at every look at once, and says so as every view of one does (verdicts.shown_level).
    level_said = f", {level_words(level)}{'' if said else ' at every look'}" if isinstance(level, (int, float)) else ""
    return {**shown, "interval": LIKELY if said else SURE, "assumption": said.removeprefix(", "),
            "text": f"{low:.2f}–{high:.2f}×{level_said}{said}"}


def clearly_faster(interval: dict | None) -> bool:
    """Deploy-worthy: the pick's interval, at the search's level, lies wholly above 1× (its verdict 'faster')."""
    return bool(interval) and interval.get("ci_low") is not None and interval["ci_low"] > 1.0
