"""Opus output (a Gepard extension of Cartesia's output_format) on a live server: what the server
sends is decoded with PyAV's libopus and compared with the PCM of the same request (same seed).

Comparison: Opus drops DC (libopus's DC-reject filter) and the tiny checkpoint's random audio has
a large DC offset, so both signals are high-passed at 100 Hz first; then the SNR of the decoded
signal against the PCM must be that of a codec at 64 kbit/s (measured ~30 dB on this audio), over
the whole utterance (two segments, many codec chunks and packets) and in every 100 ms window, so a
seam where the encoder state was lost (a click, a gap, a restart with its pre-skip) fails.
"""

from __future__ import annotations

import base64
import io
import json
import math

import av
import httpx
import numpy as np
import pytest
import scipy.signal
import soxr
from websockets.asyncio.client import connect

from tests.api.routes.audio_checks import expected_samples
from tests.api.routes.ws_helpers import gen, read_until_terminal, send

TEXT = "Hello there. How are you?"  # two segments
PRE_SKIP_48K = 312  # libopus's look-ahead at 20 ms frames (6.5 ms)
MIN_SNR_DB = 15.0  # whole utterance; the codec gives ~30 dB at 64 kbit/s
MIN_WINDOW_SNR_DB = 6.0  # every 100 ms window


def _float(frame: av.AudioFrame) -> np.ndarray:
    x = frame.to_ndarray().reshape(-1)
    return x.astype(np.float32) / 32768.0 if x.dtype == np.int16 else x.astype(np.float32)


def decode_packets(packets: list[bytes]) -> list[np.ndarray]:
    """Raw packets -> the PCM of each (48 kHz mono), through one decoder (one continuous stream)."""
    decoder = av.CodecContext.create("libopus", "r")
    decoder.layout = "mono"
    decoder.sample_rate = 48000
    return [np.concatenate([_float(f) for f in decoder.decode(av.Packet(p))] or [np.zeros(0, np.float32)])
            for p in packets]


def decode_file(data: bytes) -> tuple[np.ndarray, int]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.channels == 1
        pcm = np.concatenate([_float(f) for f in container.decode(stream)])
        return pcm, stream.codec_context.sample_rate


def assert_close(decoded: np.ndarray, pcm: np.ndarray, rate: int) -> None:
    assert abs(len(decoded) - len(pcm)) <= 1, (len(decoded), len(pcm))
    n = min(len(decoded), len(pcm))
    sos = scipy.signal.butter(2, 100, "highpass", fs=rate, output="sos")
    a, b = scipy.signal.sosfiltfilt(sos, decoded[:n]), scipy.signal.sosfiltfilt(sos, pcm[:n])
    snr = 10 * np.log10(np.sum(b ** 2) / np.sum((a - b) ** 2))
    assert snr >= MIN_SNR_DB, snr
    win = rate // 10
    windows = [10 * np.log10(np.sum(b[i:i + win] ** 2) / np.sum((a[i:i + win] - b[i:i + win]) ** 2))
               for i in range(win, n - win, win)]  # the first window holds the filters' start
    assert min(windows) >= MIN_WINDOW_SNR_DB, [round(w, 1) for w in windows]


def body(voice: str, output_format: dict, **extra) -> dict:
    return {"model_id": "sonic-3", "transcript": TEXT, "voice": voice, "output_format": output_format, "seed": 11, **extra}


def f32(rate: int) -> dict:
    return {"container": "raw", "encoding": "pcm_f32le", "sample_rate": rate}


def pcm_of(server, voice: str, rate: int) -> np.ndarray:
    r = httpx.post(server.url + "/tts/bytes", json=body(voice, f32(rate)), timeout=60)
    assert r.status_code == 200, r.text
    return np.frombuffer(r.content, "<f4")


def sse_chunks(server, payload: dict) -> list[bytes]:
    r = httpx.post(server.url + "/tts/sse", json=payload, timeout=60)
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: ")]
    assert events[-1]["type"] == "done"
    return [base64.b64decode(e["data"]) for e in events if e["type"] == "chunk"]


def test_ogg_opus_file_on_bytes_route(gateway, default_voice_id):
    """/tts/bytes container ogg: an Ogg Opus file whose decoded length is exactly the PCM's (Ogg's
    pre-skip and end trimming) and whose audio is the PCM's within the codec's tolerance."""
    ogg = {"container": "ogg", "encoding": "opus", "sample_rate": 48000}
    r = httpx.post(gateway.url + "/tts/bytes", json=body(default_voice_id, ogg), timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/ogg"
    assert r.content[:4] == b"OggS" and b"OpusHead" in r.content[:64]
    decoded, rate = decode_file(r.content)
    pcm = pcm_of(gateway, default_voice_id, 48000)
    assert rate == 48000 and len(pcm) == 2 * expected_samples(1, 48000)
    assert len(decoded) == len(pcm)
    assert_close(decoded, pcm, 48000)


@pytest.mark.parametrize("rate", [24000, 16000])
def test_sse_raw_opus_one_packet_per_chunk(gateway, default_voice_id, rate):
    """/tts/sse raw opus: every chunk is one 20 ms packet, the packets are one stream (one
    partial frame and one look-ahead packet at the very end only), and they decode to the PCM."""
    opus = {"container": "raw", "encoding": "opus", "sample_rate": rate}
    packets = sse_chunks(gateway, body(default_voice_id, opus))
    pcm = pcm_of(gateway, default_voice_id, rate)
    frame = rate // 50
    assert len(packets) == math.ceil(len(pcm) / frame) + 1
    pieces = decode_packets(packets)
    assert all(len(p) == 960 for p in pieces)  # 20 ms at 48 kHz each
    decoded = soxr.resample(np.concatenate(pieces)[PRE_SKIP_48K:], 48000, rate)[: len(pcm)]
    assert_close(decoded, pcm, rate)


def test_opus_errors_keep_cartesia_shape(gateway, default_voice_id):
    cases = [
        ("/tts/bytes", {"container": "raw", "encoding": "opus", "sample_rate": 48000}, "container 'ogg'"),
        ("/tts/sse", {"container": "ogg", "encoding": "opus", "sample_rate": 48000}, "expected 'raw'"),
        ("/tts/bytes", {"container": "ogg", "encoding": "opus", "sample_rate": 44100}, "8000, 16000, 24000, 48000"),
        ("/tts/bytes", {"container": "ogg", "encoding": "pcm_s16le", "sample_rate": 48000}, "expected one of: opus"),
    ]
    for path, fmt, words in cases:
        r = httpx.post(gateway.url + path, json=body(default_voice_id, fmt), timeout=30)
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["error_code"] == "invalid_output_format" and words in err["message"], err


async def test_websocket_flush_sections_are_separate_streams(gateway, default_voice_id):
    """Raw Opus on a WebSocket context: one continuous stream per flush section (section 1 holds two
    segments, so a per-segment encoder would send one more packet there), each section's packets
    arrive before its flush_done, and each decodes, from a fresh decoder, to that section's PCM."""
    v = default_voice_id
    opus = {"container": "raw", "encoding": "opus", "sample_rate": 24000}
    opts = {"seed": 11, "max_buffer_delay_ms": 5000}
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        for cid, fmt in (("opus", opus), ("pcm", f32(24000))):
            await send(ws, gen(cid, TEXT, v, output_format=fmt, flush=True, **opts))
            await send(ws, gen(cid, "Bye now.", v, output_format=fmt, flush=True, **opts))
            await send(ws, gen(cid, "", v, output_format=fmt, cont=False, **opts))
        msgs = await read_until_terminal(ws, ["opus", "pcm"])
    for cid in ("opus", "pcm"):  # each section's chunks come before its flush_done
        kinds = [(m["type"], m.get("flush_id")) for m in msgs if m["context_id"] == cid and m["type"] != "chunk"]
        assert kinds == [("flush_done", 1), ("flush_done", 2), ("done", None)], kinds
        done_at = {m["flush_id"]: i for i, m in enumerate(msgs) if m["context_id"] == cid and m["type"] == "flush_done"}
        assert all(i < done_at[m["flush_id"]] for i, m in enumerate(msgs) if m["context_id"] == cid and m["type"] == "chunk")

    def section(cid: str, k: int) -> list[bytes]:
        return [base64.b64decode(m["data"]) for m in msgs
                if m["context_id"] == cid and m["type"] == "chunk" and m["flush_id"] == k]

    for k, segments in ((1, 2), (2, 1)):
        pcm = np.frombuffer(b"".join(section("pcm", k)), "<f4")
        packets = section("opus", k)
        assert abs(len(pcm) - segments * expected_samples(1, 24000)) <= 1
        assert len(packets) == math.ceil(len(pcm) / 480) + 1, (k, len(packets), len(pcm))
        decoded = soxr.resample(np.concatenate(decode_packets(packets))[PRE_SKIP_48K:], 48000, 24000)[: len(pcm)]
        assert_close(decoded, pcm, 24000)


def test_official_cartesia_sdk_passes_the_extension_through(gateway, default_voice_id):
    """The SDK types do not list Opus, but they are TypedDicts: the values reach the server as sent."""
    from cartesia import Cartesia

    with Cartesia(api_key="sk-any", base_url=gateway.url, max_retries=0) as client:
        ogg = client.tts.generate(model_id="sonic-3", transcript="Hello there.", voice={"mode": "id", "id": default_voice_id},
                                  output_format={"container": "ogg", "encoding": "opus", "sample_rate": 24000}).read()
        decoded, rate = decode_file(ogg)
        assert rate == 48000 and len(decoded) == 2 * expected_samples(1, 24000)
        packets = [e.audio for e in client.tts.generate_sse(
            model_id="sonic-3", transcript="Hello there.", voice={"mode": "id", "id": default_voice_id},
            output_format={"container": "raw", "encoding": "opus", "sample_rate": 48000}) if e.type == "chunk"]
        assert len(packets) == math.ceil(expected_samples(1, 48000) / 960) + 1
        assert all(len(p) == 960 for p in decode_packets(packets))
