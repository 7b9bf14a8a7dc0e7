"""Sounds-like entries applied before normalisation: word boundaries, case, longest match, and the
alignment that keeps word timestamps in the client's own words."""

from __future__ import annotations

import random
import re
import unicodedata

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.text import normalize, segment_timestamps
from api.text.pronunciation import _match_case, apply_pronunciations, compile_pronunciations, normalize_pronounced
from voices.dictionaries import PronunciationItem as Item


def spoken(text: str, *items: Item, mode: str = "auto") -> str:
    return normalize_pronounced(text, "en", mode, compile_pronunciations(items)).text


@pytest.mark.parametrize("text, expected", [
    ("I use SQL.", "I use sequel."),
    ("(SQL), SQL; SQL!", "(sequel), sequel; sequel!"),
    ("MySQL and SQLite stay.", "MySQL and SQLite stay."),  # whole words only
    ("sql and Sql", "sequel and Sequel"),  # case-insensitive by default, capitalisation kept
    ("sql SERVER", "sequel SERVER"),
])
def test_whole_words_in_any_case_take_the_case_of_the_match(text, expected):
    assert spoken(text, Item("SQL", "sequel")) == expected


def test_key_spelled_as_listed_keeps_the_alias_as_listed():
    assert spoken("Ask Nvidia.", Item("Nvidia", "en-VID-ee-uh")) == "Ask en-VID-ee-uh."
    assert spoken("ask NVIDIA.", Item("Nvidia", "en-VID-ee-uh")) == "ask EN-VID-EE-UH."


def test_case_sensitive_entries_match_as_written_and_at_a_sentence_start():
    item = Item("gif", "jif", case_sensitive=True)
    assert spoken("gif. Gif! GIF?", item) == "jif. Jif! GIF?"
    assert spoken("nvidia or Nvidia", Item("Nvidia", "en-VID-ee-uh", case_sensitive=True)) == "nvidia or en-VID-ee-uh"


def test_longest_key_wins_and_whitespace_in_keys_is_any_whitespace():
    items = (Item("New York", "Noo Yawk"), Item("New York City", "the big apple"), Item("New", "Nu"))
    assert spoken("New York City and New\nYork, New things.", *items) == "the big apple and Noo Yawk, Nu things."


def test_keys_ending_in_symbols_match_without_a_trailing_boundary():
    assert spoken("C++ and C#.", Item("C++", "see plus plus"), Item("C#", "see sharp")) == \
        "see plus plus and see sharp."


@pytest.mark.parametrize("text, expected", [
    ("C+++ and C++++.", "C+++ and C++++."),  # a longer run of symbols is another word
    ("(C++), C++-based, C++/CLI", "(see plus plus), see plus plus-based, see plus plus/CLI"),
    ("«C++» or “C++”?", "«see plus plus» or “see plus plus”?"),
])
def test_a_symbol_edge_of_a_key_still_needs_a_boundary(text, expected):
    assert spoken(text, Item("C++", "see plus plus")) == expected


def test_a_leading_symbol_edge_needs_a_boundary_too():
    # "++C" is not inside "+++C"; after an opening bracket or a space it matches
    assert spoken("+++C or (++C) ++C", Item("++C", "increment see")) == "+++C or (increment see) increment see"


def test_entries_apply_before_normalisation_and_also_with_normalisation_off():
    assert spoken("Call 911 now.", Item("911", "nine one one")) == "Call nine one one now."
    assert spoken("I paid $5 for SQL.", Item("SQL", "sequel")) == "I paid five dollars for sequel."
    assert spoken("SQL 5", Item("SQL", "sequel"), mode="off") == "sequel 5"


def test_alignment_reports_the_clients_tokens_with_the_spoken_words():
    prons = compile_pronunciations([Item("AWS", "A W S"), Item("New York", "Noo Yawk")])
    n = normalize_pronounced("On AWS at 5 pm in New York.", "en", "auto", prons)
    assert n.original_words == "On AWS at 5 pm in New York.".split()
    assert [a.normalized for a in n.alignment] == [
        ("On",), ("A", "W", "S"), ("at",), ("five", "p", "m"), (), ("in",), ("Noo", "Yawk."), ()]
    assert n.text.split() == n.normalized_words
    assert [a.start_char for a in n.alignment] == [0, 3, 7, 10, 12, 15, 18, 22]


def test_timestamps_name_original_words_or_the_spoken_ones():
    prons = compile_pronunciations([Item("SQL", "sequel query language")])
    n = normalize_pronounced("I like SQL a lot.", "en", "auto", prons)
    rng = np.random.default_rng(0)
    pcm = (rng.standard_normal(22050 * 2) * 0.1).astype(np.float32)  # 2 s of "speech"
    original = segment_timestamps(n, pcm, 0.0)
    assert list(original.words) == ["I", "like", "SQL", "a", "lot."]
    normalized = segment_timestamps(n, pcm, 0.0, use_normalized=True)
    assert list(normalized.words) == ["I", "like", "sequel", "query", "language", "a", "lot."]
    # the original word spans exactly its three spoken words
    assert original.start[2] == normalized.start[2] and original.end[2] == normalized.end[4]


def test_no_dictionary_or_no_match_is_plain_normalisation():
    text = "Dr. Smith paid $5."
    assert normalize_pronounced(text, "en", "auto", None) == normalize(text, "en", "auto")
    assert normalize_pronounced(text, "en", "auto", compile_pronunciations([Item("SQL", "sequel")])) == \
        normalize(text, "en", "auto")
    assert apply_pronunciations(text, compile_pronunciations([])).spans == ()


def test_compiled_dictionaries_are_reused_for_equal_entries():
    a = compile_pronunciations([Item("SQL", "sequel")])
    assert compile_pronunciations([Item("SQL", "sequel")]) is a
    assert compile_pronunciations([Item("SQL", "squeal")]) is not a


# --- case-sensitive entries: the capitalised form only at a sentence start ---------------------------


@pytest.mark.parametrize("text, expected", [
    ("Please polish the Polish silver.", "Please pahlish the Polish silver."),
    ("Polish it. Then polish it again!", "Pahlish it. Then pahlish it again!"),
    ("Is it clean? Polish it… Polish it!", "Is it clean? Pahlish it… Pahlish it!"),
    ('He said: "Done." Polish it. (Polish it.)', 'He said: "Done." Pahlish it. (Pahlish it.)'),
    ('Done.) Polish, done!" Polish', 'Done.) Pahlish, done!" Pahlish'),
    ("  Polish first, then a Polish vase: Polish, vase.", "  Pahlish first, then a Polish vase: Polish, vase."),
    ("e.g.Polish or Mr Polish", "e.g.Polish or Mr Polish"),  # a period needs whitespace after it
])
def test_a_lower_case_sensitive_key_matches_its_capitalised_form_only_at_a_sentence_start(text, expected):
    item = Item("polish", "pahlish", case_sensitive=True)
    assert apply_pronunciations(text, compile_pronunciations([item])).text == expected


# --- a key with a symbol edge: the alias does not stick to the neighbouring word --------------------


def test_an_alias_for_a_symbol_is_spaced_from_the_words_it_joins():
    prons = compile_pronunciations([Item("&", "and"), Item("@", "at")])
    assert apply_pronunciations("R&D and AT&T.", prons).text == "R and D and AT and T."
    assert apply_pronunciations("me@x.com or @bob, R & D", prons).text == "me at x.com or at bob, R and D"
    # an alias that starts or ends with a symbol, or a neighbour that is one, needs no space
    assert apply_pronunciations("a&b (&)", compile_pronunciations([Item("&", "-&-")])).text == "a-&-b (-&-)"
    assert apply_pronunciations("C++11, C++.", compile_pronunciations([Item("C++", "see plus plus")])).text == \
        "see plus plus 11, see plus plus."
    # two replacements that meet are spaced once
    both = compile_pronunciations([Item("C++", "cpp"), Item("x", "ex")])
    assert apply_pronunciations("C++x", both).text == "cpp ex"


def test_a_spaced_alias_keeps_the_map_to_the_clients_words():
    prons = compile_pronunciations([Item("&", "and")])
    sub = apply_pronunciations("R&D, AT&T", prons)
    assert sub.text == "R and D, AT and T"
    assert sub.spans == ((1, 2, 1, 6), (7, 8, 11, 16))
    assert [sub.to_original(i) for i in range(len(sub.text))] == \
        [0, 1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 7, 7, 7, 7, 8]
    n = normalize_pronounced("R&D, AT&T", "en", "auto", prons)
    assert n.original_words == ["R&D,", "AT&T"]
    assert [a.normalized for a in n.alignment] == [("R", "and", "D,"), ("AT", "and", "T")]
    assert n.text.split() == n.normalized_words


# --- equivalent spellings: NFC and the typographic apostrophe --------------------------------------


def test_canonically_equivalent_spellings_match_and_offsets_stay_the_clients():
    nfc, nfd = "café", unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    for key in (nfc, nfd):
        prons = compile_pronunciations([Item(key, "kaffay")])
        for form in (nfc, nfd):
            text = f"Crème brûlée at the {form}, {form.upper()}!"
            text = unicodedata.normalize("NFD", text) if form == nfd else text
            sub = apply_pronunciations(text, prons)
            assert sub.text == text.replace(form, "kaffay").replace(form.upper(), "KAFFAY")
            assert [text[a:b] for a, b, _, _ in sub.spans] == [form, form.upper()]
            n = normalize_pronounced(text, "en", "off", prons)
            assert n.original_words == text.split()
            assert n.normalized_words == text.split()[:4] + ["kaffay,", "KAFFAY!"]
            assert [a.start_char for a in n.alignment] == [m.start() for m in re.finditer(r"\S+", text)]
    # no partial match inside a composed character: "cafe" is not "café"
    assert apply_pronunciations(nfd, compile_pronunciations([Item("cafe", "x")])).spans == ()


def test_typographic_and_straight_apostrophes_are_the_same():
    for key in ("don't", "don’t"):
        prons = compile_pronunciations([Item(key, "dont")])
        assert apply_pronunciations("I don’t, you don't.", prons).text == "I dont, you dont."
    sub = apply_pronunciations("Rock ’n’ roll", compile_pronunciations([Item("'n'", "and")]))
    assert (sub.text, sub.spans) == ("Rock and roll", ((5, 8, 5, 8),))


# --- the indexed matcher against the plain one -----------------------------------------------------


_OPEN_REF = "\"'([{¿¡«“‘„‹-–—/"
_CLOSE_REF = "\"'.,;:!?)]}»”’›…-–—/"
_SENTENCE_START_REF = re.compile(r"(?:\A\s*|[.!?…][\"')\]}»”’›]*\s+)[\"'(\[{«“‘„‹¿¡]*\Z")


def _edges_ok(key: str, m: re.Match) -> bool:
    """Whole words: a word edge of the key is not next to a word character, a symbol edge not next
    to another symbol (bar opening/closing punctuation); a combining mark is part of its word."""
    word = lambda c: bool(re.fullmatch(r"\w", c))  # noqa: E731
    mark = lambda c: unicodedata.category(c).startswith("M")  # noqa: E731
    before, after = m.string[m.start() - 1:m.start()], m.string[m.end():m.end() + 1]
    if before and mark(m.group()[0]):
        return False
    if before and (word(before) or mark(before) if word(key[0]) else
                   not (word(before) or mark(before) or before.isspace() or before in _OPEN_REF)):
        return False
    return not after or not (mark(after) or (word(after) if word(key[-1]) else
                                             not (word(after) or after.isspace() or after in _CLOSE_REF)))


def _reference(text: str, items: list[Item]) -> tuple[str, tuple[tuple[int, int, int, int], ...]]:
    """The matching rules as written in the module docstring, the slow way: at every position, every
    entry's own regex, longest key first then listed first (``text``: already NFC, with "'")."""
    entries = []
    for item in items:
        key, alias = unicodedata.normalize("NFC", item.text.strip().replace("’", "'")), item.alias.strip()
        if not key:
            continue
        body = lambda k: r"\s+".join(re.escape(part) for part in k.split())  # noqa: E731
        forms = [(re.compile(body(key), 0 if item.case_sensitive else re.I), False)]
        if item.case_sensitive and key[0].upper() != key[0]:
            forms.append((re.compile(body(key[0].upper() + key[1:])), True))
        entries.append((key, alias, forms))
    entries.sort(key=lambda e: -len(e[0]))  # stable: ties keep the listed order
    out, spans, pos, last = [], [], 0, 0
    while pos < len(text):
        for key, alias, forms in entries:
            m = next((m for rx, capital in forms if (m := rx.match(text, pos)) and _edges_ok(key, m)
                      and (not capital or _SENTENCE_START_REF.search(text[:pos]))), None)
            if m:
                break
        else:
            pos += 1
            continue
        rep = _match_case(alias, m.group(), key)
        before = out[-1][-1:] if out else ""
        kept = text[last:m.start()]
        if kept:
            before = kept[-1]
        if re.match(r"\w", before) and rep[0].isalnum():
            rep = " " + rep
        if re.match(r"\w", text[m.end():m.end() + 1]) and rep[-1].isalnum():
            rep += " "
        new_start = sum(map(len, out)) + len(kept)
        out += [kept, rep]
        spans.append((m.start(), m.end(), new_start, new_start + len(rep)))
        pos = last = m.end()
    return ("".join(out) + text[last:], tuple(spans)) if spans else (text, ())


_CHARS = "aAbBsSſiIıİkKKéÉßẞ1 \n\u0301\u0307&+.-/!?'\"()…"
_keys = st.text(_CHARS, min_size=1, max_size=6).filter(lambda s: bool(s.strip()))
_items = st.lists(st.builds(Item, _keys, st.text("xyXY &1", min_size=1).filter(str.strip),
                            st.sampled_from([None, False, True])), max_size=8)


@st.composite
def _dictionary_and_text(draw):
    items = draw(_items)
    pieces = [draw(st.one_of(st.text(_CHARS, max_size=4), st.sampled_from(items).map(lambda i: i.text)
                             if items else st.just(""), st.sampled_from(["Ab", "AB", "ab", ". ", " ", "s"])))
              for _ in range(draw(st.integers(0, 10)))]
    flip = draw(st.lists(st.booleans(), min_size=sum(map(len, pieces)), max_size=sum(map(len, pieces))))
    text = "".join(c.swapcase() if f else c for c, f in zip("".join(pieces), flip))
    return items, text


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dictionary_and_text())
def test_the_indexed_matcher_agrees_with_one_regex_per_entry(case):
    items, text = case
    text = unicodedata.normalize("NFC", text)
    sub = apply_pronunciations(text, compile_pronunciations(items))
    assert (sub.text, sub.spans) == _reference(text, items)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dictionary_and_text(), st.booleans(), st.booleans())
def test_any_equivalent_spelling_of_a_text_is_read_the_same(case, decompose, curly):
    items, text = case
    text = unicodedata.normalize("NFC", text)
    variant = unicodedata.normalize("NFD", text) if decompose else text
    variant = variant.replace("'", "’") if curly else variant
    prons = compile_pronunciations(items)
    plain, other = apply_pronunciations(text, prons), apply_pronunciations(variant, prons)
    canonical = lambda s: unicodedata.normalize("NFC", s.replace("’", "'"))  # noqa: E731
    assert canonical(other.text) == canonical(plain.text)
    assert [canonical(variant[a:b]) for a, b, _, _ in other.spans] == [text[a:b] for a, b, _, _ in plain.spans]
    # outside the replacements the client's text is kept as sent, and its tokens are reported
    assert all(other.to_original(i) == i for i in range(other.spans[0][2] if other.spans else len(variant)))
    assert normalize_pronounced(variant, "en", "off", prons).original_words == variant.split()


def test_a_large_dictionary_agrees_with_one_regex_per_entry():
    rng = random.Random(7)
    items = [Item(f"ab{i}", f"alias {i}", case_sensitive=i % 3 == 0) for i in range(1000)]
    items += [Item("ab1 ab2", "pair"), Item("ab&", "amp"), Item("ab", "short")]
    words = ["ab", "AB", "Ab12", "ab1 ab2", "ab&", "ab999", "ab1000", "the", "ab7.", "(ab42)", "ab5-ab6"]
    text = " ".join(rng.choice(words) for _ in range(120))
    sub = apply_pronunciations(text, compile_pronunciations(items))
    assert len(sub.spans) > 60
    assert (sub.text, sub.spans) == _reference(text, items)


def test_compiled_dictionaries_are_bounded_by_their_size():
    def big(n: int) -> list[Item]:
        return [Item(f"k{n}x{i:04d}" + "x" * 240, "y" * 256) for i in range(1000)]
    first = compile_pronunciations(big(0))
    small = compile_pronunciations([Item("SQL", "sequel")])
    for n in range(1, 12):  # a dozen dictionaries at the entry limits: about 6 MB of entries
        compile_pronunciations(big(n))
        assert compile_pronunciations([Item("SQL", "sequel")]) is small  # in use: kept
    assert compile_pronunciations(big(0)) is not first  # the oldest was dropped
