"""POST /tts/sse on a live server: framing as both SDKs' decoders need it, exact audio, word
timestamps (original tokens, monotonic, inside the audio, before done), and the HTTP errors that
come before the stream starts."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from tests.api.routes.audio_checks import CODEC_RATE_HZ, SAMPLES_PER_SEGMENT, expected_bytes, stretched_samples
from tests.api.routes.test_tts_bytes import assert_error
from tests.api.routes.ws_helpers import engine_idle


def sse_body(voice, transcript="Hello there.", encoding="pcm_s16le", rate=16000, **extra) -> dict:
    return {"model_id": "sonic-3", "transcript": transcript, "voice": voice,
            "output_format": {"container": "raw", "encoding": encoding, "sample_rate": rate}, **extra}


def sse_events(server, payload: dict) -> list[dict]:
    """POST, check the framing of the whole body, return the events' JSON in order."""
    r = httpx.post(server.url + "/tts/sse", json=payload, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    text = r.text
    assert text.endswith("\n\n")
    events = []
    for frame in text[:-2].split("\n\n"):
        lines = frame.split("\n")
        assert len(lines) == 2, frame[:200]  # exactly "event: <type>" and "data: <json>"
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), frame[:200]
        event = json.loads(lines[1][len("data: "):])
        assert event["type"] == lines[0][len("event: "):]
        assert isinstance(event["done"], bool) and isinstance(event["status_code"], int)
        events.append(event)
    assert "\nid:" not in "\n" + text and "\nretry:" not in "\n" + text  # breaks the Python SDK's decoder
    return events


def test_framing_audio_and_one_final_done(gateway, default_voice_id):
    events = sse_events(gateway, sse_body(default_voice_id, "Hello there. How are you today?"))
    types = [e["type"] for e in events]
    assert types[-1] == "done" and types.count("done") == 1 and set(types) == {"chunk", "done"}
    assert events[-1] == {"type": "done", "done": True, "status_code": 206}  # no context_id was sent
    chunks = [e for e in events if e["type"] == "chunk"]
    assert all(e["status_code"] == 206 and e["done"] is False and isinstance(e["step_time"], float) for e in chunks)
    assert all("context_id" not in e for e in events)
    audio = b"".join(base64.b64decode(e["data"]) for e in chunks)
    assert len(audio) == expected_bytes(2, "pcm_s16le", 16000)


@pytest.mark.parametrize("encoding,rate", [("pcm_f32le", 44100), ("pcm_mulaw", 8000)])
def test_audio_is_byte_exact_and_equals_bytes_route(gateway, default_voice_id, encoding, rate):
    events = sse_events(gateway, sse_body(default_voice_id, encoding=encoding, rate=rate, seed=21, context_id="c-1"))
    assert {e["context_id"] for e in events} == {"c-1"}  # echoed on every event
    audio = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "chunk")
    assert len(audio) == expected_bytes(1, encoding, rate)
    r = httpx.post(gateway.url + "/tts/bytes", json=sse_body(default_voice_id, encoding=encoding, rate=rate, seed=21),
                   timeout=60)
    assert r.content == audio


def check_word_timestamps(events: list[dict], transcript_words: list[str], seconds: float) -> list[dict]:
    """Timestamps events: all words in order, times monotonic and inside [0, seconds]; none after done."""
    stamps = [e for e in events if e["type"] == "timestamps"]
    assert stamps and events.index(stamps[-1]) < len(events) - 1 and events[-1]["type"] == "done"
    words, starts, ends = [], [], []
    for e in stamps:
        wt = e["word_timestamps"]
        assert len(wt["words"]) == len(wt["start"]) == len(wt["end"]) > 0
        words += wt["words"]
        starts += wt["start"]
        ends += wt["end"]
    assert words == transcript_words
    assert all(0.0 <= s <= e <= seconds + 1e-6 for s, e in zip(starts, ends))
    assert starts == sorted(starts) and ends == sorted(ends)
    assert all(ends[i] <= starts[i + 1] + 1e-9 for i in range(len(words) - 1))
    return stamps


def test_timestamps_are_original_tokens_inside_the_audio(gateway, default_voice_id):
    transcript = "Hello, Dr. Smith! It's 5 o'clock: time for tea."
    events = sse_events(gateway, sse_body(default_voice_id, transcript, add_timestamps=True, context_id="ts"))
    segments = 2  # "Hello, Dr. Smith! " and "It's 5 o'clock: time for tea."
    seconds = segments * SAMPLES_PER_SEGMENT / CODEC_RATE_HZ
    stamps = check_word_timestamps(events, transcript.split(), seconds)
    # the second segment's words start no earlier than its audio does
    second = stamps[-1]["word_timestamps"]
    assert second["words"][0] == "It's" and second["start"][0] >= SAMPLES_PER_SEGMENT / CODEC_RATE_HZ - 1e-6
    # a timestamps event follows all the audio of its segment (the resampler's look-ahead included:
    # each segment's tail goes out at the segment's end, not with the next segment's first chunk)
    for k, stamp in enumerate(stamps):
        sent = sum(len(base64.b64decode(e["data"])) for e in events[:events.index(stamp)] if e["type"] == "chunk")
        assert sent == (k + 1) * expected_bytes(1, "pcm_s16le", 16000)
        assert sent / 2 / 16000 >= max(stamp["word_timestamps"]["end"])


@pytest.mark.parametrize("fields, speed", [({"generation_config": {"speed": 1.5}}, 1.5), ({"speed": "slow"}, 0.8)])
def test_timestamps_follow_the_stretched_audio(gateway, default_voice_id, fields, speed):
    """At a speed, each segment is round(N / speed) samples, and its words lie inside its own
    stretched audio: the second segment starts where the first one's stretched audio ends."""
    transcript = "Hello, Dr. Smith! It's 5 o'clock: time for tea."
    events = sse_events(gateway, sse_body(default_voice_id, transcript, add_timestamps=True, **fields))
    segment_s = round(SAMPLES_PER_SEGMENT / speed) / CODEC_RATE_HZ
    stamps = check_word_timestamps(events, transcript.split(), 2 * segment_s)
    audio = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "chunk")
    assert len(audio) == stretched_samples(2, speed, 16000) * 2
    first, second = (s["word_timestamps"] for s in stamps)
    assert max(first["end"]) <= segment_s + 1e-6 <= second["start"][0] + 2e-6
    assert max(second["end"]) > segment_s  # the second segment's words are in its own audio


def test_normalized_timestamps_report_spoken_words(gateway, default_voice_id):
    events = sse_events(gateway, sse_body(default_voice_id, "I have 3 apples.", add_timestamps=True,
                                          use_normalized_timestamps=True))
    words = [w for e in events if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]]
    assert "three" in [w.strip(".").lower() for w in words] and "3" not in words
    plain = sse_events(gateway, sse_body(default_voice_id, "I have 3 apples.", add_timestamps=True))
    words = [w for e in plain if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]]
    assert words == ["I", "have", "3", "apples."]


@pytest.mark.parametrize(("extra", "spoken"), [
    ({"language": "es-MX"}, ["Son", "doscientos", "cincuenta", "pesos."]),
    ({"language": "es", "normalization": "es-MX"}, ["Son", "doscientos", "cincuenta", "pesos."]),
    ({"language": "es"}, ["Son", "doscientos", "cincuenta", "dólares."]),
    ({"locale": "es-US"}, ["Son", "doscientos", "cincuenta", "dólares."]),
])
def test_a_regional_locale_is_read_its_way(gateway, default_voice_id, extra, spoken):
    """The request's locale reaches the normaliser whole: Mexico's "$" is pesos (docs/text-normalisation.md, Regions)."""
    events = sse_events(gateway, sse_body(default_voice_id, "Son $250.", add_timestamps=True,
                                          use_normalized_timestamps=True, **extra))
    assert [w for e in events if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]] == spoken


def test_no_timestamps_unless_asked(gateway, default_voice_id):
    events = sse_events(gateway, sse_body(default_voice_id, add_timestamps=False))
    assert "timestamps" not in {e["type"] for e in events}


def test_sse_errors_before_the_stream_are_http_errors(gateway, default_voice_id):
    post = lambda payload: httpx.post(gateway.url + "/tts/sse", json=payload, timeout=30)  # noqa: E731
    wav = sse_body(default_voice_id) | {"output_format": {"container": "wav", "encoding": "pcm_s16le",
                                                          "sample_rate": 16000}}
    assert_error(post(wav), 400, "invalid_output_format", "raw")
    assert_error(post(sse_body(default_voice_id, "")), 400, "empty_transcript", "transcript")
    assert_error(post(sse_body(default_voice_id, " \n ")), 400, "empty_transcript")
    assert_error(post(sse_body("no-such-voice")), 404, "voice_not_found", "no-such-voice")
    assert_error(post(sse_body(default_voice_id) | {"model_id": "tts-1"}), 400, "model_not_found", "tts-1")
    assert_error(post(sse_body(default_voice_id, generation_config={"speed": 1.6})), 400, "invalid_request",
                 "generation_config.speed")
    limit = gateway.runtime.settings.max_transcript_chars
    assert_error(post(sse_body(default_voice_id, "b" * (limit + 1))), 400, "transcript_too_long")
    missing = sse_body(default_voice_id)
    del missing["voice"]
    assert_error(post(missing), 400, "missing_field", "voice")


def test_sse_client_disconnect_stops_engine_work(gateway, default_voice_id):
    text = " ".join(f"Line {w}." for w in "one two three four five six seven eight".split())
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", gateway.url + "/tts/sse", json=sse_body(default_voice_id, text)) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: ") and '"chunk"' in line:
                    break
    assert engine_idle(gateway, timeout_s=3.0, hold_s=1.0), "engine still busy after the SSE client left"


@pytest.mark.parametrize("add_timestamps", [False, True])
def test_segment_pcm_is_kept_only_for_timestamps(gateway, default_voice_id, monkeypatch, add_timestamps):
    """Without add_timestamps the route keeps no chunk of a segment's PCM once it is encoded (a long
    segment's PCM is megabytes per stream); with it, the segment's chunks live until its timestamps."""
    import gc
    import weakref

    import api.synthesis

    gain, alive_before = api.synthesis._gain, []
    refs: list[weakref.ref] = []

    def tracked(pcm, volume):  # runs in the server's thread, for each chunk the route gets
        gc.collect()
        alive_before.append(sum(ref() is not None for ref in refs))  # earlier chunks still referenced
        out = gain(pcm, volume).copy()
        refs.append(weakref.ref(out))
        return out

    monkeypatch.setattr(api.synthesis, "_gain", tracked)
    events = sse_events(gateway, sse_body(default_voice_id, "Hello there.", add_timestamps=add_timestamps))
    assert events[-1]["type"] == "done" and len(alive_before) >= 3
    if add_timestamps:
        assert alive_before == list(range(len(alive_before)))  # every earlier chunk of the segment kept
    else:
        assert max(alive_before) <= 1  # at most the chunk the route is still encoding
