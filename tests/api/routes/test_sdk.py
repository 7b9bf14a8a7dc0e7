"""The published cartesia 4.2.0 Python SDK, sync and async, against a live gateway: get_status,
tts.generate (raw and wav), tts.generate_sse with timestamps, websocket_connect with three
contexts pushing text in pieces with flushes (one cancelled mid-stream), the v2 back-compat
websocket, typed errors, and the default wss URL over TLS."""

from __future__ import annotations

import asyncio

import cartesia
import httpx
import pytest
from cartesia import AsyncCartesia, Cartesia

from tests.api.routes.audio_checks import WAV_FORMAT_TAG, expected_bytes, parse_wav, stretched_samples
from tests.api.routes.conftest import API_KEY
from tests.api.routes.ws_helpers import engine_idle

pytestmark = pytest.mark.timeout(120)

FMT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}
FMT_F32 = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 24000}
MODEL = "sonic-3"


@pytest.fixture(scope="module")
def client(gateway):
    with Cartesia(api_key="sk-any", base_url=gateway.url, websocket_base_url=gateway.ws_url, max_retries=0) as c:
        yield c


@pytest.fixture
async def aclient(gateway):
    async with AsyncCartesia(api_key="sk-any", base_url=gateway.url, websocket_base_url=gateway.ws_url,
                             max_retries=0) as c:
        yield c


def seg_bytes(fmt: dict, segments: int = 1) -> int:
    """Bytes of ``segments`` WebSocket segments (each is resampled on its own)."""
    return segments * expected_bytes(1, fmt["encoding"], fmt["sample_rate"])


# --- REST ------------------------------------------------------------------------------------------


def test_get_status(client):
    status = client.get_status()
    assert status.ok is True and isinstance(status.version, str)


async def test_get_status_async(aclient):
    assert (await aclient.get_status()).ok is True


def test_generate_raw_and_wav(client, default_voice_id):
    raw = client.tts.generate(model_id=MODEL, transcript="Hello there. How are you?", voice=default_voice_id,
                              output_format=FMT).read()
    assert len(raw) == expected_bytes(2, "pcm_s16le", 16000)
    wav = client.tts.generate(model_id=MODEL, transcript="Hello there.", voice={"id": default_voice_id},
                              output_format={"container": "wav", "encoding": "pcm_mulaw", "sample_rate": 8000},
                              language="en").read()
    info = parse_wav(wav)
    assert (info.format_tag, info.sample_rate_hz, info.bits) == (WAV_FORMAT_TAG["pcm_mulaw"], 8000, 8)
    assert len(info.data) == expected_bytes(1, "pcm_mulaw", 8000)


async def test_generate_raw_and_wav_async(aclient, default_voice_id):
    response = await aclient.tts.generate(model_id=MODEL, transcript="Hello there.", voice=default_voice_id,
                                          output_format=FMT_F32)
    assert len(await response.read()) == expected_bytes(1, "pcm_f32le", 24000)
    response = await aclient.tts.generate(model_id=MODEL, transcript="Hi.", voice=default_voice_id,
                                          output_format={"container": "wav", "encoding": "pcm_s16le",
                                                         "sample_rate": 44100})
    info = parse_wav(await response.read())
    assert info.sample_rate_hz == 44100 and len(info.data) == expected_bytes(1, "pcm_s16le", 44100)


def check_sse(events, transcript: str, fmt: dict, segments: int, context_id: str) -> None:
    types = [e.type for e in events]
    assert types[-1] == "done" and types.count("done") == 1 and "timestamps" in types
    assert all(e.context_id == context_id for e in events)
    audio = b"".join(e.audio for e in events if e.type == "chunk")
    assert len(audio) == expected_bytes(segments, fmt["encoding"], fmt["sample_rate"])
    words = [w for e in events if e.type == "timestamps" for w in e.word_timestamps.words]
    starts = [t for e in events if e.type == "timestamps" for t in e.word_timestamps.start]
    assert words == transcript.split() and starts == sorted(starts)


def test_generate_sse_with_timestamps(client, default_voice_id):
    text = "Hello there, friend. It is 5 past 3."
    events = list(client.tts.generate_sse(model_id=MODEL, transcript=text, voice=default_voice_id,
                                          output_format=FMT, add_timestamps=True, context_id="sse-sync"))
    check_sse(events, text, FMT, 2, "sse-sync")


async def test_generate_sse_with_timestamps_async(aclient, default_voice_id):
    text = "Good morning! Nice to meet you."
    stream = await aclient.tts.generate_sse(model_id=MODEL, transcript=text, voice=default_voice_id,
                                            output_format=FMT_F32, add_timestamps=True, context_id="sse-async")
    events = [e async for e in stream]
    check_sse(events, text, FMT_F32, 2, "sse-async")


def test_generation_config_speed_through_the_sdk(client, default_voice_id):
    """generation_config.speed as the SDK sends it, on every route: each segment is round(N / speed)
    codec samples (resampled on its own), and SSE's word timestamps lie inside that audio."""
    text = "Hello there. How are you?"
    raw = client.tts.generate(model_id=MODEL, transcript=text, voice=default_voice_id, output_format=FMT,
                              generation_config={"speed": 1.5}).read()
    assert len(raw) == 2 * stretched_samples(2, 1.5, 16000)
    events = list(client.tts.generate_sse(model_id=MODEL, transcript=text, voice=default_voice_id,
                                          output_format=FMT, add_timestamps=True, generation_config={"speed": 0.6}))
    audio = b"".join(e.audio for e in events if e.type == "chunk")
    assert len(audio) == 2 * stretched_samples(2, 0.6, 16000)
    ends = [t for e in events if e.type == "timestamps" for t in e.word_timestamps.end]
    assert ends and max(ends) <= len(audio) / 2 / 16000 + 1e-6
    with client.tts.websocket_connect() as ws:
        ctx = ws.context("speedy", model_id=MODEL, voice=default_voice_id, output_format=FMT,
                         generation_config={"speed": 1.25})
        ctx.push(text)
        ctx.no_more_inputs()
        ws_events = list(ctx.receive())
    assert ws_events[-1].type == "done"
    assert len(b"".join(e.audio for e in ws_events if e.type == "chunk")) == 2 * stretched_samples(2, 1.25, 16000)


def test_sdk_raises_typed_errors(client, default_voice_id):
    with pytest.raises(cartesia.NotFoundError) as info:
        client.tts.generate(model_id=MODEL, transcript="Hi.", voice="missing-voice", output_format=FMT).read()
    assert info.value.status_code == 404 and info.value.body["error_code"] == "voice_not_found"
    assert "missing-voice" in info.value.body["message"]
    with pytest.raises(cartesia.BadRequestError) as info:
        client.tts.generate(model_id=MODEL, transcript="Hi.", voice=default_voice_id, output_format=FMT,
                            generation_config={"speed": 1.6})  # Cartesia's range is 0.6-1.5
    assert info.value.body["error_code"] == "invalid_request" and "generation_config.speed" in info.value.body["message"]
    with pytest.raises(cartesia.BadRequestError):
        client.tts.generate(model_id="not-a-model", transcript="Hi.", voice=default_voice_id, output_format=FMT)
    events = list(client.tts.generate_sse(model_id=MODEL, transcript="Hi.", voice=default_voice_id,
                                          output_format={"container": "raw", "encoding": "pcm_s16le",
                                                         "sample_rate": 16000}, extra_body={"unknown": 1}))
    assert events[-1].type == "done"


def test_sdk_calls_for_endpoints_not_served_get_a_501_naming_the_feature(gateway, default_voice_id):
    """localize, accents, infill and the voice changer: one 501 each, in Cartesia's shape, that the
    SDK does not retry (x-should-retry: false), not a 404 or a 405 from /voices/{id}."""
    requests: list[str] = []
    with Cartesia(api_key="sk-any", base_url=gateway.url, max_retries=2,
                  http_client=httpx.Client(event_hooks={"request": [lambda r: requests.append(r.url.path)]})) as c:
        calls = {
            "voice localization (voices.localize)": lambda: c.voices.localize(
                voice_id=default_voice_id, name="Brit", accent="british"),
            "adding accents to a voice (voices.add_accents)": lambda: c.voices.add_accents(
                default_voice_id, accents=[{"accent": "british"}]),
            "infill (tts.infill)": lambda: c.tts.infill(model_id=MODEL, transcript="Hi.", voice_id=default_voice_id,
                                                        language="en", left_audio=b"RIFF"),
        }
        for feature, call in calls.items():
            requests.clear()
            with pytest.raises(cartesia.APIStatusError) as info:
                call()
            assert info.value.status_code == 501, (feature, info.value)
            assert info.value.body["error_code"] == "not_implemented" and feature in info.value.body["message"]
            assert len(requests) == 1, f"{feature}: the SDK retried ({requests})"
    # the neighbouring routes are unchanged: GET /voices/localize is a voice lookup
    assert httpx.get(gateway.url + "/voices/localize").status_code == 404
    for method, path in (("DELETE", f"/voices/{default_voice_id}/accents/british"), ("POST", "/voice-changer/bytes"),
                         ("POST", "/voice-changer/sse")):
        r = httpx.request(method, gateway.url + path)
        assert r.status_code == 501 and r.json()["error_code"] == "not_implemented", (path, r.text)
        assert r.headers["x-should-retry"] == "false"


# --- WebSocket -----------------------------------------------------------------------------------------


LONG = " ".join(f"Sentence {w}." for w in "one two three four five six seven eight".split())


def check_ws_context(events, context_id: str, sections: list[int], fmt: dict) -> None:
    mine = [e for e in events if e.context_id == context_id]
    assert [e.type for e in mine].count("done") == 1 and mine[-1].type == "done"
    flush_ids = [e.flush_id for e in mine if e.type == "flush_done"]
    assert flush_ids == list(range(1, len(flush_ids) + 1))
    for k, n in enumerate(sections, start=1):
        audio = b"".join(e.audio for e in mine if e.type == "chunk" and e.flush_id == k)
        assert len(audio) == seg_bytes(fmt, n), (context_id, k)


def test_websocket_three_contexts_with_flushes_and_a_cancel(client, gateway, default_voice_id):
    opts = dict(model_id=MODEL, voice=default_voice_id, max_buffer_delay_ms=5000)
    with client.tts.websocket_connect() as ws:
        a = ws.context("ctx-a", output_format=FMT, **opts)
        b = ws.context("ctx-b", output_format=FMT, **opts)
        c = ws.context("ctx-c", output_format=FMT_F32, add_timestamps=True, **opts)
        a.push("Hello ")
        c.push("One, two")
        b.push(LONG)
        a.push("there. ")
        a.push("", flush=True)
        c.push(" three.", flush=True)
        # b is cancelled mid-stream, after its first audio
        b_events = []
        for event in b.receive():
            b_events.append(event)
            if event.type == "chunk":
                break
        b.cancel()
        a.push("How are you?")
        a.no_more_inputs()
        c.push("Four.")
        c.no_more_inputs()
        a_events = list(a.receive())
        c_events = list(c.receive())
    check_ws_context(a_events, "ctx-a", [1, 1], FMT)
    check_ws_context(c_events, "ctx-c", [1, 1], FMT_F32)
    words = [w for e in c_events if e.type == "timestamps" for w in e.word_timestamps.words]
    assert words == ["One,", "two", "three.", "Four."]
    # The sync client hands events of an unregistered (cancelled) context to whichever context is
    # reading; audio already on the wire may land there, but never a done or anything after it.
    stray = [e for e in a_events + c_events if e.context_id == "ctx-b"]
    assert all(e.type == "chunk" for e in stray)
    assert all(e.context_id in ("ctx-a", "ctx-b") for e in a_events)
    assert all(e.context_id in ("ctx-c", "ctx-b") for e in c_events)
    assert engine_idle(gateway, timeout_s=3.0, hold_s=0.5)


async def test_async_websocket_three_contexts_with_flushes_and_a_cancel(aclient, gateway, default_voice_id):
    opts = dict(model_id=MODEL, voice=default_voice_id, max_buffer_delay_ms=5000, timeout=30)
    async with aclient.tts.websocket_connect() as ws:
        a = ws.context("async-a", output_format=FMT, **opts)
        b = ws.context("async-b", output_format=FMT_F32, **opts)
        c = ws.context("async-c", output_format={"container": "raw", "encoding": "pcm_alaw", "sample_rate": 8000},
                       **opts)
        await a.push("Hello ")
        await b.push(LONG)
        await c.push("Good morning")
        await a.push("there.", flush=True)
        await c.push(", everyone. ")

        async def first_chunk_then_cancel():
            async for event in b.receive():
                if event.type == "chunk":
                    await b.cancel()
                    return event

        async def collect(ctx):
            return [e async for e in ctx.receive()]

        first_b = await first_chunk_then_cancel()
        assert first_b.context_id == "async-b"
        await a.push(" Bye now.")
        await a.no_more_inputs()
        await c.push("", flush=True)
        await c.no_more_inputs()
        a_events, c_events = await asyncio.gather(collect(a), collect(c))
    check_ws_context(a_events, "async-a", [1, 1], FMT)
    check_ws_context(c_events, "async-c", [1, 0],
                     {"container": "raw", "encoding": "pcm_alaw", "sample_rate": 8000})
    assert all(e.context_id == "async-a" for e in a_events) and all(e.context_id == "async-c" for e in c_events)
    assert engine_idle(gateway, timeout_s=3.0, hold_s=0.5)


async def test_async_context_error_ends_its_receive(aclient, default_voice_id):
    async with aclient.tts.websocket_connect() as ws:
        bad = ws.context(model_id=MODEL, voice="unknown-voice-id", output_format=FMT, timeout=20)
        await bad.push("Hello there.")
        events = [e async for e in bad.receive()]
        assert [e.type for e in events] == ["error"]
        assert events[0].status_code == 404 and "unknown-voice-id" in events[0].message
        good = ws.context(model_id=MODEL, voice=default_voice_id, output_format=FMT, timeout=20)
        await good.push("Fine.")
        await good.no_more_inputs()
        events = [e async for e in good.receive()]
        assert events[-1].type == "done"


def test_v2_backcompat_websocket_send(client, default_voice_id):
    ws = client.tts.websocket()
    try:
        out = ws.send(model_id=MODEL, transcript="Hello there, my friend.", voice=default_voice_id,
                      output_format=FMT, stream=False, add_timestamps=True)
        assert len(out.audio) == seg_bytes(FMT)
        assert out.word_timestamps["words"] == ["Hello", "there,", "my", "friend."]
        chunks = list(ws.send(model_id=MODEL, transcript="Again.", voice={"mode": "id", "id": default_voice_id},
                              output_format=FMT, stream=True))
        assert len(b"".join(c.audio for c in chunks if c.audio)) == seg_bytes(FMT)
    finally:
        ws.close()


# --- over TLS, with the SDK's own wss URL -----------------------------------------------------------------


def test_sdk_over_https_and_default_wss(secure_gateway, tls_files, default_voice_id):
    ctx = tls_files.client_context()
    with Cartesia(api_key=API_KEY, base_url=secure_gateway.url, max_retries=0,
                  http_client=httpx.Client(verify=str(tls_files.ca_pem))) as c:
        assert len(c.tts.generate(model_id=MODEL, transcript="Hi.", voice=default_voice_id,
                                  output_format=FMT).read()) == expected_bytes(1, "pcm_s16le", 16000)
        token = c.access_token.create(grants={"tts": True}, expires_in=60).token
        # no websocket_base_url: the SDK turns https into wss on the same port
        with c.tts.websocket_connect(websocket_connection_options={"ssl": ctx}) as ws:
            ctx_ = ws.context(model_id=MODEL, voice=default_voice_id, output_format=FMT)
            ctx_.push("Over TLS.")
            ctx_.no_more_inputs()
            events = list(ctx_.receive())
        assert events[-1].type == "done" and len(b"".join(e.audio for e in events if e.type == "chunk")) == seg_bytes(FMT)
    with Cartesia(token=token, base_url=secure_gateway.url, max_retries=0,
                  http_client=httpx.Client(verify=str(tls_files.ca_pem))) as c:
        assert c.get_status().ok
        assert len(c.tts.generate(model_id=MODEL, transcript="Hi.", voice=default_voice_id,
                                  output_format=FMT).read()) == expected_bytes(1, "pcm_s16le", 16000)
    with Cartesia(api_key="sk_wrong", base_url=secure_gateway.url, max_retries=0,
                  http_client=httpx.Client(verify=str(tls_files.ca_pem))) as c:
        with pytest.raises(cartesia.AuthenticationError):
            c.tts.generate(model_id=MODEL, transcript="Hi.", voice=default_voice_id, output_format=FMT)
