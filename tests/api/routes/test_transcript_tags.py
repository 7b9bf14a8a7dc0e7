"""Cartesia's transcript tags on a live server: <break> is exact silence between the segments' audio
(every engine request is 24 frames: tests/api/conftest.py), <spell> keeps the client's token in word
timestamps, <volume> holds across the segments and messages of a WebSocket context, a tag split
across WebSocket messages is never read out, and a bad value is 400 ``invalid_markup`` (in band on
the WebSocket), through raw clients and the published cartesia SDK."""

from __future__ import annotations

import base64
import json

import cartesia
import httpx
import numpy as np
import pytest
from cartesia import Cartesia
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes.audio_checks import CODEC_RATE_HZ, SAMPLES_PER_SEGMENT
from tests.api.routes.test_tts_bytes import assert_error
from tests.api.routes.ws_helpers import audio_of, by_context, gen, read_until_terminal, recv, send, short

pytestmark = pytest.mark.timeout(120)

S16_22K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": CODEC_RATE_HZ}  # no resampling: exact
F32_22K = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": CODEC_RATE_HZ}
SPEECH = SAMPLES_PER_SEGMENT  # samples of one segment's speech
SECOND = CODEC_RATE_HZ  # samples of a 1 s break


def body(voice: str, transcript: str, fmt: dict = S16_22K, **extra) -> dict:
    return {"model_id": "sonic-3", "transcript": transcript, "voice": voice, "output_format": fmt, **extra}


def s16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2")


def check_speech_pause_speech(samples: np.ndarray, pause: int) -> None:
    """Two segments' speech with exactly ``pause`` samples of digital silence between them."""
    assert samples.size == 2 * SPEECH + pause, samples.size
    assert not samples[SPEECH:SPEECH + pause].any()  # the silence
    for speech in (samples[:SPEECH], samples[SPEECH + pause:]):
        assert np.abs(speech).max() > 100  # speech on both sides


# --- HTTP ----------------------------------------------------------------------------------------------


def test_a_break_is_exact_silence_between_the_sentences(gateway, default_voice_id):
    r = httpx.post(gateway.url + "/tts/bytes", json=body(default_voice_id, 'Hello.<break time="1s"/>World.'),
                   timeout=60)
    assert r.status_code == 200, r.text
    check_speech_pause_speech(s16(r.content), SECOND)


def test_a_leading_break_and_breaks_in_a_row(gateway, default_voice_id):
    transcript = '<break time="250ms"/>Hello. <break time="500ms"/> <break time="500ms"/>World.'
    r = httpx.post(gateway.url + "/tts/bytes", json=body(default_voice_id, transcript), timeout=60)
    assert r.status_code == 200, r.text
    samples = s16(r.content)
    lead = round(0.25 * CODEC_RATE_HZ)
    assert not samples[:lead].any() and np.abs(samples[lead:lead + SPEECH]).max() > 100
    check_speech_pause_speech(samples[lead:], SECOND)


def test_speed_tags_set_the_rate_of_the_segments_after_them(gateway, default_voice_id):
    """Each segment from a <speed> tag on is stretched to round(N / ratio) samples (the stretch is
    the request speed's, api/audio/tempo.py), until the next tag; before the first, the request's."""
    transcript = 'One. <speed ratio="1.25"/>Two. Three. <speed ratio="0.8"/>Four.'
    r = httpx.post(gateway.url + "/tts/bytes", json=body(default_voice_id, transcript), timeout=60)
    assert r.status_code == 200, r.text
    assert s16(r.content).size == SPEECH + 2 * round(SPEECH / 1.25) + round(SPEECH / 0.8)


@pytest.mark.parametrize("transcript, needles", [
    ('Hello.<break time="30s"/>World.', ['<break time="30s"/>', "'30s'", "10 s"]),
    ('<speed ratio="2"/>Hello.', ['<speed ratio="2"/>', "'2'", "0.6 to 1.5"]),
    ('Hi. <volume ratio="0.1"/>', ['<volume ratio="0.1"/>', "'0.1'", "0.5 to 2"]),
    ("Code <spell>1<break time='1s'/>2</spell>.", ["<spell>...</spell> cannot hold other tags"]),
])
@pytest.mark.parametrize("route", ["/tts/bytes", "/tts/sse"])
def test_a_bad_tag_value_is_a_400_before_any_audio(gateway, default_voice_id, route, transcript, needles):
    r = httpx.post(gateway.url + route, json=body(default_voice_id, transcript), timeout=60)
    assert_error(r, 400, "invalid_markup", *needles)


def sse_timestamps(gateway, voice: str, transcript: str, **extra) -> list[dict]:
    r = httpx.post(gateway.url + "/tts/sse", json=body(voice, transcript, add_timestamps=True, **extra), timeout=60)
    assert r.status_code == 200, r.text
    events = [json.loads(line[len("data: "):]) for line in r.text.splitlines() if line.startswith("data: ")]
    return [e["word_timestamps"] for e in events if e["type"] == "timestamps"]


def test_spelled_words_report_the_clients_token(gateway, default_voice_id):
    stamps = sse_timestamps(gateway, default_voice_id, "Code <spell>AB12</spell>, ok.")
    assert [w for s in stamps for w in s["words"]] == ["Code", "AB12,", "ok."]
    spoken = sse_timestamps(gateway, default_voice_id, "<spell>AB12</spell>", use_normalized_timestamps=True)
    assert [w for s in spoken for w in s["words"]] == ["A", "B", "one", "two"]
    original = sse_timestamps(gateway, default_voice_id, "<spell>AB12</spell>")
    assert [w for s in original for w in s["words"]] == ["AB12"]
    assert all(0 <= a <= b <= SPEECH / CODEC_RATE_HZ + 1e-6 for s in original for a, b in zip(s["start"], s["end"]))


def test_words_stay_in_the_speech_when_the_pause_after_it_is_far_longer(gateway, default_voice_id):
    """Word times are estimated on a segment's speech, not on its speech and pause: with 2 minutes of
    breaks after one sentence, silence was most of the segment and the estimator spread the words
    over the pause (Hello at 0-38 s). Every word now lies within the sentence's speech."""
    transcript = "Hello there my friend." + '<break time="10s"/>' * 12
    stamps = sse_timestamps(gateway, default_voice_id, transcript)
    assert [w for s in stamps for w in s["words"]] == ["Hello", "there", "my", "friend."]
    assert all(0 <= a <= b <= SPEECH / CODEC_RATE_HZ + 1e-6 for s in stamps for a, b in zip(s["start"], s["end"]))


def test_a_long_pause_is_sent_in_pieces_of_a_chunks_size(gateway, default_voice_id):
    """Breaks in a row add up to one pause; it goes out as many ordinary chunks, not one giant one
    (a run of 277 ten-second breaks was one 2,770 s array: gigabytes through the sinks)."""
    transcript = "Hi." + '<break time="10s"/>' * 6
    r = httpx.post(gateway.url + "/tts/sse", json=body(default_voice_id, transcript), timeout=60)
    assert r.status_code == 200, r.text
    chunks = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    audio = [np.frombuffer(base64.b64decode(c["data"]), "<i2") for c in chunks if c.get("type") == "chunk"]
    assert sum(a.size for a in audio) == SPEECH + 60 * SECOND
    starts = np.cumsum([0] + [a.size for a in audio[:-1]])
    pause = [a for a, start in zip(audio, starts) if start >= SPEECH]
    assert sum(a.size for a in pause) == 60 * SECOND and not any(a.any() for a in pause)
    assert max(a.size for a in pause) <= 7056  # PAUSE_PIECE_SAMPLES at the codec's rate


@pytest.mark.parametrize("route", ["/tts/bytes", "/tts/sse"])
def test_a_transcript_whose_only_audio_is_a_break_under_a_millisecond_has_nothing_to_speak(gateway, default_voice_id,
                                                                                            route):
    """A pause of less than a sample at 8 kHz is no pause: such a transcript has nothing to speak
    (400 empty_transcript), where it used to end the response before its first byte (500)."""
    fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}
    r = httpx.post(gateway.url + route, json=body(default_voice_id, '<break time="0.05ms"/>', fmt), timeout=60)
    assert_error(r, 400, "empty_transcript")


# --- WebSocket ----------------------------------------------------------------------------------------


async def test_a_tag_split_across_messages_is_a_pause_never_words(gateway, default_voice_id):
    """The buffer keeps "<break ti" until its rest arrives, with the usual buffering and with
    max_buffer_delay_ms=0 (every submission generated as it comes); the words reported are the
    sentences', and the audio is two segments and one second of silence."""
    v = default_voice_id
    url = gateway.ws_url + "/tts/websocket"
    async with connect(url) as ws:
        for cid, delay, pieces in [
            ("buffered", 3000, ["Hello.<break ti", 'me="1s"/>World.']),
            ("custom", 0, ["Hello.", "<", "break", ' time="', "1", 's"', "/>", "World."]),
        ]:
            for piece in pieces:
                await send(ws, gen(cid, piece, v, output_format=S16_22K, max_buffer_delay_ms=delay,
                                   add_timestamps=True))
            await send(ws, gen(cid, "", v, output_format=S16_22K, cont=False, max_buffer_delay_ms=delay))
        ctx = by_context(await read_until_terminal(ws, ["buffered", "custom"]))
    for cid, msgs in ctx.items():
        assert msgs[-1]["type"] == "done", [short(m) for m in msgs]
        check_speech_pause_speech(s16(audio_of(msgs)), SECOND)
        words = [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]]
        assert words == ["Hello.", "World."], (cid, words)


async def test_volume_holds_across_segments_and_messages_of_a_context(gateway, default_voice_id):
    """<volume> set in the first message still applies to the second message's segment; a later
    <volume> changes it (same seed, same speech: the samples scale)."""
    v = default_voice_id
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        common = dict(output_format=F32_22K, seed=5, max_buffer_delay_ms=3000)
        await send(ws, gen("plain", "Hello there. How are you? Fine.", v, cont=False, **common))
        await send(ws, gen("tagged", '<volume ratio="0.5"/>Hello there. ', v, **common))
        await send(ws, gen("tagged", 'How are you? <volume ratio="2.0"/>Fine.', v, cont=False, **common))
        ctx = by_context(await read_until_terminal(ws, ["plain", "tagged"]))
    plain = np.frombuffer(audio_of(ctx["plain"]), "<f4")
    tagged = np.frombuffer(audio_of(ctx["tagged"]), "<f4")
    assert plain.size == tagged.size == 3 * SPEECH
    np.testing.assert_allclose(tagged[:2 * SPEECH], 0.5 * plain[:2 * SPEECH], atol=1e-4)
    np.testing.assert_allclose(tagged[2 * SPEECH:], np.clip(2.0 * plain[2 * SPEECH:], -1, 1), atol=2e-4)


async def test_a_bad_tag_is_an_in_band_error_after_the_audio_before_it(gateway, default_voice_id):
    v = default_voice_id
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("bad", "Hello there. ", v, output_format=S16_22K))
        await send(ws, gen("bad", '<break time="1', v, output_format=S16_22K))
        await send(ws, gen("bad", '5s"/>More.', v, output_format=S16_22K, cont=False))
        msgs = (await read_until_terminal(ws, ["bad"]))
    err = msgs[-1]
    assert err["type"] == "error" and err["status_code"] == 400 and err["error_code"] == "invalid_markup", short(err)
    assert '<break time="15s"/>' in err["message"] and "'15s'" in err["message"]
    assert s16(audio_of(msgs)).size == SPEECH  # the sentence before it was spoken


@pytest.fixture(scope="module")
def idle_gateway(tiny_ckpt_dir, tmp_path_factory):
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("tags-idle-data"), ws_idle_timeout_s=1.0)
    with LiveServer(settings) as server:
        yield server


async def test_an_unfinished_tag_alone_neither_speaks_nor_holds_an_idle_socket(idle_gateway, default_voice_id):
    """The sentence before it is spoken; the fragment is kept for its rest, which never comes: it
    is not read out when the buffer timer fires, and the socket still closes idle (1000)."""
    async with connect(idle_gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("frag", 'Hello there. <break ti', default_voice_id, output_format=S16_22K,
                           max_buffer_delay_ms=200))
        msgs: list[dict] = []
        with pytest.raises(ConnectionClosed):
            while True:
                msgs.append(await recv(ws, timeout=5.0))
        assert ws.close_code == 1000
    assert all(m["type"] == "chunk" for m in msgs), [short(m) for m in msgs]
    assert s16(audio_of(msgs)).size == SPEECH  # "Hello there." only


# --- the cartesia SDK -----------------------------------------------------------------------------------


def test_sdk_generate_and_websocket_with_a_break(gateway, default_voice_id):
    with Cartesia(api_key="sk-any", base_url=gateway.url, websocket_base_url=gateway.ws_url, max_retries=0) as client:
        raw = client.tts.generate(model_id="sonic-3", transcript='Hello.<break time="1s"/>World.',
                                  voice=default_voice_id, output_format=S16_22K).read()
        check_speech_pause_speech(s16(raw), SECOND)
        with client.tts.websocket_connect() as ws:
            ctx = ws.context("sdk-break", model_id="sonic-3", voice=default_voice_id, output_format=S16_22K)
            ctx.push('Hello.<break time="500')
            ctx.push('ms"/>World.')
            ctx.no_more_inputs()
            events = list(ctx.receive())
        assert events[-1].type == "done"
        check_speech_pause_speech(s16(b"".join(e.audio for e in events if e.type == "chunk")), SECOND // 2)
        with pytest.raises(cartesia.BadRequestError) as info:
            client.tts.generate(model_id="sonic-3", transcript='Hi.<break time="1 minute"/>', voice=default_voice_id,
                                output_format=S16_22K).read()
        assert info.value.body["error_code"] == "invalid_markup" and "'1 minute'" in info.value.body["message"]


def test_breaks_past_the_pause_limit_are_a_400_before_any_audio(gateway, default_voice_id):
    transcript = " ".join(f'Word {i}. <break time="10s"/>' for i in range(13))
    r = httpx.post(gateway.url + "/tts/bytes", json=body(default_voice_id, transcript), timeout=60)
    assert_error(r, 400, "invalid_markup", '<break time="10s"/>', "130 s in all", "over the 120 s", "GEPARD_MAX_PAUSE_S")


async def test_a_contexts_breaks_past_the_pause_limit_are_an_in_band_error_after_what_came_before(
        gateway, default_voice_id):
    v = default_voice_id
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("long", "Hello there. " + '<break time="10s"/>' * 12, v, output_format=S16_22K))
        await send(ws, gen("long", '<break time="1s"/>More.', v, output_format=S16_22K, cont=False))
        msgs = await read_until_terminal(ws, ["long"])
    err = msgs[-1]
    assert err["type"] == "error" and err["status_code"] == 400 and err["error_code"] == "invalid_markup", short(err)
    assert "121 s in all" in err["message"] and "over the 120 s" in err["message"]
    assert s16(audio_of(msgs)).size == SPEECH + 120 * 22050  # the sentence and its 120 s of breaks went out
