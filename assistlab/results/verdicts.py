"""The result in words: levels, verdicts, intervals and the sentences every view shares (page, command line,
History), the answer first, and an unsettled run's one sentence; pure functions of report dicts."""

from __future__ import annotations

import math

from . import explain, sequential, stats


def counted(n: int, word: str) -> str:
    """'1 repetition', '2 repetitions': a count with its noun in the number it takes."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def level_words(level: float) -> str:
    """A true level as a person reads it, rounded down so it never claims more: 0.9375 -> '93.7%'."""
    tenths = math.floor(level * 1000 + 1e-9)
    return f"{tenths // 10}%" if tenths % 10 == 0 else f"{tenths / 10:.1f}%"


def comparisons_words(count: int) -> str:
    """'the one run-by-run comparison' or 'all 3 run-by-run comparisons together', after 'n% sure of'."""
    return "the one run-by-run comparison" if count == 1 else f"all {count} run-by-run comparisons together"


def judged(entry: dict) -> dict:
    """The interval a comparison entry's verdict rests on: its time-uniform sequence when the stopping rule
    looked after every repetition, else its fixed-n interval; the median is always the speedup's own."""
    speedup, seq = entry.get("speedup") or {}, entry.get("sequence")
    return {**seq, "median": speedup.get("median")} if seq else speedup


def shown_level(speedup: dict) -> str:
    """The level an interval is shown with, the same wherever it is shown: '95.8%', or for a time-uniform interval
    its family's '95% at every look' (the level the verdict rests on, not one arm's share of it)."""
    if speedup.get("family_level") is None:
        return level_words(speedup["level"])
    return f"{level_words(speedup['family_level'])} at every look"


def edge_note(speedup: dict) -> str:
    """Why the median shown can sit at (or past) an end of its interval, said only where it does: '' otherwise.

    The figure shown is the median of the run-by-run speedups; a time-uniform interval is the running
    intersection of every look's interval, so a later median can lie at its edge."""
    median, low, high = speedup.get("median"), speedup.get("ci_low"), speedup.get("ci_high")
    if median is None or low is None or high is None or speedup.get("family_level") is None:
        return ""
    if f"{median:.2f}" not in (f"{low:.2f}", f"{high:.2f}") and low < median < high:
        return ""
    return (f"; {median:.2f}× is the median of the run-by-run speedups, and the interval keeps only what every "
            "look so far agreed on, so the median can sit at its edge")


def _sure(speedup: dict) -> str:
    """'95.8% sure', or for a time-uniform interval '95% sure at every look' (with the arms sharing it)."""
    if speedup.get("family_level") is None:
        return f"{level_words(speedup['level'])} sure"
    shared = speedup.get("arms_sharing") or 1
    return f"{level_words(speedup['family_level'])} sure at every look" + (
        f" (shared by the {shared} assisted arms)" if shared > 1 else "")


def verdict(speedup: dict) -> str:
    """'faster', 'slower', 'unclear' (the interval contains 1×) or 'too few' (no interval of 90% or more).

    Only a real interval (stats.has_interval) can make a result faster or slower; a range of a few runs,
    or a single run, never does, however far from 1× its median is.
    """
    if speedup.get("median") is None:
        return "unclear"
    if not stats.has_interval(speedup):
        return "too few"
    low, high = speedup["ci_low"], speedup["ci_high"]
    return "faster" if low > 1.0 else "slower" if high < 1.0 else "unclear"


def interval_phrase(speedup: dict) -> str:
    """The interval in words with its true level: '95.8% sure the speedup lies between 1.12× and 1.21×',
    'range of 3 runs 0.90–1.30×: too few to be sure', or 'one repetition, so no interval'."""
    low, high, n, level = speedup.get("ci_low"), speedup.get("ci_high"), speedup.get("n", 0), speedup.get("level")
    if speedup.get("family_level") is not None and not stats.has_interval(speedup):
        return f"{n} repetition{'' if n == 1 else 's'}, too few for an interval that holds at every look"
    if n <= 1 or low is None or high is None:
        return "one repetition, so no interval" if n == 1 else "no repetition, so no interval"
    if stats.has_interval(speedup):
        return f"{_sure(speedup)} the speedup lies between {low:.2f}× and {high:.2f}×"
    if level is None:  # a report from before levels were recorded
        return f"{low:.2f}–{high:.2f}× over {n} runs, at a level not recorded"
    return f"range of {n} runs {low:.2f}–{high:.2f}×: too few to be sure"


def time_ratio(speedup: float) -> str:
    """A speedup below 1× as the time it costs: 0.54 -> '1.85×' (plain time × this is the assisted time); said
    only in a hover ('takes 1.85× as long as plain'), never beside the speedup in the text."""
    return f"{1.0 / speedup:.2f}×"


def time_hover(speedup: float | None) -> str:
    """What a speedup below 1× costs in time, for a hover: 'takes 1.85× as long as plain'; '' otherwise."""
    return f"takes {time_ratio(speedup)} as long as plain" if speedup and speedup < 1.0 else ""


def slower_phrase(speedup: dict) -> str:
    """A slower verdict's interval as speedups, as the charts and tables say it: '94.5% sure between 0.53× and
    0.58× the speed of plain'. One way to say a slower arm everywhere: the speedup below 1×, with 'slower'."""
    low, high = speedup["ci_low"], speedup["ci_high"]
    return f"{_sure(speedup)} between {low:.2f}× and {high:.2f}× the speed of plain"


def interval_cell(speedup: dict) -> str:
    """The interval for a table cell: '1.12–1.21×, 95.8%', 'range of 3 runs 0.90–1.30×', or '' for none."""
    low, high, n = speedup.get("ci_low"), speedup.get("ci_high"), speedup.get("n", 0)
    if n <= 1 or low is None or high is None:
        return ""
    if stats.has_interval(speedup):
        return f"{low:.2f}–{high:.2f}×, {shown_level(speedup)}"
    if speedup.get("level") is None:  # a report from before levels were recorded
        return f"{low:.2f}–{high:.2f}× over {n} runs, level not recorded"
    return f"range of {n} runs {low:.2f}–{high:.2f}×"


BUSY_MACHINE = "busy-machine"


def is_busy(report: dict) -> bool:
    """Whether a report dict carries the busy-machine warning."""
    return any(w.get("code") == BUSY_MACHINE for w in report.get("warnings") or [])


def busy_clause(busy: bool) -> str:
    """What a verdict adds when others used the machine during the timed runs ('' when they did not)."""
    return " Measured on a busy machine, so this may not hold on an idle one." if busy else ""


def speedup_sentence(entry: dict, sampling: bool = False, busy: bool = False) -> str:
    """One comparison entry in words; the CLI and the page both say a result this way.

    e.g. 'assistant: x (k=5) was 1.17× faster (95.8% sure the speedup lies between 1.12× and 1.21×); 83% of
    drafted tokens accepted; outputs identical.' A slower one as the charts and tables say it: 'was slower:
    0.54× the speed of plain (94.5% sure between 0.53× and 0.58× the speed of plain)'. A result whose interval
    contains 1× is called no clear difference, and one with too few runs for a 90% interval is neither faster nor slower.
    """
    name, s = entry["arm"], judged(entry)
    median = s.get("median")
    if median is None:
        return f"{name} finished no repetition, so there is no speedup to report."
    interval = interval_phrase(s)
    kind = verdict(s)
    if s.get("settled") == sequential.SAME:
        parts = [f"{name} was {median:.2f}×, no practical difference from plain ({interval}, within "
                 f"±{s['band']:.0%} of 1×)"]
    elif kind == "faster":
        parts = [f"{name} was {median:.2f}× faster ({interval}{edge_note(s)})"]
    elif kind == "slower":
        parts = [f"{name} was slower: {median:.2f}× the speed of plain ({slower_phrase(s)}{edge_note(s)})"]
    elif kind == "unclear":
        parts = [f"{name} was {median:.2f}×, no clear difference from plain ({interval}, which contains 1×)"]
    else:
        parts = [f"{name} ran at {median:.2f}× the speed of plain ({interval})"]
    if entry.get("limit_kind") == explain.NOTHING_DRAFTED:  # said beside the figure, never as a speedup
        parts = [f"{name} drafted nothing, so its {median:.2f}× against plain is not a speedup: it is run-to-run "
                 f"noise or other work around generation ({interval})"]
    if entry.get("acceptance_rate") is not None:
        parts.append(f"{entry['acceptance_rate']:.0%} of drafted tokens accepted")
    if entry.get("outputs_identical") is True:
        parts.append("outputs identical")
    elif entry.get("outputs_identical") is False:
        first = entry.get("first_difference")
        differ = "outputs differ" + (f" from token {first + 1}" if first is not None else "")
        parts.append(differ + (" (expected when sampling)" if sampling else ""))
    if entry.get("lossless") is False and not sampling:
        parts.append(f"lossy: {entry.get('lossy_reason') or 'not lossless by construction'}")
    return "; ".join(parts) + "." + busy_clause(busy)


def provisional_sentence(entry: dict) -> str:
    """A comparison entry in words while its repetitions go on: what its time-uniform interval says so far,
    which later looks can only sharpen ('So far prompt lookup is slower than plain, 95% sure at every look...')."""
    name, s = entry["arm"], judged(entry)
    if s.get("median") is None:
        return f"{name} has finished no repetition yet."
    sharpen = "; more repetitions can only sharpen this."
    if s.get("settled") == sequential.SAME:
        return (f"So far {name} is within ±{s['band']:.0%} of plain, {_sure(s)}: no practical difference"
                f"{sharpen}")
    kind = verdict(s)
    if kind == "faster":
        return (f"So far {name} is faster than plain, {_sure(s)}: {s['median']:.2f}×, between {s['ci_low']:.2f}× "
                f"and {s['ci_high']:.2f}×{edge_note(s)}{sharpen}")
    if kind == "slower":
        return (f"So far {name} is slower than plain, {_sure(s)}: {s['median']:.2f}× the speed of plain, between "
                f"{s['ci_low']:.2f}× and {s['ci_high']:.2f}×{edge_note(s)}{sharpen}")
    return (f"So far {name} runs at {s['median']:.2f}× the speed of plain, not yet clearly faster or slower "
            f"({interval_phrase(s)}).")


def provisional(report: dict) -> bool:
    """Whether a report dict's verdicts are still provisional: repetitions go on and the rule has not ended them."""
    return report.get("status") == "running" and not (report.get("stopping") or {}).get("ended_by")


# An unsettled run: the rule 'clear' ended by its time budget or its most repetitions, without a clear answer for
# every assisted arm. The page, History, the Leaderboard and the command line all say it in these words.
NO_CLEAR_ANSWER = "No clear answer"
NO_CLEAR_ANSWER_SHORT = "no clear answer: the runs ended before it was clear"
UNSETTLED_ENDS = ("time budget", "repetitions")


def unsettled(report: dict) -> bool:
    """Whether a finished report dict ran until clear (or likely) and ended (time budget, most repetitions) without a clear
    answer for every assisted arm; a running, stopped or workload report is not."""
    stop = report.get("stopping") if isinstance(report.get("stopping"), dict) else {}
    return (report.get("kind") != "suite" and report.get("status") == "complete"
            and stop.get("rule") in ("clear", "likely") and stop.get("ended_by") in UNSETTLED_ENDS
            and not stop.get("reached"))


def open_arms(stopping: dict) -> list[str]:
    """The assisted arms whose answer was not clear when the runs ended (failed arms left out); under the rule
    'likely' an arm's likely answer is its answer."""
    likely = (stopping.get("likely") or {}) if stopping.get("rule") == "likely" else {}
    return [name for name, arm in (stopping.get("arms") or {}).items()
            if isinstance(arm, dict) and arm.get("settled") is None and not likely.get(name) and "error" not in arm]


def unsettled_sentence(stopping: dict) -> str:
    """'No clear answer: the time budget of 600 s ran out after 2 repetitions, before the answer was clear for
    universal.' The one sentence an unsettled run is said in, wherever it is shown."""
    n = stopping.get("repetitions") or 0
    runs = f"{n} repetition{'' if n == 1 else 's'}"
    if stopping.get("ended_by") == "time budget" and stopping.get("max_time_s"):
        ended = f"the time budget of {stopping['max_time_s']:g} s ran out after {runs}"
    else:
        ended = f"{runs}, the most allowed, ran"
    still = open_arms(stopping)
    whom = f" for {', '.join(still)}" if still else ""
    return f"{NO_CLEAR_ANSWER}: {ended}, before the answer was clear{whom}."


UNSETTLED_ADVICE = ("The figures are what was measured, not an answer: a longer time budget or more repetitions "
                    "would settle it.")

NOTHING_HELPED = "Plain generation was fastest here: no assistant helped."
NONE_CLEARLY_FASTER = (
    "No assistant was clearly faster than plain generation here: the differences are within the run-to-run noise."
)
TOO_FEW_TO_TELL = (
    "Too few repetitions to tell yet whether an assistant saves time over plain generation: each speedup below "
    f"is the range of a few runs, too few to be sure; {stats.fewest_runs()} repetitions are the fewest that give "
    "an interval and an answer."
)
TOO_FEW_FOR_EVERY_LOOK = (
    "Too few repetitions yet for an answer that holds at every look: the runs go on until each assistant is "
    "clearly faster, clearly slower, or within a few percent of plain generation."
)


def likely_verdict(report: dict, comp: dict) -> str | None:
    """The likely verdict an arm's answer rests on (faster, slower or no practical difference) under the rule
    'likely', and under the rule 'clear' until its sure answer comes (the answer first, said with its
    assumption); None: another rule, no likely answer yet, or its sure answer came (then that one is the answer)."""
    stop = report.get("stopping") or {}
    if stop.get("rule") not in ("likely", "clear") or (comp.get("sequence") or {}).get("settled"):
        return None
    return (stop.get("likely") or {}).get(comp["arm"])


def first_answer_words(report: dict) -> str:
    """'First answer 62 s after the start (every assisted arm answered, likely or sure).'; '' before it."""
    seconds = (report.get("timing") or {}).get("first_answer_s")
    if seconds is None:
        return ""
    return f"First answer {seconds:.0f} s after the start (every assisted arm answered, likely or sure)."


LIKELY_NOTHING_HELPED = "Plain generation was likely fastest here, assuming roughly normal noise: no assistant helped."


def confirming(report: dict) -> str:
    """What a 'clear' run still does once a likely answer is in: ' Confirming without that assumption (the sure
    answer needs at least 7 repetitions).'; '' under another rule or once the runs are over."""
    stop = report.get("stopping") or {}
    if stop.get("rule") != "clear" or not provisional(report):
        return ""
    floor = sequential.fewest_for_verdict(sequential.arm_alpha(stats.TARGET_LEVEL, len(stop.get("arms") or {}) or 1))
    return f" Confirming without that assumption (the sure answer needs at least {floor} repetitions)."


def _likely_words(name: str, verdict: str, median: float) -> str:
    """'universal is likely slower (0.19× the speed of plain)'."""
    if verdict == sequential.SAME:
        return f"{name} is likely within a few percent of plain ({median:.2f}×)"
    return f"{name} is likely {verdict} ({median:.2f}× the speed of plain)"


def likely_lead(report: dict, measured: list[tuple[dict, dict]], so_far: str) -> str | None:
    """The lead once some arm's answer rests on its likely interval (the rule 'likely', or 'clear' before its sure
    answers); None otherwise."""
    likely = {comp["arm"]: likely_verdict(report, comp) for _arm, comp in measured}
    if not any(likely.values()):
        return None
    answer = {name: v or (judged(comp).get("settled")) for (_arm, comp), (name, v) in zip(measured, likely.items())}
    faster = [(arm, comp) for arm, comp in measured if answer[comp["arm"]] == sequential.FASTER]
    then = confirming(report)
    if faster:
        arm, comp = max(faster, key=lambda pair: pair[1]["speedup"]["median"])
        saved = 1.0 - 1.0 / comp["speedup"]["median"]
        hedge = ", assuming roughly normal noise" if likely[comp["arm"]] else ""
        return (f"{so_far}{arm['name']} was {'likely ' if hedge else ''}fastest: the same text took {saved:.0%} less "
                f"time than plain generation (the target model on its own){hedge}.{then if hedge else ''}")
    if all(answer.values()):
        return so_far + LIKELY_NOTHING_HELPED + then
    if then:  # the rule 'clear', some arms answered: what is likely so far, the others still open
        said = [_likely_words(comp["arm"], v, comp["speedup"]["median"]) for _arm, comp in measured
                if (v := likely[comp["arm"]])]
        still = [comp["arm"] for _arm, comp in measured if not answer[comp["arm"]]]
        return (f"{so_far}{'; '.join(said)}, assuming roughly normal noise; {' and '.join(still)} not yet clear."
                f"{then}")
    return None


def _assisted_entries(report: dict) -> list[tuple[dict, dict]]:
    """(arm, comparison entry) of each assisted arm with a comparison, in report order."""
    by_name = {c["arm"]: c for c in report.get("comparison") or []}
    return [(arm, by_name[arm["name"]]) for arm in report.get("arms") or []
            if arm.get("strategy") != "plain" and arm.get("name") in by_name]


def answer_sentence(report: dict) -> str | None:
    """The answer first, in plain words: which arm was fastest, or that plain was; None before any comparison.
    The page's first line, the report's `answer` and the command line's say it in these words.

    Only a real interval ('faster') names an arm fastest. A run that ended without a clear answer says so
    (unsettled_sentence); when some arm has too few runs for an interval, it says so rather than calling
    anything faster or slower. Otherwise it says plain was fastest whenever no assisted arm's median beats 1×,
    so a slower arm is never the answer.
    """
    if report.get("kind") == "suite":
        overall = (report.get("suite") or {}).get("overall") or {}
        return overall.get("best") or None
    measured = [(arm, comp) for arm, comp in _assisted_entries(report)
                if arm.get("latencies_s") and (comp.get("speedup") or {}).get("median") is not None]
    if not measured:
        return None
    so_far = "So far: " if provisional(report) else ""
    lead = likely_lead(report, measured, so_far)  # a likely answer, with its assumption said
    if lead:
        return f"{lead} {unsettled_sentence(report['stopping'])}" if unsettled(report) else lead
    faster = [(arm, comp) for arm, comp in measured if verdict(judged(comp)) == "faster"
              and comp.get("limit_kind") != explain.NOTHING_DRAFTED]  # drafting nothing speeds nothing up
    if faster:
        arm, comp = max(faster, key=lambda pair: pair[1]["speedup"]["median"])
        saved = 1.0 - 1.0 / comp["speedup"]["median"]
        lead = (f"{so_far}{arm['name']} was fastest: the same text took {saved:.0%} less time than plain "
                f"generation (the target model on its own).")
        return f"{lead} {unsettled_sentence(report['stopping'])}" if unsettled(report) else lead
    if unsettled(report):
        return f"{unsettled_sentence(report['stopping'])} {UNSETTLED_ADVICE}"
    if any(verdict(judged(comp)) == "too few" for _arm, comp in measured):
        if any(comp.get("sequence") for _arm, comp in measured):  # the rule 'clear' or 'precision' looks on
            return so_far + TOO_FEW_FOR_EVERY_LOOK
        return so_far + TOO_FEW_TO_TELL
    if max(comp["speedup"]["median"] for _arm, comp in measured) <= 1.0:
        return so_far + NOTHING_HELPED
    return so_far + NONE_CLEARLY_FASTER


LEVEL_KEYS = ("level", "family_level", "arm_level", "ci_level")


def with_level_words(value):
    """A report dict with every level also as the percent the page shows, beside it: 'level': 0.9375 gains
    'level_percent': '93.7%' (rounded down, as level_words), so a JSON reader need not convert."""
    if isinstance(value, list):
        return [with_level_words(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        out[key] = with_level_words(item)
        if key in LEVEL_KEYS and isinstance(item, float) and 0.0 < item <= 1.0:
            out[f"{key}_percent"] = level_words(item)
    return out
