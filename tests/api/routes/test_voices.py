"""api/routes/voices.py on a real uvicorn server, over both stores (embedded SQLite and a real Redis):
CRUD through the cartesia SDK, SDK auto-pagination over 250 voices, clones in every format and
rate, every bad clip and form, synthesis with a cloned voice (bytes and WebSocket), concurrency."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import cartesia
import httpx
import numpy as np
import pytest
import torch
from websockets.asyncio.client import connect

from api.app import DEFAULT_VOICE_ID
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes._voices_support import (
    CLIP_22K,
    CLIP_44K,
    clone,
    encode_clip,
    error_of,
    speech,
    tts_bytes,
    tts_ws,
)
from tests.api.routes.ws_helpers import assert_ws_error, gen, read_until_terminal, send
from tests.voices.redis_server import RedisServer
from voices.backends import open_voice_store
from voices.models import Voice, VoiceRecord

SEEDED = 250


@dataclass
class Deployment:
    server: LiveServer
    backend: str
    data_dir: Path
    redis_url: Optional[str]

    @property
    def url(self) -> str:
        return self.server.url

    def sdk(self, **kwargs) -> cartesia.Cartesia:
        return cartesia.Cartesia(api_key="unused", base_url=self.url, max_retries=0, **kwargs)

    def run(self, coro_fn):
        """Run ``coro_fn(store)`` against a second store on the same backing data (another replica)."""
        async def main():
            async with open_voice_store(self.redis_url, self.data_dir) as store:
                return await coro_fn(store)
        return asyncio.run(main())


@pytest.fixture(scope="module", params=["local", pytest.param("redis", marks=pytest.mark.redis)])
def deployment(request, tiny_ckpt_dir, tmp_path_factory) -> Iterator[Deployment]:
    redis = RedisServer.start() if request.param == "redis" else None
    data_dir = tmp_path_factory.mktemp(f"voices-{request.param}")
    try:
        settings = gateway_settings(tiny_ckpt_dir, data_dir, redis_url=redis.url if redis else None)
        with LiveServer(settings) as server:
            yield Deployment(server, request.param, data_dir, redis.url if redis else None)
    finally:
        if redis is not None:
            redis.stop()


def all_ids(dep: Deployment) -> list[str]:
    """Every listed id, walked with raw requests (independent of the SDK's paginator)."""
    ids: list[str] = []
    after = None
    while True:
        params = {"limit": 100, **({"starting_after": after} if after else {})}
        data = httpx.get(dep.url + "/voices", params=params).json()["data"]
        if not data:
            return ids
        ids += [v["id"] for v in data]
        after = ids[-1]


# --- builtins, CRUD ------------------------------------------------------------------------------


def test_default_voice_is_listed_with_a_stable_id_and_read_only(deployment):
    client = deployment.sdk()
    listed = {v.id: v for v in client.voices.list(limit=100)}
    assert DEFAULT_VOICE_ID in listed
    voice = client.voices.get(DEFAULT_VOICE_ID)
    assert (voice.name, voice.is_owner, voice.access, voice.visibility) == ("Gepard", False, "public", "all")
    for call in (lambda: client.voices.update(DEFAULT_VOICE_ID, name="mine"),
                 lambda: client.voices.delete(DEFAULT_VOICE_ID)):
        with pytest.raises(cartesia.PermissionDeniedError) as info:
            call()
        assert info.value.body["error_code"] == "voice_read_only"
        assert DEFAULT_VOICE_ID in info.value.body["message"]


def test_clone_both_reference_clips_then_get_patch_delete_with_the_sdk(deployment):
    client = deployment.sdk()
    for path in (CLIP_44K, CLIP_22K):
        with path.open("rb") as clip:
            meta = client.voices.clone(clip=clip, name=f"ref {path.stem}", language="en",
                                       description="from the SDK", accent="british", base_voice_id=DEFAULT_VOICE_ID)
        assert (meta.name, meta.language, meta.description, meta.access, meta.visibility) == (
            f"ref {path.stem}", "en", "from the SDK", "private", "owner")
        voice = client.voices.get(meta.id)
        assert (voice.id, voice.is_owner, voice.accent) == (meta.id, True, "british")
        assert [(loc.locale, loc.is_native) for loc in voice.locales] == [("en", True)]
        # reference codes were resampled to 22.05 kHz: ceil(seconds * 22050 / 1024) frames
        seconds = 7.3 if path == CLIP_44K else 8.0
        record = deployment.run(lambda store: store.get_record(meta.id))
        assert record.ref_codes.shape == (math.ceil(seconds * 22050 / 1024), 32)

        updated = client.voices.update(meta.id, name="renamed", description="patched", gender="feminine",
                                       accent="southern-us")
        assert (updated.name, updated.description, updated.gender, updated.accent) == (
            "renamed", "patched", "feminine", "southern-us")
        assert client.voices.get(meta.id).name == "renamed"
        assert meta.id in [v.id for v in client.voices.list(q="renamed", limit=100)]

        client.voices.delete(meta.id)
        with pytest.raises(cartesia.NotFoundError) as info:
            client.voices.get(meta.id)
        assert info.value.body["error_code"] == "voice_not_found" and meta.id in info.value.body["message"]
        with pytest.raises(cartesia.NotFoundError):
            client.voices.delete(meta.id)
        assert meta.id not in all_ids(deployment)


def test_patch_rejects_unknown_fields_bad_values_and_display_name_accents(deployment):
    vid = clone(deployment.url, CLIP_22K.read_bytes(), name="patch me").json()["id"]
    cases = [
        ({"id": "x"}, "cannot update field(s) ['id']"),
        ({"name": None}, "name: must not be null"),
        ({"name": 3}, "name: expected a string, got int"),
        ({"gender": "robot"}, "gender must be one of"),
        ({"accent": "British English"}, "'British English' is not a catalog accent id"),
        ({"accent": "a" * 1_000_000}, "accent: 1000000 characters; the limit is 64"),
        ({"tagline": "t" * 1_000_000}, "tagline is 1000000 characters; the limit is 256"),
    ]
    for body, message in cases:
        r = httpx.patch(f"{deployment.url}/voices/{vid}", json=body)
        assert r.status_code == 400 and message in error_of(r)["message"], (body, r.text)
    r = httpx.patch(f"{deployment.url}/voices/{vid}", content=b"{not json")
    assert r.status_code == 400 and error_of(r)["error_code"] == "invalid_json"
    r = httpx.patch(f"{deployment.url}/voices/{vid}", json={"description": None, "gender": None, "accent": None})
    assert r.status_code == 200 and (r.json()["description"], r.json()["gender"], r.json()["accent"]) == ("", None, None)
    r = httpx.patch(f"{deployment.url}/voices/{uuid.uuid4()}", json={"name": "x"})
    assert r.status_code == 404 and error_of(r)["error_code"] == "voice_not_found"


def test_accents_catalogue_through_the_sdk(deployment):
    accents = deployment.sdk().voices.list_accents().accents
    ids = [a.id for a in accents]
    assert ids == sorted(ids) and {"british", "general-american", "parisian"} <= set(ids)
    british = next(a for a in accents if a.id == "british")
    assert (british.language, british.locale, british.is_locale_default) == ("en", "en-GB", True)


# --- pagination ----------------------------------------------------------------------------------


def seed_voices(dep: Deployment, count: int) -> list[str]:
    """Store ``count`` voices through a second store; ten share each created_at (ties order by id).
    They carry the running checkpoint's fingerprint: they have no reference codes to recompute from."""
    hidden = dep.server.runtime.engine.default_prefix().shape[1]
    fingerprint = dep.server.runtime.engine.model_info.fingerprint

    async def put_all(store) -> list[str]:
        ids = []
        for i in range(count):
            voice = Voice(id=str(uuid.uuid4()), name=f"seeded {i:03d}", language="de" if i % 5 == 0 else "en-GB",
                          created_at=f"2026-08-14T10:{i // 10 % 60:02d}:00Z", description="bulk",
                          gender=("feminine", "masculine")[i % 2], is_owner=i % 3 != 0,
                          model_fingerprint=fingerprint)
            await store.put(VoiceRecord(voice=voice, prefix=torch.randn(8, hidden)))
            ids.append(voice.id)
        return ids

    return dep.run(put_all)


def test_sdk_auto_pagination_over_250_voices_walks_each_once_both_ways(deployment):
    seeded = seed_voices(deployment, SEEDED)
    expected = all_ids(deployment)
    assert len(expected) == len(set(expected)) and set(seeded) <= set(expected)
    requests: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [requests.append]})
    client = deployment.sdk(http_client=http)
    for limit in (7, 100):
        requests.clear()
        walked = []
        for voice in client.voices.list(limit=limit):
            walked.append(voice.id)
            assert len(walked) <= len(expected), "pagination loops"
        assert walked == expected
        assert len(requests) == math.ceil(len(expected) / limit) + 1  # the last page is empty
    # backwards: ending_before walks towards the start, pages in forward order
    walked = [v.id for v in client.voices.list(limit=9, ending_before=expected[-1])]
    pages = [walked[i:i + 9] for i in range(0, len(walked), 9)]
    assert sorted(walked) == sorted(expected[:-1]) and len(walked) == len(set(walked))
    assert [v for page in reversed(pages) for v in page] == expected[:-1]


def test_list_filters_cursors_and_parameter_errors(deployment):
    url = deployment.url + "/voices"
    if not any("seeded" in v for v in map(str, httpx.get(url, params={"q": "seeded", "limit": 1}).json()["data"])):
        seed_voices(deployment, SEEDED)  # also runs alone (-k), not only after the pagination test
    everything = all_ids(deployment)
    page = httpx.get(url, params={"limit": 3}).json()
    assert set(page) == {"data", "has_more", "next_page"} and page["has_more"] and page["next_page"] == page["data"][-1]["id"]
    assert httpx.get(url + "/", params={"limit": 3}).json() == page
    # past the end: an empty page, as the SDK needs to stop
    assert httpx.get(url, params={"starting_after": everything[-1]}).json() == {"data": [], "has_more": False, "next_page": None}
    assert httpx.get(url, params={"ending_before": everything[0]}).json()["data"] == []
    middle = httpx.get(url, params={"starting_after": everything[10], "limit": 5}).json()["data"]
    assert [v["id"] for v in middle] == everything[11:16]
    before = httpx.get(url, params={"ending_before": everything[10], "limit": 5}).json()
    assert [v["id"] for v in before["data"]] == everything[5:10] and before["next_page"] == everything[5]

    def listed(**params) -> list[dict]:
        out, after = [], None
        while True:
            data = httpx.get(url, params={"limit": 100, **params, **({"starting_after": after} if after else {})}).json()["data"]
            if not data:
                return out
            out += data
            after = data[-1]["id"]

    seeded = [v for v in listed(q="SEEDED")]
    assert len(seeded) >= SEEDED and all("seeded" in v["name"] for v in seeded)
    assert all(v["gender"] == "feminine" for v in listed(gender="feminine", q="seeded"))
    assert len(listed(gender="feminine", q="seeded")) == len(seeded) // 2
    german = listed(language="de", q="seeded")
    assert german and all(v["language"] == "de" for v in german)
    assert all(v["language"] == "en-GB" for v in listed(language="en-GB", q="seeded"))
    assert all(not v["is_owner"] for v in listed(is_owner="false", q="seeded"))
    assert all(v["is_owner"] for v in listed(is_owner="true", q="seeded"))
    assert listed(q=DEFAULT_VOICE_ID)[0]["id"] == DEFAULT_VOICE_ID

    for params, code, message in [
        ({"limit": "abc"}, "invalid_request", "limit: expected an integer, got 'abc'"),
        ({"limit": 0}, "invalid_request", "limit: must be an integer from 1 to 100, got 0"),
        ({"limit": 101}, "invalid_request", "limit: must be an integer from 1 to 100, got 101"),
        ({"is_owner": "maybe"}, "invalid_request", "is_owner: expected true or false, got 'maybe'"),
        ({"gender": "robot"}, "invalid_voice", "gender filter must be one of"),
        ({"starting_after": "nope"}, "invalid_cursor", "starting_after='nope' is not the id of a voice"),
        ({"starting_after": everything[1], "ending_before": everything[5]}, "invalid_request", "not both"),
    ]:
        r = httpx.get(url, params=params)
        body = error_of(r)
        assert (r.status_code, body["error_code"]) == (400, code) and message in body["message"], (params, body)


# --- clones: formats, limits, bad clips ----------------------------------------------------------


@pytest.mark.parametrize("fmt, rate_hz, channels", [
    ("mp3", 44100, 1), ("mp3", 24000, 2), ("flac", 48000, 2), ("ogg", 16000, 1), ("wav", 8000, 2),
])
def test_clone_accepts_every_format_at_any_rate_mono_mixed(deployment, fmt, rate_hz, channels):
    pcm = speech(rate_hz, seconds=5.0)
    if channels == 2:
        pcm = np.stack([pcm, 0.5 * pcm], axis=1)
    data = encode_clip(pcm, rate_hz, fmt)
    r = clone(deployment.url, data, filename=f"made.{fmt}", content_type=f"audio/{'mpeg' if fmt == 'mp3' else fmt}")
    assert r.status_code == 200, r.text
    record = deployment.run(lambda store: store.get_record(r.json()["id"]))
    frames = record.ref_codes.shape[0]
    assert abs(frames - 5.0 * 22050 / 1024) <= 3  # ~5 s at 22.05 kHz, whatever the input rate


def test_clone_keeps_the_first_max_ref_seconds(deployment):
    long_clip = encode_clip(np.concatenate([speech()] * 3), 22050, "wav")  # 21.9 s
    r = clone(deployment.url, long_clip, mode="similarity", enhance="true")  # 2.x fields are ignored
    assert r.status_code == 200, r.text
    record = deployment.run(lambda store: store.get_record(r.json()["id"]))
    assert record.ref_codes.shape[0] == math.ceil(15 * 22050 / 1024)


def _chunked(data: bytes, boundary: str) -> Iterator[bytes]:
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nbig\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"language\"\r\n\r\nen\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"clip\"; filename=\"big.wav\"\r\n"
            f"Content-Type: audio/wav\r\n\r\n").encode()
    yield head
    for i in range(0, len(data), 1 << 20):
        yield data[i:i + (1 << 20)]
    yield f"\r\n--{boundary}--\r\n".encode()


def _wav_like(size: int) -> bytes:
    return (b"RIFF" + (size - 8).to_bytes(4, "little") + b"WAVE").ljust(size, b"\0")


def test_every_bad_clip_gets_a_precise_error_and_stores_nothing(deployment):
    before = all_ids(deployment)
    quiet = np.random.default_rng(0).normal(0, 10 ** (-80 / 20), 22050 * 5).astype(np.float32)
    cases = [
        (encode_clip(speech(seconds=2.0), 22050, "wav"), "short.wav", "audio/wav", 400, "clip_too_short",
         "reference clip is 2.00 s long; at least 3 s of audio is needed"),
        (encode_clip(speech(44100, seconds=2.5), 44100, "mp3"), "short.mp3", "audio/mpeg", 400, "clip_too_short", "at least 3 s"),
        (encode_clip(np.zeros(22050 * 5, np.float32), 22050, "wav"), "silent.wav", "audio/wav", 400, "clip_silent",
         "reference clip is silent: its RMS level is -inf dBFS, below the -60 dBFS threshold"),
        (encode_clip(quiet, 22050, "flac"), "hiss.flac", "audio/flac", 400, "clip_silent", "-80."),
        (b"RIFF\x24\x00\x00\x00WAVEgarbage-not-a-fmt-chunk" * 4, "bad.wav", "audio/wav", 400, "corrupt_clip",
         "looks like wav but cannot be decoded"),
        (b"ID3" + bytes(range(256)) * 8, "bad.mp3", "audio/mpeg", 400, "corrupt_clip", "looks like mp3"),
        (b"just some text, not audio at all", "notes.wav", "audio/wav", 400, "corrupt_clip",
         "is declared as wav (content type 'audio/wav' and extension '.wav') but its bytes are not a wav stream"),
        (b"", "empty.wav", "audio/wav", 400, "corrupt_clip", "is empty (0 bytes)"),
        (b"just some text, not audio at all", "notes.txt", "text/plain", 400, "unsupported_audio_format",
         "has an unsupported audio format (content type 'text/plain' and extension '.txt'"),
        (_wav_like(20_000_001), "big.wav", "audio/wav", 400, "clip_too_large",
         "reference clip is 20000001 bytes; the limit is 20000000 bytes (20 MB)"),
        (_wav_like(25_000_000), "huge.wav", "audio/wav", 400, "clip_too_large", "may be at most 20000000 bytes (20 MB)"),
    ]
    for data, filename, ctype, status, code, message in cases:
        r = clone(deployment.url, data, filename=filename, content_type=ctype)
        body = error_of(r)
        assert (r.status_code, body["error_code"]) == (status, code) and message in body["message"], (filename, body)
        assert r.headers["x-should-retry"] == "false"
    # a chunked upload (no Content-Length) is cut off while streaming
    boundary = "gepardtestboundary"
    r = httpx.post(deployment.url + "/voices/clone", content=_chunked(_wav_like(25_000_000), boundary),
                   headers={"content-type": f"multipart/form-data; boundary={boundary}"}, timeout=60)
    body = error_of(r)
    assert (r.status_code, body["error_code"]) == (400, "clip_too_large") and "is over" in body["message"], body
    assert all_ids(deployment) == before


def test_a_clone_whose_client_hangs_up_is_cancelled_and_stores_nothing(deployment):
    """The client learns a clone's id only from the response: a clone finished after it left would
    be stored for nobody (and an SDK that timed out and retried would store one per attempt)."""
    import threading

    cloner = deployment.server.runtime.cloner
    encode, started, cancelled = cloner._encode, threading.Event(), threading.Event()

    async def slow_encode(voice_id, pcm, *steps):  # a busy machine: the clone is still working when the client leaves
        started.set()
        try:
            await asyncio.sleep(3.0)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return await encode(voice_id, pcm, *steps)

    name = f"abandoned {uuid.uuid4().hex[:8]}"
    cloner._encode = slow_encode
    try:
        with ThreadPoolExecutor(1) as pool:
            gone = pool.submit(clone, deployment.url, CLIP_22K.read_bytes(), name=name, timeout=1.0)
            assert started.wait(10), "the clone never reached the encoder"
            with pytest.raises(httpx.ReadTimeout):
                gone.result()  # httpx closes the connection on the timeout: the client is gone
        assert cancelled.wait(5), "the clone went on after its client hung up"
    finally:
        del cloner._encode  # the class's method again
    time.sleep(0.2)
    assert name not in [v.name for v in deployment.sdk().voices.list(q=name, limit=100)]
    again = clone(deployment.url, CLIP_22K.read_bytes(), name=name)  # clones still work
    assert again.status_code == 200, again.text
    deployment.sdk().voices.delete(again.json()["id"])


def test_clones_past_the_process_limit_wait_briefly_then_get_429(deployment, monkeypatch):
    """A clone holds its upload and decoded audio in memory while it runs (20 concurrent 19 MB
    clones took +677 MiB): at most GEPARD_MAX_CONCURRENT_CLONES run at once per process. One more, its
    upload in, waits up to CLONE_SLOT_WAIT_S for a place, then gets 429 concurrency_limited with
    retry advice; one that finds a place within the wait is served."""
    import threading

    from api.routes import voices as voices_routes

    monkeypatch.setattr(voices_routes, "CLONE_SLOT_WAIT_S", 0.5)
    rt = deployment.server.runtime
    limit = rt.cloner.max_concurrent
    cloner = rt.cloner
    encode, release, holding = cloner._encode, threading.Event(), []

    async def held_encode(voice_id, pcm, *steps):  # slow clones: their places stay taken until released
        holding.append(voice_id)
        while not release.is_set():
            await asyncio.sleep(0.02)
        return await encode(voice_id, pcm, *steps)

    refused_before = rt.metrics.errors.labels("voices", "concurrency_limited")._value.get()
    clip = CLIP_22K.read_bytes()
    cloner._encode = held_encode
    try:
        with ThreadPoolExecutor(limit + 1) as pool:
            first = [pool.submit(clone, deployment.url, clip, name=f"limited {i}") for i in range(limit)]
            deadline = time.monotonic() + 20
            while len(holding) < limit:
                assert time.monotonic() < deadline, f"only {len(holding)} of {limit} clones started"
                time.sleep(0.02)
            # a whole upload over the limit: 429 after the brief wait, with retry advice
            t0 = time.monotonic()
            r = clone(deployment.url, clip, name="one too many", timeout=10)
            waited = time.monotonic() - t0
            body = error_of(r)
            assert (r.status_code, body["error_code"]) == (429, "concurrency_limited"), body
            assert f"already runs {limit} voice clones" in body["message"] and "retry in" in body["message"]
            assert (r.headers["retry-after"], r.headers["retry-after-ms"]) == ("2", "2000")
            assert "x-should-retry" not in r.headers
            assert 0.4 <= waited < 5
            assert len(holding) == limit  # the refused clone never reached the encoder
            # a clone that finds a place within its wait is served
            monkeypatch.setattr(voices_routes, "CLONE_SLOT_WAIT_S", 30.0)
            late = pool.submit(clone, deployment.url, clip, name="limited late")
            time.sleep(0.5)
            assert not late.done() and len(holding) == limit
            release.set()
            made = [f.result() for f in first] + [late.result()]
    finally:
        release.set()
        del cloner._encode  # the class's method again
    assert [r.status_code for r in made] == [200] * (limit + 1), [r.text for r in made]
    assert rt.metrics.errors.labels("voices", "concurrency_limited")._value.get() == refused_before + 1
    for r in made:
        assert httpx.delete(f"{deployment.url}/voices/{r.json()['id']}").status_code == 204


def test_bad_clone_forms_name_the_field(deployment):
    url = deployment.url + "/voices/clone"
    clip = CLIP_22K.read_bytes()
    files = {"clip": ("linda.wav", clip, "audio/wav")}
    before = all_ids(deployment)
    cases = [
        (dict(json={"name": "x", "language": "en"}), "invalid_content_type",
         "expects a multipart/form-data body with a 'clip' file part, got content type 'application/json'"),
        (dict(data={"name": "x", "language": "en"}, files={"other": ("a.wav", clip, "audio/wav")}), "missing_field",
         "clip: field required"),
        (dict(data={"language": "en"}, files=files), "missing_field", "name: field required"),
        (dict(data={"name": "  ", "language": "en"}, files=files), "missing_field", "name: field required"),
        (dict(data={"name": "x"}, files=files), "missing_field", "language: field required"),
        (dict(data={"name": "x", "language": "english!"}, files=files), "invalid_request",
         "language: 'english!' is not a language code"),
        (dict(data={"name": "x", "language": "en", "accent": "British English"}, files=files), "invalid_request",
         "accent: 'British English' is not a catalog accent id"),
        (dict(data={"name": "x", "language": "en", "gender": "robot"}, files=files), "invalid_voice",
         "gender must be one of"),
        (dict(data={"name": "x" * 300, "language": "en"}, files=files), "invalid_voice",
         "voice name is 300 characters; the limit is 256"),
        (dict(content=b"--b\r\ngarbage", headers={"content-type": "multipart/form-data; boundary=b"}),
         "invalid_multipart", "the body ended before the closing boundary"),
        (dict(content=b"x", headers={"content-type": "multipart/form-data"}), "invalid_multipart",
         "Missing boundary in multipart"),
    ]
    for kwargs, code, message in cases:
        r = httpx.post(url, timeout=60, **kwargs)
        body = error_of(r)
        assert (r.status_code, body["error_code"]) == (400, code) and message in body["message"], (kwargs.get("data"), body)
    # a text part named clip is not a file
    r = httpx.post(url, files={"clip": (None, "text"), "name": (None, "x"), "language": (None, "en")})
    assert r.status_code == 400 and "clip must be a file part" in error_of(r)["message"]
    assert all_ids(deployment) == before


# --- synthesis with stored voices ----------------------------------------------------------------


def test_synthesis_uses_the_stored_prefix_and_a_deleted_voice_is_refused(deployment):
    url = deployment.url
    vid = clone(url, CLIP_44K.read_bytes(), name="speaker").json()["id"]
    cloned = tts_bytes(url, vid)
    assert cloned.status_code == 200 and len(cloned.content) > 0
    default = tts_bytes(url, DEFAULT_VOICE_ID)
    assert default.status_code == 200 and default.content != cloned.content
    for shape in ({"id": vid}, {"mode": "id", "id": vid}):
        assert tts_bytes(url, shape).content == cloned.content  # same prefix, same seed: same audio
    ws_cloned, events = tts_ws(deployment.server.ws_url, {"mode": "id", "id": vid})
    assert events[-1]["type"] == "done" and ws_cloned
    ws_default, _ = tts_ws(deployment.server.ws_url, DEFAULT_VOICE_ID)
    assert ws_cloned != ws_default
    assert ws_cloned == cloned.content

    r = tts_bytes(url, {"mode": "embedding", "embedding": [0.1] * 192})
    assert r.status_code == 400 and error_of(r)["error_code"] == "voice_embedding_not_supported"
    missing = str(uuid.uuid4())
    r = tts_bytes(url, missing)
    assert r.status_code == 404 and missing in error_of(r)["message"]

    assert httpx.delete(f"{url}/voices/{vid}").status_code == 204
    r = tts_bytes(url, vid)
    assert r.status_code == 404 and error_of(r)["error_code"] == "voice_not_found" and vid in error_of(r)["message"]
    _, events = tts_ws(deployment.server.ws_url, vid)
    error = events[-1]
    assert (error["type"], error["status_code"], error["error_code"], error["done"]) == ("error", 404, "voice_not_found", True)
    assert vid in error["message"] and error["context_id"] == events[0]["context_id"]


def test_a_voice_stored_by_another_replica_is_usable_and_its_delete_is_seen(deployment):
    [vid] = seed_voices(deployment, 1)
    assert tts_bytes(deployment.url, vid).status_code == 200  # now cached here
    deployment.run(lambda store: store.delete(vid))
    r = tts_bytes(deployment.url, vid)
    assert r.status_code == 404 and vid in error_of(r)["message"]


# --- the voice's language -----------------------------------------------------------------------

PESOS = ["Son", "doscientos", "cincuenta", "pesos."]  # "Son $250." read for Mexico
DOLARES = ["Son", "doscientos", "cincuenta", "dólares."]  # ... for Spain


def spoken_words(url: str, voice_id: str, transcript: str = "Son $250.", **extra) -> list[str]:
    """The words an SSE request was read as (its normalised word timestamps)."""
    body = {"model_id": "sonic-3", "transcript": transcript, "voice": {"mode": "id", "id": voice_id},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
            "add_timestamps": True, "use_normalized_timestamps": True, **extra}
    r = httpx.post(url + "/tts/sse", json=body, timeout=60)
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    return [w for e in events if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]]


async def ws_spoken_words(ws_url: str, voice_id: str, pieces: list[str], **extra) -> list[str]:
    """The words a WebSocket context that sends ``pieces`` (then closes) was read as."""
    async with connect(ws_url + "/tts/websocket") as ws:
        for piece in pieces:
            await send(ws, gen("c", piece, voice_id, add_timestamps=True, use_normalized_timestamps=True, **extra))
        await send(ws, gen("c", "", voice_id, cont=False, **extra))
        msgs = await read_until_terminal(ws, ["c"])
    assert msgs[-1]["type"] == "done", msgs[-1]
    return [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]]


def test_a_request_naming_no_language_is_read_in_its_voices(deployment):
    """A Spanish voice with a Mexican accent reads a request with no language (LiveKit sends null),
    or with only "es", for Mexico; a region or another language asked for wins. Its accent changed
    here or through another replica changes the reading at the next request."""
    url = deployment.url
    vid = clone(url, CLIP_22K.read_bytes(), name="mx", language="es", accent="mexican").json()["id"]
    assert spoken_words(url, vid) == PESOS
    assert spoken_words(url, vid, language=None) == PESOS
    assert spoken_words(url, vid, language="es") == PESOS
    assert spoken_words(url, vid, language="es-ES") == DOLARES
    assert spoken_words(url, vid, locale="es-ES") == DOLARES
    assert spoken_words(url, vid, language="es", normalization="es-ES") == DOLARES
    assert spoken_words(url, vid, language="en") == ["Son", "two", "hundred", "and", "fifty", "dollars."]
    assert spoken_words(url, DEFAULT_VOICE_ID, "It is $250.", language=None)[-1] == "dollars."  # an English voice

    assert httpx.patch(f"{url}/voices/{vid}", json={"accent": "castilian"}).status_code == 200
    assert spoken_words(url, vid) == DOLARES
    deployment.run(lambda store: store.update(vid, accent="mexican"))
    deadline = time.monotonic() + 10  # Redis: the replica's change is published, and lands here in milliseconds
    while (words := spoken_words(url, vid)) != PESOS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert words == PESOS


async def test_a_websocket_context_naming_no_language_is_read_in_its_voices(deployment):
    vid = clone(deployment.url, CLIP_22K.read_bytes(), name="mx", language="es-MX").json()["id"]
    ws_url = deployment.server.ws_url
    assert await ws_spoken_words(ws_url, vid, ["Son $250."], language=None) == PESOS
    assert await ws_spoken_words(ws_url, vid, ["", "Son $250."]) == PESOS  # opened empty, as agents do
    assert await ws_spoken_words(ws_url, vid, ["Son $250."], language="es-ES") == DOLARES


async def test_phonemes_are_checked_in_the_voices_language(deployment):
    """A voice in a language eSpeak lacks: a request naming no language is refused before any audio
    (a context also when its first text comes after an empty opening); naming one it has, served."""
    url = deployment.url
    vid = clone(url, CLIP_22K.read_bytes(), name="tl", language="tl").json()["id"]
    body = {"model_id": "sonic-3", "transcript": "Kumusta ka?", "voice": {"mode": "id", "id": vid},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
            "add_phoneme_timestamps": True}
    r = httpx.post(url + "/tts/sse", json=body, timeout=60)
    assert r.status_code == 400 and error_of(r)["error_code"] == "unsupported_language" and "'tl'" in r.text
    assert httpx.post(url + "/tts/sse", json=body | {"language": "en"}, timeout=60).status_code == 200
    async with connect(deployment.server.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("now", "Kumusta ka?", vid, add_phoneme_timestamps=True))
        await send(ws, gen("later", "", vid, add_phoneme_timestamps=True))
        await send(ws, gen("later", "Kumusta ka?", vid, add_phoneme_timestamps=True))
        msgs = await read_until_terminal(ws, ["now", "later"])
    for cid in ("now", "later"):
        (refusal,) = [m for m in msgs if m["context_id"] == cid]
        assert_ws_error(refusal, cid, 400, "unsupported_language", "'tl'")


def test_concurrent_clones_and_deletes(deployment):
    clip = CLIP_22K.read_bytes()
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda i: clone(deployment.url, clip, name=f"parallel {i}"), range(4)))
        assert [r.status_code for r in made] == [200] * 4
        ids = [r.json()["id"] for r in made]
        assert len(set(ids)) == 4 and set(ids) <= set(all_ids(deployment))
        # four deletes of one voice race: exactly one wins, the others see 404
        codes = sorted(pool.map(lambda _: httpx.delete(f"{deployment.url}/voices/{ids[0]}").status_code, range(4)))
        assert codes == [204, 404, 404, 404]
        # deletes racing synthesis of the other voices: each request either speaks or gets 404
        results = list(pool.map(lambda job: job(), [
            *(lambda v=v: httpx.delete(f"{deployment.url}/voices/{v}").status_code for v in ids[1:]),
            *(lambda v=v: tts_bytes(deployment.url, v).status_code for v in ids[1:]),
        ]))
        assert results[:3] == [204] * 3 and set(results[3:]) <= {200, 404}
    for vid in ids:
        assert tts_bytes(deployment.url, vid).status_code == 404
    assert not set(ids) & set(all_ids(deployment))
