"""GET /playground: the browser playground (static files in ``api/playground``, no build step).

    GET /playground            -> 308 to /playground/ (so the page's relative URLs resolve under it)
    GET /playground/           -> index.html
    GET /playground/{asset}    -> one of the files shipped in api/playground (a fixed list, read once)

The page holds no secret and needs no credential: it asks the server itself (``GET /voices``)
whether authentication is on and then asks the user for a key. Every answer carries a strict
Content-Security-Policy: scripts and styles only from this origin (no inline code, no eval),
network only to this origin (``'self'`` covers ws:/wss: to the same host in CSP Level 3), no
frames, no plugins, no form posts; the microphone only for this origin (voice cloning).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from api.errors import NotFoundError

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent / "playground"
INDEX = "index.html"

#: Content types by suffix; a file with another suffix is not served (nothing else ships).
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "media-src 'self' blob:",  # the recorded clip's preview before it is uploaded
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
])

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Permissions-Policy": "microphone=(self), camera=(), geolocation=()",
    "Cross-Origin-Opener-Policy": "same-origin",
    # revalidate every time (the ETag makes that a 304): a new server version is seen at once
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


@lru_cache(maxsize=1)
def assets() -> dict[str, Asset]:
    """Every servable file under ROOT by its path relative to it ("js/main.js"), read once."""
    found: dict[str, Asset] = {}
    for path in sorted(ROOT.rglob("*")):
        content_type = CONTENT_TYPES.get(path.suffix)
        if not path.is_file() or content_type is None:
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        found[path.relative_to(ROOT).as_posix()] = Asset(body, content_type, etag)
    logger.debug("playground: %d assets under %s", len(found), ROOT)
    return found


def _serve(request: Request, name: str) -> Response:
    asset = assets().get(name)
    if asset is None:
        raise NotFoundError(f"no playground file {name!r}")
    headers = {**SECURITY_HEADERS, "ETag": asset.etag}
    if asset.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.content_type, headers=headers)


async def redirect(request: Request) -> Response:
    # relative, so it stays right behind a proxy that mounts the server under a path prefix
    return RedirectResponse("playground/", status_code=308, headers=SECURITY_HEADERS)


async def index(request: Request) -> Response:
    return _serve(request, INDEX)


async def asset(request: Request) -> Response:
    return _serve(request, request.path_params["name"])


def routes() -> list[BaseRoute]:
    return [
        Route("/playground", redirect, methods=["GET", "HEAD"]),
        Route("/playground/", index, methods=["GET", "HEAD"]),
        Route("/playground/{name:path}", asset, methods=["GET", "HEAD"]),
    ]
