"""Two gateway processes sharing one real Redis: a clone on A is listed and spoken on B with the same
audio, a delete on B is refused on A as soon as Redis's invalidation message reaches A (A serves
the hot voice from its cache without reading Redis), and a Redis outage keeps cached voices speaking while
clone and list answer 503 with retry advice."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import cartesia
import httpx
import pytest

from api.app import DEFAULT_VOICE_ID
from tests.api.live import ServerProcess
from tests.api.routes._voices_support import CLIP_22K, CLIP_44K, clone, error_of, tts_bytes, tts_ws
from tests.voices.redis_server import RedisServer

pytestmark = pytest.mark.redis


@dataclass
class Cluster:
    redis: RedisServer
    a: ServerProcess
    b: ServerProcess


@pytest.fixture(scope="module")
def cluster(tiny_ckpt_dir, tmp_path_factory) -> Iterator[Cluster]:
    redis = RedisServer.start()
    logs = tmp_path_factory.mktemp("replica-logs")
    env = {"GEPARD_MODEL": str(tiny_ckpt_dir), "GEPARD_BACKEND": "torch", "GEPARD_DEVICE": "cpu",
           "GEPARD_DTYPE": "float32", "GEPARD_REDIS_URL": redis.url, "GEPARD_API_KEYS": "",
           "GEPARD_DATA_DIR": str(tmp_path_factory.mktemp("replica-data"))}
    servers: list[ServerProcess] = []
    try:
        with ThreadPoolExecutor(2) as pool:  # both start at once: start-up is mostly imports
            futures = [pool.submit(ServerProcess.start, env, logs / f"{name}.log") for name in "ab"]
            for future in futures:
                servers.append(future.result())
        yield Cluster(redis, *servers)
    finally:
        for server in servers:
            server.stop()
        redis.stop()


def test_clone_on_a_is_spoken_on_b_and_a_delete_on_b_is_seen_on_a(cluster):
    a, b = cluster.a.url, cluster.b.url
    with CLIP_44K.open("rb") as clip:
        meta = cartesia.Cartesia(api_key="x", base_url=a, max_retries=0).voices.clone(
            clip=clip, name="shared", language="en")
    on_b = cartesia.Cartesia(api_key="x", base_url=b, max_retries=0)
    assert meta.id in [v.id for v in on_b.voices.list(limit=100)]
    assert on_b.voices.get(meta.id).name == "shared"
    spoken_a, spoken_b = tts_bytes(a, meta.id), tts_bytes(b, meta.id)
    assert spoken_a.status_code == spoken_b.status_code == 200
    assert spoken_a.content == spoken_b.content  # one stored prefix, same seed: the same audio
    assert spoken_b.content != tts_bytes(b, DEFAULT_VOICE_ID).content
    on_b.voices.update(meta.id, name="renamed on b")
    assert httpx.get(f"{a}/voices/{meta.id}").json()["name"] == "renamed on b"

    on_b.voices.delete(meta.id)
    # A holds the prompt in its cache; B's delete publishes the id and A evicts it on arrival
    # (milliseconds): the first request after that is refused
    deadline = time.monotonic() + 1.0
    while (r := tts_bytes(a, meta.id)).status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.status_code == 404 and meta.id in error_of(r)["message"]
    _, events = tts_ws(a.replace("http", "ws"), meta.id)
    assert (events[-1]["type"], events[-1]["status_code"], events[-1]["error_code"]) == ("error", 404, "voice_not_found")


def test_a_redis_outage_keeps_cached_voices_speaking_and_answers_503_to_writes(cluster):
    a, b = cluster.a.url, cluster.b.url
    vid = clone(a, CLIP_22K.read_bytes(), name="cached").json()["id"]
    before = tts_bytes(b, vid)
    assert before.status_code == 200  # B now holds the prompt

    cluster.redis.stop()
    again = tts_bytes(b, vid)
    assert again.status_code == 200 and again.content == before.content
    assert tts_bytes(a, vid).status_code == 200 and tts_bytes(a, DEFAULT_VOICE_ID).status_code == 200
    ws_audio, events = tts_ws(b.replace("http", "ws"), vid)
    assert events[-1]["type"] == "done" and ws_audio == before.content

    for r in (clone(a, CLIP_22K.read_bytes(), name="during outage"), httpx.get(b + "/voices"),
              httpx.get(f"{b}/voices", params={"starting_after": vid})):
        body = error_of(r)
        assert (r.status_code, body["error_code"]) == (503, "voice_store_unavailable"), body
        assert "voice store unavailable" in body["message"]
        assert (r.headers["retry-after"], r.headers["retry-after-ms"]) == ("1", "1000")
    with pytest.raises(cartesia.InternalServerError) as info:
        cartesia.Cartesia(api_key="x", base_url=a, max_retries=0).voices.clone(
            clip=CLIP_22K.open("rb"), name="sdk during outage", language="en")
    assert info.value.status_code == 503
    # liveness and readiness stay 200 (restarting replicas or taking them all out of the load balancer
    # would not bring Redis back, and cached voices still speak); both say what is wrong
    for probe in ("/health", "/ready"):
        r = httpx.get(b + probe)
        assert r.status_code == 200 and r.json()["checks"]["voices"].startswith("VoiceStoreUnavailableError"), probe
