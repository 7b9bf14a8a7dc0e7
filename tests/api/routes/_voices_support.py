"""Helpers for the voices route tests: clips in every format, TTS over bytes and WebSocket."""

from __future__ import annotations

import base64
import io
import json
import uuid
from typing import Any, Optional

import httpx
import lameenc
import numpy as np
import soundfile as sf
import soxr
from websockets.sync.client import connect

from tests.conftest import REF_AUDIO_DIR

RAW_S16_22K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}
CLIP_44K = REF_AUDIO_DIR / "audio_en.wav"  # 44.1 kHz mono, 7.3 s
CLIP_22K = REF_AUDIO_DIR / "linda.wav"  # 22.05 kHz mono, 8 s


def speech(rate_hz: int = 22050, seconds: Optional[float] = None) -> np.ndarray:
    """Real speech [N] float32 @ rate_hz (from the 44.1 kHz reference clip)."""
    pcm, rate = sf.read(str(CLIP_44K), dtype="float32")
    if seconds is not None:
        pcm = pcm[: int(seconds * rate)]
    return soxr.resample(pcm, rate, rate_hz).astype(np.float32) if rate_hz != rate else pcm


def encode_clip(pcm: np.ndarray, rate_hz: int, fmt: str) -> bytes:
    """pcm [N] or [N, C] float32 -> file bytes: "wav", "flac", "ogg" (vorbis) or "mp3" (lameenc)."""
    if fmt == "mp3":
        chans = 1 if pcm.ndim == 1 else pcm.shape[1]
        enc = lameenc.Encoder()
        enc.set_bit_rate(64)
        enc.set_in_sample_rate(rate_hz)
        enc.set_channels(chans)
        enc.set_quality(7)
        data = enc.encode((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())
        return bytes(data + enc.flush())
    buf = io.BytesIO()
    subtype = {"wav": "PCM_16", "flac": "PCM_16", "ogg": "VORBIS"}[fmt]
    sf.write(buf, pcm, rate_hz, format=fmt.upper(), subtype=subtype)
    return buf.getvalue()


def clone(url: str, clip: bytes, filename: str = "clip.wav", content_type: str = "audio/wav",
          timeout: float = 60.0, **fields: str) -> httpx.Response:
    data = {"name": "test voice", "language": "en", **fields}
    return httpx.post(url + "/voices/clone", data=data, files={"clip": (filename, clip, content_type)},
                      timeout=timeout)


def tts_bytes(url: str, voice: Any, seed: int = 7, transcript: str = "Hello there.") -> httpx.Response:
    body = {"model_id": "sonic-3", "transcript": transcript, "voice": voice, "output_format": RAW_S16_22K,
            "seed": seed}
    return httpx.post(url + "/tts/bytes", json=body, timeout=60)


def tts_ws(ws_url: str, voice: Any, seed: int = 7, transcript: str = "Hello there.") -> tuple[bytes, list[dict]]:
    """One WebSocket context: (audio bytes of its chunks, every event received for it)."""
    cid = str(uuid.uuid4())
    msg = {"context_id": cid, "model_id": "sonic-3", "transcript": transcript, "voice": voice,
           "output_format": RAW_S16_22K, "seed": seed, "continue": False}
    audio, events = b"", []
    with connect(ws_url + "/tts/websocket", open_timeout=10) as ws:
        ws.send(json.dumps(msg))
        while True:
            event = json.loads(ws.recv(timeout=60))
            events.append(event)
            if event.get("type") == "chunk":
                audio += base64.b64decode(event["data"])
            if event.get("done") or event.get("type") in ("done", "error"):
                break
    return audio, events


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) >= {"error_code", "title", "message", "request_id"}, body
    return body
