"""``TextBuffer``: the incremental text buffer of one WebSocket context.

Clients stream a transcript in pieces (``continue: true``) and the pieces concatenate exactly -
clients send their own spaces. The buffer hands out *segments* the engine can synthesise with
good prosody:

- **Sentence ends**: a run of ``. ! ? …`` (or CJK/Devanagari/Arabic ``。 ！ ？ ｡ । ؟``), then any
  closing quotes/brackets, then whitespace. The segment includes that whitespace, so
  ``"".join(segments) + pending`` is always exactly the text appended (minus dropped
  whitespace-only segments). CJK marks need no whitespace after them.
- A single ``.`` is *not* a sentence end after a known abbreviation ("Dr.", "e.g.", "Sra.",
  "St. Louis" - see ``normalization.known_abbreviations``; those that can close a sentence, like
  "etc.", end one only before an uppercase letter; "a.m." and "p.m." not before a day, a month or
  a time zone: "9 a.m. Monday", "3 p.m. Eastern"), after a single capital initial ("J. K."),
  after "No." between a record's noun and its code ("Model No. XR-7", a code still arriving
  waits), after an acronym ("U.S." only before an uppercase letter), after a list number starting the
  text or a line ("1. First", "Steps:\n2. Bake"), after a short word before a number ("Jan. 5",
  "Fig. 3", "p. 12", "ext. 204"), or before a lowercase letter ("approx. five", "wait... what").
  "3.5" never splits (no space).
- **At the end of the buffer** (no whitespace yet), with ``eager=True``: CJK marks end a
  sentence at once, and so do ``. ! ?`` after an ordinary word ("Hello world.", "Really?"), so
  the engine can start before the next piece arrives. After anything else they wait for the
  next character: streamed text often breaks right after such a mark ("$3" "." "50",
  "me@example" "." "com", "example.com/search?" "q=tts"), so ``. ! ?`` after a word with a
  digit or a symbol in it, ``.`` after an abbreviation or a month ("Jan."), and ``...``/``…``
  all wait.
- **List items**: a line that starts with a bullet or an item number ("- Paris", "2. Bake", "3)
  Serve"), or a table's row ("| Basic | $10 |"), starts a segment, so each item or row is said as
  soon as its line is complete (the normaliser leaves the marks unsaid, api/text/normalization_markdown.py).
- **Clause ends** ``, ; :`` (and ``、 ， ； ：``) followed by whitespace split too when
  ``clause_min_chars`` is set and the segment would be at least that long.
- **Length cap**: with ``max_chars`` set, a buffer that has reached it without any boundary is
  cut at its last whitespace (or hard at ``max_chars``).
- ``take_ready(force=True)`` (flush, end of input) also returns the remainder.
  ``take_whole_words()`` (the buffer timer: the client paused) returns it up to its last
  whitespace: the word after it may still be arriving ("fo" "x"), so it stays, unless it is all
  the buffer holds. Nor does that cut part words that are read together ("$5 million", "9 AM",
  "Dr. Smith", "March 5"): it falls between two plain lowercase words, a few words further back
  if need be, and only where none is near does it fall before the last word as before.
  Whitespace-only segments are dropped, never returned.
- **Transcript tags** (api/text/markup.py): no segment is cut inside a tag or a
  ``<spell>...</spell>`` span (it may hold ". " and spaces). A ``<break>`` ends a segment, with any
  breaks right after it (its pause follows that segment's speech); a segment ends before a
  ``<speed>`` or ``<volume>`` tag, so each segment has one speed and one volume; a sentence mark
  right before another tag ends a sentence as if whitespace followed it. Unfinished markup at the
  end of the buffer ("<break ti", "<", "<spell>AB") waits for its rest at every cut, as a half word
  does: the sentence cuts, ``take_whole_words`` (the client paused mid-tag), and
  ``take_ready(force=True, hold_markup=True)`` (a WebSocket submission with
  max_buffer_delay_ms=0: the client sends a tag in pieces, as Cartesia warns they do). A plain
  ``take_ready(force=True)`` (flush, end of input, a whole HTTP transcript) hands it out too: the
  segment's reading then drops an unfinished tag and spells an unclosed ``<spell>`` to its end.
"""

from __future__ import annotations

import bisect
import re
from typing import Optional

from api.text.markup import Span, TagKind, scan
from api.text.normalization import goes_on_after_meridiem, known_abbreviations, numbers_a_code

__all__ = ["TextBuffer"]

_SENTENCE_MARKS = set(".!?…")
_STRONG_MARKS = set("!?！？。｡؟।॥")  # always end a sentence
_NO_SPACE_MARKS = set("。！？｡")  # CJK: no whitespace follows them
_ALL_MARKS = _SENTENCE_MARKS | _STRONG_MARKS
_CLOSERS = set("\"'”’»)]}」』）】》〉")
_OPENERS = "\"'([{¿¡«“‘"
_CLAUSE_MARKS = set(",;:")
_CJK_CLAUSE_MARKS = set("、，；：")
_ACRONYM_RE = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")
_ASCII_STRONG_MARKS = set("!?")  # the strong marks that also occur inside URLs ("/search?q=")
_IN_WORD = str.maketrans("", "", "'’-")  # "don't", "well-known" are still ordinary words
# A word this short before ". <digit>" is an abbreviation of what the number counts ("Tab. 4",
# "Nr. 5"), not the end of a sentence (a sentence rarely starts with a digit), unless the digit
# starts a list item ("First item. 2. Second").
_SHORT_WORD_MAX = 4
_LIST_NUMBER_RE = re.compile(r"\d+\.(?!\d)")  # "2. Second", not "2.5"
# a line that starts a list item or a table's row, once its first word has begun: "- Paris", "2.
# Bake", "3) Serve", "| Basic | $10 |" (a table's rule row, "|---|", stays with the row before it)
_LIST_ITEM_RE = re.compile(r"[ \t]*(?:[-*+•|]|\d{1,2}[.)])[ \t]+\S")
_CUT_BEFORE = (TagKind.SPEED, TagKind.VOLUME)  # a segment has one speed and one volume
_WORD_RE = re.compile(r"\S+")
_LETTERS_RE = re.compile(r"[^\W\d_]*")
_CUT_BACKOFF_WORDS = 6  # how far the timer's cut moves back to fall between plain words


class TextBuffer:
    """Accumulates one context's transcript and releases complete segments.

    clause_min_chars: also split at ``, ; :`` once the segment is at least this long (None: never).
    max_chars: cut a boundary-less buffer at this length (None: never).
    eager: accept a sentence end at the very end of the buffer (see the module docstring).
    """

    def __init__(
        self,
        clause_min_chars: Optional[int] = None,
        max_chars: Optional[int] = None,
        eager: bool = True,
    ) -> None:
        if clause_min_chars is not None and clause_min_chars < 1:
            raise ValueError(f"clause_min_chars must be >= 1 or None, got {clause_min_chars}")
        if max_chars is not None and max_chars < 1:
            raise ValueError(f"max_chars must be >= 1 or None, got {max_chars}")
        self.clause_min_chars = clause_min_chars
        self.max_chars = max_chars
        self.eager = eager
        self._buf = ""

    @property
    def pending(self) -> str:
        """Text appended but not yet handed out."""
        return self._buf

    def __len__(self) -> int:
        return len(self._buf)

    def append(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"transcript must be a string, got {type(text).__name__}")
        self._buf += text

    def clear(self) -> str:
        """Drop and return the pending text (cancel)."""
        pending, self._buf = self._buf, ""
        return pending

    @property
    def waits_for_markup(self) -> bool:
        """Whether all the pending text (whitespace aside) is unfinished markup ("<break ti",
        "<spell>AB"): no cut releases anything until its rest arrives."""
        open_at = scan(self._buf).open_at
        return open_at is not None and not self._buf[:open_at].strip()

    def take_ready(self, force: bool = False, hold_markup: bool = False) -> list[str]:
        """Complete segments, in order; with ``force`` the remainder too (if not blank), bar
        unfinished markup at its end with ``hold_markup`` (the client is mid-tag)."""
        out: list[str] = []
        marks = _Marks(self._buf)  # one scan for all the cuts (a scan per cut is quadratic)
        while True:
            cut = self._find_cut(self._buf, marks)
            if cut is None:
                break
            segment, self._buf = self._buf[:cut], self._buf[cut:]
            marks.cut(cut)
            if segment.strip():
                out.append(segment)
        if force:
            rest = self.clear()
            open_at = marks.open_at if hold_markup else None
            if open_at is not None:
                rest, self._buf = rest[:open_at], rest[open_at:]
            if rest.strip():
                out.append(rest)
        return out

    def take_whole_words(self) -> list[str]:
        """Complete segments, then the remainder up to its last whitespace; its last word stays
        pending unless it is the only one (the client went quiet mid-word: say it all). Unfinished
        markup at the end always stays: the words before it are whole (a tag separates words)."""
        out = self.take_ready()
        rest = self._buf
        found = scan(rest)
        if found.open_at is not None:
            head, self._buf = rest[: found.open_at], rest[found.open_at :]
            return out + [head] if head.strip() else out
        start = len(rest)
        while start > 0 and not rest[start - 1].isspace():
            start -= 1  # the unfinished word is rest[start:] (empty when rest ends in whitespace)
        start = _cut_between_plain_words(rest, start)
        inside = _span_around(found.spans, start)
        if inside is not None:  # a space inside a tag or a spell span: the span is the last word
            start = inside.start
        if not rest[:start].strip():
            return out + self.take_ready(force=True)
        out.append(rest[:start])
        self._buf = rest[start:]
        return out

    # --- boundary search ----------------------------------------------------------------------

    def _find_cut(self, buf: str, marks: "_Marks") -> Optional[int]:
        """End (exclusive, trailing whitespace included) of the first segment in ``buf``, whose
        markup is ``marks``."""
        if marks.open_at is not None:
            buf = buf[: marks.open_at]  # unfinished markup: for now the text ends where it starts
        n = len(buf)
        i = 0
        floor = 0  # where the last span ended: a word starts there at the latest ("<speed .../>Fast.")
        span = marks.next_from(0)  # the next span; the scan below never steps over a span's "<"
        while i < n:
            if span is not None and i == span.start:
                # never inside one; a break ends the segment, speed and volume start one
                if span.kind is TagKind.BREAK:
                    return _after_breaks(buf, span.end, marks)
                if span.kind in _CUT_BEFORE and buf[:i].strip():
                    return i
                i = floor = span.end
                span = marks.next_from(i)
                continue
            c = buf[i]
            if c == "\n" and buf[floor:i].strip() and _LIST_ITEM_RE.match(buf, i + 1):
                return i + 1  # a list item starts a segment of its own: "Steps:\n" | "1. Mix it\n"
            if c in _ALL_MARKS:
                j = i
                while j < n and buf[j] in _ALL_MARKS:
                    j += 1
                k = j
                while k < n and buf[k] in _CLOSERS:
                    k += 1
                run = buf[i:j]
                if k < n and buf[k].isspace():
                    w = _skip_space(buf, k)
                    if self._ends_sentence(buf, i, run, w if w < n else None, floor):
                        return w
                elif k == n:
                    if self.eager and self._ends_sentence(buf, i, run, None, floor):
                        return n
                elif span is not None and k == span.start:
                    # "Hello.<spell>..." as "Hello. <spell>..." (a break after the mark is the
                    # segment's own: the cut comes after it)
                    if span.kind is not TagKind.BREAK and self._ends_sentence(buf, i, run, k, floor):
                        return k
                elif any(ch in _NO_SPACE_MARKS for ch in run):
                    return _skip_space(buf, k)
                i = j
                continue
            if self.clause_min_chars is not None and (c in _CLAUSE_MARKS or c in _CJK_CLAUSE_MARKS):
                if len(buf[: i + 1].strip()) >= self.clause_min_chars:
                    if c in _CJK_CLAUSE_MARKS:
                        return _skip_space(buf, i + 1)
                    if i + 1 < n and buf[i + 1].isspace():
                        return _skip_space(buf, i + 1)
            i += 1
        if self.max_chars is not None and n >= self.max_chars:
            return _cap_cut(buf, self.max_chars, marks)
        return None

    def _ends_sentence(self, buf: str, i: int, run: str, next_at: Optional[int], floor: int = 0) -> bool:
        """Whether the mark run ``run`` at ``buf[i]`` ends a sentence; ``next_at`` is the index of
        the first character after the following whitespace, or None when it has not arrived yet;
        ``floor``: the end of the last tag before the mark (the word before it starts there at the latest)."""
        at_end = next_at is None
        next_char = None if next_at is None else buf[next_at]
        # the buffer ends at the mark (or its closers): the word before it may go on ("$3." "50")
        open_word = at_end and not buf[-1].isspace()
        if any(ch in _STRONG_MARKS for ch in run):
            if not open_word or any(ch not in _ASCII_STRONG_MARKS for ch in run):
                return True  # CJK, Arabic, Devanagari marks never occur inside a word
            word = _word_before(buf, i, floor)
            return not word or _is_plain_word(word)  # "example.com/search?" may go on: "q=tts"
        if next_char is not None and next_char.islower():
            return False  # "approx. five", "wait... what"
        if run != ".":
            return not at_end  # "..." / "…": wait to see what follows
        word = _word_before(buf, i, floor)
        abbreviations = known_abbreviations()
        key = (word + ".").lower()
        if key in abbreviations:
            if key in ("a.m.", "p.m.") and next_at is not None and self._time_goes_on(buf, next_at):
                return False  # "9 a.m. Monday through Friday", "3 p.m. Eastern"
            if next_at is not None and numbers_a_code(key, _previous_word(buf, i, floor), _whole_word_at(buf, next_at)):
                return False  # "Model No. XR-7": the code's number
            return abbreviations[key] and next_char is not None and next_char.isupper()
        if len(word) == 1 and word.isupper():
            return False  # an initial: "J. K. Rowling"
        if _ACRONYM_RE.fullmatch(word):
            return next_char is not None and next_char.isupper()
        if word.isdigit():
            # "3." may become "3.5"; "1. First" starting the text or a line is a list item, not a
            # sentence ("Steps:\n1. Mix\n2. Bake")
            before = buf[floor: i - len(word)]
            return not at_end and bool(before.strip()) and not before.rstrip(" \t").endswith("\n")
        if at_end:
            # "$3." "3.11." "192.168." "me@example." are numbers and addresses in pieces: only an
            # ordinary word ends a sentence before its next piece ("Jan." waits as an abbreviation).
            return bool(word) and (not open_word or _is_plain_word(word))
        if next_char.isdecimal() and word.isalpha() and len(word) <= _SHORT_WORD_MAX:
            # "Tab. 4", "Sec. 2" (the known ones, "Jan. 5", "Fig. 3", are abbreviations above);
            # but "First item. 2. Second" is a list going on
            return bool(_LIST_NUMBER_RE.match(buf, next_at))
        return True

    @staticmethod
    def _time_goes_on(buf: str, next_at: int) -> bool:
        """Whether the word at ``next_at``, after "a.m."/"p.m.", goes on with the time; a word still
        arriving at the buffer's end may ("Mon" of "Monday"), so it waits for the rest."""
        word = _LETTERS_RE.match(buf, next_at)
        assert word is not None  # the pattern matches the empty string
        return word.end() == len(buf) or goes_on_after_meridiem(word.group())


class _Marks:
    """The markup of a buffer, scanned once for all the cuts of one ``take_ready``: each cut takes
    the buffer's head off (``cut``), and positions are asked and answered in the buffer as it is now."""

    def __init__(self, text: str) -> None:
        found = scan(text)
        self._spans = found.spans  # in order, never overlapping
        self._positions = [span.start for span in found.spans]
        self._starts = {span.start: span for span in found.spans}
        self._open_at = found.open_at
        self._base = 0  # characters cut off the buffer since the scan

    def cut(self, n: int) -> None:
        self._base += n

    @property
    def open_at(self) -> Optional[int]:
        """Where unfinished markup starts (it runs to the end of the buffer); None: none."""
        return None if self._open_at is None else self._open_at - self._base

    def starting(self, i: int) -> Optional[Span]:
        """The span that starts at ``i``, if any."""
        span = self._starts.get(i + self._base)
        return None if span is None else self._now(span)

    def next_from(self, i: int) -> Optional[Span]:
        """The first span that starts at ``i`` or after it, if any."""
        k = bisect.bisect_left(self._positions, i + self._base)
        return self._now(self._spans[k]) if k < len(self._spans) else None

    def around(self, pos: int) -> Optional[Span]:
        """The span that ``pos`` is strictly inside (a cut there would split it), if any."""
        at = pos + self._base
        k = bisect.bisect_left(self._positions, at) - 1  # the last span that starts before it
        if k < 0 or at >= self._spans[k].end:
            return None
        return self._now(self._spans[k])

    def _now(self, span: Span) -> Span:
        return Span(span.start - self._base, span.end - self._base, span.kind)


def _cap_cut(buf: str, max_chars: int, marks: _Marks) -> int:
    """Where a buffer of at least ``max_chars`` without a boundary is cut: its last whitespace
    before ``max_chars`` that is in no span, else ``max_chars``, else around the span there."""
    head = buf[:max_chars]
    space = _last_space(head, max_chars)
    while space >= 0 and (inside := marks.around(space)) is not None:
        space = _last_space(head, inside.start)
    if space > 0 and head[:space].strip():
        return _skip_space(buf, space)
    inside = marks.around(max_chars)
    if inside is not None:
        return inside.start if inside.start > 0 else _skip_space(buf, inside.end)
    return max_chars


def _last_space(text: str, end: int) -> int:
    return max(text.rfind(" ", 0, end), text.rfind("\n", 0, end), text.rfind("\t", 0, end))


def _cut_between_plain_words(rest: str, start: int) -> int:
    """Where the buffer timer's cut goes in ``rest``, whose unfinished word starts at ``start``.

    A reading spans words only from a number, a symbol or a capitalised word on: "$5 million
    dollars" and "$2 mil millones" three, "9 AM", "Dr. Smith", "March 5" two. So a cut is safe
    after a lowercase word of letters when the two before it have no digits or symbols either
    (``_is_plain_word``, a clause mark after them allowed). Best, the word after it is lowercase
    letters too; failing that, it may start a
    reading ("It costs | $5 million"; a lead word before it, as in "a | $20 gift card", then
    loses what it added). The nearest such cut at most ``_CUT_BACKOFF_WORDS`` back from
    ``start`` is taken, the best first; where there is none (a run of numbers, a text without
    case), ``start``, the cut before the last word."""
    words = list(_WORD_RE.finditer(rest, 0, start))
    cores = [m.group().rstrip(",;:") for m in words] + [rest[start:]]  # the last: the unfinished word
    n = len(words)
    lettered = [_is_plain_word(core) for core in cores]
    plain = [letters and core.islower() for letters, core in zip(lettered, cores)]
    plain[n] = plain[n] or not cores[n]  # nothing unfinished: the cut before the last word is fine
    # cuts before word k (k == n: before the unfinished one), nearest first
    safe = [k for k in range(n, max(0, n - _CUT_BACKOFF_WORDS), -1)
            if plain[k - 1] and all(lettered[j] for j in range(max(0, k - 3), k - 1))]
    best = next((k for k in safe if plain[k]), safe[0] if safe else n)
    return start if best == n else words[best].start()


def _span_around(spans: tuple[Span, ...], pos: int) -> Optional[Span]:
    """The span that ``pos`` is strictly inside (a cut there would split it), if any."""
    return next((s for s in spans if s.start < pos < s.end), None)


def _after_breaks(buf: str, end: int, marks: _Marks) -> int:
    """The end of a run of ``<break>`` tags (and the whitespace between and after them) that
    starts with the one ending at ``end``: their pauses add up after the segment's speech."""
    while True:
        end = _skip_space(buf, end)
        span = marks.starting(end)
        if span is None or span.kind is not TagKind.BREAK:
            return end
        end = span.end


def _skip_space(buf: str, k: int) -> int:
    while k < len(buf) and buf[k].isspace():
        k += 1
    return k


def _is_plain_word(word: str) -> bool:
    """Whether ``word`` (closing quotes/brackets allowed at its end) is letters only: no digit,
    '@', '/', '.' or other symbol that makes it a number, an address or a URL."""
    return word.rstrip("".join(_CLOSERS)).translate(_IN_WORD).isalpha()


def _word_start(buf: str, i: int, floor: int = 0) -> int:
    """Where the whitespace-delimited word ending at ``buf[i]`` (exclusive) starts, ``floor`` at the latest."""
    start = i
    while start > floor and not buf[start - 1].isspace():
        start -= 1
    return start


def _previous_word(buf: str, i: int, floor: int = 0) -> str:
    """The word before the one ending at ``buf[i]``: "Model" for the "No" of "Model No."."""
    end = _word_start(buf, i, floor)
    while end > floor and buf[end - 1].isspace():
        end -= 1
    return _word_before(buf, end, floor)


def _whole_word_at(buf: str, at: int) -> Optional[str]:
    """The whitespace-delimited word starting at ``buf[at]``; None while it may still be arriving
    (it runs to the buffer's end)."""
    word = _WORD_RE.match(buf, at)
    return None if word is None or word.end() == len(buf) else word.group()


def _word_before(buf: str, i: int, floor: int = 0) -> str:
    """The whitespace-delimited word ending at ``buf[i]`` (exclusive) and starting at ``floor`` at
    the latest, opening quotes removed."""
    return buf[_word_start(buf, i, floor):i].lstrip(_OPENERS)
