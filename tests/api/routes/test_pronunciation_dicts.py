"""Pronunciation dictionaries through the official ``cartesia`` SDK on live servers: CRUD on the
embedded store and on Redis (two gateways on one Redis see the same dictionary), IPA refused with
a 400, an unknown id 404 on every TTS route, and an entry changing what is spoken (the audio equals
the aliased text's; normalised timestamps report the alias, the default ones the client's words)."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any, Iterator

import cartesia
import httpx
import pytest
from websockets.sync.client import connect

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes.test_tts_sse import sse_body, sse_events
from tests.voices.redis_server import RedisServer

RAW = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}


def sdk(server: LiveServer) -> cartesia.Cartesia:
    return cartesia.Cartesia(api_key="unused", base_url=server.url, max_retries=0)


def tts_bytes(server: LiveServer, voice: str, transcript: str, **extra: Any) -> httpx.Response:
    body = {"model_id": "sonic-3", "transcript": transcript, "voice": {"mode": "id", "id": voice},
            "output_format": RAW, "seed": 11, **extra}
    return httpx.post(server.url + "/tts/bytes", json=body, timeout=60)


def ws_context(server: LiveServer, voice: str, transcript: str, **extra: Any) -> list[dict]:
    """Every event of one WebSocket context (the last one is done or an error)."""
    cid = str(uuid.uuid4())
    msg = {"context_id": cid, "model_id": "sonic-3", "transcript": transcript, "voice": {"mode": "id", "id": voice},
           "output_format": RAW, "seed": 11, "continue": False, **extra}
    events: list[dict] = []
    with connect(server.ws_url + "/tts/websocket", open_timeout=10) as ws:
        ws.send(json.dumps(msg))
        while not events or not (events[-1].get("done") or events[-1]["type"] in ("done", "error")):
            events.append(json.loads(ws.recv(timeout=60)))
    assert all(e["context_id"] == cid for e in events)
    return events


def words(events: list[dict]) -> list[str]:
    return [w for e in events if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]]


def crud_round_trip(create_on: cartesia.Cartesia, read_on: cartesia.Cartesia) -> None:
    created = create_on.pronunciation_dicts.create(
        name="brands", items=[{"text": "Nvidia", "alias": "en-VID-ee-uh"},
                              {"text": "gif", "alias": "jif", "case_sensitive": True}])
    assert created.id and created.name == "brands" and created.pinned is False and created.created_at
    assert [(i.text, i.alias, i.case_sensitive) for i in created.items] == [
        ("Nvidia", "en-VID-ee-uh", None), ("gif", "jif", True)]
    got = read_on.pronunciation_dicts.retrieve(created.id)
    assert got.to_dict() == created.to_dict()

    extra = [create_on.pronunciation_dicts.create(name=f"page {i}").id for i in range(3)]
    listed = [d.id for d in read_on.pronunciation_dicts.list(limit=2)]  # auto-pagination, 2 per page
    assert listed[-4:] == [created.id, *extra]

    updated = read_on.pronunciation_dicts.update(created.id, name="brands v2", items=[{"text": "SQL", "alias": "sequel"}])
    assert updated.name == "brands v2" and [i.text for i in updated.items] == ["SQL"]
    assert create_on.pronunciation_dicts.retrieve(created.id).to_dict() == updated.to_dict()
    renamed = create_on.pronunciation_dicts.update(created.id, name="brands v3")  # items omitted: kept
    assert [i.alias for i in renamed.items] == ["sequel"]

    for d in [created.id, *extra]:
        read_on.pronunciation_dicts.delete(d)
    with pytest.raises(cartesia.NotFoundError) as err:
        create_on.pronunciation_dicts.retrieve(created.id)
    assert err.value.body["error_code"] == "pronunciation_dict_not_found" and created.id in err.value.body["message"]
    assert created.id not in [d.id for d in read_on.pronunciation_dicts.list()]


def test_sdk_crud_on_the_embedded_store(gateway):
    crud_round_trip(sdk(gateway), sdk(gateway))


def test_bad_list_parameters_are_400s_naming_the_parameter(gateway):
    for params, message in [({"limit": 101}, "limit: must be an integer from 1 to 100, got 101"),
                            ({"limit": "x"}, "limit: expected an integer, got 'x'"),
                            ({"starting_after": "a", "ending_before": "b"}, "not both")]:
        r = httpx.get(gateway.url + "/pronunciation-dicts/", params=params)
        body = r.json()
        assert (r.status_code, body["error_code"]) == (400, "invalid_request") and message in body["message"], body


def test_ipa_aliases_are_refused_with_a_400_naming_the_entry(gateway):
    client = sdk(gateway)
    with pytest.raises(cartesia.BadRequestError) as err:
        client.pronunciation_dicts.create(name="ipa", items=[{"text": "Cartesia", "alias": "<<k|ɑ|ɹ|ˈ|t|i|ʒ|ə>>"}])
    body = err.value.body
    assert err.value.status_code == 400 and body["error_code"] == "ipa_not_supported"
    assert "items[0].alias" in body["message"] and "phoneme" in body["message"] and body["request_id"]
    d = client.pronunciation_dicts.create(name="ok", items=[{"text": "Cartesia", "alias": "car-TEE-zhuh"}])
    with pytest.raises(cartesia.BadRequestError, match="ipa_not_supported"):
        client.pronunciation_dicts.update(d.id, items=[{"text": "SQL", "alias": "ok"}, {"text": "x", "alias": "<<s|i>>"}])
    assert client.pronunciation_dicts.retrieve(d.id).items[0].alias == "car-TEE-zhuh"  # unchanged
    r = httpx.post(gateway.url + "/pronunciation-dicts/", json={"items": []})
    assert r.status_code == 400 and r.json()["message"] == "name: field required"
    client.pronunciation_dicts.delete(d.id)


def test_an_unknown_dictionary_is_a_404_naming_it_on_every_tts_route(gateway, default_voice_id):
    missing = "pdict_does_not_exist"
    r = tts_bytes(gateway, default_voice_id, "Hello there.", pronunciation_dict_id=missing)
    assert r.status_code == 404 and r.json()["error_code"] == "pronunciation_dict_not_found"
    assert missing in r.json()["message"]
    r = httpx.post(gateway.url + "/tts/sse", json=sse_body(default_voice_id, pronunciation_dict_id=missing), timeout=60)
    assert r.status_code == 404 and missing in r.json()["message"]
    events = ws_context(gateway, default_voice_id, "Hello there.", pronunciation_dict_id=missing)
    assert [(e["type"], e["status_code"], e["error_code"]) for e in events] == [
        ("error", 404, "pronunciation_dict_not_found")]
    assert missing in events[0]["message"]
    # an empty id is no dictionary, as an empty cursor is no cursor
    assert tts_bytes(gateway, default_voice_id, "Hello there.", pronunciation_dict_id="").status_code == 200


def test_an_entry_changes_what_is_spoken(gateway, default_voice_id):
    client = sdk(gateway)
    d = client.pronunciation_dicts.create(name="db", items=[{"text": "SQL", "alias": "sequel"}])
    # same seed: with the dictionary the model speaks exactly the aliased text
    with_dict = tts_bytes(gateway, default_voice_id, "I like SQL.", pronunciation_dict_id=d.id)
    assert with_dict.status_code == 200
    assert with_dict.content == tts_bytes(gateway, default_voice_id, "I like sequel.").content
    assert with_dict.content != tts_bytes(gateway, default_voice_id, "I like SQL.").content

    common = dict(add_timestamps=True, pronunciation_dict_id=d.id)
    spoken = sse_events(gateway, sse_body(default_voice_id, "I like SQL.", use_normalized_timestamps=True, **common))
    assert words(spoken) == ["I", "like", "sequel."]
    assert words(sse_events(gateway, sse_body(default_voice_id, "I like SQL.", **common))) == ["I", "like", "SQL."]
    ws_spoken = ws_context(gateway, default_voice_id, "Use SQL daily.", use_normalized_timestamps=True, **common)
    assert ws_spoken[-1]["type"] == "done" and words(ws_spoken) == ["Use", "sequel", "daily."]
    ws_original = ws_context(gateway, default_voice_id, "Use SQL daily.", **common)
    assert words(ws_original) == ["Use", "SQL", "daily."]

    # an update applies to the next request
    client.pronunciation_dicts.update(d.id, items=[{"text": "SQL", "alias": "S Q L"}])
    again = sse_events(gateway, sse_body(default_voice_id, "I like SQL.", use_normalized_timestamps=True, **common))
    assert words(again) == ["I", "like", "S", "Q", "L."]
    client.pronunciation_dicts.delete(d.id)
    assert tts_bytes(gateway, default_voice_id, "I like SQL.", pronunciation_dict_id=d.id).status_code == 404


@pytest.fixture(scope="module")
def replicas(tiny_ckpt_dir, tmp_path_factory) -> Iterator[tuple[LiveServer, LiveServer]]:
    redis = RedisServer.start()
    servers: list[LiveServer] = []
    try:
        for name in "ab":
            settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp(f"replica-{name}"), redis_url=redis.url)
            servers.append(LiveServer(settings).start())
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()
        redis.stop()


@pytest.mark.redis
def test_sdk_crud_on_redis_across_two_replicas(replicas):
    a, b = replicas
    crud_round_trip(sdk(a), sdk(b))


@pytest.mark.redis
def test_a_dictionary_made_on_one_replica_is_spoken_on_the_other(replicas, default_voice_id):
    a, b = replicas
    d = sdk(a).pronunciation_dicts.create(name="shared", items=[{"text": "AWS", "alias": "A W S"}])
    assert d.id in [x.id for x in sdk(b).pronunciation_dicts.list()]
    events = ws_context(b, default_voice_id, "Deploy on AWS.", add_timestamps=True, use_normalized_timestamps=True,
                        pronunciation_dict_id=d.id)
    assert words(events) == ["Deploy", "on", "A", "W", "S."]
    sdk(b).pronunciation_dicts.delete(d.id)
    assert tts_bytes(a, default_voice_id, "Deploy on AWS.", pronunciation_dict_id=d.id).status_code == 404
