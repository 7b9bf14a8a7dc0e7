"""The server log of a live gateway, captured the way ``gepard serve`` logs (configure_logging: one
redacting root handler, DEBUG, uvicorn's access log on too): no API key or access token appears in
it, whatever credential form a client used over HTTP or WebSocket, accepted or rejected. Every HTTP
request and upgrade is one access line with its request id and the credential's id. Clients that
hang up mid-stream (/tts/bytes, /tts/sse, WebSocket) leave INFO lines, no ERROR and no traceback;
what a client sends cannot forge a line or make a huge one."""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import socket
import struct
import time
from collections import Counter

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from api.app import DEFAULT_VOICE_ID
from api.auth import Authenticator, key_id
from api.logging_setup import MAX_MESSAGE_CHARS, configure_logging
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer

KEY = "sk_redact_live_7Qp2Zr9Lm4"
WRONG_KEY = "sk_redact_wrong_3Jd8Vx1Nc6"
# a well-formed token signed with another secret: rejected as invalid_token
WRONG_TOKEN = Authenticator([], b"some-other-secret-0123456789abcdef").mint_token(key_digest="ab" * 32)
FMT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}


def tts(text: str = "Hi there.") -> dict:
    return {"model_id": "sonic-3", "transcript": text, "voice": {"mode": "id", "id": DEFAULT_VOICE_ID},
            "output_format": FMT}


@pytest.fixture(scope="module")
def logged_gateway(tiny_ckpt_dir, tmp_path_factory):
    """(server, captured log) - the capture is installed before the server starts."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    access_level = logging.getLogger("uvicorn.access").level
    stream = io.StringIO()
    configure_logging("DEBUG", stream=stream)  # no literal secrets: the patterns alone must do
    logging.getLogger("uvicorn.access").setLevel(logging.INFO)  # an operator may turn it on
    # the test's own WebSocket client logs at DEBUG too (a traceback when its socket is cut under it)
    client_level = logging.getLogger("websockets.client").level
    logging.getLogger("websockets.client").setLevel(logging.INFO)
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("redaction-data"), api_keys={KEY},
                                token_secret=b"redaction-tests-secret-0123456789")
    try:
        with LiveServer(settings) as server:
            yield server, stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.getLogger("uvicorn.access").setLevel(access_level)
        logging.getLogger("websockets.client").setLevel(client_level)


def _mint(server) -> str:
    r = httpx.post(server.url + "/access-token", json={"expires_in": 600}, headers={"Authorization": f"Bearer {KEY}"},
                   timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["token"]


def test_no_credential_reaches_the_log(logged_gateway):
    server, log = logged_gateway
    start = len(log.getvalue())
    token = _mint(server)
    payload = token.split(".")[1]
    token_id = "token:" + json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"]
    url = server.url + "/tts/bytes"
    answered: list[tuple[str, str, int, str]] = []  # (what, request id, status, credential id): patterns
    with httpx.Client(timeout=60) as http:
        for headers, params, status in [
            ({"Authorization": f"Bearer {KEY}"}, {}, 200),
            ({"X-API-Key": KEY}, {}, 200),
            ({}, {"api_key": KEY}, 200),
            ({"Authorization": f"Bearer {token}"}, {}, 200),
            ({}, {"access_token": token}, 200),
            ({"Authorization": f"Bearer {WRONG_KEY}"}, {}, 401),
            ({"X-API-Key": WRONG_KEY}, {}, 401),
            ({"Authorization": f"Basic {WRONG_KEY}"}, {}, 401),
            ({}, {"api_key": WRONG_KEY}, 401),
            ({}, {"access_token": WRONG_TOKEN}, 401),
        ]:
            r = http.post(url, json=tts(), headers=headers, params=params)
            assert r.status_code == status, (headers, params, r.text)
            used_token = any(token in value for value in (*headers.values(), *params.values()))
            credential = "-" if status == 401 else (token_id if used_token else key_id(KEY))
            answered.append(("http POST /tts/bytes", re.escape(r.headers["x-request-id"]), status, credential))
    ws_url = server.ws_url + "/tts/websocket?cartesia_version=2026-08-14"
    for query, headers in [(f"&api_key={KEY}", None), (f"&access_token={token}", None),
                           ("", {"Authorization": f"Bearer {KEY}"}), ("", {"X-API-Key": token})]:
        with connect(ws_url + query, additional_headers=headers) as ws:
            ws.send(json.dumps({**tts(), "context_id": "c", "continue": False}))
            while json.loads(ws.recv(timeout=60))["type"] != "done":
                pass
        credential = token_id if token in (query + str(headers)) else key_id(KEY)
        answered.append(("ws GET /tts/websocket", "[0-9a-f-]+", 101, credential))  # the socket's id
    for query, headers in [(f"&api_key={WRONG_KEY}", None), (f"&access_token={WRONG_TOKEN}", None),
                           ("", {"Authorization": f"Bearer {WRONG_KEY}"})]:
        with pytest.raises(InvalidStatus) as info:
            with connect(ws_url + query, additional_headers=headers):
                pass
        assert info.value.response.status_code == 401
        request_id = info.value.response.headers["x-request-id"]
        answered.append(("ws GET /tts/websocket", re.escape(request_id), 401, "-"))
    time.sleep(0.5)  # the last close lines
    text = log.getvalue()
    # the lines that used to carry them were written, with the credential redacted
    assert '"WebSocket /tts/websocket?cartesia_version=2026-08-14&api_key=[REDACTED]" [accepted]' in text
    assert "access_token=[REDACTED]" in text and '"POST /tts/bytes?api_key=[REDACTED] HTTP/1.1" 401' in text
    # one access line per request and upgrade, naming its request id and who called, never how
    lines = Counter(rf"INFO api\.access_log {what} {status} [0-9.]+ ms \(request {rid}, credential {credential}\)\n"
                    for what, rid, status, credential in answered)
    for line, times in lines.items():
        assert len(re.findall(line, text[start:])) == times, f"{line!r} is not {times} line(s) of:\n{text[start:]}"
    for secret in (KEY, WRONG_KEY, token, WRONG_TOKEN, *token.split(".")[1:], *WRONG_TOKEN.split(".")[1:]):
        assert secret not in text, f"{secret!r} is in the log"


# --- clients that hang up ----------------------------------------------------------------------------


def _hang_up(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, like a dead client
    sock.close()


def _wait_for(log: io.StringIO, start: int, pattern: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not re.search(pattern, log.getvalue()[start:]):
        assert time.monotonic() < deadline, f"no {pattern!r} in:\n{log.getvalue()[start:]}"
        time.sleep(0.05)
    time.sleep(0.5)  # whatever is logged right after (a traceback would be) lands too
    return log.getvalue()[start:]


def _assert_quiet(text: str) -> None:
    assert " ERROR " not in text and "Traceback" not in text and "Exception in ASGI" not in text, text


@pytest.mark.parametrize("path", ["/tts/bytes", "/tts/sse"])
def test_hanging_up_mid_stream_is_one_info_line(logged_gateway, path):
    server, log = logged_gateway
    start = len(log.getvalue())
    body = json.dumps(tts("Hello there. " * 30)).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    sock.sendall(f"POST {path}?api_key={KEY} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    assert sock.recv(64).startswith(b"HTTP/1.1 200")  # audio is streaming
    _hang_up(sock)
    text = _wait_for(log, start, rf"INFO api\.disconnects client disconnected: POST {path} \(request [0-9a-f-]+\)")
    _assert_quiet(text)
    assert text.count("client disconnected") == 1


@pytest.mark.parametrize("path", ["/tts/bytes", "/tts/sse"])
def test_hanging_up_mid_body_is_one_info_line(logged_gateway, path):
    server, log = logged_gateway
    start = len(log.getvalue())
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: 5000\r\n\r\n".encode() + b'{"model_id": "sonic-3", ')
    time.sleep(0.2)
    sock.close()
    text = _wait_for(log, start, rf"client disconnected: POST {path}")
    _assert_quiet(text)
    assert text.count("client disconnected") == 1


def test_a_websocket_client_vanishing_under_busy_contexts_is_quiet(logged_gateway):
    server, log = logged_gateway
    start = len(log.getvalue())
    ws = connect(server.ws_url + f"/tts/websocket?api_key={KEY}")
    for i in range(4):
        ws.send(json.dumps({**tts("Hello there. " * 30), "context_id": f"busy-{i}", "continue": False}))
    assert json.loads(ws.recv(timeout=60))["type"] == "chunk"
    _hang_up(ws.socket)
    text = _wait_for(log, start, r"INFO api\.connection ws \S+ closed by client")
    _assert_quiet(_wait_for(log, start, r"INFO api\.connection ws \S+ closed\n"))
    assert len(re.findall(r"closed by client", text)) == 1


# --- one access line per request ---------------------------------------------------------------------


def test_each_http_request_is_one_access_line_with_the_route_not_the_path(logged_gateway):
    server, log = logged_gateway
    start = len(log.getvalue())
    long_path = "/no/such/" + "p" * 500
    with httpx.Client(base_url=server.url, timeout=60) as http:
        voice = http.get(f"/voices/{DEFAULT_VOICE_ID}", headers={"X-API-Key": KEY})
        missing = http.get(long_path, params={"q": "client-chosen"})
        wrong_method = http.put(f"/voices/{DEFAULT_VOICE_ID}", headers={"X-API-Key": KEY})
        health = http.get("/health")
    statuses = (voice.status_code, missing.status_code, wrong_method.status_code, health.status_code)
    assert statuses == (200, 404, 405, 200)
    text = _wait_for(log, start, r"api\.access_log http GET /health ")
    lines = [line for line in text.splitlines() if " api.access_log " in line]  # (uvicorn's own is on here)
    assert len(lines) == 4, lines  # one each, in order
    assert re.search(rf"http GET /voices/\{{voice_id\}} 200 [0-9.]+ ms \(request \S+, credential {key_id(KEY)}\)$",
                     lines[0]) and DEFAULT_VOICE_ID not in lines[0]
    # a path no route matches is cut short; the query string is never logged
    bounded = long_path[:64] + f"...({len(long_path) - 64} more)"
    assert lines[1].endswith(f"http GET {bounded} 404 " + lines[1].split(" 404 ")[1])
    assert f"(request {missing.headers['x-request-id']}, credential -)" in lines[1] and "client-chosen" not in lines[1]
    assert f"http PUT /voices/{{voice_id}} 405 " in lines[2]
    assert f"(request {wrong_method.headers['x-request-id']}, credential -)" in lines[2]
    assert all(" INFO api.access_log " in line for line in lines[:3]), lines
    # a successful probe is a DEBUG line: an orchestrator's polling must not bury the traffic
    assert " DEBUG api.access_log http GET /health 200 " in lines[3]


# --- what a client sends cannot forge a line -------------------------------------------------------------

FORGED = "2026-12-01 00:00:00,000 ERROR api.auth FORGED: admin key accepted"


def test_client_values_cannot_forge_a_log_line_or_make_a_huge_one(logged_gateway):
    server, log = logged_gateway
    start = len(log.getvalue())
    context_id = "x\n" + FORGED
    with connect(server.ws_url + f"/tts/websocket?api_key={KEY}", max_size=None) as ws:
        # no text yet: the context opens without a voice lookup, and its line quotes both ids
        ws.send(json.dumps({**tts(""), "context_id": context_id, "continue": True,
                            "voice": {"mode": "id", "id": "V\n" + FORGED}}))
        ws.send(json.dumps({"context_id": context_id, "cancel": True}))
        ws.send(json.dumps({**tts(), "context_id": "huge", "voice": {"mode": "id", "id": "V\n" + "A" * 900_000}}))
        refused = json.loads(ws.recv(timeout=60))
    assert refused["type"] == "error" and refused["context_id"] == "huge" and refused["status_code"] == 400
    assert refused["message"].startswith("voice.id: must be at most 256 characters")
    text = _wait_for(log, start, r"cancelled")
    assert "opened (voice V\\n" + FORGED in text  # the opened line, with both ids escaped
    for line in text.splitlines():
        assert not line.startswith(FORGED) and len(line) < MAX_MESSAGE_CHARS + 300, line[:200]
