"""Helpers shared by the HTTP routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, AsyncIterator, Callable, Optional

from starlette.requests import Request

from api.app_state import runtime_of  # noqa: F401  (re-exported for routes)
from api.disconnects import unless_client_leaves
from api.errors import RequestTooLargeError, describe_error, is_mapped, new_request_id

if TYPE_CHECKING:
    from api.audio import AudioSink
    from api.synthesis import PreparedRequest, SynthesisService

logger = logging.getLogger(__name__)

MAX_JSON_BODY_BYTES = 1 << 20


def start_request(request: Request) -> str:
    """Name the request (its id goes in every log line and error body) and note when it started:
    its time to first audio counts from here (``since_start``), so authentication, the body read
    and the voice lookup are in it."""
    request_id = new_request_id()
    request.state.request_id = request_id
    request.state.started_at = time.perf_counter()
    return request_id


def since_start(request: Request) -> float:
    """Seconds since ``start_request(request)``."""
    return time.perf_counter() - request.state.started_at


def note_mid_stream_failure(what: str, exc: BaseException) -> None:
    """Log a stream's failure after its 200 went out, once. The in-band error event's lookup
    (``api.errors.describe_error``) already logs server failures (a WARNING line) and bugs (a
    traceback); only a client error found mid-stream, which it leaves alone, gets its line here."""
    if is_mapped(exc) and describe_error(exc, log=False).status_code < 500:
        logger.info("%s failed mid-stream: %s: %s", what, type(exc).__name__, exc)


async def read_body(request: Request, limit: int = MAX_JSON_BODY_BYTES) -> bytes:
    body = b""
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise RequestTooLargeError(f"request body is over {limit} bytes")
    return body


async def primed(
    request: Request, body: AsyncIterator[bytes], on_error: Optional[Callable[[Exception], bytes]] = None
) -> AsyncIterator[bytes]:
    """Await ``body``'s first item now, so that errors until then become proper HTTP errors, and
    return a stream of all its items for a StreamingResponse. ``request``'s body must have been read.

    A client that hangs up before the first item (queued behind a busy engine, say) closes ``body``
    at once, which aborts its engine request and gives back its stream place, and ClientDisconnect
    is raised: api.disconnects logs the one line, the access log a 499 (no answer was sent).
    After the first item the status line is gone: ``on_error`` turns a later failure into a last
    in-band item (SSE); without it the failure propagates and the server aborts the connection.
    Closing the stream (client gone, or done) closes ``body``, which aborts its engine requests.
    """
    async def first_item() -> bytes:
        return await body.__anext__()

    try:
        first = await unless_client_leaves(request, first_item())
    except BaseException:  # client gone, a refusal, an error, this handler cancelled: nothing is left open
        await body.aclose()
        raise

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield first
            async for item in body:
                yield item
        except Exception as exc:
            if on_error is None:
                raise
            yield on_error(exc)
        finally:
            await body.aclose()

    return stream()


async def encoded_audio(svc: "SynthesisService", job: "PreparedRequest", sink: "AudioSink", *, key: str, route: str,
                        request_id: str) -> AsyncIterator[bytes]:
    """A whole prepared transcript as encoded audio through ``sink``, for the one-body routes
    (``/tts/bytes``, ``/v1/audio/speech``): segment after segment, each piece as soon as it is encoded.
    Each segment ends with ``sink.end_segment()``: its resampler tail goes out with it (not with the
    next segment's first audio), and the samples are those the SSE and WebSocket routes make.

    The stream's admission place is taken when the first audio is awaited (a refusal is still an
    HTTP error) and given back when the body ends or is abandoned; closing this generator mid-segment
    (client gone) aborts the engine request now rather than when the generator is collected."""
    with svc.admission.stream(key) as ticket, svc.stream_timing(route, continuous=True) as timing:
        for i, segment in enumerate(job.segments):
            async with contextlib.aclosing(svc.speak(segment, job.prefix, job.sampling, f"{request_id}:{i}", job.volume,
                                                       timing=timing, speed=job.speed)) as chunks:
                async for pcm in chunks:
                    ticket.mark_spoke()
                    data = await asyncio.to_thread(sink.push, pcm)
                    if data:
                        yield data
            data = await asyncio.to_thread(sink.end_segment)
            if data:
                yield data
        tail = await asyncio.to_thread(sink.finish)
        if tail:
            yield tail
