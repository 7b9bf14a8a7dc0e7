"""api/auth.py: credentials from every location on real Starlette Requests and WebSockets, the
version header/query, constant-time keys, the key_lookup hook (digests only; what is answered
without it), and access tokens (mint, verify, expiry, tampering, grants, revocation with the key)."""

from __future__ import annotations

import base64
import json
import logging

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket

from api.auth import (
    NEWEST_CARTESIA_VERSION,
    MIN_LOOKUP_KEY_CHARS,
    TOKEN_PREFIX,
    Authenticator,
    Grants,
    Principal,
    PrincipalKind,
    key_digest,
    key_id,
)
from api.errors import (
    AuthBackendUnavailableError,
    AuthenticationError,
    BadRequestError,
    PermissionDeniedError,
    error_response,
)

KEY = "sk_test_0123456789"
SECRET = b"0123456789abcdef0123456789abcdef"


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_auth(**kwargs) -> Authenticator:
    kwargs.setdefault("api_keys", {KEY, "sk_other"})
    kwargs.setdefault("token_secret", SECRET)
    return Authenticator(**kwargs)


def app_for(auth: Authenticator, required_grant="tts") -> Starlette:
    """A tiny app whose HTTP route and WebSocket both answer with the principal they got."""

    def describe(p: Principal) -> dict:
        return {"kind": p.kind.value, "grants": list(p.grants.names), "credential_id": p.credential_id,
                "subject": p.subject, "version": p.cartesia_version}

    async def http(request: Request):
        try:
            principal = await auth.authenticate(request, required_grant=required_grant)
        except Exception as exc:  # the route's job in the real app
            return error_response(exc, "req-1")
        return JSONResponse(describe(principal))

    async def ws(websocket: WebSocket):
        try:
            principal = await auth.authenticate(websocket, required_grant=required_grant)
        except Exception as exc:
            await websocket.send_denial_response(error_response(exc, "req-1"))
            return
        await websocket.accept()
        await websocket.send_json(describe(principal))
        await websocket.close()

    return Starlette(routes=[Route("/tts/bytes", http, methods=["GET", "POST"]), WebSocketRoute("/tts/websocket", ws)])


@pytest.fixture
def client():
    return TestClient(app_for(make_auth()))


# --- where credentials come from ------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers, query",
    [
        ({"Authorization": f"Bearer {KEY}"}, ""),
        ({"authorization": f"bearer {KEY}"}, ""),
        ({"Authorization": f"BEARER   {KEY}  "}, ""),
        ({"X-API-Key": KEY}, ""),
        ({"x-api-key": KEY}, ""),
        ({"X-API-KEY": KEY}, ""),
        ({}, f"?api_key={KEY}"),
        ({}, f"?access_token={KEY}"),
    ],
)
def test_http_credential_locations(client, headers, query):
    r = client.get("/tts/bytes" + query, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"kind": "api_key", "grants": ["tts", "stt", "agent"], "credential_id": key_id(KEY),
                        "subject": key_id(KEY), "version": NEWEST_CARTESIA_VERSION}


@pytest.mark.parametrize(
    "headers, query",
    [
        ({"Authorization": f"Bearer {KEY}", "Cartesia-Version": "2026-08-14"}, ""),
        ({"X-API-Key": KEY, "Cartesia-Version": "2026-03-01"}, ""),  # pipecat
        ({"X-API-Key": KEY}, "?cartesia_version=2025-04-16"),  # LiveKit
        ({}, f"?cartesia_version=2026-08-14&api_key={KEY}&cartesia_client=cartesia-js/4.2.0"),  # JS in Node/browser
        # what Python 4.2.0 sends on the upgrade, content headers included
        ({"Authorization": f"Bearer {KEY}", "cartesia-version": "2026-08-14", "Content-Type": "application/json",
          "Accept": "application/json", "User-Agent": "cartesia-python/4.2.0", "X-Stainless-Lang": "python"}, ""),
    ],
)
def test_websocket_credential_locations(client, headers, query):
    with client.websocket_connect("/tts/websocket" + query, headers=headers) as ws:
        got = ws.receive_json()
    assert got["kind"] == "api_key" and got["credential_id"] == key_id(KEY)


def test_header_wins_over_query(client):
    r = client.get("/tts/bytes?api_key=wrong", headers={"X-API-Key": KEY})
    assert r.status_code == 200
    r = client.get(f"/tts/bytes?api_key={KEY}", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    # Authorization wins over X-API-Key
    r = client.get("/tts/bytes", headers={"Authorization": f"Bearer {KEY}", "X-API-Key": "wrong"})
    assert r.status_code == 200


def test_version_query_wins_and_any_date_is_accepted(client):
    r = client.get(f"/tts/bytes?cartesia_version=2024-06-10&api_key={KEY}", headers={"Cartesia-Version": "2026-03-01"})
    assert r.json()["version"] == "2024-06-10"
    r = client.get("/tts/bytes", headers={"X-API-Key": KEY, "CARTESIA-VERSION": "1999-01-01"})
    assert r.json()["version"] == "1999-01-01"
    r = client.get("/tts/bytes", headers={"X-API-Key": KEY, "Cartesia-Version": " "})
    assert r.json()["version"] == NEWEST_CARTESIA_VERSION


@pytest.mark.parametrize(
    "headers, query, code, message",
    [
        ({}, "", "missing_credentials", "missing credentials"),
        ({"X-API-Key": "  "}, "", "missing_credentials", "missing credentials"),
        ({"Authorization": "Bearer nope"}, "", "invalid_credentials", "invalid API key or access token"),
        ({"X-API-Key": KEY + "x"}, "", "invalid_credentials", "invalid API key or access token"),
        ({}, "?api_key=nope", "invalid_credentials", "invalid API key or access token"),
        ({"Authorization": f"Basic {KEY}"}, "", "invalid_credentials", "must be 'Bearer <api key or access token>'"),
        ({"Authorization": "Bearer "}, "", "invalid_credentials", "empty Bearer credential"),
    ],
)
def test_http_rejections(client, headers, query, code, message):
    r = client.get("/tts/bytes" + query, headers=headers)
    assert r.status_code == 401 and r.headers["x-should-retry"] == "false"
    body = r.json()
    assert body["error_code"] == code and message in body["message"] and body["title"] == "Unauthorized"
    assert KEY not in r.text


def test_non_bearer_authorization_falls_back_to_other_credentials(client):
    r = client.get("/tts/bytes", headers={"Authorization": "Basic Zm9vOmJhcg==", "X-API-Key": KEY})
    assert r.status_code == 200


def test_websocket_rejection_is_http_401(client):
    from starlette.testclient import WebSocketDenialResponse

    with pytest.raises(WebSocketDenialResponse) as info:
        with client.websocket_connect("/tts/websocket", headers={"X-API-Key": "bad"}):
            pass
    assert info.value.status_code == 401
    assert info.value.json()["error_code"] == "invalid_credentials"


def test_auth_disabled_makes_everyone_anonymous(caplog):
    caplog.set_level(logging.WARNING, logger="api.auth")
    auth = make_auth(api_keys=set(), require_auth=False)
    assert any("authentication is disabled" in r.getMessage() for r in caplog.records)
    client = TestClient(app_for(auth))
    for headers in ({}, {"X-API-Key": "anything"}, {"Cartesia-Version": "2025-04-16"}):
        r = client.get("/tts/bytes", headers=headers)
        assert r.status_code == 200
        assert r.json()["kind"] == "anonymous" and r.json()["grants"] == ["tts", "stt", "agent"]
    assert r.json()["version"] == "2025-04-16"


def test_warns_when_nothing_can_authenticate(caplog):
    caplog.set_level(logging.WARNING, logger="api.auth")
    make_auth(api_keys=set())
    assert any("no request can authenticate" in r.getMessage() for r in caplog.records)


def test_keys_are_never_logged(caplog):
    caplog.set_level(logging.DEBUG)
    auth = make_auth()
    client = TestClient(app_for(auth))
    client.get("/tts/bytes", headers={"X-API-Key": KEY})
    client.get("/tts/bytes", headers={"X-API-Key": "sk_wrong_guess"})
    assert all(KEY not in r.getMessage() and "sk_wrong_guess" not in r.getMessage() for r in caplog.records)


def test_constructor_validates_the_secret():
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Authenticator({KEY}, b"short")
    with pytest.raises(ValueError, match="key_cache_ttl_s"):
        Authenticator({KEY}, SECRET, key_cache_ttl_s=-1)


# --- key_lookup hook ------------------------------------------------------------------------------

REDIS_KEY = "sk_in_redis_0123456789"  # long enough to be a stored key (MIN_LOOKUP_KEY_CHARS)


class FakeStore:
    """The key_lookup contract: digests in, bool out (a real Redis store: tests/api/routes/test_redis_keys.py)."""

    def __init__(self, *keys: str) -> None:
        self.digests = {key_digest(k) for k in keys}
        self.asked: list[str] = []
        self.down = False

    async def __call__(self, digest: str) -> bool:
        self.asked.append(digest)
        if self.down:
            raise ConnectionError("redis is down")
        return digest in self.digests


async def test_key_lookup_hook_gets_digests_never_keys():
    store = FakeStore(REDIS_KEY)
    auth = make_auth(key_lookup=store, key_cache_ttl_s=0)
    principal = await auth.principal_for(REDIS_KEY)
    assert principal.kind is PrincipalKind.API_KEY and principal.credential_id == key_id(REDIS_KEY)
    assert principal.key_digest == key_digest(REDIS_KEY)
    with pytest.raises(AuthenticationError) as info:
        await auth.principal_for("sk_unknown_0123456789")
    assert info.value.error_code == "invalid_credentials"
    # configured keys, tokens of configured keys, and credentials too short to be stored never reach it
    await auth.principal_for(KEY)
    await auth.principal_for(auth.issue_token(await auth.principal_for(KEY)))
    with pytest.raises(AuthenticationError):
        await auth.principal_for("x" * (MIN_LOOKUP_KEY_CHARS - 1))
    assert store.asked == [key_digest(REDIS_KEY), key_digest("sk_unknown_0123456789")]


async def test_store_outage_costs_only_what_needs_the_store():
    """Redis down: everything that can be answered without it is; 503 only for a possible stored key."""
    store = FakeStore(REDIS_KEY)
    auth = make_auth(key_lookup=store, key_cache_ttl_s=0)
    static_token = auth.issue_token(await auth.principal_for(KEY))
    stored_token = auth.issue_token(await auth.principal_for(REDIS_KEY))
    store.down = True
    assert (await auth.principal_for(KEY)).kind is PrincipalKind.API_KEY  # configured key
    assert (await auth.principal_for(static_token)).kind is PrincipalKind.ACCESS_TOKEN  # its token
    for wrong, code in [("sk_wrong", "invalid_credentials"),  # too short to be a stored key
                        (_reencode(static_token, grants=["stt"]), "invalid_token"),  # bad MAC
                        ("gat1.bm9wZQ.c2ln", "invalid_token")]:
        with pytest.raises(AuthenticationError) as info:
            await auth.principal_for(wrong)
        assert info.value.error_code == code
    store.asked.clear()
    for maybe_stored in ("sk_unknown_0123456789", REDIS_KEY, stored_token):
        with pytest.raises(AuthBackendUnavailableError) as unavailable:
            await auth.principal_for(maybe_stored)
        response = error_response(unavailable.value, "r")
        assert response.status_code == 503 and "retry-after" in response.headers
    assert len(store.asked) == 3  # each of the three, and nothing else, needed the store


async def test_without_a_store_unknown_keys_are_401():
    with pytest.raises(AuthenticationError) as info:
        await make_auth().principal_for("sk_unknown_0123456789")
    assert info.value.error_code == "invalid_credentials"


# --- access tokens --------------------------------------------------------------------------------


async def test_token_round_trip_and_grants():
    clock = Clock()
    auth = make_auth(clock=clock)
    token = auth.mint_token({"tts": True, "stt": True}, 120, key_digest=key_digest(KEY))
    assert token.startswith(TOKEN_PREFIX) and token.count(".") == 2
    claims = auth.verify_token(token)
    assert claims.grants == Grants(tts=True, stt=True) and claims.subject == key_id(KEY)
    assert claims.key_digest == key_digest(KEY)
    assert claims.expires_at - claims.issued_at == 120 and claims.issued_at == int(clock.now)
    principal = await auth.principal_for(token, "2026-03-01")
    assert principal.kind is PrincipalKind.ACCESS_TOKEN and principal.credential_id == f"token:{claims.token_id}"
    assert principal.expires_at == claims.expires_at and principal.cartesia_version == "2026-03-01"
    assert auth.mint_token() != auth.mint_token()  # each token has its own id


def test_tokens_through_every_location():
    clock = Clock()
    auth = make_auth(clock=clock)
    client = TestClient(app_for(auth))
    token = auth.mint_token({"tts": True}, key_digest=key_digest(KEY))
    for headers, query in [({"Authorization": f"Bearer {token}"}, ""), ({}, f"?access_token={token}"),
                           ({"X-API-Key": token}, "")]:
        r = client.get("/tts/bytes" + query, headers=headers)
        assert r.status_code == 200 and r.json()["kind"] == "access_token" and r.json()["grants"] == ["tts"]
    with client.websocket_connect(f"/tts/websocket?access_token={token}&cartesia_version=2026-08-14") as ws:
        assert ws.receive_json()["kind"] == "access_token"


def test_default_token_is_tts_for_60_seconds():
    clock = Clock()
    claims = make_auth(clock=clock).verify_token(make_auth(clock=clock).mint_token())
    assert claims.grants == Grants(tts=True) and claims.expires_at - claims.issued_at == 60


def test_token_expiry():
    clock = Clock()
    auth = make_auth(clock=clock)
    token = auth.mint_token(expires_in=30)
    clock.now += 29.9
    auth.verify_token(token)
    clock.now += 0.1
    with pytest.raises(AuthenticationError) as info:
        auth.verify_token(token)
    assert info.value.error_code == "token_expired" and "expired" in str(info.value)


def test_tokens_verify_on_every_replica_sharing_the_secret():
    clock = Clock()
    token = make_auth(clock=clock).mint_token()
    assert make_auth(clock=clock, api_keys=set()).verify_token(token).grants.tts
    with pytest.raises(AuthenticationError) as info:
        make_auth(clock=clock, token_secret=b"another-secret-of-32-bytes-long!").verify_token(token)
    assert info.value.error_code == "invalid_token"


def _reencode(token: str, **changes) -> str:
    prefix_payload, signature = token.rsplit(".", 1)
    payload = prefix_payload[len(TOKEN_PREFIX):]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    new_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{TOKEN_PREFIX}{new_payload}.{signature}"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: _reencode(t, grants=["tts", "stt", "agent"]),  # widen grants
        lambda t: _reencode(t, exp=9_999_999_999),  # extend expiry
        lambda t: t[:-2] + ("AA" if t[-2:] != "AA" else "BB"),  # flip signature bits
        lambda t: t.rsplit(".", 1)[0] + ".",  # drop the signature
        lambda t: t.rsplit(".", 1)[0],  # no signature part at all
        lambda t: t + ".x",
        lambda t: t.replace(TOKEN_PREFIX, "gat2."),
        lambda t: t[:-1] + "é",
        lambda t: "gat1.%%%.%%%",
    ],
)
def test_tampered_tokens_are_rejected(tamper):
    clock = Clock()
    auth = make_auth(clock=clock)
    bad = tamper(auth.mint_token({"tts": True}, 60))
    with pytest.raises(AuthenticationError) as info:
        auth.verify_token(bad)
    assert info.value.error_code == "invalid_token"


async def test_tampered_token_used_as_credential_is_401():
    auth = make_auth()
    bad = _reencode(auth.mint_token(key_digest=key_digest(KEY)), grants=["tts", "stt"])
    with pytest.raises(AuthenticationError):
        await auth.principal_for(bad)


def test_token_without_tts_grant_is_forbidden_on_tts_routes():
    auth = make_auth()
    client = TestClient(app_for(auth))
    stt_only = auth.mint_token({"stt": True}, key_digest=key_digest(KEY))
    r = client.get("/tts/bytes", headers={"Authorization": f"Bearer {stt_only}"})
    assert r.status_code == 403 and r.json()["error_code"] == "missing_grant"
    assert "does not grant 'tts'" in r.json()["message"] and "stt" in r.json()["message"]
    # a route that needs no grant accepts it
    r = TestClient(app_for(auth, required_grant=None)).get("/tts/bytes", headers={"Authorization": f"Bearer {stt_only}"})
    assert r.status_code == 200


@pytest.mark.parametrize(
    "grants, expires_in, message",
    [
        (None, 0, "expires_in: must be between 1 and 3600 seconds, got 0"),
        (None, 3601, "expires_in: must be between 1 and 3600 seconds, got 3601"),
        (None, -5, "expires_in: must be between 1 and 3600 seconds, got -5"),
        (None, 1.5, "expires_in: expected an integer number of seconds, got 1.5"),
        (None, True, "expires_in: expected an integer number of seconds, got True"),
        ({"tts": True, "admin": True}, 60, "grants: unknown grant 'admin'"),
    ],
)
def test_mint_validation(grants, expires_in, message):
    with pytest.raises(BadRequestError) as info:
        make_auth().mint_token(grants, expires_in)
    assert str(info.value).startswith(message)


def test_mint_accepts_the_bounds():
    auth = make_auth()
    for expires_in in (1, 3600):
        claims = auth.verify_token(auth.mint_token(expires_in=expires_in))
        assert claims.expires_at - claims.issued_at == expires_in


async def test_only_api_keys_may_issue_tokens():
    auth = make_auth()
    key_principal = await auth.principal_for(KEY)
    token = auth.issue_token(key_principal, {"tts": True}, 60)
    token_principal = await auth.principal_for(token)
    assert token_principal.subject == key_id(KEY)
    with pytest.raises(PermissionDeniedError) as info:
        auth.issue_token(token_principal, {"tts": True}, 60)
    assert "access token cannot be used to mint access tokens" in str(info.value)
    anonymous = await make_auth(api_keys=set(), require_auth=False).authenticate(
        Request({"type": "http", "method": "POST", "path": "/access-token", "headers": [], "query_string": b""}))
    assert anonymous.is_anonymous
    anonymous_token = auth.issue_token(anonymous)  # auth disabled: anyone may mint
    assert auth.verify_token(anonymous_token).key_digest is None
    with pytest.raises(AuthenticationError) as info:  # ... but it names no key, so auth on rejects it
        await auth.principal_for(anonymous_token)
    assert info.value.error_code == "invalid_token" and "authentication was off" in str(info.value)


# --- revocation: a token works only while the key that minted it does -------------------------------


async def test_removing_a_configured_key_revokes_its_tokens():
    clock = Clock()
    before = make_auth(clock=clock)
    token = before.issue_token(await before.principal_for(KEY), {"tts": True}, 3600)
    other = before.issue_token(await before.principal_for("sk_other"), {"tts": True}, 3600)
    principal = await before.principal_for(token)
    assert principal.subject == key_id(KEY) and principal.key_digest == key_digest(KEY)
    after = make_auth(clock=clock, api_keys={"sk_other"})  # the replica restarted without KEY
    with pytest.raises(AuthenticationError) as info:
        await after.principal_for(token)
    assert info.value.error_code == "token_revoked" and "removed" in str(info.value)
    assert (await after.principal_for(other)).subject == key_id("sk_other")


async def test_removing_a_stored_key_revokes_its_tokens_within_the_cache_ttl():
    clock = Clock()
    store = FakeStore(REDIS_KEY)
    auth = make_auth(clock=clock, key_lookup=store, key_cache_ttl_s=2.0, monotonic=clock)
    token = auth.issue_token(await auth.principal_for(REDIS_KEY), {"tts": True}, 3600)
    assert store.asked == [key_digest(REDIS_KEY)]
    for _ in range(3):  # a hot token: believed from the cache, no store round trip
        assert (await auth.principal_for(token)).kind is PrincipalKind.ACCESS_TOKEN
    assert len(store.asked) == 1
    store.digests.clear()  # gepard keys remove
    clock.now += 1.9
    await auth.principal_for(token)  # still within the bound
    clock.now += 0.1
    for revoked in (token, REDIS_KEY):
        with pytest.raises(AuthenticationError) as info:
            await auth.principal_for(revoked)
        assert info.value.error_code == ("token_revoked" if revoked is token else "invalid_credentials")
    # and a key added again works at once (only positive answers are cached)
    store.digests.add(key_digest(REDIS_KEY))
    assert (await auth.principal_for(token)).kind is PrincipalKind.ACCESS_TOKEN


async def test_a_cached_key_survives_a_store_outage_until_its_ttl():
    clock = Clock()
    store = FakeStore(REDIS_KEY)
    auth = make_auth(clock=clock, key_lookup=store, key_cache_ttl_s=2.0, monotonic=clock)
    token = auth.issue_token(await auth.principal_for(REDIS_KEY), {"tts": True}, 3600)
    store.down = True
    await auth.principal_for(token)
    clock.now += 2.0
    with pytest.raises(AuthBackendUnavailableError):
        await auth.principal_for(token)


async def test_recheck_answers_what_a_new_request_would_get_now():
    """A connection keeps the principal of its upgrade; recheck() is the request's check, again:
    expiry first, then whether the key is still live (through the same cache, so within its TTL)."""
    clock = Clock()
    store = FakeStore(REDIS_KEY)
    auth = make_auth(clock=clock, key_lookup=store, key_cache_ttl_s=2.0, monotonic=clock)
    stored_key = await auth.principal_for(REDIS_KEY)
    stored_token = await auth.principal_for(auth.issue_token(stored_key, {"tts": True}, 3600))
    short_token = await auth.principal_for(auth.issue_token(await auth.principal_for(KEY), {"tts": True}, 3))
    anonymous = await make_auth(require_auth=False).authenticate(
        Request({"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}))
    for live in (stored_key, stored_token, short_token, anonymous):
        await auth.recheck(live)
    assert len(store.asked) == 1  # the cache answered

    store.digests.clear()  # gepard keys remove
    clock.now += 1.9
    for live in (stored_key, stored_token):  # the removal is believed once the cached answer lapses
        await auth.recheck(live)
    clock.now += 1.1  # the short token's expiry; the cached answer is 3 s old, over the 2 s TTL
    with pytest.raises(AuthenticationError) as info:
        await auth.recheck(short_token)
    assert info.value.error_code == "token_expired"
    for removed, code in [(stored_key, "invalid_credentials"), (stored_token, "token_revoked")]:
        with pytest.raises(AuthenticationError) as info:
            await auth.recheck(removed)
        assert info.value.error_code == code and info.value.status_code == 401
    store.down = True
    with pytest.raises(AuthBackendUnavailableError):  # only the store could tell: 503, retryable
        await auth.recheck(stored_key)
    await auth.recheck(anonymous)


def test_tokens_name_their_key_without_revealing_it():
    auth = make_auth()
    token = auth.mint_token(key_digest=key_digest(KEY))
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert set(claims) == {"v", "grants", "iat", "exp", "jti", "kid"} and claims["v"] == 2
    # masked with the secret: neither the digest the store keeps nor the key id can be read off it
    assert claims["kid"] != key_digest(KEY) and key_digest(KEY)[:8] not in token
    assert auth.verify_token(token).key_digest == key_digest(KEY)
    # two tokens of one key carry different kids (the mask is per token)
    assert json.loads(base64.urlsafe_b64decode(auth.mint_token(key_digest=key_digest(KEY)).split(".")[1] + "==="))[
        "kid"] != claims["kid"]


def test_tokens_of_the_earlier_format_are_rejected():
    import hashlib
    import hmac

    claims = {"v": 1, "grants": ["tts"], "iat": 1_700_000_000, "exp": 9_999_999_999, "jti": "00ff", "sub": key_id(KEY)}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    signed = TOKEN_PREFIX + payload
    mac = base64.urlsafe_b64encode(hmac.new(SECRET, signed.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
    with pytest.raises(AuthenticationError) as info:
        make_auth().verify_token(f"{signed}.{mac}")
    assert info.value.error_code == "invalid_token" and "older format" in str(info.value)


def test_grants_helpers():
    assert Grants.from_names(["stt"]) == Grants(stt=True)
    assert Grants.all().names == ("tts", "stt", "agent")
    with pytest.raises(ValueError, match="unknown grants"):
        Grants.from_names(["admin"])
    with pytest.raises(ValueError, match="unknown grant"):
        Grants().allows("admin")
