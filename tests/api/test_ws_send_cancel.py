"""A cancel must stop a WebSocket context whatever moment it lands, also in the loop step where a send
completes.

On Python 3.11, ``asyncio.wait_for`` returns the inner result when the task is cancelled in the step
where the inner send completes: the cancel is lost. A context's worker that sent through it then
ignored its client's cancel and spoke to its end, while the reader, waiting for the worker to stop,
read nothing more from that socket (the soak caught it as audio 9 s after a cancel). These tests
drive a real Starlette WebSocket over an ASGI channel the test holds, and cancel at every loop step
around a send's completion.
"""

from __future__ import annotations

import asyncio

import pytest
from starlette.websockets import WebSocket

from api.connection import ClientNotReadingError, WsConnection, WsLimits
from api.ws_context import ContextState, WsContext
from api.protocol.events import DoneEvent, FlushDoneEvent


class HeldChannel:
    """The ASGI side of one WebSocket: every ``websocket.send`` waits until the test releases it."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.release: asyncio.Future = asyncio.get_running_loop().create_future()
        self.waiting = asyncio.Event()

    async def receive(self) -> dict:
        return {"type": "websocket.connect"}

    async def send(self, message: dict) -> None:
        if message["type"] == "websocket.send":
            self.waiting.set()
            await self.release
            self.sent.append(message)


async def accepted_connection(channel: HeldChannel) -> WsConnection:
    ws = WebSocket({"type": "websocket", "path": "/tts/websocket", "headers": []}, channel.receive, channel.send)
    await ws.accept()
    return WsConnection(ws, service=None, limits=WsLimits(send_timeout_s=10.0))  # send() needs no service


async def outcome_of_cancel_at(step: int) -> tuple[bool, str]:
    """Release a pending send, let ``step`` loop steps pass, then cancel the sending task (if it is
    still running). Returns (cancel was requested, how the task ended)."""
    channel = HeldChannel()
    conn = await accepted_connection(channel)
    task = asyncio.create_task(conn.send(DoneEvent(context_id="c")))
    await channel.waiting.wait()
    channel.release.set_result(None)
    for _ in range(step):
        await asyncio.sleep(0)
    requested = not task.done() and task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return requested, "cancelled"
    return requested, "returned"


async def test_a_cancel_at_any_step_around_a_send_completing_cancels_the_sender():
    seen = []
    for step in range(8):
        requested, ended = await outcome_of_cancel_at(step)
        seen.append((step, requested, ended))
        if requested:
            assert ended == "cancelled", f"cancel requested {step} loop steps after the send was released: {seen}"
    # the sweep really covered both sides: cancels that landed, and a send that finished first
    assert any(requested for _, requested, _ in seen) and not all(requested for _, requested, _ in seen), seen


async def test_the_send_timeout_still_fires_for_a_client_that_reads_nothing():
    channel = HeldChannel()  # never released: the client's socket buffer stays full
    conn = await accepted_connection(channel)
    conn.limits = WsLimits(send_timeout_s=0.05)
    with pytest.raises(ClientNotReadingError) as info:
        await conn.send(DoneEvent(context_id="c"))
    assert info.value.code == 1008
    assert conn._stalled
    await conn._stall_task  # closes the socket (1008) through the same held channel
    assert channel.sent == []


async def test_a_cancelled_context_sends_nothing_even_if_its_task_missed_the_cancel():
    """The state guard behind the task cancel: a worker that reaches a send after its context was
    cancelled stops there (CancelledError) and sends nothing."""
    channel = HeldChannel()
    channel.release.set_result(None)
    conn = await accepted_connection(channel)
    ctx = WsContext.__new__(WsContext)  # only the send path: no worker, engine or ticket
    ctx.conn, ctx.state, ctx.context_id = conn, ContextState.OPEN, "c"
    await ctx._send(FlushDoneEvent(flush_id=1, context_id="c"))
    assert len(channel.sent) == 1
    ctx.state = ContextState.CANCELLED
    with pytest.raises(asyncio.CancelledError):
        await ctx._send(DoneEvent(context_id="c"))
    assert len(channel.sent) == 1


def context_with_worker(conn: WsConnection, worker, finished: list) -> WsContext:
    """A WsContext around ``worker`` (no engine or ticket); ``finished`` records context_finished."""
    ctx = WsContext.__new__(WsContext)
    ctx.conn, ctx.state, ctx.context_id, ctx.request_id, ctx._timer = conn, ContextState.OPEN, "c", "conn:c", None
    ctx._hold_timer = None
    conn.context_finished = finished.append  # the connection's bookkeeping, recorded
    ctx.task = asyncio.create_task(worker(ctx))
    return ctx


async def test_a_cancel_waits_for_the_work_to_stop_then_finishes_the_context():
    conn = await accepted_connection(HeldChannel())
    finished: list = []
    stopped = []

    async def worker(ctx):
        try:
            await asyncio.sleep(3600)  # speaking
        finally:
            await asyncio.sleep(0.01)  # the engine abort and codec close
            stopped.append(True)

    ctx = context_with_worker(conn, worker, finished)
    await asyncio.sleep(0)
    await ctx.cancel()
    assert stopped == [True] and finished == [ctx] and ctx.state is ContextState.CANCELLED


async def test_a_context_stuck_stopping_holds_the_reader_only_for_the_cancel_wait(monkeypatch):
    """A worker whose stopping hangs (say an engine abort that never returns) may not hold up the
    socket's reader: the cancel returns after CANCEL_WAIT_S, and the context is finished (its stream
    slot released) when the worker does stop, not before."""
    import api.ws_context

    monkeypatch.setattr(api.ws_context, "CANCEL_WAIT_S", 0.05)
    conn = await accepted_connection(HeldChannel())
    finished: list = []
    unstick = asyncio.Event()

    async def worker(ctx):
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.shield(unstick.wait())  # deaf to the cancel until the test lets it go
            conn.context_finished(ctx)

    ctx = context_with_worker(conn, worker, finished)
    await asyncio.sleep(0)
    await asyncio.wait_for(ctx.cancel(), timeout=30)  # returns: the reader goes on
    assert not ctx.task.done() and finished == [] and ctx.state is ContextState.CANCELLED
    unstick.set()
    await asyncio.wait({ctx.task})
    assert ctx.task.cancelled() and finished == [ctx]
