"""Transcript tags (api/text/markup.py, api/text/markup_reading.py): which text is markup, the values
and their errors, and what the model reads for a segment with tags, with the client's tokens kept."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.text.errors import InvalidMarkupError
from api.text.markup import MAX_BREAK_S, MarkupState, TagKind, parse, scan
from api.text.markup_reading import read_markup, spell_words
from api.text.normalization import normalize, rules_for
from api.text.pronunciation import compile_pronunciations


@dataclass(frozen=True)
class Item:
    text: str
    alias: str
    case_sensitive: bool = False


def read(text: str, language: str = "en", mode: str = "auto", prons=None):
    return read_markup(parse(text), language, mode, prons)


def kinds(text: str) -> list[str]:
    return [s.kind.value for s in scan(text).spans]


# --- syntax ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ('Hello.<break time="1s"/>World.', ["break"]),
    ("<break time='500ms'/>", ["break"]),  # single quotes
    ('<break time = "1s" />', ["break"]),  # spaces around "=" and before "/>"
    ('<break time="1s">', ["break"]),  # the "/" may be left out
    ('<break time="1s" / >', ["break"]),  # spaces on either side of the "/", as LLMs write it
    ('<break time="1s"/ > a </spell >', ["break", "end"]),
    ('<BREAK Time="1s"/>', ["break"]),  # any case
    ('<speed ratio="1.5"/> fast <volume ratio="0.5"/> soft', ["speed", "volume"]),
    ('<emotion value="angry" /> no!', ["emotion"]),
    ("<spell>A. B. C.</spell> ok", ["spell"]),  # one span, whatever it holds
    ("a </speed> b </spell>", ["end", "end"]),  # closing tags that close nothing
])
def test_well_formed_known_tags_are_markup(text, expected):
    found = scan(text)
    assert [s.kind.value for s in found.spans] == expected and found.open_at is None


@pytest.mark.parametrize("text", [
    "if a < b then", "x <3 y", "<b>bold</b>", "<break time=1s/>", "<breaktime='1s'/>", "a <br> b",
    "<p class='x'>", "I <3 you", "1 < 2 > 0", '<break time="' + "1" * 120 + 's"/>',
])
def test_anything_else_in_angle_brackets_stays_text(text):
    found = scan(text)
    assert found.spans == () and found.open_at is None
    assert read(text) == normalize(text, "en", "auto")  # read exactly as before tags existed


@pytest.mark.parametrize("text, open_at", [
    ("Hello <break ti", 6), ("Hello <", 6), ("a </spe", 2), ("<bre", 0), ('<break time="1', 0),
    ('x <break time="1s" /', 2), ('x <break time="1s" / ', 2), ('<speed ratio=', 0), ("Say <spell>AB", 4), ("<spell>A. B", 0),
    ('<spell>12<break time="1s"/>', 0),  # everything after an open <spell> belongs to it
])
def test_unfinished_markup_at_the_end(text, open_at):
    assert scan(text).open_at == open_at


@pytest.mark.parametrize("text", ["a < b", "<3", "<x", "</x", "<breakfast", "< break"])
def test_a_stray_lt_at_the_end_is_not_unfinished_markup(text):
    assert scan(text).open_at is None


# --- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("tag, seconds", [
    ('<break time="1s"/>', 1.0), ('<break time="500ms"/>', 0.5), ('<break time="0.25s"/>', 0.25),
    ('<break time=".5s"/>', 0.5), ('<break time="0s"/>', 0.0), ('<break time="10s"/>', MAX_BREAK_S),
    ('<break time="10000ms"/>', MAX_BREAK_S), ("<break time=' 2 S '/>", 2.0),
])
def test_break_times(tag, seconds):
    assert parse(tag).pause_s == pytest.approx(seconds)


def test_breaks_add_up_and_speed_and_volume_hold_until_the_next_tag():
    m = parse('<speed ratio="0.6"/>A<volume ratio="2.0"/>B<speed ratio="1.5"/> <break time="1s"/><break time="250ms"/>')
    assert m.pause_s == pytest.approx(1.25)
    state = MarkupState()
    m.apply(state)
    assert (state.speed, state.volume) == (1.5, 2.0)
    parse('<volume ratio="0.5"/>').apply(state)
    assert (state.speed, state.volume) == (1.5, 0.5)
    parse("no tags").apply(state)
    assert (state.speed, state.volume) == (1.5, 0.5)


@pytest.mark.parametrize("tag, message", [
    ('<break time="abc"/>', """<break time="abc"/>: time 'abc' is not a duration from 0 to 10 s"""),
    ('<break time="-1s"/>', "time '-1s' is not a duration"),
    ('<break time="1"/>', "time '1' is not a duration"),
    ('<break time="1 min"/>', "time '1 min' is not a duration"),
    ('<break time="10.5s"/>', "time '10.5s' is longer than the 10 s a break may last"),
    ('<break time="20000ms"/>', "time '20000ms' is longer than the 10 s"),
    ("<break/>", '<break/>: <break> needs a time attribute, as in <break time="1s"/>'),
    ('<break strength="weak"/>', "unknown attribute 'strength'; <break> takes only time"),
    ('<break time="1s" time="2s"/>', "attribute 'time' is given twice"),
    ('<speed ratio="2"/>', """<speed ratio="2"/>: ratio '2' must be a number from 0.6 to 1.5"""),
    ('<speed ratio="0.5"/>', "ratio '0.5' must be a number from 0.6 to 1.5"),
    ('<speed ratio="fast"/>', "ratio 'fast' must be a number from 0.6 to 1.5"),
    ('<speed ratio="-1"/>', "ratio '-1' must be a number"),
    ('<volume ratio="2.5"/>', "ratio '2.5' must be a number from 0.5 to 2"),
    ('<volume ratio="0.1"/>', "ratio '0.1' must be a number from 0.5 to 2"),
    ("<volume/>", "<volume> needs a ratio attribute"),
    ("<spell/>", "<spell> wraps the text to spell"),
    ('<spell mode="x">A</spell>', "<spell> takes no attributes"),
    ('<spell>12<break time="1s"/>34</spell>', 'cannot hold other tags: found <break time="1s"/> inside it'),
    ("<spell>12<spell>34</spell>", "cannot hold other tags: found <spell> inside it"),
    ('</spell x="1">', "a closing tag takes no attributes"),
])
def test_a_known_tag_with_a_bad_value_names_the_tag_and_the_value(tag, message):
    with pytest.raises(InvalidMarkupError) as err:
        parse(f"Hello {tag} world.")
    assert message in str(err.value)


def test_a_spell_span_of_the_most_characters_is_spelled():
    assert len(read("<spell>" + "A" * 200 + "</spell>").normalized_words) == 200


@pytest.mark.parametrize("closing", ["</spell>", ""])
def test_a_spell_not_closed_within_the_most_a_span_holds_is_a_slip_read_as_text(closing):
    """An LLM that forgets </spell> (or closes it 201 characters later) loses the tag, not its turn:
    the opener is dropped and what follows is read as text (a stray </spell> is dropped too). It used
    to hold the rest of a WebSocket turn, then fail it with invalid_markup at the flush."""
    rest = "Your code is ready. " * 11  # 220 characters
    found = scan("Say <spell>" + rest + closing)
    assert found.open_at is None and [s.kind for s in found.spans] == [TagKind.END] * (2 if closing else 1)
    n = read("Say <spell>" + rest + closing)
    assert n.original_words == ("Say " + rest).split() and "spell" not in n.text
    # shorter than that, the span may still close: it waits (and spells to the end of a whole text)
    assert scan("Say <spell>" + rest[:150]).open_at == 4


def test_ratio_bounds_are_included_and_emotion_is_accepted_whatever_it_says():
    for tag in ('<speed ratio="0.6"/>', '<speed ratio="1.5"/>', '<volume ratio="0.5"/>', '<volume ratio="2.0"/>',
                '<emotion value="angry"/>', '<emotion value="whatever" intensity="9"/>', "<emotion/>"):
        parse(tag)  # no error


def test_a_text_is_complete_an_unfinished_tag_is_dropped_an_unclosed_spell_spells_to_the_end():
    assert read("Hello <break ti").text.split() == ["Hello"]
    assert read("Hello <").original_words == ["Hello"]
    spelled = read("Code <spell>AB")
    assert spelled.normalized_words == ["Code", "A", "B"] and spelled.original_words == ["Code", "AB"]
    assert read("Code <spell>AB<break ti").normalized_words == ["Code", "A", "B"]


# --- what is read ---------------------------------------------------------------------------------


def test_tags_are_not_read_and_are_not_words():
    """Before: 'Sonic.<break' and 'time="1s"/>Nice' were tokens, read as 'time=" one s">'."""
    text = 'Hello, my name is Sonic.<break time="1s"/>Nice to meet you.'
    assert normalize(text).text == 'Hello, my name is Sonic.<break time=" one s"> Nice to meet you.'  # the old reading
    n = read(text)
    assert n.text == "Hello, my name is Sonic. Nice to meet you."
    assert n.original_words == ["Hello,", "my", "name", "is", "Sonic.", "Nice", "to", "meet", "you."]
    assert n.original == text and text[n.alignment[5].start_char:].startswith("Nice")
    n = read('<speed ratio="1.2"/><emotion value="sad"/>I have 5 USD <volume ratio="0.8"/>now.')
    assert n.text.split() == ["I", "have", "five", "dollars", "now."]
    assert n.original_words == ["I", "have", "5", "USD", "now."]


@pytest.mark.parametrize("content, language, words", [
    ("ABC-123", "en", ["A", "B", "C,", "one", "two", "three"]),
    ("(123) 456-7890", "en", "one two three, four five six, seven eight nine zero".split()),
    ("1234-5678", "en", "one two three four, five six seven eight".split()),
    ("Bob", "en", ["B", "O", "B"]),
    ("ab12", "es", ["A", "B", "uno", "dos"]),
    ("ab12", "pt-BR", ["A", "B", "um", "dois"]),
    ("ab12", "nl", ["A", "B", "één", "twee"]),
    ("ab12", "ja", ["A", "B", "1", "2"]),  # no number words for the language: the digit itself
    ("x@y.io", "en", ["X,", "Y,", "I", "O"]),
    ("x²", "en", ["X", "two"]),  # a raised or lowered digit is its digit
    ("H₂O", "es", ["H", "dos", "O"]),
    ("--", "en", []),
])
def test_spell_reads_characters_one_by_one(content, language, words):
    n = read(f"<spell>{content}</spell>", language)
    assert n.normalized_words == words
    assert n.original_words == content.split()


def test_spell_applies_with_normalization_off_and_the_dictionary_never_touches_it_or_a_tag():
    off = read("My code is <spell>AB12</spell>, 5 left.", mode="off")
    assert off.normalized_words == ["My", "code", "is", "A", "B", "one", "two,", "5", "left."]
    prons = compile_pronunciations([Item("AB", "ay bee"), Item("break", "brake"), Item("time", "thyme"),
                                    Item("spell", "spiel")])
    n = read('time <break time="1s"/>AB <spell>AB</spell> spell', prons=prons)
    assert n.text.split() == ["thyme", "ay", "bee", "A", "B", "spiel"]
    assert n.original_words == ["time", "AB", "AB", "spell"]


def test_punctuation_against_a_spell_span_belongs_to_it():
    n = read("My account number is <spell>ABC-123</spell>, my phone is (<spell>555</spell>).")
    assert n.original_words == ["My", "account", "number", "is", "ABC-123,", "my", "phone", "is", "(555)."]
    assert n.normalized_words[4:10] == ["A", "B", "C,", "one", "two", "three,"]
    assert n.normalized_words[-3:] == ["(five", "five", "five)."]


def test_spell_words_helper():
    en = rules_for("en")
    assert spell_words(["A1", "b"], en) == [["A", "one,"], ["B"]]
    assert spell_words(["ß"], None) == [["ß"]]


_PIECES = st.sampled_from([
    "Hello", "world.", " ", "  ", "5", "$3.50", "Dr.", "<", ">", "a<b", '<break time="1s"/>',
    '<break time="250ms"/>', '<speed ratio="1.2"/>', '<volume ratio="0.7"/>', '<emotion value="sad"/>',
    "<spell>AB-12</spell>", "<spell>(555) 123</spell>", "</spell>", "<spell>", "<b>", ",", ".", "é", "\n",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12))
def test_any_mix_reads_with_a_consistent_alignment(pieces):
    text = "".join(pieces)
    try:
        n = read(text)
    except InvalidMarkupError as exc:  # every value here is good: only a tag inside a spell span is wrong
        assert "<spell>...</spell> cannot hold other tags" in str(exc) and "<spell>" in text
        return
    assert n.text.split() == n.normalized_words
    assert n.original == text
    for entry in n.alignment:
        assert "<break" not in entry.original and "<spell>" not in entry.original
    if "<" not in text:
        assert n == normalize(text)
