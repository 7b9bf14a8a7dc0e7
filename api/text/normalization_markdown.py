"""Markdown and the other marks of an LLM's reply that are not said.

An LLM writes its reply for a screen: emphasis, headings, bullets and numbered items, tables, code
fences, links, horizontal rules, and arrows through menus ("Settings > Privacy"). None of it is
said; where a mark stood for a pause (the end of a list item, a table's cell, a step of a path) the
word before it gets the punctuation a reader would pause at. The normaliser
(api/text/normalization.py) runs these on a text's whitespace-separated tokens before it reads
them; each keeps the tokens' count, a token left with nothing being "", so the written words
still align with what is said.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

__all__ = ["token_line_starts", "without_markdown", "without_path_arrows"]

_MARK = r"(?:\*{1,3}|_{1,3}|`{1,3}|~~)"
_MARK_CHARS = frozenset("*_`~")  # a token without any has no emphasis to take out
# Markdown at a word's edges: "**" (or "*", "__", "_", "`", "~~") opening before what it marks,
# after any opening brackets or quotes, or closing after a word, before any closing punctuation
_MARKDOWN_EDGES_RE = re.compile(
    rf"^(?P<lead>[\"'(\[{{]*){_MARK}(?=[^\s*_`~])"
    rf"|(?<=[\w.,;:!?%)\]]){_MARK}(?P<trail>[.,;:!?)\]}}\"']*)$"
)
_HEADING_RE = re.compile(r"#{1,6}")
_BULLETS = frozenset("-*+•")  # a Markdown list item's mark, and the bullet LLMs also write
_PATH_ARROWS = frozenset({">", "→", "›", "»", "->", "=>", "⇒", "➜", "➔"})  # "Settings > Privacy"
_TABLE_RULE_RE = re.compile(r"\|?(?::?-{3,}:?\|)+(?::?-{3,}:?)?")  # "|---|:---:|", "|------|-------|"
_TABLE_CELL_RULE_RE = re.compile(r":?-{3,}:?")  # "---" between a rule row's spaced "|"s
_FENCE_RE = re.compile(r"```[\w+-]*")  # a code fence: "```", "```python"
_RULE_RE = re.compile(r"-{3,}|\*{3,}|_{3,}")  # a Markdown horizontal rule: "---", "***", "___"
_NUMBERED_ITEM_RE = re.compile(r"\d{1,2}[.)]")  # "1. First", "2) Second"
_LINK_TARGET_RE = re.compile(r"\]\((?:[^()\s]|\([^()\s]*\))*\)")  # "](https://example.com/a_(b))"
_LINK_MAX_WORDS = 12  # how far back a link's "[" is looked for
# a line's last token that ends with a pause of its own, maybe inside brackets or quotes: "users.)"
_ENDS_WITH_PAUSE_RE = re.compile(r"[.,;:!?…][)\]}\"'”’»]*$")


def token_line_starts(text: str, matches: list[re.Match[str]]) -> list[bool]:
    """For each token, whether it starts a line: the text's first, or one after a line break. A
    streamed text's segment starts where the last one ended, after whitespace, so its first token
    counts too."""
    ends = [0] + [m.end() for m in matches[:-1]]
    return [k == 0 or "\n" in text[end: m.start()] for k, (end, m) in enumerate(zip(ends, matches))]


def without_markdown(raws: list[str], line_starts: Optional[list[bool]] = None,
                     literal: Callable[[str], bool] = lambda raw: False) -> list[str]:
    """The tokens with the Markdown an LLM writes into a reply taken out, as nothing of it is said:
    emphasis and code marks at a word's edges ("**very**", "`pip`", "_so_", "~~no~~", but not the
    star of a keypad code, "*67"), a heading's "#"s before a word at the start of a line ("Press #
    to confirm" keeps its key), a list item's bullet ("- ", "* ", "+ ", "• ") at the start of a
    line, a horizontal rule ("---" alone on its line), and a link's target ("[our site](https://...)"
    is "our site"). A mark that touches no word ("5 * 3", "**" alone) and marks inside a word
    ("snake_case") stay, and so do the stars of a token that ``literal`` says are no marks (a
    keypad's "*67", a card's "****1234"). ``line_starts``: which tokens start a line (none,
    without it), and a quotation's ">" at the start of a line; where a list or a heading starts or
    ends, a line without punctuation gets the
    pause a reader makes (``_pause_after_lines``), and a table's cells theirs
    (``_without_tables_and_fences``)."""
    out = [_MARKDOWN_EDGES_RE.sub(r"\g<lead>\g<trail>", raw) if _MARK_CHARS.intersection(raw) and not literal(raw)
           else raw for raw in raws]
    line_starts = line_starts or [False] * len(out)
    _without_tables_and_fences(out, raws, line_starts)
    _pause_after_lines(out, line_starts)
    for k, raw in enumerate(out):
        if _HEADING_RE.fullmatch(raw) and line_starts[k] and k + 1 < len(out) and out[k + 1][:1].isalpha():
            out[k] = ""
        elif raw in _BULLETS and line_starts[k] and k + 1 < len(out) and not line_starts[k + 1]:
            out[k] = ""
        elif (raw == ">" and line_starts[k] and k + 1 < len(out) and not line_starts[k + 1]
              and not out[k + 1][:1].isdecimal() and out[k + 1][:1] not in "$€£¥₹"):
            out[k] = ""  # a quotation's mark ("> Tip: ..."); "> 10 items" is a comparison
        elif _RULE_RE.fullmatch(raw) and line_starts[k] and (k + 1 == len(out) or line_starts[k + 1]):
            out[k] = ""  # a horizontal rule, a line of its own
        target = _LINK_TARGET_RE.search(raw)
        if target is None:
            continue
        out[k] = raw[: target.start()] + raw[target.end():]
        for j in range(k, max(-1, k - _LINK_MAX_WORDS), -1):  # its text's "[" ends the link's marks
            if "[" in out[j]:
                out[j] = out[j].replace("[", "", 1)
                break
    return out


def without_path_arrows(raws: list[str]) -> list[str]:
    """The tokens with the arrows of a path through menus or steps taken out, each said as the
    pause after the word before it: "Settings > Privacy > Location", "Step 1 → Step 2 → done" ->
    "Settings, Privacy, Location". A ">" counts between capitalised words only ("x > y" stays a
    comparison, and "> 10" is one before a number)."""
    out = list(raws)
    for k in range(1, len(out) - 1):
        arrow, before, after = out[k], out[k - 1], out[k + 1]
        if arrow not in _PATH_ARROWS or not before or not before[-1].isalnum() or not after[:1].isalpha():
            continue
        if arrow == ">" and not (before[:1].isupper() and after[:1].isupper()):
            continue
        out[k - 1], out[k] = before + ",", ""
    return out


def _without_tables_and_fences(out: list[str], raws: list[str], line_starts: list[bool]) -> None:
    """Takes a Markdown table's marks out, in place: its rule row ("|---|:---:|") is not said, and
    each cell's "|" is the pause after the cell: "," within a row, "." at its end ("| Plan | Price
    |" is said "Plan, Price."). A code fence ("```", "```python") on a line of its own is not said
    either (``raws``: the tokens as written, before their emphasis marks went). Only a "|"
    standing alone counts, on a line that starts with one."""
    table_line = False
    for k, raw in enumerate(out):
        ends_line = k + 1 == len(out) or line_starts[k + 1]
        if line_starts[k]:
            table_line = raw == "|" or bool(_TABLE_RULE_RE.fullmatch(raw))
            if _FENCE_RE.fullmatch(raws[k]) and ends_line:
                out[k] = ""
                continue
        if not table_line:
            continue
        if _TABLE_RULE_RE.fullmatch(raw) or _TABLE_CELL_RULE_RE.fullmatch(raw):
            out[k] = ""  # the rule row, whole or a cell at a time
        elif raw == "|":
            out[k] = ""
            before = next((j for j in range(k - 1, -1, -1) if out[j]), None)
            if before is not None and not line_starts[k] and out[before][-1:].isalnum():
                out[before] += "." if ends_line else ","


def _pause_after_lines(out: list[str], line_starts: list[bool]) -> None:
    """Ends a line that has no punctuation of its own with the pause a reader makes where a list
    or a heading starts or ends: after a list item "," before another item and "." before anything
    else, after a heading ".", and before a list ":" or, before a heading, "." ("Options\n- Paris\n-
    Rome\nWhich one?" is said "Options: Paris, Rome. Which one?"); without them the lines run
    together. Other lines are left as written. In place, on the tokens of ``without_markdown``."""
    starts = [k for k, start in enumerate(line_starts) if start]
    for first, nxt in zip(starts, starts[1:]):
        last = nxt - 1
        if not out[last] or _ENDS_WITH_PAUSE_RE.search(out[last]):
            continue
        next_item = _is_list_item(out, nxt, len(out) - 1)
        if _is_list_item(out, first, last):
            out[last] += "," if next_item else "."
        elif _is_block_line(out, first, last) or _is_block_line(out, nxt, len(out) - 1):
            out[last] += ":" if next_item and not _is_block_line(out, first, last) else "."


def _is_list_item(out: list[str], first: int, last: int) -> bool:
    """Whether the line of tokens ``first``..``last`` is a list item: a bullet or "1." / "2)"
    first, and words after it."""
    return last > first and (out[first] in _BULLETS or _NUMBERED_ITEM_RE.fullmatch(out[first]) is not None)


def _is_block_line(out: list[str], first: int, last: int) -> bool:
    return _is_list_item(out, first, last) or (last > first and _HEADING_RE.fullmatch(out[first]) is not None)
