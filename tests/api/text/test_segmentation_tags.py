"""TextBuffer with transcript tags: never a cut inside a tag or a spell span, a break ends its
segment, speed and volume start one, and unfinished markup waits for its rest at every cut but a
plain forced one, however the text is split across appends."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.text.markup import scan
from api.text.segmentation import TextBuffer

BREAK = '<break time="1s"/>'


def feed(pieces, **kwargs):
    buf = TextBuffer(**kwargs)
    out = []
    for piece in pieces:
        buf.append(piece)
        out += buf.take_ready()
    return out, buf.pending


def whole(segments: list[str]) -> bool:
    """Every segment holds whole tags and spell spans only."""
    return all(scan(s).open_at is None for s in segments)


def test_a_break_ends_its_segment_with_the_breaks_right_after_it():
    assert feed([f"Hello.{BREAK}World."]) == ([f"Hello.{BREAK}", "World."], "")
    assert feed([f"Hello{BREAK}world"]) == ([f"Hello{BREAK}"], "world")  # mid-sentence too
    two = f'Hello {BREAK} <break time="500ms"/> World. Next'
    assert feed([two]) == ([f'Hello {BREAK} <break time="500ms"/> ', "World. "], "Next")
    assert feed([f"{BREAK}Hello."]) == ([BREAK, "Hello."], "")  # a pause before the first speech
    assert feed([f"你好。{BREAK}再见。"]) == ([f"你好。{BREAK}", "再见。"], "")


def test_speed_and_volume_start_a_segment():
    out, rest = feed(['Hi there <speed ratio="1.5"/> fast. <volume ratio="2"/>Loud.'])
    assert out == ["Hi there ", '<speed ratio="1.5"/> fast. ', '<volume ratio="2"/>Loud.'] and rest == ""
    # at the start there is nothing to cut off, and an emotion tag is no boundary
    assert feed(['<speed ratio="1.2"/><emotion value="sad"/>Hello there.']) == (
        ['<speed ratio="1.2"/><emotion value="sad"/>Hello there.'], "")


def test_a_sentence_mark_before_a_tag_ends_the_sentence():
    assert feed(["Hello.<spell>AB</spell> is it."]) == (["Hello.", "<spell>AB</spell> is it."], "")
    assert feed(['Done!<emotion value="sad"/>Oh.']) == (["Done!", '<emotion value="sad"/>Oh.'], "")
    assert feed(['<volume ratio="2"/>Loud.']) == (['<volume ratio="2"/>Loud.'], "")  # "Loud" is a plain word


def test_no_cut_inside_a_spell_span_or_a_tag():
    text = "Say <spell>A. B. C.</spell> now. Ok"
    assert feed([text]) == (["Say <spell>A. B. C.</spell> now. "], "Ok")
    assert feed(["Say <spell>A. B", ". C.</spell> now. Ok"]) == (["Say <spell>A. B. C.</spell> now. "], "Ok")
    # clause cuts and the length cap leave spans whole too
    out, rest = feed(["Call <spell>(555), 123-4567, ext</spell>, please, or write"], clause_min_chars=5)
    assert out == ["Call <spell>(555), 123-4567, ext</spell>, ", "please, "] and rest == "or write"
    out, rest = feed(["aaa bbb <spell>1 2 3 4 5 6 7 8</spell> ccc ddd eee"], max_chars=20)
    assert out == ["aaa bbb ", "<spell>1 2 3 4 5 6 7 8</spell> "] and rest == "ccc ddd eee"
    out, rest = feed(['Hi <emotion value="a b c d e f" /> g h i j k l'], max_chars=15)
    assert whole(out) and "".join(out) + rest == 'Hi <emotion value="a b c d e f" /> g h i j k l'


def test_unfinished_markup_waits_at_sentence_cuts():
    assert feed(["Hello world.<spe"]) == (["Hello world."], "<spe")  # the sentence before it goes
    assert feed(["Hello.<break ti", 'me="1s"/>World.']) == (["Hello.", BREAK, "World."], "")
    assert feed(["Say <spell>AB. CD. ", "EF</spell>. Next"]) == (["Say <spell>AB. CD. EF</spell>. "], "Next")
    assert feed(["a <"]) == ([], "a <")


def test_the_timer_cut_keeps_unfinished_markup_and_releases_the_words_before_it():
    buf = TextBuffer()
    buf.append("Hello wor<break ti")
    assert buf.take_whole_words() == ["Hello wor"] and buf.pending == "<break ti" and buf.waits_for_markup
    assert buf.take_whole_words() == [] and buf.pending == "<break ti"  # alone, it still waits
    buf.append('me="1s"/>')
    assert buf.take_ready() == [BREAK] and buf.pending == ""
    buf.append("Code <spell>1 2")
    assert buf.take_whole_words() == ["Code "] and buf.pending == "<spell>1 2"
    buf.append(" 3</spell> ok")
    assert buf.take_whole_words() == ["<spell>1 2 3</spell> "] and buf.pending == "ok"
    # a whole tag with spaces at the end is one word: the cut is not inside it
    buf = TextBuffer()
    buf.append('Hi <emotion value="sad" />')
    assert buf.take_whole_words() == ["Hi "] and buf.pending == '<emotion value="sad" />'
    assert not buf.waits_for_markup


def test_forced_cuts_hold_markup_only_when_asked():
    buf = TextBuffer()
    buf.append("Hi <spell>AB")
    assert buf.take_ready(force=True, hold_markup=True) == ["Hi "] and buf.pending == "<spell>AB"
    assert buf.take_ready(force=True, hold_markup=True) == [] and buf.waits_for_markup
    assert buf.take_ready(force=True) == ["<spell>AB"] and buf.pending == ""  # flush: it all goes
    buf.append("Hi <break ti")
    assert buf.take_ready(force=True) == ["Hi <break ti"]


def test_whitespace_before_unfinished_markup_still_waits():
    buf = TextBuffer()
    buf.append("  <brea")
    assert buf.waits_for_markup and buf.take_whole_words() == [] and buf.pending == "<brea"


SCRIPT = ('Hello, my name is Sonic.<break time="1s"/>Nice to meet you. My code is <spell>AB-12. 3</spell>, '
          'and <speed ratio="1.2"/>this is faster <volume ratio=\'0.5\'/>and softer.<break time="250ms"/> '
          '<emotion value="sad" />Bye. <break time="2s"/>')


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(SCRIPT)), max_size=6), st.booleans())
def test_any_split_gives_the_same_whole_tags(cuts, timer):
    """However the script arrives, and whenever the buffer timer fires, no segment splits markup,
    nothing is lost, and the break tags end their segments."""
    bounds = sorted(set(cuts) | {0, len(SCRIPT)})
    buf = TextBuffer(clause_min_chars=60, max_chars=250)
    out: list[str] = []
    for a, b in zip(bounds, bounds[1:]):
        buf.append(SCRIPT[a:b])
        out += buf.take_whole_words() if timer else buf.take_ready()
    out += buf.take_ready(force=True)
    assert "".join("".join(out).split()) == "".join(SCRIPT.split())  # only whitespace-only segments are dropped
    assert whole(out)
    for segment in out:
        spans = scan(segment).spans
        breaks = [s for s in spans if s.kind.value == "break"]
        if breaks:  # after its breaks, a segment has nothing but whitespace
            assert not segment[breaks[-1].end:].strip()
        for s in spans:
            if s.kind.value in ("speed", "volume"):  # before a speed or volume tag: tags or blanks only
                assert not segment[:s.start].replace('<emotion value="sad" />', "").strip()


@pytest.mark.parametrize("text", ["a < b. ", "I <3 you. ", "x<y and y>z. "])
def test_text_with_angle_brackets_is_cut_as_before(text):
    assert feed([text]) == ([text], "")


def test_a_spell_left_open_holds_text_only_until_it_cannot_be_a_span():
    """Streaming after a "<spell>" that is never closed: the text waits while it may still be a span,
    and flows as sentences once it holds more than a span may (the tag is then a dropped slip)."""
    buf = TextBuffer(clause_min_chars=None, max_chars=400)
    buf.append("Your code is <spell>AB")
    assert buf.take_ready() == [] and scan(buf.pending).open_at == len("Your code is ")
    for _ in range(12):
        buf.append(" and then some more words.")
    ready = buf.take_ready()
    assert ready and ready[0].startswith("Your code is <spell>AB and then some more words.")
    assert "".join(ready) + buf.pending == "Your code is <spell>AB" + " and then some more words." * 12
    assert scan(buf.pending).open_at is None
