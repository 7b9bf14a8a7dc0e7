"""Authentication on the live routes of a TLS gateway that requires an API key: every credential
location over https and wss, access tokens from POST /access-token, and the 401/403 answers."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.api.routes.audio_checks import expected_bytes
from tests.api.routes.conftest import API_KEY
from tests.api.routes.test_tts_bytes import assert_error
from tests.api.routes.ws_helpers import gen, read_until_terminal, send

FMT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}


def tts(voice: str) -> dict:
    return {"model_id": "sonic-3", "transcript": "Hi there.", "voice": voice, "output_format": FMT}


@pytest.fixture(scope="module")
def https(secure_gateway, tls_files):
    with httpx.Client(base_url=secure_gateway.url, verify=str(tls_files.ca_pem), timeout=60) as client:
        yield client


def token(https, grants=None, expires_in=None) -> str:
    payload = {k: v for k, v in (("grants", grants), ("expires_in", expires_in)) if v is not None}
    r = https.post("/access-token", json=payload, headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"token"}
    return r.json()["token"]


@pytest.mark.parametrize("where", ["bearer", "bearer-lowercase", "x-api-key", "query-api_key", "token-bearer",
                                   "token-query"])
def test_every_credential_location_over_https(https, default_voice_id, where):
    headers, params = {}, {}
    if where == "bearer":
        headers["Authorization"] = f"Bearer {API_KEY}"
    elif where == "bearer-lowercase":
        headers["authorization"] = f"bearer {API_KEY}"
    elif where == "x-api-key":
        headers["X-API-Key"] = API_KEY
    elif where == "query-api_key":
        params["api_key"] = API_KEY
    elif where == "token-bearer":
        headers["Authorization"] = f"Bearer {token(https)}"
    else:
        params["access_token"] = token(https)
    headers["Cartesia-Version"] = "2025-04-16"
    r = https.post("/tts/bytes", json=tts(default_voice_id), headers=headers, params=params)
    assert r.status_code == 200, r.text
    assert len(r.content) == expected_bytes(1, "pcm_s16le", 8000)


@pytest.mark.parametrize("headers,params,code", [
    ({}, {}, "missing_credentials"),
    ({"Authorization": "Bearer sk_wrong"}, {}, "invalid_credentials"),
    ({"X-API-Key": "sk_wrong"}, {}, "invalid_credentials"),
    ({}, {"api_key": "sk_wrong"}, "invalid_credentials"),
    ({}, {"access_token": "gat1.bm9wZQ.c2ln"}, "invalid_token"),
    ({"Authorization": f"Basic {API_KEY}"}, {}, "invalid_credentials"),
])
@pytest.mark.parametrize("path", ["/tts/bytes", "/tts/sse", "/access-token"])
def test_wrong_or_missing_credentials_are_401_json(https, default_voice_id, headers, params, code, path):
    r = https.post(path, json=tts(default_voice_id), headers=headers, params=params)
    assert_error(r, 401, code)


def test_token_grants_and_minting_rules(https, default_voice_id):
    stt_only = token(https, grants={"tts": False, "stt": True})
    r = https.post("/tts/bytes", json=tts(default_voice_id), headers={"Authorization": f"Bearer {stt_only}"})
    assert_error(r, 403, "missing_grant", "tts")
    tts_token = token(https, grants={"tts": True}, expires_in=3600)
    r = https.post("/access-token", json={}, headers={"Authorization": f"Bearer {tts_token}"})
    assert_error(r, 403, "permission_denied", "API key")
    r = https.post("/access-token", json={"expires_in": 3601}, headers={"X-API-Key": API_KEY})
    assert_error(r, 400, "invalid_request", "expires_in")
    r = https.post("/access-token", content=b"", headers={"X-API-Key": API_KEY})
    assert r.status_code == 200 and r.json()["token"].startswith("gat1.")  # an empty body is all defaults


def test_status_needs_no_credentials(https):
    r = https.get("/")
    assert r.status_code == 200 and r.json()["ok"] is True and isinstance(r.json()["version"], str)


# --- WebSocket upgrade --------------------------------------------------------------------------------


def wss(server) -> str:
    return server.ws_url + "/tts/websocket"


@pytest.mark.parametrize("credentials", [
    {},
    {"headers": {"X-API-Key": "sk_wrong"}},
    {"query": "api_key=sk_wrong&cartesia_version=2026-08-14"},
    {"headers": {"Authorization": "Bearer gat1.bm9wZQ.c2ln"}},
])
async def test_ws_upgrade_is_rejected_with_401(secure_gateway, tls_files, credentials):
    url = wss(secure_gateway) + ("?" + credentials["query"] if "query" in credentials else "")
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, ssl=tls_files.client_context(), additional_headers=credentials.get("headers")):
            pass
    response = info.value.response
    assert response.status_code == 401
    body = json.loads(response.body)
    assert body["error_code"] in ("missing_credentials", "invalid_credentials", "invalid_token")
    assert set(body) >= {"error_code", "title", "message", "request_id"}


@pytest.mark.parametrize("where", ["bearer", "x-api-key", "query-api_key", "query-access_token"])
async def test_ws_accepts_every_credential_location(secure_gateway, tls_files, https, default_voice_id, where):
    headers = {"Cartesia-Version": "2026-03-01"}
    query = "cartesia_version=2025-04-16"
    if where == "bearer":
        headers["Authorization"] = f"Bearer {API_KEY}"
    elif where == "x-api-key":
        headers["X-API-Key"] = API_KEY
    elif where == "query-api_key":
        query += f"&api_key={API_KEY}&cartesia_client=cartesia-js/4.2.0"
    else:
        query += f"&access_token={token(https)}"
    async with connect(f"{wss(secure_gateway)}?{query}", ssl=tls_files.client_context(),
                       additional_headers=headers) as ws:
        await send(ws, gen("auth", "Hi there.", default_voice_id, cont=False, output_format=FMT))
        msgs = await read_until_terminal(ws, ["auth"])
    assert msgs[-1]["type"] == "done"


async def test_ws_token_without_tts_grant_is_403(secure_gateway, tls_files, https):
    stt_only = token(https, grants={"stt": True})
    with pytest.raises(InvalidStatus) as info:
        async with connect(f"{wss(secure_gateway)}?access_token={stt_only}", ssl=tls_files.client_context()):
            pass
    assert info.value.response.status_code == 403
