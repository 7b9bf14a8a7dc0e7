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

import numpy as np
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from api.audio import AudioSink
from api.protocol.requests import EmptyTranscriptError, parse_tts_request
from api.routes._common import read_body, runtime_of, start_request


async def endpoint(request: Request) -> Response:
    rid = start_request(request)
    rt = runtime_of(request)
    await rt.auth.authenticate(request)
    req = parse_tts_request(await read_body(request), sse=False, request_id=rid)
    svc = rt.service
    svc.check_request(req)
    prefix = await svc.voice_prefix(req.voice_id)
    segments = svc.plan(req.transcript, req.effective_language, req.normalization)
    if not segments:
        raise EmptyTranscriptError("transcript: nothing to speak after normalisation")
    sampling, volume = svc.sampling(req), svc.volume(req)
    rt.metrics.requests.labels("bytes").inc()
    t0 = time.perf_counter()

    async def audio() -> AsyncIterator[bytes]:
        sink = AudioSink(req.output_format)
        for i, segment in enumerate(segments):
            # aclosing: when this generator is closed mid-segment (client gone), the engine
            # request is aborted now rather than when the suspended generator is collected
            async with contextlib.aclosing(svc.speak(segment, prefix, sampling, f"{rid}:{i}")) as chunks:
                async for pcm in chunks:
                    if volume != 1.0:
                        pcm = np.clip(pcm * volume, -1.0, 1.0)
                    data = await asyncio.to_thread(sink.push, pcm)
                    if data:
                        yield data
        tail = await asyncio.to_thread(sink.finish)
        if tail:
            yield tail
        rt.metrics.audio_seconds.labels("bytes").inc(sink.samples_in / svc.sample_rate_hz)

    body = audio()
    first = await body.__anext__()  # errors before the first byte become proper HTTP errors
    rt.metrics.first_audio.labels("bytes").observe(time.perf_counter() - t0)

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield first
            async for data in body:
                yield data
        finally:
            await body.aclose()  # client gone or done: abort the engine request, free the codec stream

    return StreamingResponse(stream(), media_type=req.output_format.media_type, headers={"x-request-id": rid})
