"""``add_phoneme_timestamps`` on a live server: ``phoneme_timestamps`` events on /tts/sse and the
WebSocket, read by the cartesia 4.2.0 SDK and raw; the phonemes are eSpeak NG's for the words
spoken, in the request's language, inside their words' spans; refusals come before any audio."""

from __future__ import annotations

import base64
import os
import signal

import httpx
import pytest
from cartesia import Cartesia
from websockets.asyncio.client import connect

from api.text import normalize
from api.text.errors import PhonemesUnavailableError
from api.text.phonemes import phonemizer
from tests.api.routes.audio_checks import CODEC_RATE_HZ, SAMPLES_PER_SEGMENT
from tests.api.routes.test_tts_bytes import assert_error
from tests.api.routes.test_tts_sse import sse_body, sse_events
from tests.api.routes.ws_helpers import assert_ws_error, gen, read_until_terminal, send

pytestmark = pytest.mark.timeout(120)

FMT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}


def spoken_phonemes(text: str, language: str = "en") -> list[str]:
    """What the server must send: eSpeak's phonemes of each word the normaliser makes of ``text``."""
    reader = phonemizer()
    return [p for word in normalize(text, language).normalized_words for p in reader.word(word, language)]


def phoneme_lists(events: list[dict]) -> tuple[list[str], list[float], list[float]]:
    phonemes, starts, ends = [], [], []
    for e in events:
        if e["type"] == "phoneme_timestamps":
            pt = e["phoneme_timestamps"]
            assert len(pt["phonemes"]) == len(pt["start"]) == len(pt["end"]) > 0
            phonemes += pt["phonemes"]
            starts += pt["start"]
            ends += pt["end"]
    return phonemes, starts, ends


def test_sse_phonemes_of_the_spoken_words_inside_the_audio(gateway, default_voice_id):
    transcript = "I have 3 apples. Hello there!"
    events = sse_events(gateway, sse_body(default_voice_id, transcript, add_phoneme_timestamps=True, context_id="ph"))
    assert "timestamps" not in {e["type"] for e in events}  # words only when asked for
    phonemes, starts, ends = phoneme_lists(events)
    assert phonemes == spoken_phonemes(transcript)
    assert {"θ", "ɹ", "iː"} <= set(phonemes)  # "3" is read "three"
    seconds = 2 * SAMPLES_PER_SEGMENT / CODEC_RATE_HZ
    assert all(0.0 <= s <= e <= seconds + 1e-6 for s, e in zip(starts, ends))
    assert starts == sorted(starts) and ends == sorted(ends)
    stamps = [e for e in events if e["type"] == "phoneme_timestamps"]
    assert len(stamps) == 2 and all(e["context_id"] == "ph" for e in stamps) and events[-1]["type"] == "done"
    # each segment's phonemes follow all of that segment's audio
    for k, stamp in enumerate(stamps):
        sent = sum(len(base64.b64decode(e["data"])) for e in events[:events.index(stamp)] if e["type"] == "chunk")
        assert sent / 2 / 16000 >= max(stamp["phoneme_timestamps"]["end"]) - 1e-6


def test_phonemes_lie_inside_their_spoken_words(gateway, default_voice_id):
    transcript = "It costs $5, Dr. Smith."
    events = sse_events(gateway, sse_body(default_voice_id, transcript, add_timestamps=True,
                                          add_phoneme_timestamps=True, use_normalized_timestamps=True))
    words = [w for e in events if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]]
    word_spans = [(s, t) for e in events if e["type"] == "timestamps"
                  for s, t in zip(e["word_timestamps"]["start"], e["word_timestamps"]["end"])]
    phonemes, starts, ends = phoneme_lists(events)
    assert phonemes == spoken_phonemes(transcript)
    k = 0
    for word, (ws, we) in zip(words, word_spans):
        n = len(phonemizer().word(word, "en"))
        assert all(ws - 1e-9 <= s <= e <= we + 1e-9 for s, e in zip(starts[k:k + n], ends[k:k + n])), word
        if n:
            assert starts[k] == pytest.approx(ws) and ends[k + n - 1] == pytest.approx(we)  # they tile it
        k += n
    assert k == len(phonemes)


def test_phonemes_follow_the_language(gateway, default_voice_id):
    events = sse_events(gateway, sse_body(default_voice_id, "El centro de la ciudad.", language="es",
                                          add_phoneme_timestamps=True))
    phonemes = phoneme_lists(events)[0]
    assert phonemes == spoken_phonemes("El centro de la ciudad.", "es") and "θ" not in phonemes  # Latin American
    spain = sse_events(gateway, sse_body(default_voice_id, "El centro de la ciudad.", language="es",
                                         normalization="es-ES", add_phoneme_timestamps=True))
    assert "θ" in phoneme_lists(spain)[0]  # the locale the text is read in decides


def test_sse_refuses_a_language_espeak_lacks_before_the_stream(gateway, default_voice_id):
    r = httpx.post(gateway.url + "/tts/sse", timeout=30,
                   json=sse_body(default_voice_id, "Kumusta ka?", language="tl", add_phoneme_timestamps=True))
    assert_error(r, 400, "unsupported_language", "'tl'", "add_phoneme_timestamps")
    # without phonemes the same request is served
    assert sse_events(gateway, sse_body(default_voice_id, "Kumusta ka?", language="tl"))[-1]["type"] == "done"


async def test_websocket_phonemes_across_continuations(gateway, default_voice_id):
    pieces = ["Hello, ", "world! ", "See you ", "at 5."]
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        for piece in pieces:
            await send(ws, gen("ph", piece, default_voice_id, add_phoneme_timestamps=True, max_buffer_delay_ms=5000))
        await send(ws, gen("ph", "", default_voice_id, add_phoneme_timestamps=True, cont=False))
        msgs = await read_until_terminal(ws, ["ph"])
    assert msgs[-1]["type"] == "done" and "timestamps" not in {m["type"] for m in msgs}
    phonemes, starts, ends = phoneme_lists(msgs)
    assert phonemes == spoken_phonemes("".join(pieces))
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends))
    # the second segment's phonemes start in its own audio
    second = [m for m in msgs if m["type"] == "phoneme_timestamps"][1]["phoneme_timestamps"]
    assert second["start"][0] >= SAMPLES_PER_SEGMENT / CODEC_RATE_HZ - 1e-6


async def test_websocket_refuses_a_language_espeak_lacks_for_that_context_only(gateway, default_voice_id):
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("tl", "Kumusta ka?", default_voice_id, language="tl", add_phoneme_timestamps=True))
        await send(ws, gen("en", "Hello.", default_voice_id, add_phoneme_timestamps=True, cont=False))
        msgs = await read_until_terminal(ws, ["tl", "en"])
    (refusal,) = [m for m in msgs if m["context_id"] == "tl"]
    assert_ws_error(refusal, "tl", 400, "unsupported_language", "'tl'")
    assert [m["type"] for m in msgs if m["context_id"] == "en"][-1] == "done"
    assert phoneme_lists([m for m in msgs if m["context_id"] == "en"])[0] == spoken_phonemes("Hello.")


def test_the_sdk_reads_phoneme_timestamps_on_sse_and_websocket(gateway, default_voice_id):
    with Cartesia(api_key="sk-any", base_url=gateway.url, websocket_base_url=gateway.ws_url, max_retries=0) as client:
        events = list(client.tts.generate_sse(model_id="sonic-3", transcript="Hello there, friend.",
                                              voice=default_voice_id, output_format=FMT,
                                              add_phoneme_timestamps=True, add_timestamps=True))
        said = [p for e in events if e.type == "phoneme_timestamps" for p in e.phoneme_timestamps.phonemes]
        assert said == spoken_phonemes("Hello there, friend.") and events[-1].type == "done"
        assert [w for e in events if e.type == "timestamps" for w in e.word_timestamps.words] == \
            ["Hello", "there,", "friend."]
        with client.tts.websocket_connect() as ws:
            ctx = ws.context("sdk-ph", model_id="sonic-3", voice=default_voice_id, output_format=FMT,
                             add_phoneme_timestamps=True)
            ctx.push("Good ")
            ctx.push("morning.")
            ctx.no_more_inputs()
            ws_events = list(ctx.receive())
    assert ws_events[-1].type == "done"
    said = [p for e in ws_events if e.type == "phoneme_timestamps" for p in e.phoneme_timestamps.phonemes]
    assert said == spoken_phonemes("Good morning.")


async def test_espeak_dying_costs_a_restart_not_the_server(gateway, default_voice_id):
    """eSpeak NG runs in a child process: killed (as a crash or the OOM killer would), the server
    goes on, the next request gets its phonemes from a new process, and /metrics counts it."""
    from tests.api.test_metrics import scrape, value

    crashes = value(scrape(gateway.url), "gepard_phonemizer_restarts_total", reason="crash")
    first = phonemizer().pid
    os.kill(first, signal.SIGKILL)
    events = sse_events(gateway, sse_body(default_voice_id, "Still speaking.", add_phoneme_timestamps=True))
    assert events[-1]["type"] == "done" and phoneme_lists(events)[0] == spoken_phonemes("Still speaking.")
    os.kill(phonemizer().pid, signal.SIGKILL)  # again, under a WebSocket context this time
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("after", "Good night.", default_voice_id, add_phoneme_timestamps=True, cont=False))
        msgs = await read_until_terminal(ws, ["after"])
    assert msgs[-1]["type"] == "done" and phoneme_lists(msgs)[0] == spoken_phonemes("Good night.")
    assert phonemizer().pid not in (first, None)
    assert value(scrape(gateway.url), "gepard_phonemizer_restarts_total", reason="crash") == crashes + 2


def _no_espeak():
    raise PhonemesUnavailableError("phoneme timestamps need eSpeak NG: install the espeakng-loader wheel")


async def test_without_espeak_phonemes_are_501_and_the_rest_is_served(gateway, default_voice_id, monkeypatch, caplog):
    import api.segment_timing

    monkeypatch.setattr(api.segment_timing, "phonemizer", _no_espeak)
    r = httpx.post(gateway.url + "/tts/sse", timeout=30,
                   json=sse_body(default_voice_id, "Hello.", add_phoneme_timestamps=True))
    assert_error(r, 501, "phonemes_unavailable", "eSpeak NG")
    assert r.headers["x-should-retry"] == "false"
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("no-ph", "Hello.", default_voice_id, add_phoneme_timestamps=True, cont=False))
        await send(ws, gen("words", "Hello.", default_voice_id, add_timestamps=True, cont=False))
        msgs = await read_until_terminal(ws, ["no-ph", "words"])
    (refusal,) = [m for m in msgs if m["context_id"] == "no-ph"]
    assert_ws_error(refusal, "no-ph", 501, "phonemes_unavailable", "eSpeak NG")
    assert "timestamps" in [m["type"] for m in msgs if m["context_id"] == "words"]  # word timestamps need no eSpeak
    with caplog.at_level("WARNING", logger="api.segment_timing"):
        api.segment_timing.load_phonemizer()  # what the warm-up says in the log
    assert any("phonemes_unavailable" in r.getMessage() and "eSpeak NG" in r.getMessage() for r in caplog.records)
