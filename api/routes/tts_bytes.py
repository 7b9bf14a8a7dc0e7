"""POST /tts/bytes: the whole transcript as one audio body (raw, wav or mp3), streamed as it is made.

Generation starts before the response does: the first audio bytes are awaited first, so any error
up to then (unknown voice, overload...) is a proper JSON error with its status. A failure after
that point aborts the connection (there is no in-band error channel on this route).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from api.audio import AudioSink
from api.protocol.requests import parse_tts_request
from api.routes._common import primed, read_body, runtime_of, start_request


async def endpoint(request: Request) -> Response:
    rid = start_request(request)
    rt = runtime_of(request)
    principal = await rt.auth.authenticate(request)
    req = parse_tts_request(await read_body(request), sse=False, request_id=rid)
    svc = rt.service
    job = await svc.prepare(req)
    rt.metrics.requests.labels("bytes").inc()
    t0 = time.perf_counter()

    async def audio() -> AsyncIterator[bytes]:
        # the stream's place is taken when the first audio is awaited (a refusal is still a 429)
        # and given back when the body ends or is abandoned
        with svc.admission.stream(principal.subject) as ticket, svc.stream_timing("bytes", continuous=True) as timing:
            sink = AudioSink(req.output_format)
            for i, segment in enumerate(job.segments):
                # aclosing: when this generator is closed mid-segment (client gone), the engine
                # request is aborted now rather than when the suspended generator is collected
                async with contextlib.aclosing(svc.speak(segment, job.prefix, job.sampling, f"{rid}:{i}", job.volume,
                                                           timing=timing)) as chunks:
                    async for pcm in chunks:
                        ticket.mark_spoke()
                        data = await asyncio.to_thread(sink.push, pcm)
                        if data:
                            yield data
            tail = await asyncio.to_thread(sink.finish)
            if tail:
                yield tail
            rt.metrics.audio_seconds.labels("bytes").inc(sink.samples_in / svc.sample_rate_hz)

    stream = await primed(audio())
    rt.metrics.first_audio.labels("bytes").observe(time.perf_counter() - t0)
    return StreamingResponse(stream, media_type=req.output_format.media_type, headers={"x-request-id": rid})
