"""Cartesia's SSML-like transcript tags: which text is markup, what it means, what is wrong with it.

    <break time="1s"/>  <break time="500ms"/>   a pause there, 0 to MAX_BREAK_S (10 s)
    <speed ratio="1.2"/>                         the speech rate from here on, 0.6 to 1.5
    <volume ratio="0.5"/>                        the volume from here on, 0.5 to 2.0
    <emotion value="angry"/>                     accepted and ignored (as generation_config.emotion)
    <spell>ABC-123</spell>                       read character by character (api/text/markup_reading.py)

Syntax. A tag is "<", a known name (in any case), its attributes ``key="value"`` or ``key='value'``
(spaces around "=" allowed; a value holds no "<" or ">" and at most 100 characters), optional
spaces, an optional "/", optional spaces and ">", ``MAX_TAG_CHARS`` at most. break, speed, volume and emotion stand
alone (the "/" of ``<break time="1s"/>`` may be left out); ``<spell>`` opens a span that the first
``</spell>`` closes within ``MAX_SPELL_CHARS`` characters, and the span is one piece of markup,
whatever it holds (a ``<spell>`` not closed that soon is a slip, not a span: it is dropped, and what
follows it is text, so an LLM that forgets ``</spell>`` loses one tag, not its turn). Other closing tags
(``</speed>``, a ``</spell>`` with no span open) are markup that means nothing: dropped. Anything else
in angle brackets is text, as before tags were read: an unknown name (``<b>``), a stray "<" ("a < b"),
or a known name whose attributes are not of that form (``<break time=1s/>``).

Two passes:

- ``scan(text)`` (syntax only, never raises): the spans of the tags and spell spans, and where an
  *unfinished* piece of markup starts at the end of the text: a tag not closed yet ("<break ti",
  "<", "</spe") or a ``<spell>`` span not closed yet ("<spell>AB"). The segmenter
  (api/text/segmentation.py) never cuts inside a span and waits for the rest of an unfinished one.
- ``parse(text)`` (values checked): the tags with their values and the spell spans of one segment,
  or ``InvalidMarkupError`` (400 ``invalid_markup``) quoting the first bad tag, its value and what
  it may be: a break time that is not a number of seconds ("1s", "0.5s") or milliseconds ("500ms"),
  or is above MAX_BREAK_S; a speed or volume ratio that is not a number in its range; an attribute
  the tag does not take, or the one it needs missing; a tag inside a spell span. A text is taken as
  complete: an unfinished tag at its end is dropped
  (never read out), an unclosed ``<spell>`` spells to the end.

``MarkupState`` carries the speed and volume that ``<speed>``/``<volume>`` set from segment to
segment: one per HTTP request (``SynthesisService.plan``) or WebSocket context.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Optional

from api.text.errors import InvalidMarkupError

__all__ = [
    "MAX_BREAK_S",
    "MAX_SPELL_CHARS",
    "MAX_TAG_CHARS",
    "RATIO_RANGES",
    "Markup",
    "MarkupState",
    "Scan",
    "Span",
    "Spell",
    "Tag",
    "TagKind",
    "parse",
    "scan",
]

#: The longest pause one ``<break>`` may ask for (Cartesia documents none; longer is a 400).
MAX_BREAK_S = 10.0
#: The most characters a spell span may hold: codes, phone and card numbers, addresses (Cartesia
#: documents none). Spelled, each becomes a word, so this keeps a segment's text near the size of a
#: 400-character sentence's (the segmenter never cuts inside a span).
MAX_SPELL_CHARS = 200
#: A longer run of "<...>" is text, whole or unfinished (attribute values hold at most 100 characters).
MAX_TAG_CHARS = 200
#: Accepted ratios, as Cartesia documents them (the bounds included).
RATIO_RANGES = {"speed": (0.6, 1.5), "volume": (0.5, 2.0)}


class TagKind(str, enum.Enum):
    """What a span of markup is."""

    BREAK = "break"
    SPEED = "speed"
    VOLUME = "volume"
    EMOTION = "emotion"
    SPELL = "spell"  # a whole <spell>...</spell> span
    END = "end"  # a closing tag that closes nothing: dropped


_NAMES = ("break", "speed", "volume", "emotion", "spell")
_VALUE = r"""(?:"[^"<>]{0,100}"|'[^'<>]{0,100}')"""
_KEY = r"[A-Za-z_][\w-]*"
_ATTR = rf"\s+{_KEY}\s*=\s*{_VALUE}"
# spaces may stand on either side of the "/" ("<break time='1s' / >", as LLMs write it)
_TAG_RE = re.compile(rf"<(?P<close>/)?(?P<name>[A-Za-z]+)(?P<attrs>(?:{_ATTR})*)\s*(?P<slash>/)?\s*>")
_ATTR_RE = re.compile(rf"""\s+(?P<key>{_KEY})\s*=\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)')""")
# What may follow a known name in a tag still arriving: whole attributes, then one in progress (its
# key, "=", an opening quote and part of its value), then spaces and the "/" of "/>".
_PARTIAL_REST_RE = re.compile(
    rf"""(?:{_ATTR})*(?:\s+{_KEY}(?:\s*=(?:\s*(?:"[^"<>]{{0,100}}|'[^'<>]{{0,100}}))?)?)?\s*/?\s*""")
_PARTIAL_NAME_RE = re.compile(r"</?([A-Za-z]*)")
_SPELL_END_RE = re.compile(r"</spell\s*>", re.IGNORECASE)
#: How far past "<spell>" its "</spell>" is looked for: the most a span holds, and the closing tag
_SPELL_REACH = MAX_SPELL_CHARS + len("</spell>")
_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)\s*", re.IGNORECASE)
_NUMBER_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*")


@dataclass(frozen=True, slots=True)
class Span:
    """One piece of markup, ``text[start:end]``: a tag, or a whole spell span."""

    start: int
    end: int
    kind: TagKind


@dataclass(frozen=True, slots=True)
class Scan:
    """The markup of a text, by syntax: ``spans`` in order; ``open_at``: where unfinished markup
    starts (it runs to the end of the text), None when there is none."""

    spans: tuple[Span, ...]
    open_at: Optional[int]


_NO_MARKUP = Scan((), None)


def scan(text: str) -> Scan:
    """The spans of markup in ``text`` and where unfinished markup starts (module docstring)."""
    if "<" not in text:
        return _NO_MARKUP
    spans: list[Span] = []
    pos = 0
    while (i := text.find("<", pos)) >= 0:
        m = _known_tag(text, i)
        if m is None:
            pos = i + 1
            continue
        if m["close"]:
            spans.append(Span(i, m.end(), TagKind.END))
        elif m["name"].lower() == "spell" and not m["slash"]:
            close = _SPELL_END_RE.search(text, m.end(), m.end() + _SPELL_REACH)
            if close is not None:
                spans.append(Span(i, close.end(), TagKind.SPELL))
                pos = close.end()
                continue
            if len(text) - m.end() < _SPELL_REACH:
                return Scan(tuple(spans), i)  # an open spell span holds the rest of the text, for now
            # no </spell> within the most a span holds: a slip (a span never closed), not a span.
            # The opener is dropped and what follows is read as text, rather than holding the rest
            # of a WebSocket turn and failing it at its flush
            spans.append(Span(i, m.end(), TagKind.END))
        else:
            spans.append(Span(i, m.end(), TagKind(m["name"].lower())))
        pos = m.end()
    last = text.rfind("<", spans[-1].end if spans else 0)
    return Scan(tuple(spans), last if last >= 0 and _unfinished(text[last:]) else None)


def _known_tag(text: str, i: int) -> Optional[re.Match[str]]:
    m = _TAG_RE.match(text, i)
    if m is None or m.end() - i > MAX_TAG_CHARS or m["name"].lower() not in _NAMES:
        return None
    return m


def _unfinished(tail: str) -> bool:
    """Whether ``tail`` (from a "<" to the end of the text) may still become a known tag."""
    if ">" in tail or len(tail) >= MAX_TAG_CHARS:
        return False
    m = _PARTIAL_NAME_RE.match(tail)
    name, rest = m[1].lower(), tail[m.end():]
    if not rest:  # "<", "</", "<bre": a name still being typed
        return any(known.startswith(name) for known in _NAMES)
    return name in _NAMES and _PARTIAL_REST_RE.fullmatch(rest) is not None


# --- values ------------------------------------------------------------------------------------


@dataclass(slots=True)
class MarkupState:
    """The speed and volume the transcript's ``<speed>``/``<volume>`` tags set, held from the tag on
    across the later segments of one request or WebSocket context (None: no tag yet, the request's
    ``generation_config`` applies), and the seconds its breaks have paused so far."""

    speed: Optional[float] = None
    volume: Optional[float] = None
    paused_s: float = 0.0

    def pause(self, marked: "Markup", limit_s: float) -> None:
        """Count ``marked``'s breaks; InvalidMarkupError (400 ``invalid_markup``) when they would take
        this request's or context's pauses past ``limit_s``, quoting the break that crosses it. Each
        break may last MAX_BREAK_S, but a transcript of nothing else (5,000 characters of breaks are
        ~44 minutes of silence, 116 MB of PCM) would hold a stream and a connection that long."""
        total = self.paused_s
        for tag in marked.tags:
            if tag.kind is not TagKind.BREAK or not tag.value:
                continue
            total += tag.value
            if total > limit_s:
                raise InvalidMarkupError(
                    f"{marked.text[tag.start:tag.end]}: with it the breaks would pause {total:g} s in all, over the "
                    f"{limit_s:g} s one request or WebSocket context may pause (GEPARD_MAX_PAUSE_S)")
        self.paused_s = total


@dataclass(frozen=True, slots=True)
class Tag:
    """A checked tag at ``text[start:end]``: a break's seconds, a speed or volume ratio (``value``),
    or an emotion or closing tag (no value: they change nothing)."""

    kind: TagKind
    start: int
    end: int
    value: Optional[float] = None


@dataclass(frozen=True, slots=True)
class Spell:
    """A spell span ``text[start:end]``; the characters to spell are ``text[content_start:content_end]``."""

    start: int
    end: int
    content_start: int
    content_end: int


@dataclass(frozen=True, slots=True)
class Markup:
    """One segment's text with its markup read: tags (spell spans' own tags aside) and spell spans
    in order; the text is read up to ``end`` (an unfinished tag after it is dropped)."""

    text: str
    tags: tuple[Tag, ...]
    spells: tuple[Spell, ...]
    end: int

    @property
    def plain(self) -> bool:
        """No markup at all: the text reads as it did before tags were read."""
        return not self.tags and not self.spells and self.end == len(self.text)

    @property
    def pause_s(self) -> float:
        """The segment's breaks, added up: silence after its speech."""
        return sum(t.value or 0.0 for t in self.tags if t.kind is TagKind.BREAK)

    def apply(self, state: MarkupState) -> None:
        """Move ``state`` past this segment's ``<speed>``/``<volume>`` tags (the last of each wins)."""
        for tag in self.tags:
            if tag.kind is TagKind.SPEED:
                state.speed = tag.value
            elif tag.kind is TagKind.VOLUME:
                state.volume = tag.value


def parse(text: str) -> Markup:
    """``text``'s markup with every value checked (module docstring); raises InvalidMarkupError."""
    found = scan(text)
    tags: list[Tag] = []
    spells: list[Spell] = []
    for span in found.spans:
        if span.kind is TagKind.SPELL:
            spells.append(_spell(text, span.start, span.end))
        else:
            tags.append(_checked(text, span))
    end = len(text)
    if found.open_at is not None:
        m = _known_tag(text, found.open_at)
        if m is not None:  # "<spell>..." to the end of the text: spelled to its end
            spells.append(_spell(text, found.open_at, len(text)))
        else:  # a tag cut off by the end of the text: never read out
            end = found.open_at
    return Markup(text, tuple(tags), tuple(spells), end)


def _spell(text: str, start: int, end: int) -> Spell:
    opening = _known_tag(text, start)
    assert opening is not None  # scan found it
    if opening["slash"]:
        raise InvalidMarkupError(f"{opening.group()}: <spell> wraps the text to spell, as in <spell>ABC-123</spell>")
    if opening["attrs"].strip():
        raise InvalidMarkupError(f"{opening.group()}: <spell> takes no attributes; write <spell>ABC-123</spell>")
    closing = _SPELL_END_RE.search(text, opening.end(), end)
    content_end = closing.start() if closing is not None else end
    content = text[opening.end():content_end]
    inner = scan(content)
    nested = inner.spans[0].start if inner.spans else inner.open_at
    if nested is not None and (inner.spans or _known_tag(content, nested) is not None):  # "<spell>" again
        found = _TAG_RE.match(content, nested)
        raise InvalidMarkupError(f"<spell>...</spell> cannot hold other tags: found {found.group()} inside it")
    if closing is None and inner.open_at is not None:  # unclosed, and a tag cut off at the end
        content_end = opening.end() + inner.open_at
    if content_end - opening.end() > MAX_SPELL_CHARS:
        missing = "" if closing is not None else " (its </spell> is missing)"
        raise InvalidMarkupError(f"<spell>...</spell> holds {content_end - opening.end()} characters{missing}; "
                                 f"it may hold at most {MAX_SPELL_CHARS}")
    return Spell(start, end, opening.end(), content_end)


def _checked(text: str, span: Span) -> Tag:
    m = _known_tag(text, span.start)
    assert m is not None  # scan found it
    written = m.group()
    if span.kind is TagKind.END:
        if m["attrs"].strip():
            raise InvalidMarkupError(f"{written}: a closing tag takes no attributes")
        return Tag(TagKind.END, span.start, span.end)
    attrs = _attributes(m["attrs"], written)
    if span.kind is TagKind.EMOTION:  # accepted and ignored, whatever it says
        return Tag(TagKind.EMOTION, span.start, span.end)
    key, example = ("time", '<break time="1s"/>') if span.kind is TagKind.BREAK else (
        "ratio", f'<{span.kind.value} ratio="1.2"/>' if span.kind is TagKind.SPEED else '<volume ratio="0.8"/>')
    for other in attrs:
        if other != key:
            raise InvalidMarkupError(f"{written}: unknown attribute {other!r}; <{span.kind.value}> takes only "
                                     f"{key}, as in {example}")
    if key not in attrs:
        raise InvalidMarkupError(f"{written}: <{span.kind.value}> needs a {key} attribute, as in {example}")
    value = attrs[key]
    if span.kind is TagKind.BREAK:
        return Tag(TagKind.BREAK, span.start, span.end, _break_seconds(value, written))
    low, high = RATIO_RANGES[span.kind.value]
    number = _NUMBER_RE.fullmatch(value)
    ratio = float(number[1]) if number is not None else None
    if ratio is None or not low <= ratio <= high:
        raise InvalidMarkupError(f"{written}: ratio {value!r} must be a number from {low:g} to {high:g}")
    return Tag(span.kind, span.start, span.end, ratio)


def _attributes(attrs: str, written: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in _ATTR_RE.finditer(attrs):
        key = a["key"].lower()
        if key in out:
            raise InvalidMarkupError(f"{written}: attribute {key!r} is given twice")
        out[key] = a["dq"] if a["dq"] is not None else a["sq"]
    return out


def _break_seconds(value: str, written: str) -> float:
    m = _DURATION_RE.fullmatch(value)
    if m is None:
        raise InvalidMarkupError(f"{written}: time {value!r} is not a duration from 0 to {MAX_BREAK_S:g} s, "
                                 'such as "1s", "0.5s" or "500ms"')
    seconds = float(m[1]) / (1000.0 if m[2].lower() == "ms" else 1.0)
    if seconds > MAX_BREAK_S:
        raise InvalidMarkupError(f"{written}: time {value!r} is longer than the {MAX_BREAK_S:g} s a break may last")
    return seconds
