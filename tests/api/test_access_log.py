"""api/access_log.py on a small Starlette app (the live gateway's lines: tests/api/routes/test_log_redaction.py):
one line per request or upgrade, whatever way it ends, with the id the client was given."""

from __future__ import annotations

import logging
import re

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from api.access_log import AccessLogMiddleware
from api.errors import error_response
from api.routes._common import start_request


async def plain(request: Request) -> Response:
    return PlainTextResponse("ok")


async def with_own_id(request: Request) -> Response:
    request.state.credential_id = "key:0123abcd"  # what Authenticator.authenticate leaves
    return JSONResponse({}, headers={"x-request-id": start_request(request)})


async def boom(request: Request) -> Response:
    raise RuntimeError("a bug")


async def on_error(request: Request, exc: Exception) -> Response:  # as api/app.py answers
    return error_response(exc, request.state.request_id)


async def ws_accept(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("hi")
    await websocket.close()


async def ws_refuse(websocket: WebSocket) -> None:
    await websocket.close(code=1008)


@pytest.fixture
def client():
    app = Starlette(routes=[Route("/plain", plain), Route("/voices/{voice_id}", with_own_id), Route("/boom", boom),
                            Route("/ready", plain), Route("/metrics", boom),
                            WebSocketRoute("/ws/ok", ws_accept), WebSocketRoute("/ws/no", ws_refuse)],
                    middleware=[Middleware(AccessLogMiddleware)], exception_handlers={Exception: on_error})
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def access_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "api.access_log"]


LINE = re.compile(r"(http|ws) (\S+) (\S+) (\d+) [0-9.]+ ms \(request ([0-9a-f-]+), credential (\S+)\)")


def test_each_request_is_one_line_with_the_id_its_client_holds(client, caplog):
    caplog.set_level(logging.INFO, logger="api.access_log")
    own = client.get("/voices/zzz-voice?api_key=never-logged")
    failed = client.get("/boom")
    assert client.get("/plain").status_code == 200 and client.get("/missing").status_code == 404
    lines = access_lines(caplog)
    assert len(lines) == 4, lines
    parsed = [LINE.fullmatch(line).groups() for line in lines]
    assert parsed[0] == ("http", "GET", "/voices/{voice_id}", "200", own.headers["x-request-id"], "key:0123abcd")
    # an unexpected error: 500, and the request id its error body names
    assert failed.status_code == 500 and parsed[1] == ("http", "GET", "/boom", "500", failed.json()["request_id"], "-")
    assert parsed[2][:4] == ("http", "GET", "/plain", "200") and parsed[3][:4] == ("http", "GET", "/missing", "404")
    assert parsed[2][4] != parsed[3][4]  # a response without an id of its own still gets one in the log
    assert "never-logged" not in " ".join(lines) and "zzz-voice" not in lines[0]


def test_an_upgrade_is_one_line_when_it_is_answered_not_one_per_frame(client, caplog):
    caplog.set_level(logging.INFO, logger="api.access_log")
    with client.websocket_connect("/ws/ok") as ws:
        assert ws.receive_text() == "hi"
    with pytest.raises(WebSocketDisconnect):
        with client.websocket_connect("/ws/no"):
            pass
    parsed = [LINE.fullmatch(line).groups()[:4] for line in access_lines(caplog)]
    assert parsed == [("ws", "GET", "/ws/ok", "101"), ("ws", "GET", "/ws/no", "403")]


def test_successful_probes_and_scrapes_are_debug_lines_failing_ones_info(client, caplog):
    caplog.set_level(logging.DEBUG, logger="api.access_log")
    client.get("/ready")
    client.get("/metrics")  # fails: a scrape that fails is worth a line
    client.get("/plain")
    levels = {LINE.fullmatch(r.getMessage()).group(3): r.levelno for r in caplog.records if r.name == "api.access_log"}
    assert levels == {"/ready": logging.DEBUG, "/metrics": logging.INFO, "/plain": logging.INFO}
