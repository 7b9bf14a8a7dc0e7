"""API keys kept in Redis (``gepard keys add``) authenticate on every replica sharing that Redis;
removing one revokes it and every access token it minted, on open WebSockets too (their next new
context); with Redis down, every credential that can be judged without Redis still is (a real
redis-server, stopped for the outage)."""

import asyncio
import base64
import json
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from api.auth import Authenticator, PrincipalKind
from api.cli import main
from api.errors import AuthBackendUnavailableError, AuthenticationError
from api.key_store import RedisKeyStore
from api.settings import Settings, SettingsError
from tests.api.conftest import gateway_settings, redis_key_gateway
from tests.api.live import LiveServer
from tests.api.routes.ws_helpers import gen, read_until_terminal, send
from tests.voices.redis_server import RedisServer

KEY = "k-redis-0123456789abcdef"
STATIC_KEY = "sk-static-0123456789"
SECRET = b"redis-keys-token-secret-0123456789"


@pytest.fixture(scope="module")
def redis_gateway(tiny_ckpt_dir, tmp_path_factory):
    with redis_key_gateway(tiny_ckpt_dir, tmp_path_factory.mktemp("keys-data")) as pair:
        yield pair


def _voices(server, key):
    return httpx.get(server.url + "/voices", headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_keys_added_through_the_cli_authenticate_and_removed_ones_do_not(redis_gateway, capsys):
    server, redis = redis_gateway
    assert _voices(server, KEY).status_code == 401
    assert main(["keys", "add", KEY, "--redis-url", redis.url]) == 0
    assert _voices(server, KEY).status_code == 200
    assert httpx.get(server.url + "/voices", headers={"X-API-Key": KEY}, timeout=30).status_code == 200
    assert _voices(server, "k-someone-else-000000").status_code == 401
    assert main(["keys", "remove", KEY, "--redis-url", redis.url]) == 0
    assert _voices(server, KEY).status_code == 401
    assert "added" in capsys.readouterr().out


def test_removing_a_key_revokes_the_tokens_it_minted(redis_gateway):
    server, redis = redis_gateway
    assert main(["keys", "add", KEY, "--redis-url", redis.url]) == 0
    r = httpx.post(server.url + "/access-token", json={"expires_in": 3600}, headers={"X-API-Key": KEY}, timeout=30)
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    assert _voices(server, token).status_code == 200
    assert main(["keys", "remove", KEY, "--redis-url", redis.url]) == 0
    r = _voices(server, token)
    assert r.status_code == 401 and r.json()["error_code"] == "token_revoked", r.text
    assert "removed" in r.json()["message"]


# --- a WebSocket outlives its credential: each new context re-checks it -------------------------------

FMT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}


def _mint(server, key: str, expires_in: int) -> str:
    r = httpx.post(server.url + "/access-token", json={"expires_in": expires_in}, headers={"X-API-Key": key},
                   timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["token"]


async def _keys(action: str, key: str, redis: RedisServer) -> int:
    """``gepard keys add|remove`` (its own event loop, so in a thread)."""
    return await asyncio.to_thread(main, ["keys", action, key, "--redis-url", redis.url])


async def until_closed(ws) -> int:
    """Read (and drop) messages until the server closes the socket; its close code."""
    with pytest.raises(ConnectionClosed) as info:
        while True:
            await asyncio.wait_for(ws.recv(), 30)
    return info.value.rcvd.code if info.value.rcvd else -1


async def speaking(ws, context_ids: set[str]) -> None:
    """Read until each of ``context_ids`` sent audio: the server opened them (the messages that
    opened them were read and checked, not just sent)."""
    waiting = set(context_ids)
    while waiting:
        msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert msg["type"] not in ("done", "error") or msg["context_id"] not in context_ids, msg
        if msg["type"] == "chunk":
            waiting.discard(msg["context_id"])


async def _speak(ws, context_id: str, voice: str) -> dict:
    """One short context; its terminal event."""
    await send(ws, gen(context_id, "Hi there.", voice, cont=False, output_format=FMT))
    return (await read_until_terminal(ws, [context_id]))[-1]


@pytest.mark.parametrize("credential, code", [("key", "invalid_credentials"), ("token", "token_revoked")])
async def test_a_removed_key_opens_no_new_context_on_a_socket_it_opened(redis_gateway, default_voice_id,
                                                                          credential, code):
    server, redis = redis_gateway
    key = f"k-ws-{credential}-0123456789abcdef"
    assert await _keys("add", key, redis) == 0
    secret = key if credential == "key" else _mint(server, key, 3600)
    headers = {"Authorization": f"Bearer {secret}"}
    async with connect(server.ws_url + "/tts/websocket", additional_headers=headers) as ws:
        assert (await _speak(ws, "before", default_voice_id))["type"] == "done"
        # a context that is running when the key goes: it may finish
        await send(ws, gen("running", "Hello there. ", default_voice_id, output_format=FMT))
        # and one kept open (continue) that would go on taking text: more text is new work, refused
        await send(ws, gen("kept-open", "Hello there. ", default_voice_id, output_format=FMT))
        await speaking(ws, {"running", "kept-open"})  # both opened before the key goes
        assert await _keys("remove", key, redis) == 0  # cache TTL 0: at once
        await send(ws, gen("kept-open", "More words for it.", default_voice_id, output_format=FMT))
        ends = [m for m in await read_until_terminal(ws, ["kept-open"])
                if m["type"] in ("done", "error") and m["context_id"] == "kept-open"]
        assert [(m["type"], m["status_code"], m["error_code"]) for m in ends] == [("error", 401, code)], ends
        refused = await _speak(ws, "after", default_voice_id)
        assert refused["type"] == "error" and refused["context_id"] == "after", refused
        assert refused["status_code"] == 401 and refused["error_code"] == code and refused["done"] is True
        assert set(refused) >= {"title", "message", "request_id"}
        # what a new HTTP request with the same credential gets
        r = _voices(server, secret)
        assert r.status_code == 401 and r.json()["error_code"] == code
        await send(ws, gen("running", "", default_voice_id, cont=False, output_format=FMT))
        ends = [m for m in await read_until_terminal(ws, ["running"])
                if m["type"] in ("done", "error") and m["context_id"] == "running"]
        assert [m["type"] for m in ends] == ["done"]
        assert await until_closed(ws) == 1008  # ws_close_code of a 401: policy violation


async def test_an_expired_token_opens_no_new_context_on_a_socket_it_opened(redis_gateway, default_voice_id):
    server, redis = redis_gateway
    key = "k-ws-expiry-0123456789abcdef"
    assert await _keys("add", key, redis) == 0
    token = _mint(server, key, 4)
    payload = token.split(".")[1]
    expires_at = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"]
    async with connect(server.ws_url + f"/tts/websocket?access_token={token}") as ws:
        await asyncio.sleep(max(expires_at - time.time(), 0) + 0.2)  # waiting out the token, not timing the server
        refused = await _speak(ws, "after-expiry", default_voice_id)
        assert refused["type"] == "error" and refused["status_code"] == 401, refused
        assert refused["error_code"] == "token_expired"
        assert await until_closed(ws) == 1008
    assert await _keys("remove", key, redis) == 0


def test_short_keys_are_refused(redis_gateway, capsys):
    _, redis = redis_gateway
    assert main(["keys", "add", "short", "--redis-url", redis.url]) == 2
    assert "at least 16 characters" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["  k-spaced-0123456789abc  ", "k-newline-0123456789abc\n", "k-comma-0123456789,abc"])
def test_keys_that_could_never_authenticate_are_refused(redis_gateway, capsys, key):
    """HTTP strips the spaces around a header value, so such a key would be stored and always get 401:
    it is refused as GEPARD_API_KEYS refuses it, with the same words (api.settings.api_key_problem)."""
    _, redis = redis_gateway
    assert main(["keys", "count", "--redis-url", redis.url]) == 0
    before = capsys.readouterr().out
    assert main(["keys", "add", key, "--redis-url", redis.url]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == "gepard keys: keys must be non-empty, without spaces around them or commas\n"
    with pytest.raises(SettingsError) as info:
        Settings.from_env({}, api_keys=frozenset({key}))
    assert info.value.problems == ["GEPARD_API_KEYS: " + out.err.split(": ", 1)[1].strip()]
    assert main(["keys", "count", "--redis-url", redis.url]) == 0
    assert capsys.readouterr().out == before  # nothing stored


@pytest.mark.parametrize("action", [["count"], ["add", KEY], ["remove", KEY]])
@pytest.mark.parametrize("url, error", [
    ("redis://127.0.0.1:1", "gepard keys: Redis: ConnectionError: "),  # nothing listens on port 1
    ("redis://:hunter2@127.0.0.1:1/0", "gepard keys: Redis: ConnectionError: "),
    ("http://x", "gepard keys: Redis URL must specify one of the following schemes"),
])
def test_an_unreachable_or_malformed_redis_is_one_line_exit_2(action, url, error, capsys):
    assert main(["keys", *action, "--redis-url", url]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith(error) and out.err.count("\n") == 1, out.err
    assert "hunter2" not in out.err


# --- the Authenticator on a real store, without a gateway ---------------------------------------------


async def test_store_lookup_and_revocation_and_outage_on_a_real_redis():
    redis = RedisServer.start()
    store = RedisKeyStore.from_url(redis.url)
    try:
        auth = Authenticator({STATIC_KEY}, SECRET, key_lookup=store.contains_digest, key_cache_ttl_s=0)
        await store.add(KEY)
        stored_token = auth.issue_token(await auth.principal_for(KEY))
        static_token = auth.issue_token(await auth.principal_for(STATIC_KEY))
        assert (await auth.principal_for(stored_token)).kind is PrincipalKind.ACCESS_TOKEN
        await store.remove(KEY)  # what `gepard keys remove` does
        with pytest.raises(AuthenticationError) as info:
            await auth.principal_for(stored_token)
        assert info.value.error_code == "token_revoked"
        await store.add(KEY)
        redis.stop()  # the outage
        assert (await auth.principal_for(STATIC_KEY)).kind is PrincipalKind.API_KEY
        assert (await auth.principal_for(static_token)).kind is PrincipalKind.ACCESS_TOKEN
        with pytest.raises(AuthenticationError):
            await auth.principal_for("sk-short")
        for needs_redis in (KEY, stored_token):
            with pytest.raises(AuthBackendUnavailableError):
                await auth.principal_for(needs_redis)
    finally:
        await store.aclose()
        redis.stop()


# --- a gateway whose Redis goes down ------------------------------------------------------------------


async def test_with_the_key_store_down_a_socket_refuses_new_contexts_and_lets_open_ones_speak(
        tiny_ckpt_dir, tmp_path, default_voice_id):
    """A re-check that only Redis could answer is not a lapsed credential: a new context gets a
    retryable 503 in band, an open one takes its text and ends, and the socket stays open."""
    redis = RedisServer.start()
    settings = gateway_settings(tiny_ckpt_dir, tmp_path, redis_url=redis.url, require_auth=True, key_cache_ttl_s=0)
    key = "k-ws-outage-0123456789abcdef"
    try:
        with LiveServer(settings) as server:
            assert await _keys("add", key, redis) == 0
            headers = {"Authorization": f"Bearer {key}"}
            async with connect(server.ws_url + "/tts/websocket", additional_headers=headers) as ws:
                await send(ws, gen("open", "Hello there. ", default_voice_id, output_format=FMT))
                await speaking(ws, {"open"})
                redis.stop()
                await send(ws, gen("open", "More words for it.", default_voice_id, output_format=FMT))
                refused = await _speak(ws, "new", default_voice_id)
                assert (refused["type"], refused["status_code"], refused["error_code"]) == \
                    ("error", 503, "auth_unavailable"), refused
                await send(ws, gen("open", "", default_voice_id, cont=False, output_format=FMT))
                ends = [m for m in await read_until_terminal(ws, ["open"])
                        if m["type"] in ("done", "error") and m["context_id"] == "open"]
                assert [m["type"] for m in ends] == ["done"], ends
                # still open: another new context is answered (refused again), not a closed socket
                assert (await _speak(ws, "again", default_voice_id))["error_code"] == "auth_unavailable"
    finally:
        redis.stop()


@pytest.fixture(scope="module")
def outage_gateway(tiny_ckpt_dir, tmp_path_factory):
    """Keys in the environment AND in Redis; the test stops Redis (so this server is its own)."""
    redis = RedisServer.start()
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("outage-data"), redis_url=redis.url,
                                api_keys={STATIC_KEY}, token_secret=SECRET, key_cache_ttl_s=0)
    with LiveServer(settings) as server:
        yield server, redis
    redis.stop()


def test_with_redis_down_what_needs_no_redis_is_answered(outage_gateway):
    server, redis = outage_gateway
    assert main(["keys", "add", KEY, "--redis-url", redis.url]) == 0

    def mint(headers):
        return httpx.post(server.url + "/access-token", json={}, headers=headers, timeout=30)

    static_token = mint({"X-API-Key": STATIC_KEY}).json()["token"]
    stored_token = mint({"X-API-Key": KEY}).json()["token"]
    redis.stop()
    assert mint({"Authorization": f"Bearer {STATIC_KEY}"}).status_code == 200
    r = mint({"Authorization": f"Bearer {static_token}"})  # authenticated; tokens may not mint
    assert r.status_code == 403 and r.json()["error_code"] == "permission_denied"
    forged = static_token[:-4] + ("AAAA" if not static_token.endswith("AAAA") else "BBBB")
    for wrong, code in [("sk_wrong", "invalid_credentials"), (forged, "invalid_token"),
                        ("gat1.bm9wZQ.c2ln", "invalid_token")]:
        r = mint({"X-API-Key": wrong})
        assert r.status_code == 401 and r.json()["error_code"] == code, r.text
    for maybe_valid in ("sk-unknown-but-long-enough", KEY, stored_token):
        r = mint({"X-API-Key": maybe_valid})
        assert r.status_code == 503 and r.json()["error_code"] == "auth_unavailable", r.text
        assert "retry-after" in r.headers
