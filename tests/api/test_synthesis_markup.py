"""SynthesisService.plan() and segment() with transcript tags: each segment's pause, speed, volume
and spoken text, the state that carries <speed>/<volume> across segments, and the errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from api.text.errors import InvalidMarkupError
from api.text.markup import MarkupState
from api.text.normalization import normalize
from api.text.pronunciation import compile_pronunciations


@dataclass(frozen=True)
class Item:
    text: str
    alias: str
    case_sensitive: bool = False


@pytest.fixture(scope="module")
def svc(gateway):
    return gateway.runtime.service  # plan() and segment() are pure: called from the test's thread


def fields(segments) -> list[tuple]:
    return [(s.speech_text.strip(), s.pause_after_s, s.speed, s.volume) for s in segments]


def test_a_break_is_the_pause_after_its_segment(svc):
    plan = svc.plan('Hello.<break time="1s"/>World.', "en")
    assert fields(plan) == [("Hello.", 1.0, None, None), ("World.", 0.0, None, None)]
    assert [s.original for s in plan] == ['Hello.<break time="1s"/>', "World."]


def test_breaks_in_a_row_add_up_and_a_leading_break_is_a_pause_before_the_speech(svc):
    plan = svc.plan('<break time="500ms"/>Hi there <break time="1s"/> <break time=\'250ms\'/> you.', "en")
    assert fields(plan) == [("", 0.5, None, None), ("Hi there", 1.25, None, None), ("you.", 0.0, None, None)]
    assert not plan[0].has_speech and plan[0].has_audio  # silence, no engine request


def test_speed_and_volume_hold_from_the_tag_across_segments_until_the_next(svc):
    plan = svc.plan('One. <speed ratio="1.5"/>Two. Three <volume ratio="0.5"/>four. Five. '
                    '<speed ratio="0.8"/>Six.', "en")
    assert fields(plan) == [
        ("One.", 0.0, None, None), ("Two.", 0.0, 1.5, None), ("Three", 0.0, 1.5, None),
        ("four.", 0.0, 1.5, 0.5), ("Five.", 0.0, 1.5, 0.5), ("Six.", 0.0, 0.8, 0.5),
    ]


def test_the_state_travels_between_calls_as_a_websocket_context_keeps_it(svc):
    state = MarkupState()
    first = svc.segment('<volume ratio="2.0"/>', "en", markup=state)  # tags only: no audio, state moved
    assert not first.has_audio and state.volume == 2.0
    second = svc.segment("Loud now.", "en", markup=state)
    assert (second.volume, second.speed) == (2.0, None)
    assert svc.segment("Fresh.", "en").volume is None  # no state given: a fresh one


def test_spell_text_and_its_tokens(svc):
    plan = svc.plan("My code is <spell>ABC-123</spell>. Call <spell>(555) 123-4567</spell>!", "en")
    assert [s.speech_text.split() for s in plan] == [
        ["My", "code", "is", "A", "B", "C,", "one", "two", "three."],
        ["Call", "five", "five", "five,", "one", "two", "three,", "four", "five", "six", "seven!"],
    ]
    assert plan[0].normalized.original_words == ["My", "code", "is", "ABC-123."]
    assert plan[1].normalized.original_words == ["Call", "(555)", "123-4567!"]
    off = svc.plan("<spell>AB12</spell> 5", "es", "off")
    assert off[0].speech_text.split() == ["A", "B", "uno", "dos", "5"]


def test_the_dictionary_applies_outside_tags_only(svc):
    prons = compile_pronunciations([Item("AB", "ay bee"), Item("break", "brake")])
    plan = svc.plan('AB <spell>AB</spell>.<break time="1s"/>Take a break.', "en", pronunciations=prons)
    assert [s.speech_text.split() for s in plan] == [["ay", "bee", "A", "B."], ["Take", "a", "brake."]]


def test_unknown_tags_and_stray_brackets_are_text_as_before(svc):
    plan = svc.plan("I <3 tags: <b>bold</b>.", "en")
    assert len(plan) == 1 and plan[0].normalized == normalize("I <3 tags: <b>bold</b>.", "en")
    assert (plan[0].pause_after_s, plan[0].speed, plan[0].volume) == (0.0, None, None)


def test_a_transcript_is_complete_an_unfinished_tag_at_its_end_is_dropped(svc):
    assert fields(svc.plan('Hello there. <break time="1', "en")) == [("Hello there.", 0.0, None, None)]
    assert svc.plan("Code <spell>AB", "en")[0].speech_text.split() == ["Code", "A", "B"]


@pytest.mark.parametrize("transcript, needle", [
    ('Fine. Then <break time="30s"/> more.', """<break time="30s"/>: time '30s' is longer than the 10 s"""),
    ('<speed ratio="3"/>Fast.', "ratio '3' must be a number from 0.6 to 1.5"),
    ('Ok. <volume ratio="loud"/>', "ratio 'loud' must be a number from 0.5 to 2"),
])
def test_a_bad_tag_anywhere_fails_the_whole_plan(svc, transcript, needle):
    with pytest.raises(InvalidMarkupError) as err:
        svc.plan(transcript, "en")
    assert needle in str(err.value)



def test_the_breaks_of_a_request_add_up_to_at_most_the_pause_limit(svc):
    assert svc.settings.max_pause_s == 120.0
    twelve = " ".join(f'Word {i}. <break time="10s"/>' for i in range(12))
    assert sum(s.pause_after_s for s in svc.plan(twelve, "en")) == 120.0  # at the limit: fine
    with pytest.raises(InvalidMarkupError) as err:
        svc.plan(twelve + ' And one more. <break time="500ms"/> End.', "en")
    assert str(err.value) == ('<break time="500ms"/>: with it the breaks would pause 120.5 s in all, over the 120 s one '
                              "request or WebSocket context may pause (GEPARD_MAX_PAUSE_S)")


def test_a_contexts_breaks_count_across_its_segments_and_a_refused_one_is_not_counted(svc):
    state = MarkupState()
    for _ in range(11):
        svc.segment('Wait. <break time="10s"/>', "en", markup=state)
    assert state.paused_s == 110.0
    with pytest.raises(InvalidMarkupError, match="would pause 125 s in all"):
        svc.segment('Hm. <break time="5s"/><break time="10s"/>', "en", markup=state)
    assert state.paused_s == 110.0  # the refused segment paused nothing
    svc.segment('Last. <break time="10s"/>', "en", markup=state)  # 120: still within
    assert state.paused_s == 120.0
    assert svc.segment('Fresh. <break time="10s"/>', "en").pause_after_s == 10.0  # no state given: its own count
