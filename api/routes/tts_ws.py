"""WS /tts/websocket: authenticate the upgrade, then hand the socket to a WsConnection."""

from __future__ import annotations

from starlette.websockets import WebSocket

from api.connection import WsConnection, WsLimits
from api.errors import error_response, new_request_id
from api.routes._common import runtime_of


async def endpoint(websocket: WebSocket) -> None:
    rt = runtime_of(websocket)
    # the access log's id for this upgrade (api/access_log.py): a denial's x-request-id, else the socket's id
    request_id = getattr(websocket.state, "request_id", None) or new_request_id()
    try:
        principal = await rt.auth.authenticate(websocket)
    except Exception as exc:
        # reject the upgrade with the HTTP status (401/403/503) when the server supports denial
        # responses; otherwise a plain close before accept (the server answers 403)
        response = error_response(exc, request_id)
        rt.metrics.error("ws", exc)  # counted either way: the client is refused with this code
        if "websocket.http.response" in websocket.scope.get("extensions", {}):
            await websocket.send_denial_response(response)
        else:
            await websocket.close(code=1008)
        return
    rt.metrics.ws_connections.inc()
    try:
        # the principal stays with the socket: each new context re-checks it (a removed key or an
        # expired token opens nothing new on a socket that outlived it)
        conn = WsConnection(websocket, rt.service, WsLimits.from_settings(rt.settings), rt.metrics,
                            client_key=principal.subject, lifecycle=rt.lifecycle, principal=principal, auth=rt.auth,
                            connection_id=request_id)
        await conn.run()
    finally:
        rt.metrics.ws_connections.dec()
