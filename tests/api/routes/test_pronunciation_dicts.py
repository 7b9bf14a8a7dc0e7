"""Pronunciation dictionaries through the official ``cartesia`` SDK on live servers: CRUD on the
embedded store and on Redis (two gateways on one Redis see the same dictionary), IPA refused with
a 400, an unknown id 404 on every TTS route, and an entry changing what is spoken (the audio equals
the aliased text's; normalised timestamps report the alias, the default ones the client's words).
Then the limits: the text after the dictionary within GEPARD_MAX_TRANSCRIPT_CHARS (HTTP and per
WebSocket sentence), a context that outlives its dictionary's delete or a Redis outage, cursors
(invalid_cursor as on /voices), control characters, and the create body that fits 1000 entries."""

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


# --- the text after the dictionary, a dictionary that goes mid-context, cursors, characters, body size ---


def context_turns(server: LiveServer, voice: str, dict_id: str, turns: list[tuple[str, Any]]) -> list[dict]:
    """One WebSocket context fed in turns: each sentence is sent and spoken (read up to its
    timestamps) before ``between`` (a callable, or None) runs and the next turn starts; the last
    sentence closes the context, whose events are read to the end. Normalised timestamps on."""
    cid = str(uuid.uuid4())
    base = {"context_id": cid, "model_id": "sonic-3", "voice": {"mode": "id", "id": voice}, "output_format": RAW,
            "seed": 11, "pronunciation_dict_id": dict_id, "add_timestamps": True, "use_normalized_timestamps": True,
            "max_buffer_delay_ms": 0}
    events: list[dict] = []
    with connect(server.ws_url + "/tts/websocket", open_timeout=10) as ws:
        for i, (sentence, between) in enumerate(turns):
            last = i == len(turns) - 1
            ws.send(json.dumps({**base, "transcript": sentence, "continue": not last}))
            while True:
                event = json.loads(ws.recv(timeout=60))
                events.append(event)
                spoken = not last and event["type"] == "timestamps"
                if event.get("done") or event["type"] in ("done", "error") or spoken:
                    break
            if events[-1]["type"] in ("done", "error"):
                break
            if between is not None:
                between()
    return events


LONG_ALIAS = " ".join(["abracadabra"] * 21)  # 251 characters
LONG_READ = "a " * 25 + "."  # 51 characters sent, 25 * 251 + 26 read with {"a": LONG_ALIAS}


def test_the_text_after_the_dictionary_must_fit_the_transcript_limit(gateway, default_voice_id):
    """GEPARD_MAX_TRANSCRIPT_CHARS bounds the text the engine reads, not only the text sent: a
    251-character alias of "a" made 301 characters sent into 37,801 read (46.8 s for one request)."""
    limit = gateway.runtime.settings.max_transcript_chars
    d = sdk(gateway).pronunciation_dicts.create(name="long alias", items=[{"text": "a", "alias": LONG_ALIAS}])
    transcript = LONG_READ
    pronounced = 25 * len(LONG_ALIAS) + 26
    assert pronounced > limit >= len(transcript)

    r = tts_bytes(gateway, default_voice_id, transcript, pronunciation_dict_id=d.id)
    assert r.status_code == 400, r.status_code
    body = r.json()
    assert (r.status_code, body["error_code"]) == (400, "transcript_too_long"), body
    for needle in (d.id, f"{len(transcript)} characters read as {pronounced}", f"limit of {limit}",
                   "GEPARD_MAX_TRANSCRIPT_CHARS"):
        assert needle in body["message"], body["message"]
    r = httpx.post(gateway.url + "/tts/sse", json=sse_body(default_voice_id, transcript, pronunciation_dict_id=d.id),
                   timeout=60)
    assert (r.status_code, r.json()["error_code"]) == (400, "transcript_too_long")
    # the same words without the dictionary, and a short use of it, are spoken
    assert tts_bytes(gateway, default_voice_id, transcript).status_code == 200
    assert tts_bytes(gateway, default_voice_id, "a a.", pronunciation_dict_id=d.id).status_code == 200
    sdk(gateway).pronunciation_dicts.delete(d.id)


def test_a_websocket_sentence_too_long_after_the_dictionary_is_a_400_in_band(gateway, default_voice_id):
    """A context speaks its sentences until one is too long after the dictionary (sentences are cut
    from the text sent, at most 400 characters, so the bound applies to each)."""
    d = sdk(gateway).pronunciation_dicts.create(name="long alias", items=[{"text": "a", "alias": LONG_ALIAS}])
    events = context_turns(gateway, default_voice_id, d.id, [("Hello there. ", None), (LONG_READ, None)])
    assert words(events)[:2] == ["Hello", "there."]
    last = events[-1]
    outcome = (last["type"], last.get("status_code"), last.get("error_code"))
    assert outcome == ("error", 400, "transcript_too_long"), last
    assert d.id in last["message"] and last["message"].startswith(f"sentence: {len(LONG_READ)} characters read as")
    assert "GEPARD_MAX_TRANSCRIPT_CHARS" in last["message"]
    sdk(gateway).pronunciation_dicts.delete(d.id)


def test_a_context_keeps_speaking_with_a_dictionary_deleted_after_it_was_accepted(gateway, default_voice_id):
    """The text a context accepted is spoken as the dictionary it was accepted with says (HTTP
    requests read it once, too); a request made after the delete gets its 404."""
    client = sdk(gateway)
    d = client.pronunciation_dicts.create(name="goes", items=[{"text": "SQL", "alias": "sequel"}])
    events = context_turns(gateway, default_voice_id, d.id, [
        ("I like SQL. ", lambda: client.pronunciation_dicts.delete(d.id)),
        ("Use SQL daily.", None)])
    assert events[-1]["type"] == "done", events[-1]
    assert words(events) == ["I", "like", "sequel.", "Use", "sequel", "daily."]
    assert tts_bytes(gateway, default_voice_id, "I like SQL.", pronunciation_dict_id=d.id).status_code == 404
    gone = ws_context(gateway, default_voice_id, "I like SQL.", pronunciation_dict_id=d.id)
    assert [(e["type"], e["error_code"]) for e in gone] == [("error", "pronunciation_dict_not_found")]

    # deleted after the context was accepted but before it spoke anything (its first words wait in
    # the buffer): it speaks with the copy read when it was accepted
    d = client.pronunciation_dicts.create(name="goes early", items=[{"text": "SQL", "alias": "sequel"}])
    cid = str(uuid.uuid4())
    base = {"context_id": cid, "model_id": "sonic-3", "voice": {"mode": "id", "id": default_voice_id},
            "output_format": RAW, "pronunciation_dict_id": d.id, "add_timestamps": True,
            "use_normalized_timestamps": True, "max_buffer_delay_ms": 5000}
    with connect(gateway.ws_url + "/tts/websocket", open_timeout=10) as ws:
        ws.send(json.dumps({**base, "transcript": "I like", "continue": True}))
        client.pronunciation_dicts.delete(d.id)
        ws.send(json.dumps({**base, "transcript": " SQL.", "continue": False}))
        events = [json.loads(ws.recv(timeout=60))]
        while events[-1]["type"] not in ("done", "error"):
            events.append(json.loads(ws.recv(timeout=60)))
    assert events[-1]["type"] == "done", events[-1]
    assert words(events) == ["I", "like", "sequel."]


@pytest.fixture
def redis_gateway(tiny_ckpt_dir, tmp_path) -> Iterator[tuple[LiveServer, RedisServer]]:
    """A gateway on a Redis of its own, which the test may stop."""
    redis = RedisServer.start()
    try:
        with LiveServer(gateway_settings(tiny_ckpt_dir, tmp_path, redis_url=redis.url)) as server:
            yield server, redis
    finally:
        redis.stop()


@pytest.mark.redis
def test_dictionaries_already_read_are_spoken_through_a_redis_outage(redis_gateway, default_voice_id, caplog):
    """As cached voices are (voices/store.py): an open context's next sentence and a new request
    speak with the last copy read, one WARNING says so; a dictionary never read here is a 503."""
    server, redis = redis_gateway
    client = sdk(server)
    d = client.pronunciation_dicts.create(name="outage", items=[{"text": "SQL", "alias": "sequel"}])
    never_read = client.pronunciation_dicts.create(name="unread", items=[{"text": "AWS", "alias": "A W S"}])
    before = tts_bytes(server, default_voice_id, "I like SQL.", pronunciation_dict_id=d.id)
    assert before.status_code == 200

    with caplog.at_level("WARNING", logger="api.synthesis"):
        events = context_turns(server, default_voice_id, d.id, [("I like SQL. ", redis.stop), ("Use SQL daily.", None)])
        assert events[-1]["type"] == "done", events[-1]
        assert words(events) == ["I", "like", "sequel.", "Use", "sequel", "daily."]
        during = tts_bytes(server, default_voice_id, "I like SQL.", pronunciation_dict_id=d.id)
        assert during.status_code == 200 and during.content == before.content
        r = tts_bytes(server, default_voice_id, "I like AWS.", pronunciation_dict_id=never_read.id)
        assert (r.status_code, r.json()["error_code"]) == (503, "voice_store_unavailable")
    warnings = [r for r in caplog.records if r.name == "api.synthesis" and r.levelname == "WARNING"]
    assert len(warnings) == 1 and "last copy" in warnings[0].getMessage(), [r.getMessage() for r in warnings]


def test_an_unknown_cursor_is_invalid_cursor_as_on_voices(gateway):
    for parameter in ("starting_after", "ending_before"):
        voices = httpx.get(gateway.url + "/voices", params={parameter: "nope"})
        dicts = httpx.get(gateway.url + "/pronunciation-dicts/", params={parameter: "nope"})
        assert voices.status_code == dicts.status_code == 400
        assert voices.json()["error_code"] == dicts.json()["error_code"] == "invalid_cursor"
        assert f"{parameter}='nope' is not the id of a pronunciation dictionary" in dicts.json()["message"]


def test_control_characters_are_refused_naming_the_field(gateway):
    url = gateway.url + "/pronunciation-dicts/"
    ok = {"text": "SQL", "alias": "sequel"}
    for body, field, code in [
        ({"name": "nul\u0000"}, "name", "U+0000"),
        ({"name": "bell", "items": [ok, {"text": "a\u0007b", "alias": "x"}]}, "items[1].text", "U+0007"),
        ({"name": "c1", "items": [{"text": "x", "alias": "next\u0085line"}]}, "items[0].alias", "U+0085"),
        ({"name": "del", "items": [{"text": "x\u007f", "alias": "y"}]}, "items[0].text", "U+007F"),
    ]:
        r = httpx.post(url, json=body)
        data = r.json()
        assert (r.status_code, data.get("error_code")) == (400, "invalid_pronunciation_dict"), (body, data)
        assert data["message"].startswith(f"{field}: a control character ({code})"), data["message"]
    # an unpaired surrogate, as JSON can spell one, is refused by the JSON reader already
    r = httpx.post(url, content=b'{"name": "half \\ud800 pair"}', headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error_code"]) == (400, "invalid_json")
    # tab and line breaks are whitespace, which matching reads as a space
    d = sdk(gateway).pronunciation_dicts.create(name="lines\tok", items=[{"text": "New\nYork", "alias": "Noo\r\nYawk"}])
    r = httpx.patch(url + d.id, json={"name": "still\u0000bad"})
    assert r.status_code == 400 and r.json()["message"].startswith("name: a control character (U+0000)")
    r = httpx.patch(url + d.id, json={"items": [{"text": "x", "alias": "\u001b[31m"}]})
    assert r.status_code == 400 and r.json()["message"].startswith("items[0].alias: a control character (U+001B)")
    assert sdk(gateway).pronunciation_dicts.retrieve(d.id).name == "lines\tok"  # unchanged
    sdk(gateway).pronunciation_dicts.delete(d.id)


def test_a_dictionary_at_the_item_limits_fits_the_body_limit(gateway):
    """1000 entries of 256 + 256 characters, each an astral one sent as an escaped surrogate pair (the
    most bytes JSON can spend on a character): 6.2 MB, over the 1 MiB of the other JSON routes."""
    from voices.dictionaries import MAX_DICT_NAME_CHARS, MAX_ITEM_CHARS, MAX_ITEMS

    items = [{"text": chr(0x1F600 + i % 64) * (MAX_ITEM_CHARS - 4) + f"{i:04d}", "alias": "\U0001F680" * MAX_ITEM_CHARS,
              "case_sensitive": False} for i in range(MAX_ITEMS)]
    body = json.dumps({"name": "\U0001F680" * MAX_DICT_NAME_CHARS, "items": items}, indent=1).encode()
    assert 6_000_000 < len(body) < 7_000_000
    r = httpx.post(gateway.url + "/pronunciation-dicts/", content=body, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 200, r.text[:500]
    d = r.json()
    assert len(d["items"]) == MAX_ITEMS and d["items"][999]["text"].endswith("0999")
    from api.routes.pronunciation_dicts import MAX_DICT_BODY_BYTES
    too_big = body[:-1] + b" " * MAX_DICT_BODY_BYTES + b"}"
    r = httpx.patch(gateway.url + f"/pronunciation-dicts/{d['id']}", content=too_big,
                    headers={"content-type": "application/json"}, timeout=60)
    assert (r.status_code, r.json()["error_code"]) == (413, "request_too_large")
    assert str(MAX_DICT_BODY_BYTES) in r.json()["message"]
    httpx.delete(gateway.url + f"/pronunciation-dicts/{d['id']}")
