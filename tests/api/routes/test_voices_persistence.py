"""The embedded store across a server restart, the start-up preload directory, the clip settings
(GEPARD_MAX_REF_SECONDS, GEPARD_MAX_CLIP_BYTES) and who may read or write voices."""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes._voices_support import CLIP_22K, encode_clip, error_of, speech
from voices.backends import LocalVoiceStore
from voices.preload import preload_voice_id

KEY = "voices-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def ids_of(url: str, headers: dict) -> list[str]:
    return [v["id"] for v in httpx.get(url + "/voices", params={"limit": 100}, headers=headers).json()["data"]]


def test_voices_survive_a_restart_and_preload_is_idempotent(tiny_ckpt_dir, tmp_path):
    preload = tmp_path / "preload"
    preload.mkdir()
    (preload / "linda.wav").write_bytes(CLIP_22K.read_bytes())
    mp3 = encode_clip(speech(44100, seconds=6.0), 44100, "mp3")
    (preload / "anna.mp3").write_bytes(mp3)
    (preload / "anna.json").write_text(json.dumps({"name": "Anna", "gender": "feminine", "description": "preloaded"}))
    (preload / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEnot audio")  # reported, start-up goes on
    settings = gateway_settings(tiny_ckpt_dir, tmp_path / "data", preload_dir=preload, max_ref_seconds=5,
                                max_clip_bytes=400_000, api_keys=frozenset({KEY}))

    with LiveServer(settings) as server:
        url = server.url
        preloaded = {preload_voice_id(CLIP_22K.read_bytes()): "linda", preload_voice_id(mp3): "Anna"}
        listed = {v["id"]: v for v in httpx.get(url + "/voices", params={"limit": 100}, headers=AUTH).json()["data"]}
        assert {vid: listed[vid]["name"] for vid in preloaded} == preloaded
        anna = listed[preload_voice_id(mp3)]
        assert (anna["gender"], anna["description"], anna["access"], anna["is_owner"]) == ("feminine", "preloaded", "public", False)
        for vid in preloaded:
            r = httpx.delete(f"{url}/voices/{vid}", headers=AUTH)
            assert r.status_code == 403 and error_of(r)["error_code"] == "voice_read_only"
        # the clip settings: the first 5 s are kept; uploads over 400 kB are refused
        r = httpx.post(url + "/voices/clone", data={"name": "kept", "language": "en"}, headers=AUTH,
                       files={"clip": ("linda.wav", CLIP_22K.read_bytes(), "audio/wav")}, timeout=60)
        assert r.status_code == 200, r.text
        cloned = r.json()
        record = asyncio.run(_record(tmp_path / "data", cloned["id"]))
        assert record.ref_codes.shape[0] == math.ceil(5 * 22050 / 1024)
        big = encode_clip(speech(44100, seconds=4.8), 44100, "wav")  # ~423 kB: read, then refused by size
        r = httpx.post(url + "/voices/clone", data={"name": "big", "language": "en"}, headers=AUTH,
                       files={"clip": ("big.wav", big, "audio/wav")}, timeout=60)
        assert r.status_code == 400 and f"reference clip is {len(big)} bytes; the limit is 400000 bytes (0.4 MB)" in error_of(r)["message"]
        check_permissions(url, cloned["id"])
        before_ids = ids_of(url, AUTH)
        before_audio = {vid: tts_bytes_auth(url, vid) for vid in (cloned["id"], *preloaded)}

    with LiveServer(settings) as server:  # same data dir and preload dir: a restart
        url = server.url
        assert ids_of(url, AUTH) == before_ids  # nothing duplicated, nothing lost
        got = httpx.get(f"{url}/voices/{cloned['id']}", headers=AUTH).json()
        assert (got["name"], got["created_at"]) == ("kept", cloned["created_at"])
        for vid, audio in before_audio.items():
            assert tts_bytes_auth(url, vid) == audio  # the same stored prefix after the restart


async def _record(data_dir, voice_id):
    async with LocalVoiceStore(data_dir) as store:
        return await store.get_record(voice_id)


def tts_bytes_auth(url: str, voice_id: str) -> bytes:
    body = {"model_id": "sonic-3", "transcript": "Hello there.", "voice": voice_id, "seed": 3,
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}}
    r = httpx.post(url + "/tts/bytes", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return r.content


def check_permissions(url: str, voice_id: str) -> None:
    """Reads need a credential (a token needs the tts grant); writes need an API key."""
    r = httpx.get(url + "/voices")
    assert r.status_code == 401 and error_of(r)["error_code"] == "missing_credentials"
    token = httpx.post(url + "/access-token", json={"grants": {"tts": True}}, headers=AUTH).json()["token"]
    as_token = {"Authorization": f"Bearer {token}"}
    assert voice_id in ids_of(url, as_token)
    assert httpx.get(f"{url}/voices/{voice_id}", headers=as_token).status_code == 200
    assert httpx.get(url + "/accents", headers=as_token).status_code == 200
    for r, action in [
        (httpx.post(url + "/voices/clone", data={"name": "x", "language": "en"}, headers=as_token,
                    files={"clip": ("linda.wav", CLIP_22K.read_bytes(), "audio/wav")}), "clone voices"),
        (httpx.patch(f"{url}/voices/{voice_id}", json={"name": "x"}, headers=as_token), "update voices"),
        (httpx.delete(f"{url}/voices/{voice_id}", headers=as_token), "delete voices"),
    ]:
        assert r.status_code == 403 and f"cannot be used to {action}; use an API key" in error_of(r)["message"]
    stt_only = httpx.post(url + "/access-token", json={"grants": {"stt": True}}, headers=AUTH).json()["token"]
    r = httpx.get(url + "/voices", headers={"Authorization": f"Bearer {stt_only}"})
    assert r.status_code == 403 and error_of(r)["error_code"] == "missing_grant"


def test_clip_and_preload_settings_from_the_environment(tmp_path):
    from api.settings import Settings, SettingsError

    s = Settings.from_env({"GEPARD_PRELOAD_DIR": str(tmp_path), "GEPARD_MAX_REF_SECONDS": "0",
                           "GEPARD_MAX_CLIP_BYTES": "1000000", "GEPARD_TOKEN_SECRET": "x" * 32})
    assert (s.preload_dir, s.max_ref_seconds, s.max_clip_bytes) == (tmp_path, 0.0, 1_000_000)
    defaults = Settings()
    assert (defaults.preload_dir, defaults.max_ref_seconds, defaults.max_clip_bytes) == (None, 15.0, 20_000_000)
    for env, message in [
        ({"GEPARD_MAX_REF_SECONDS": "2"}, "GEPARD_MAX_REF_SECONDS: must be 0 (keep whole clips) or >= 3"),
        ({"GEPARD_MAX_REF_SECONDS": "-1"}, "GEPARD_MAX_REF_SECONDS: must be 0"),
        ({"GEPARD_MAX_REF_SECONDS": "long"}, "GEPARD_MAX_REF_SECONDS: 'long' is not a number"),
        ({"GEPARD_MAX_CLIP_BYTES": "0"}, "GEPARD_MAX_CLIP_BYTES: must be >= 1, got 0"),
        ({"GEPARD_MAX_CLIP_BYTES": "20MB"}, "GEPARD_MAX_CLIP_BYTES: '20MB' is not an integer"),
        ({"GEPARD_PRELOAD_DIR": str(tmp_path / "missing")}, "GEPARD_PRELOAD_DIR: directory"),
    ]:
        with pytest.raises(SettingsError) as info:
            Settings.from_env({**env, "GEPARD_TOKEN_SECRET": "x" * 32})
        assert message in str(info.value)
