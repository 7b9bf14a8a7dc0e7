"""Raw /tts/websocket helpers: message builders, a reader that checks every server message's
shape, and a wait for the engine to be idle (the live server's runtime is in this process)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import defaultdict
from typing import Any, Iterable, Optional

from websockets.asyncio.client import ClientConnection

RAW_S16_22K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}
REQUIRED_KEYS = ("type", "done", "status_code", "context_id")
TERMINAL = ("done", "error")
ONE_MIB = 1 << 20


def gen(context_id: str, transcript: str, voice: Any, *, cont: bool = True, **extra: Any) -> dict:
    """A generation message as the SDK context helpers send it (full config on every message)."""
    msg = {"context_id": context_id, "model_id": "sonic-3", "transcript": transcript, "voice": voice,
           "output_format": RAW_S16_22K, "continue": cont}
    msg.update(extra)
    return msg


async def send(ws: ClientConnection, msg: dict) -> None:
    await ws.send(json.dumps(msg))


async def recv(ws: ClientConnection, timeout: float = 10.0) -> dict:
    """The next server message, checked (``check_message``)."""
    return check_message(await asyncio.wait_for(ws.recv(), timeout))


def check_message(raw: str | bytes) -> dict:
    """One server message: a JSON text frame under 1 MiB with the four common keys, done exactly on
    terminal events, never audio on done."""
    assert isinstance(raw, str), "server messages must be text frames"
    assert len(raw.encode("utf-8")) < ONE_MIB
    msg = json.loads(raw)
    for key in REQUIRED_KEYS:
        assert key in msg, f"{key!r} missing from {short(msg)}"
    assert isinstance(msg["status_code"], int) and isinstance(msg["done"], bool)
    assert msg["done"] is (msg["type"] in TERMINAL), short(msg)
    if msg["type"] == "done":
        assert "data" not in msg  # LiveKit reads any "data" as audio
    return msg


async def read_until_terminal(ws: ClientConnection, context_ids: Iterable[str], timeout: float = 30.0) -> list[dict]:
    """Every message until each of ``context_ids`` got its done/error, in arrival order."""
    waiting = set(context_ids)
    out: list[dict] = []
    deadline = time.monotonic() + timeout
    while waiting:
        msg = await recv(ws, max(deadline - time.monotonic(), 0.01))
        out.append(msg)
        if msg["type"] in TERMINAL:
            waiting.discard(msg["context_id"])
    return out


async def read_for(ws: ClientConnection, seconds: float) -> list[dict]:
    """Whatever arrives within ``seconds`` (used to show that nothing more comes)."""
    out: list[dict] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            out.append(await recv(ws, left))
        except asyncio.TimeoutError:
            break
    return out


def by_context(messages: Iterable[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for msg in messages:
        groups[msg["context_id"]].append(msg)
    return dict(groups)


def audio_of(messages: Iterable[dict]) -> bytes:
    return b"".join(base64.b64decode(m["data"]) for m in messages if m["type"] == "chunk")


def short(msg: dict) -> dict:
    return {k: (f"<{len(v)} chars>" if k == "data" else v) for k, v in msg.items()}


def engine_idle(server, timeout_s: float = 3.0, hold_s: float = 0.5) -> bool:
    """True once the engine runs no request and no generation is in flight, and that holds for
    ``hold_s`` (so a next segment that starts after a gap would be caught)."""
    rt = server.runtime
    deadline = time.monotonic() + timeout_s
    idle_since: Optional[float] = None
    while time.monotonic() < deadline:
        if rt.engine.num_running == 0 and rt.service.in_flight == 0:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= hold_s:
                return True
        else:
            idle_since = None
        time.sleep(0.02)
    return False


def assert_ws_error(msg: dict, context_id: str, status: int, code: str, *needles: str) -> None:
    """``msg`` is the in-band error for ``context_id`` with this status and code, its message
    containing every needle."""
    assert msg["type"] == "error" and msg["done"] is True and msg["context_id"] == context_id, msg
    assert msg["status_code"] == status and msg["error_code"] == code, msg
    for needle in needles:
        assert needle in msg["message"], (needle, msg["message"])
