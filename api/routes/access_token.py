"""POST /access-token: an API key mints a short-lived token with grants (protocol 2.6)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.protocol.requests import parse_access_token_request
from api.routes._common import read_body, runtime_of, start_request


async def endpoint(request: Request) -> Response:
    rid = start_request(request)
    rt = runtime_of(request)
    principal = await rt.auth.authenticate(request, required_grant=None)
    body = parse_access_token_request(await read_body(request), request_id=rid)
    grants = body.grants.model_dump() if body.grants is not None else None
    token = rt.auth.issue_token(principal, grants, body.expires_in)
    return JSONResponse({"token": token})
