"""Cartesia endpoints the SDKs call that this server does not implement.

Each answers 501 ``not_implemented`` in the protocol's error shape, naming the feature, so a client
learns what is missing instead of a 404 "no such endpoint", or a 405 from a neighbouring route
(``POST /voices/localize`` would otherwise meet ``/voices/{voice_id}``, which takes no POST). A 501
carries ``x-should-retry: false``: the SDKs do not retry it. STT, agents, datasets and fine-tunes
are not TTS and stay 404 (protocol section 2.1).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from api.errors import NotServedError

#: (path, method, what it does, the SDK call)
NOT_SERVED: tuple[tuple[str, str, str, str], ...] = (
    ("/voices/localize", "POST", "voice localization", "voices.localize"),
    ("/voices/{voice_id}/accents", "PATCH", "adding accents to a voice", "voices.add_accents"),
    ("/voices/{voice_id}/accents/{accent_id}", "DELETE", "removing an accent from a voice", "voices.delete_accent"),
    ("/infill/bytes", "POST", "infill", "tts.infill"),
    ("/voice-changer/bytes", "POST", "the voice changer", "voice_changer.generate"),
    ("/voice-changer/sse", "POST", "the voice changer", "voice_changer.generate_sse"),
)


def _refusal(what: str, call: str):
    async def endpoint(request: Request) -> Response:
        raise NotServedError(f"{request.method} {request.url.path}: {what} ({call}) is not served by this "
                             "Gepard server; it serves text to speech (/tts/*), voices, voice cloning and "
                             "pronunciation dictionaries")

    return endpoint


def routes() -> list[BaseRoute]:
    return [Route(path, _refusal(what, call), methods=[method]) for path, method, what, call in NOT_SERVED]
