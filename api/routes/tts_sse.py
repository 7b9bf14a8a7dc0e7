"""POST /tts/sse: ``event: chunk`` / ``timestamps`` / ``phoneme_timestamps`` / ``done`` frames, then the body ends.

Errors before the first event are HTTP errors; later ones are an ``event: error`` frame, after
which the body ends (the SDKs read until the body closes, protocol 4.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator

import numpy as np
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from api.audio import AudioSink
from api.errors import error_event
from api.protocol.events import ChunkEvent, DoneEvent, split_audio, sse_frame
from api.protocol.requests import parse_tts_request
from api.routes._common import note_mid_stream_failure, primed, read_body, runtime_of, since_start, start_request
from api.segment_timing import check_timing_request, segment_timing_events, wants_timing


async def endpoint(request: Request) -> Response:
    rid = start_request(request)
    rt = runtime_of(request)
    principal = await rt.auth.authenticate(request)
    req = parse_tts_request(await read_body(request), sse=True, request_id=rid)
    svc = rt.service
    job = await svc.prepare(req)
    await check_timing_request(req, job.language)
    cid, width = req.context_id, req.output_format.unit_bytes
    rt.metrics.requests.labels("sse").inc()

    async def events() -> AsyncIterator[bytes]:
        # the stream's place is taken when the first event is awaited (a refusal is still a 429)
        with svc.admission.stream(principal.subject) as ticket, svc.stream_timing("sse", continuous=True) as timing:
            sink = AudioSink(req.output_format)
            since = time.perf_counter()
            for i, segment in enumerate(job.segments):
                offset_s = sink.samples_in / svc.sample_rate_hz
                pieces: list[np.ndarray] = []  # the segment's PCM, kept only for its timing events
                # aclosing: closing this generator mid-segment (client gone) aborts the engine request now
                async with contextlib.aclosing(svc.speak(segment, job.prefix, job.sampling, f"{rid}:{i}", job.volume,
                                                           timing=timing, speed=job.speed)) as chunks:
                    async for pcm in chunks:
                        ticket.mark_spoke()
                        if wants_timing(req):
                            pieces.append(pcm)
                        units = await asyncio.to_thread(sink.push_units, pcm)
                        now = time.perf_counter()
                        for piece in (p for unit in units for p in split_audio(unit, width, cid)):
                            yield sse_frame(ChunkEvent(piece, step_time_ms=(now - since) * 1000.0, context_id=cid))
                        since = now
                # the segment's resampler tail now, not with the next segment's first audio: the same
                # samples as /tts/bytes and the WebSocket (each segment resampled on its own)
                units = await asyncio.to_thread(sink.end_segment_units)
                now = time.perf_counter()
                for piece in (p for unit in units for p in split_audio(unit, width, cid)):
                    yield sse_frame(ChunkEvent(piece, step_time_ms=(now - since) * 1000.0, context_id=cid))
                since = now
                for event in await segment_timing_events(segment, pieces, svc.sample_rate_hz, offset_s, req, cid):
                    yield sse_frame(event)
            tail = await asyncio.to_thread(sink.finish_units)
            for piece in (p for unit in tail for p in split_audio(unit, width, cid)):
                yield sse_frame(ChunkEvent(piece, step_time_ms=0.0, context_id=cid))
            yield sse_frame(DoneEvent(context_id=cid))

    def in_band(exc: Exception) -> bytes:  # after 200 went out, errors travel as an event
        note_mid_stream_failure(f"sse {rid}", exc)
        event = error_event(exc, rid, cid)
        rt.metrics.errors.labels("sse", event.error_code).inc()  # the code the client reads
        return sse_frame(event)

    stream = await primed(request, events(), on_error=in_band)
    rt.metrics.first_audio.labels("sse").observe(since_start(request))
    return StreamingResponse(stream, media_type="text/event-stream", headers={"cache-control": "no-cache", "x-request-id": rid})
