"""HTML pieces every panel shares: a term with its meaning as a hover, the glossary, an arm's dot, literal text.

Pure functions, no gradio, as the panels that use them.
"""

from __future__ import annotations

import html
import re
import unicodedata

from . import charts

# Plain words for every symbol and abbreviation the page shows: a hover where each appears, and a small
# "What do these words mean?" list beside the tables that use them.
GLOSSARY = {
    "plain": ("plain", "the target model writing on its own, with no assistant: the baseline every other arm is "
              "compared with."),
    "speedup": ("speedup", "plain time ÷ assisted time for the same text: 1.5× means it took two thirds of the "
                "time; below 1× the assistant made it slower."),
    "alpha": ("α (alpha)", "the chance that the target keeps a drafted token it checks; 1 would keep every "
              "guess. The target stops checking a draft at its first rejected token and throws the rest away "
              "unchecked, so α is higher than the share of all drafted tokens accepted."),
    "c": ("c", "how long guessing (drafting) one token takes, counted in target forward passes: 0.1 is a tenth "
          "of the time the target takes to write one token."),
    "k": ("k", "in an arm's name (k=10), the most tokens it may draft before the target checks them (the draft "
          "length)."),
    "drafted": ("drafted per step", "how many tokens were drafted, on average, before each check by the target; "
                "at most the k in the arm's name, fewer when drafting stopped early."),
    "forward": ("target forward pass", "one step of the big target model: in plain generation it writes one "
                "token; with an assistant it checks a whole draft at once."),
    "bonus": ("bonus token", "when the target checks a draft it also writes one token of its own after the ones "
              "it kept, at no extra cost."),
    "accepted": ("accepted", "the share of all drafted tokens the target kept, counting the ones thrown away "
                 "unchecked after a rejection as not kept; lower than α, which counts only the tokens checked."),
    "iqr": ("IQR", "interquartile range: the middle half of the runs took times within a range this wide; small "
            "means steady timings."),
    "ttft": ("first token (TTFT)", "time to first token: how long after the start the first new token appeared."),
    "per_pass": ("tokens per pass (tok/fwd)", "new tokens per target forward pass: plain writes 1, and every "
                 "drafted token the target keeps adds to it."),
    "tokens": ("tokens", "the word pieces a model reads and writes: a word is one to a few tokens, so 64 new "
               "tokens are some 40 to 60 words."),
    "tokenizer": ("tokenizer (word list)", "how a model cuts text into tokens; two models with the same tokenizer "
                  "share a word list, so one can check the other's guesses token by token."),
    "universal_ag": ("universal assisted generation", "an assistant with another word list (tokenizer): its guesses "
                  "are turned into text and back into the target's tokens before the target checks them."),
    "defaults": ("transformers defaults", "no drafting setting was chosen here, so transformers' own apply: "
                 "how many tokens to guess, and whether that number adapts as the text goes (see the arm's "
                 "settings under the results)."),
    "every_look": ("an interval that holds at every look", "a range for the true speedup that stays right however "
                   "often the runs are checked and stopped once the answer is clear (a confidence sequence); an "
                   "ordinary interval read at a stop the data chose would claim more than it holds."),
    "dtype": ("dtype", "how precisely the models' numbers are kept: float32 is full precision, bfloat16 half the "
              "memory and usually faster on a GPU."),
    "mtp": ("MTP (multi-token prediction)", "extra guessing layers some targets are trained with, so they can "
            "draft their own next tokens without an assistant."),
    "dflash": ("DFlash", "a draft model that guesses a whole block of tokens at once, in one step."),
    "layerskip": ("LayerSkip", "a model trained so its first layers alone can guess the next token (early exit)."),
}

# Phrases the result sentences use, with the glossary entry that explains them (with_terms adds the hovers).
PHRASES = (
    ("an interval that holds at every look", "every_look"),
    ("at every look", "every_look"),
    ("transformers defaults", "defaults"),
    ("target forward passes", "forward"),
    ("target forward pass", "forward"),
    ("bonus token", "bonus"),
    ("universal", "universal_ag"),
    ("tokenizer", "tokenizer"),
    ("tokens", "tokens"),
)


def with_terms(text: str) -> str:
    """`text` escaped, with the first use of each phrase in PHRASES marked with its meaning as a hover: plain
    words first, the term explained where it is met."""
    escaped, marks = html.escape(text), {}
    for phrase, key in PHRASES:
        at = escaped.find(phrase)
        if at < 0 or key in {k for k, _p in marks.values()}:
            continue
        mark = f"\x00{len(marks)}\x00"
        marks[mark] = (key, phrase)
        escaped = escaped[:at] + mark + escaped[at + len(phrase):]
    for mark, (key, phrase) in marks.items():
        escaped = escaped.replace(mark, term(key, phrase), 1)
    return escaped


def term(key: str, text: str | None = None) -> str:
    """`text` (default: the term's own name) with its plain-words meaning as a hover."""
    name, meaning = GLOSSARY[key]
    shown = html.escape(text if text is not None else name)
    return f'<abbr class="al-term" title="{html.escape(name)}: {html.escape(meaning)}">{shown}</abbr>'


def glossary_html(keys: tuple[str, ...]) -> str:
    """A small, closed "What do these words mean?" list for the terms a panel uses."""
    items = "".join(
        f"<dt>{html.escape(GLOSSARY[key][0])}</dt><dd>{html.escape(GLOSSARY[key][1])}</dd>" for key in keys
    )
    return (
        '<details class="al-glossary"><summary>What do these words mean?</summary>'
        f'<dl>{items}</dl></details>'
    )


def printable(text: str) -> str:
    """Control characters (random models write them) shown as a visible placeholder, not swallowed."""
    return "".join(
        ch if ch in "\n\t" or unicodedata.category(ch) != "Cc" else "\ufffd" for ch in text
    )


# Every ASCII punctuation mark can be backslash-escaped in Markdown (CommonMark); '<', '>', '&' and quotes
# become HTML entities instead, which Markdown shows as the characters themselves.
_MD_PUNCTUATION = re.compile(r"([!#$%()*+,\-./:;=?@\[\\\]^_`{|}~])")


def md_text(text: object) -> str:
    """`text` shown literally inside Markdown: no emphasis, links, images, code spans, autolinks or tags."""
    escaped = _MD_PUNCTUATION.sub(r"\\\1", printable(str(text)).replace("\n", " "))
    return html.escape(escaped, quote=True)


def dot(index: int) -> str:
    """An arm's dot in the colour its chart draws it in."""
    return f'<span class="al-dot" style="background:{charts.arm_color(index)}"></span>'
