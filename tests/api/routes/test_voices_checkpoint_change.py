"""A checkpoint change on the same data directory (the operator switches GEPARD_MODEL): stored voices
speak with a prefix the running checkpoint computed from their reference codes, a voice that cannot
be recomputed is a 409 ``voice_incompatible`` in Cartesia's error shape, and preloaded voices keep
their ids instead of being listed once per checkpoint."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import torch

from engine.tiny import write_tiny_checkpoint
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes._voices_support import CLIP_22K, CLIP_44K, clone, error_of, tts_bytes, tts_ws
from voices.backends import LocalVoiceStore
from voices.models import Voice, VoiceRecord

WIDE = 1024  # Gepard's hidden size: a voice kept from the real model, on the tiny checkpoint


def listed_ids(url: str) -> list[str]:
    return [v["id"] for v in httpx.get(url + "/voices", params={"limit": 100}).json()["data"]]


async def _seed_wide_voices(data_dir: Path, codes_from: str) -> tuple[str, str]:
    """Two voices with [8, WIDE] prefixes of another model: one with ``codes_from``'s reference
    codes, one without codes. Returns their ids."""
    async with LocalVoiceStore(data_dir) as store:
        codes = (await store.get_record(codes_from)).ref_codes
        ids = []
        for name, ref_codes in (("wide with codes", codes), ("wide without codes", None)):
            voice = Voice(id=str(uuid.uuid4()), name=name, language="en", model_fingerprint="the-real-model")
            await store.put(VoiceRecord(voice=voice, prefix=torch.randn(8, WIDE), ref_codes=ref_codes))
            ids.append(voice.id)
        return ids[0], ids[1]


async def _record(data_dir: Path, voice_id: str) -> VoiceRecord:
    async with LocalVoiceStore(data_dir) as store:
        return await store.get_record(voice_id)


@dataclass
class Switched:
    """A gateway restarted on another checkpoint over the data of a first one."""

    server: LiveServer  # running the second checkpoint
    data_dir: Path
    old_fingerprint: str
    listed_before: list[str]  # GET /voices on the first checkpoint
    cloned: str  # cloned on the first checkpoint
    preloaded: str  # linda.wav of the preload directory
    wide: str  # [8, WIDE] prefix of another model, with the cloned voice's reference codes
    wide_without_codes: str

    @property
    def fingerprint(self) -> str:
        return self.server.runtime.engine.model_info.fingerprint


@pytest.fixture(scope="module")
def switched(tiny_ckpt_dir, tmp_path_factory) -> Iterator[Switched]:
    root = tmp_path_factory.mktemp("checkpoint-change")
    other_ckpt = write_tiny_checkpoint(root / "other-ckpt", size="tiny", seed=1, with_codec=True)
    data = root / "data"
    preload = root / "preload"
    preload.mkdir()
    (preload / "linda.wav").write_bytes(CLIP_22K.read_bytes())

    with LiveServer(gateway_settings(tiny_ckpt_dir, data, preload_dir=preload)) as first:
        old_fingerprint = first.runtime.engine.model_info.fingerprint
        r = clone(first.url, CLIP_44K.read_bytes(), name="cloned before the change")
        assert r.status_code == 200, r.text
        cloned = r.json()["id"]
        listed = httpx.get(first.url + "/voices", params={"limit": 100}).json()["data"]
    [preloaded] = [v["id"] for v in listed if v["name"] == "linda"]
    wide, wide_without_codes = asyncio.run(_seed_wide_voices(data, codes_from=cloned))
    with LiveServer(gateway_settings(other_ckpt, data, preload_dir=preload)) as server:
        assert server.runtime.engine.model_info.fingerprint != old_fingerprint
        yield Switched(server, data, old_fingerprint, [v["id"] for v in listed], cloned, preloaded, wide,
                       wide_without_codes)


def test_a_voice_cloned_on_the_old_checkpoint_speaks_with_this_ones_prefix(switched):
    r = tts_bytes(switched.server.url, switched.cloned)
    assert r.status_code == 200, r.text
    # recomputed from its reference codes and stored, so every replica and restart reads it
    record = asyncio.run(_record(switched.data_dir, switched.cloned))
    assert record.voice.model_fingerprint == switched.fingerprint
    engine = switched.server.runtime.engine
    assert torch.allclose(record.prefix.float(), engine.compress_reference(record.ref_codes.long()))
    assert record.voice.name == "cloned before the change"


def test_a_voice_of_another_hidden_size_is_recomputed_not_blamed_on_the_client(switched):
    r = tts_bytes(switched.server.url, switched.wide)
    assert r.status_code == 200, r.text
    # the same reference codes as the cloned voice: the same prefix here, so the same audio
    assert r.content == tts_bytes(switched.server.url, switched.cloned).content


def test_a_voice_without_codes_is_a_409_voice_incompatible_over_http_and_in_band(switched):
    voice_id = switched.wide_without_codes
    r = tts_bytes(switched.server.url, voice_id)
    body = error_of(r)
    assert (r.status_code, body["error_code"], r.headers["x-should-retry"]) == (409, "voice_incompatible", "false")
    for part in (voice_id, "[8, 1024]", "'the-real-model'", switched.fingerprint, "no stored reference codes",
                 "clone it again"):
        assert part in body["message"], (part, body)
    _, events = tts_ws(switched.server.ws_url, {"mode": "id", "id": voice_id})
    assert (events[-1]["type"], events[-1]["status_code"], events[-1]["error_code"]) == \
        ("error", 409, "voice_incompatible")
    assert httpx.get(f"{switched.server.url}/voices/{voice_id}").status_code == 200  # kept for the operator


def test_a_preloaded_voice_keeps_its_id_and_is_listed_once(switched):
    url = switched.server.url
    assert listed_ids(url) == switched.listed_before + [switched.wide, switched.wide_without_codes]
    assert tts_bytes(url, switched.preloaded).status_code == 200
    record = asyncio.run(_record(switched.data_dir, switched.preloaded))
    assert record.voice.model_fingerprint == switched.fingerprint  # recomputed at start-up
