"""TextBuffer: sentence/clause boundaries on streamed text, exact concatenation, force."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.text.normalization import normalize
from api.text.segmentation import TextBuffer


def feed(pieces, force_at_end=False, **kwargs):
    buf = TextBuffer(**kwargs)
    out = []
    for piece in pieces:
        buf.append(piece)
        out += buf.take_ready()
    if force_at_end:
        out += buf.take_ready(force=True)
    return out, buf.pending


def test_sentences_split_after_their_trailing_space():
    out, rest = feed(["Hello ", "world. How", " are you? I'm fine! Ok"])
    assert out == ["Hello world. ", "How are you? ", "I'm fine! "]
    assert rest == "Ok"


def test_eager_end_of_buffer():
    assert feed(["Hello world."]) == (["Hello world."], "")
    assert feed(["Really?"]) == (["Really?"], "")
    # Without eagerness the period waits for what follows.
    assert feed(["Hello world."], eager=False) == ([], "Hello world.")
    assert feed(["Hello world.", " Bye"], eager=False) == (["Hello world. "], "Bye")


@pytest.mark.parametrize(
    "text",
    [
        "Dr. Smith arrived",
        "Mr. and Mrs. Jones came",
        "We need fruit, e.g. apples",
        "That is, i.e. this one",
        "Apples vs. oranges",
        "La Sra. García y la Dra. Ruiz",
        "De heer, bijv. Jansen",
        "It costs 3.5 dollars",
        "J. K. Rowling wrote",
        "Call me approx. five times",
        "Wait... what",
        "Main St. is long",
    ],
)
def test_no_split_inside_sentences(text):
    out, rest = feed([text + " and more"])
    assert out == [] and rest == text + " and more"


def test_number_then_period_waits_for_the_next_piece():
    assert feed(["I have 3."]) == ([], "I have 3.")
    assert feed(["I have 3.", "5 apples. Ok"]) == (["I have 3.5 apples. "], "Ok")
    assert feed(["I have 3.", " Then"]) == (["I have 3. "], "Then")


def test_list_numbers_are_not_sentences():
    assert feed(["1. First item. 2. Second"]) == (["1. First item. "], "2. Second")
    # a number starting a line is an item's, streamed or not: each item is a segment, said as soon
    # as its line is complete (a bullet's too; "-5" is no bullet)
    steps = ["Here are the steps:\n", "1.", " Mix it\n2", ". Bake it\n", "Enjoy!"]
    assert feed(steps) == (["Here are the steps:\n", "1. Mix it\n", "2. Bake it\nEnjoy!"], "")
    assert feed(["Options:\n- Paris\n", "  * Rome\n-", "5 degrees\n- Oslo"]) == (
        ["Options:\n", "- Paris\n", "  * Rome\n-5 degrees\n"], "- Oslo")
    assert feed(["I was number 1. Then more."]) == (["I was number 1. ", "Then more."], "")  # inside a line: a stop
    # a table's rows too, each read with a pause after each cell and a stop at its end
    table = ["Plans:\n| Plan | Price |\n|---|---|\n| Ba", "sic | $10 |\n", "| Pro | $25 |"]
    segments, rest = feed(table, force_at_end=True)
    assert segments == ["Plans:\n", "| Plan | Price |\n|---|---|\n", "| Basic | $10 |\n", "| Pro | $25 |"]
    assert [normalize(s, "en").text.strip() for s in segments] == [
        "Plans:", "Plan, Price.", "Basic, ten dollars.", "Pro, twenty-five dollars."]


def test_abbreviation_that_can_end_a_sentence():
    out, rest = feed(["Apples, pears, etc. Bananas too. Then"])
    assert out == ["Apples, pears, etc. ", "Bananas too. "]
    out, rest = feed(["We saw the U.S. It was big. Then"])
    assert out == ["We saw the U.S. ", "It was big. "]


@pytest.mark.parametrize(
    ("text", "language", "reading"),
    [
        ("We flew to St. Louis today.", "en", "We flew to Saint Louis today."),
        ("We saw St. Peter's Basilica.", "en", "We saw Saint Peter's Basilica."),
        ("El Sr. García llegó tarde.", "es", "El Señor García llegó tarde."),
        ("O Sr. Silva chegou.", "pt", "O Senhor Silva chegou."),
    ],
)
def test_an_abbreviation_read_before_a_name_never_ends_a_sentence(text, language, reading):
    """A cut after "St." / "Sr." would have the normaliser read the first segment on its own
    ("...to Street.", "El Señor.") and the engine speak it as a sentence of its own."""
    segments, rest = feed([text], force_at_end=True, max_chars=400)
    assert segments == [text] and rest == ""
    assert normalize(segments[0], language).text == reading


@pytest.mark.parametrize(
    ("pieces", "said"),
    [
        (["We're open 9 a.m. Monday through Friday. Ok"], "We're open nine a m Monday through Friday."),
        (["Call at 3 p.m. Eastern time. Ok"], "Call at three p m Eastern time."),
        (["It starts at 5 p.m. EST on Friday. Ok"], "It starts at five p m EST on Friday."),
        (["See you at 4 p.m. Mon", "day morning. Ok"], "See you at four p m Monday morning."),  # a day still arriving
    ],
)
def test_a_time_goes_on_after_its_meridiem_before_a_day_a_month_or_a_zone(pieces, said):
    """A cut after "a.m." would have the first segment said as a sentence of its own ("nine a m.")
    and the day or zone start the next."""
    segments, rest = feed(pieces)
    assert len(segments) == 1 and rest == "Ok"
    assert normalize(segments[0].strip(), "en").text == said


def test_a_meridiem_still_ends_a_sentence_before_another_word():
    assert feed(["Meet me at 5 p.m. Then we eat. Ok"]) == (["Meet me at 5 p.m. ", "Then we eat. "], "Ok")


def test_an_abbreviation_read_only_before_a_number_is_a_word_elsewhere():
    assert feed(["I said no. Then he left. No. 5 is mine. Ok"]) == (
        ["I said no. ", "Then he left. ", "No. 5 is mine. "], "Ok")


@pytest.mark.parametrize(
    ("pieces", "language", "said"),
    [
        (["Model No. XR-7 is in stock. Ok"], "en", "Model Number XR seven is in stock."),
        (["Part no. A12B fits. Ok"], "en", "Part number A one two B fits."),
        (["Model No. ", "X", "R-7 is in stock. Ok"], "en", "Model Number XR seven is in stock."),  # a code arriving
        (["Artikel nr. AB-12 is binnen. Ok"], "nl", "Artikel nummer AB één twee is binnen."),
    ],
)
def test_no_before_a_records_code_does_not_end_a_sentence(pieces, language, said):
    """A cut after "No." would leave it unread at the end of its own segment ("Model No.") and
    the code start a sentence of its own."""
    segments, rest = feed(pieces)
    assert len(segments) == 1 and rest == "Ok"
    assert normalize(segments[0].strip(), language).text == said


def test_no_after_a_records_noun_still_ends_a_sentence_before_a_word():
    assert feed(["Is it the right model? Model No. Then we wait. Ok"]) == (
        ["Is it the right model? ", "Model No. ", "Then we wait. "], "Ok")


@pytest.mark.parametrize(
    "text",
    ["We met on Jan. 5 and left.", "It happened on Sept. 11 that year.", "See Fig. 3 for details.",
     "It is on p. 12 of the book.", "Call ext. 204 after noon.", "See Tab. 4 below.",
     "Read Sec. 2 first."],
)
def test_a_short_abbreviation_before_a_number_does_not_end_a_sentence(text):
    assert feed([text], force_at_end=True) == ([text], "")


def test_a_number_after_a_short_word_may_still_start_a_list_item():
    assert feed(["See Fig. 3. It shows"]) == (["See Fig. 3. "], "It shows")
    assert feed(["Buy milk. 2. Buy eggs. Ok"]) == (["Buy milk. ", "2. Buy eggs. "], "Ok")


@pytest.mark.parametrize(
    "pieces",
    [
        ["It costs $", "3", ".", "50", " today."],
        ["Upgrade to Python 3", ".", "11", ".", "4", " now."],
        ["Ping 192", ".", "168", ".", "1", ".", "1", " please."],
        ["It fell to -3", ".", "5 degrees."],
        ["That is 1,000", ".", "50 dollars."],
        ["Send it to me@example", ".", "com today."],
        ["Go to example.com/search?", "q=tts now."],
        ["Open https://example", ".", "com/a!", "b now."],
        ["We met on Jan", ".", " 5 and left."],
    ],
)
def test_a_mark_at_the_end_of_a_piece_waits_inside_numbers_and_addresses(pieces):
    """LLM token streams break right after the "." of "$3.50", "3.11.4" or "example.com": the
    segment must not end there (it would be spoken as two sentences, "three." "fifty")."""
    assert feed(pieces, force_at_end=True) == (["".join(pieces)], "")


@pytest.mark.parametrize(
    "piece", ["Hello world.", "Really?", "I won't!", "It's well-known.", "(He left).", 'He said "Stop!', "我有3个。"]
)
def test_a_mark_after_an_ordinary_word_still_ends_the_piece_at_once(piece):
    assert feed([piece]) == ([piece], "")


def test_after_a_space_a_number_or_address_is_complete():
    assert feed(["It costs $3. "]) == (["It costs $3. "], "")
    assert feed(["Try example.com/search? "]) == (["Try example.com/search? "], "")


def test_take_whole_words_keeps_the_word_being_typed():
    buf = TextBuffer()
    buf.append("Done. The quick brown fo")
    assert buf.take_whole_words() == ["Done. ", "The quick brown "] and buf.pending == "fo"
    buf.append("x jumps ")
    assert buf.take_whole_words() == ["fox jumps "] and buf.pending == ""
    buf.append("  lonely")  # one word is all there is: the client went quiet, say it
    assert buf.take_whole_words() == ["  lonely"] and buf.pending == ""
    buf.append("   ")
    assert buf.take_whole_words() == [] and buf.pending == ""


@pytest.mark.parametrize("text, said, kept", [
    # words read together stay together: the cut falls between plain words before them
    ("The total for the order is $5 million", "The total for the order ", "is $5 million"),
    ("costs $5 million dollars", "costs ", "$5 million dollars"),
    ("a price of $2 mil millones", "a price ", "of $2 mil millones"),
    ("I will see you at 9 AM", "I will see you ", "at 9 AM"),
    ("we meet on March 5", "we meet ", "on March 5"),
    ("It costs $5 ", "It costs ", "$5 "),  # a number just ended may have its scale still coming
    ("It costs $5 million", "It costs ", "$5 million"),  # no plain pair: before the number
    # plain words: before the last one, as ever; none near, or no case: as ever too
    ("the price is about", "the price is ", "about"),
    ("1 2 3 4 5 6 7 8 9", "1 2 3 4 5 6 7 8 ", "9"),
    ("$5 million", "$5 ", "million"),
])
def test_the_timer_cut_keeps_words_read_together_whole(text, said, kept):
    buf = TextBuffer()
    buf.append(text)
    assert buf.take_whole_words() == [said] and buf.pending == kept
    buf.append(" more")  # what was kept is said with what follows it
    assert buf.take_ready(force=True) == [kept + " more"]


def test_closing_quotes_and_brackets_stay_with_the_sentence():
    out, _ = feed(['He said "Stop." Then (he left.) Done'])
    assert out == ['He said "Stop." ', "Then (he left.) "]


def test_cjk_and_spanish_marks():
    out, rest = feed(["你好。我很好！谢谢你？再见"])
    assert out == ["你好。", "我很好！", "谢谢你？"] and rest == "再见"
    out, rest = feed(["¿Qué tal? ¡Bien! Sigue"])
    assert out == ["¿Qué tal? ", "¡Bien! "] and rest == "Sigue"


def test_ellipsis_and_repeated_marks_are_one_boundary():
    out, rest = feed(["Wait... What?! No… Yes"])
    assert out == ["Wait... ", "What?! ", "No… "] and rest == "Yes"
    assert feed(["Well..."]) == ([], "Well...")


def test_clause_boundaries_only_when_long_enough():
    text = "One, two, three; four: and a long clause, yes"
    assert feed([text]) == ([], text)
    out, rest = feed([text], clause_min_chars=12)
    assert out == ["One, two, three; ", "four: and a long clause, "] and rest == "yes"
    # "3,5" and "3:30" have no space after the mark.
    assert feed(["At 3:30 we paid 3,5 euros"], clause_min_chars=1) == ([], "At 3:30 we paid 3,5 euros")


def test_max_chars_cuts_at_whitespace():
    out, rest = feed(["a" * 30 + " " + "b" * 30], max_chars=40)
    assert out == ["a" * 30 + " "] and rest == "b" * 30
    out, rest = feed(["c" * 50], max_chars=20)
    assert out == ["c" * 20, "c" * 20] and rest == "c" * 10


def test_force_returns_the_rest_and_drops_blank_segments():
    buf = TextBuffer()
    buf.append("No end here")
    assert buf.take_ready() == []
    assert buf.take_ready(force=True) == ["No end here"]
    assert buf.pending == ""
    buf.append("   \n ")
    assert buf.take_ready(force=True) == []
    assert buf.pending == ""
    assert buf.take_ready(force=True) == []


def test_clear_returns_pending():
    buf = TextBuffer()
    buf.append("Hello there")
    assert buf.clear() == "Hello there" and len(buf) == 0


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="clause_min_chars must be >= 1 or None, got 0"):
        TextBuffer(clause_min_chars=0)
    with pytest.raises(ValueError, match="max_chars"):
        TextBuffer(max_chars=-1)
    with pytest.raises(TypeError, match="got NoneType"):
        TextBuffer().append(None)


_PIECES = st.lists(
    st.sampled_from(list("ab Dr.,;!?3\n…。") + [" e.g. ", "Mr. ", " 3.5 ", "U.S.", "etc. "]),
    max_size=6,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=12))
def test_segments_concatenate_exactly(pieces):
    """Whatever the pieces, the segments are the appended text in order, with only
    whitespace-only stretches left out, and nothing is left pending after a force."""
    joined = "".join(pieces)
    for kwargs in ({}, {"clause_min_chars": 5, "max_chars": 25}, {"eager": False}):
        buf = TextBuffer(**kwargs)
        segments = []
        for piece in pieces:
            buf.append(piece)
            segments += buf.take_ready()
        segments += buf.take_ready(force=True)
        assert all(s.strip() for s in segments) and buf.pending == ""
        pos = 0
        for segment in segments:
            idx = joined.find(segment, pos)
            assert idx >= 0 and joined[pos:idx].strip() == ""
            pos = idx + len(segment)
        assert joined[pos:].strip() == ""
