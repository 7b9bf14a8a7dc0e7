"""api/disconnects.py on a real uvicorn (the production configuration) with small apps that do what
the routes do: a client that hangs up mid-body, mid-stream or under a WebSocket's sends is one
INFO line and no ERROR; a real error is still an ERROR."""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import struct
import threading
import time

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from api.disconnects import DisconnectMiddleware, unless_client_leaves
from api.logging_setup import configure_logging
from api.server import uvicorn_config
from api.settings import Settings
from tests.ports import free_port

log = logging.getLogger("tests.disconnects")
second_send_done = threading.Event()


async def body(request: Request):
    await request.body()  # the client hangs up before the body is complete
    return PlainTextResponse("never")


async def stream(request: Request):
    async def forever():
        while True:
            yield b"x" * 1024
            await asyncio.sleep(0.01)

    return StreamingResponse(forever())


async def broken(request: Request):
    raise ValueError("a real bug")


async def ws(websocket: WebSocket):
    """Like api.connection: contexts send without reading; each treats WebSocketDisconnect as 'gone'."""
    await websocket.accept()
    for _ in range(3):  # more than one context notices the client is gone
        try:
            while True:
                await websocket.send_text("x" * 1024)
                await asyncio.sleep(0.01)
        except WebSocketDisconnect as exc:
            log.info("context saw the client go (code %s)", exc.code)
        except Exception:
            log.exception("context failed")
    second_send_done.set()


@pytest.fixture(scope="module")
def server():
    app = Starlette(routes=[Route("/body", body, methods=["POST"]), Route("/stream", stream),
                            Route("/broken", broken), WebSocketRoute("/ws", ws)],
                    middleware=[Middleware(DisconnectMiddleware)])
    port = free_port()
    srv = uvicorn.Server(uvicorn_config(Settings(), app, host="127.0.0.1", port=port))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.02)
    yield port
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def captured():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream_ = io.StringIO()
    configure_logging("INFO", stream=stream_)
    yield stream_
    root.handlers[:] = handlers
    root.setLevel(level)


def wait_for(stream_: io.StringIO, text: str, count: int = 1, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while stream_.getvalue().count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} in:\n{stream_.getvalue()}"
        time.sleep(0.02)
    time.sleep(0.2)  # anything logged right after (e.g. uvicorn's own traceback) lands too
    return stream_.getvalue()


def hang_up(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, like a dead client
    sock.close()


def assert_quiet(text: str) -> None:
    assert " ERROR " not in text and "Traceback" not in text, text


def test_hanging_up_mid_body_is_one_info_line(server, captured):
    sock = socket.create_connection(("127.0.0.1", server))
    sock.sendall(b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"{" * 10)
    time.sleep(0.1)
    sock.close()
    text = wait_for(captured, "client disconnected: POST /body")
    assert_quiet(text)
    assert text.count("client disconnected") == 1


def test_hanging_up_mid_stream_is_one_info_line(server, captured):
    sock = socket.create_connection(("127.0.0.1", server))
    sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    assert sock.recv(100).startswith(b"HTTP/1.1 200")
    hang_up(sock)
    text = wait_for(captured, "client disconnected: GET /stream")
    assert_quiet(text)
    assert text.count("client disconnected") == 1


def test_sends_after_a_websocket_client_vanished_are_disconnects(server, captured):
    second_send_done.clear()
    sock = socket.create_connection(("127.0.0.1", server))
    sock.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    assert sock.recv(100).startswith(b"HTTP/1.1 101")
    hang_up(sock)
    assert second_send_done.wait(30)
    text = wait_for(captured, "context saw the client go", count=3)
    assert_quiet(text)


def test_a_real_error_is_still_an_error(server, captured):
    assert httpx.get(f"http://127.0.0.1:{server}/broken", timeout=30).status_code == 500
    text = wait_for(captured, "Exception in ASGI application")
    assert "ValueError: a real bug" in text and "client disconnected" not in text


# --- the real gateway: a client gone before its first audio -----------------------------------------

SPEAK = {"model_id": "sonic-3", "transcript": "Hello there.",
         "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}}


def until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("path, body", [
    ("/tts/bytes", SPEAK),
    ("/tts/sse", SPEAK),
    ("/v1/audio/speech", {"model": "tts-1", "voice": "alloy", "input": "Hello there.", "response_format": "pcm"}),
])
def test_a_client_gone_before_its_first_audio_gives_back_its_engine_request_and_stream(
        gateway, default_voice_id, captured, monkeypatch, path, body):
    """The engine is busy and the request waits for its first audio; its client gives up. Its engine
    request is aborted and its stream place given back at once (not when its first audio would have
    come), and the request is a disconnect: one INFO line and a 499 in the access log, no ERROR."""
    import json

    rt = gateway.runtime
    svc = rt.service
    held: list[str] = []  # the engine requests waiting for a first frame that does not come
    release = threading.Event()  # lets them end if the server never closes them (the test failed)

    async def first_frame_held_back(request):
        held.append(request.request_id)
        try:
            while not release.is_set():
                await asyncio.sleep(0.01)
            return
            yield  # an async generator, like the engine's
        finally:
            held.remove(request.request_id)

    monkeypatch.setattr(rt.engine, "generate", first_frame_held_back)
    if "voice" not in body:
        body = {**body, "voice": default_voice_id}
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    try:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        until(lambda: held and svc.admission.open_streams == 1 and svc.in_flight == 1, 30,
              "the request to wait for its first audio")
        sock.close()  # the client gives up (curl -m)
        until(lambda: not held and svc.admission.open_streams == 0 and svc.in_flight == 0, 2.0,
              "the engine request and the stream place to be given back")
        text = wait_for(captured, f"client disconnected: POST {path} (request ")
        text = wait_for(captured, f"http POST {path} 499 ")
    finally:
        release.set()
        sock.close()
    assert_quiet(text)
    assert text.count("client disconnected") == 1


# --- unless_client_leaves, on its own --------------------------------------------------------------


def request_whose_client(leaves: asyncio.Event) -> Request:
    """A request whose body was read: its next message is http.disconnect once ``leaves`` is set."""
    async def receive():
        await leaves.wait()
        return {"type": "http.disconnect"}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)


async def slow_to_stop(stopped: list) -> None:
    """Work whose cancel takes a moment (a clone's running step, an engine abort)."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.2)
        stopped.append(True)
        raise


async def test_work_is_cancelled_when_the_client_leaves_first():
    leaves, stopped = asyncio.Event(), []
    call = asyncio.create_task(unless_client_leaves(request_whose_client(leaves), slow_to_stop(stopped)))
    await asyncio.sleep(0.05)
    leaves.set()
    with pytest.raises(ClientDisconnect):
        await call
    assert stopped == [True]  # the work had stopped when ClientDisconnect came


async def test_the_result_comes_back_when_the_client_stays():
    async def work():
        return 42

    assert await unless_client_leaves(request_whose_client(asyncio.Event()), work()) == 42


async def test_a_cancel_of_the_caller_while_the_work_stops_is_a_cancel():
    """The handler cancelled (a server shutdown) while it waits for the work's cancel to finish:
    CancelledError, not the work's unfinished state read as a result."""
    leaves, stopped = asyncio.Event(), []
    call = asyncio.create_task(unless_client_leaves(request_whose_client(leaves), slow_to_stop(stopped)))
    await asyncio.sleep(0.05)
    leaves.set()
    await asyncio.sleep(0.05)  # the client is gone: the work is being cancelled, and takes 0.2 s
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
