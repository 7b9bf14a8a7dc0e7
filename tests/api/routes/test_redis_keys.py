"""API keys kept in Redis (``gepard keys add``) authenticate on every replica sharing that Redis;
removing one revokes it and every access token it minted; with Redis down, every credential that
can be judged without Redis still is (a real redis-server, stopped for the outage)."""

import httpx
import pytest

from api.auth import Authenticator, PrincipalKind
from api.cli import main
from api.errors import AuthBackendUnavailableError, AuthenticationError
from api.key_store import RedisKeyStore
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.voices.redis_server import RedisServer

KEY = "k-redis-0123456789abcdef"
STATIC_KEY = "sk-static-0123456789"
SECRET = b"redis-keys-token-secret-0123456789"


@pytest.fixture(scope="module")
def redis_gateway(tiny_ckpt_dir, tmp_path_factory):
    redis = RedisServer.start()
    # key_cache_ttl_s=0: a removed key fails at once (the default believes Redis for 2 s)
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("keys-data"), redis_url=redis.url,
                                require_auth=True, key_cache_ttl_s=0)
    with LiveServer(settings) as server:
        yield server, redis
    redis.stop()


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


def test_short_keys_are_refused(redis_gateway, capsys):
    _, redis = redis_gateway
    assert main(["keys", "add", "short", "--redis-url", redis.url]) == 2
    assert "at least 16 characters" in capsys.readouterr().err


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
