"""POST /tts/bytes: the whole transcript as one audio body (raw, wav or mp3), streamed as it is made.

Generation starts before the response does: the first audio bytes are awaited first, so any error
up to then (unknown voice, overload...) is a proper JSON error with its status. A failure after
that point aborts the connection (there is no in-band error channel on this route).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from api.audio import AudioSink
from api.protocol.requests import parse_tts_request
from api.routes._common import encoded_audio, primed, read_body, runtime_of, since_start, start_request


async def endpoint(request: Request) -> Response:
    rid = start_request(request)
    rt = runtime_of(request)
    principal = await rt.auth.authenticate(request)
    req = parse_tts_request(await read_body(request), sse=False, request_id=rid)
    svc = rt.service
    job = await svc.prepare(req)
    rt.metrics.requests.labels("bytes").inc()

    sink = AudioSink(req.output_format)
    stream = await primed(request, encoded_audio(svc, job, sink, key=principal.subject, route="bytes", request_id=rid))
    rt.metrics.first_audio.labels("bytes").observe(since_start(request))
    return StreamingResponse(stream, media_type=req.output_format.media_type, headers={"x-request-id": rid})
