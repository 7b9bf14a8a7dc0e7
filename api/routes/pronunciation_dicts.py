"""Pronunciation dictionaries (the SDKs' ``pronunciation_dicts`` resource):

    GET    /pronunciation-dicts/        ?limit&starting_after&ending_before -> {"data", "has_more", "next_page"}
    POST   /pronunciation-dicts/        JSON {name, items?}                  -> PronunciationDict
    GET    /pronunciation-dicts/{id}                                         -> PronunciationDict
    PATCH  /pronunciation-dicts/{id}    JSON {name?, items?} (items replace the list; null: unchanged)
    DELETE /pronunciation-dicts/{id}                                         -> 204

``PronunciationDict = {id, name, owner_id, pinned, created_at, items: [{text, alias, case_sensitive?}]}``.
The paths also answer without the trailing slash. Reads need any credential (a token needs the
``tts`` grant, as the dictionaries serve TTS requests); writes need an API key. Entries are
sounds-like spellings only: an IPA alias is refused with 400 ``ipa_not_supported``
(voices/dictionaries.py). A create or update body may be up to MAX_DICT_BODY_BYTES (8 MiB), so a
dictionary within the item limits always fits, however its text is encoded. Every dictionary is
visible to every credential of this server, as voices are; ``owner_id`` records the credential
that created it (``key:<8 hex>``, or ``anonymous``).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from api.auth import Principal
from api.protocol import InvalidJsonError
from api.protocol.json_body import load_json
from api.routes._common import read_body, runtime_of, start_request
from api.routes.voices import PageQuery
from voices.dictionaries import DictionaryStore, parse_items
from voices.errors import InvalidPronunciationDictError

logger = logging.getLogger(__name__)

CREATE_FIELDS = frozenset({"name", "items"})
UPDATE_FIELDS = frozenset({"name", "items"})

#: Largest create or update body. The most a dictionary within the limits can take as JSON: every
#: character of text, alias and name an astral one written as an escaped surrogate pair ("\ud83d\ude00",
#: 12 bytes), each entry with its keys and case_sensitive (46 bytes more): 6.2 MB for 1000 entries
#: of 256 + 256 characters. 8 MiB leaves room for indentation; the shared 1 MiB would refuse (413) a
#: dictionary of long non-ASCII entries that the item limits accept.
MAX_DICT_BODY_BYTES = 8 << 20


async def _authorise(request: Request, write: str | None = None) -> Principal:
    principal = await runtime_of(request).auth.authenticate(request)
    if write is not None:
        principal.require_api_key(write)
    return principal


def _store(request: Request) -> DictionaryStore:
    return runtime_of(request).voices.dictionaries


async def _json_object(request: Request, what: str, allowed: frozenset[str]) -> dict[str, Any]:
    body = await read_body(request, MAX_DICT_BODY_BYTES)
    data = load_json(body, what) if body.strip() else {}  # bounded depth, precise 400s
    if not isinstance(data, dict):
        raise InvalidJsonError(f"{what} must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidPronunciationDictError(f"unknown field(s) {unknown}; this body takes {sorted(allowed)}",
                                            field=unknown[0])
    return data


async def list_dicts(request: Request) -> Response:
    start_request(request)
    await _authorise(request)
    paging = PageQuery.of(request)
    page = await _store(request).list(limit=paging.limit, starting_after=paging.starting_after,
                                      ending_before=paging.ending_before)
    return JSONResponse(page.to_api_dict())


async def create_dict(request: Request) -> Response:
    rid = start_request(request)
    principal = await _authorise(request, write="create pronunciation dictionaries")
    data = await _json_object(request, "pronunciation dictionary", CREATE_FIELDS)
    if "name" not in data:
        raise InvalidPronunciationDictError("name: field required", field="name")
    items = parse_items(data.get("items"))
    d = await _store(request).create(name=data["name"], items=items, owner_id=principal.subject)
    logger.info("pronunciation dictionary %s created by %s (%d entries; request %s)", d.id, principal.subject,
                len(d.items), rid)
    return JSONResponse(d.to_api_dict())


async def get_dict(request: Request) -> Response:
    start_request(request)
    await _authorise(request)
    d = await _store(request).get(request.path_params["dict_id"])
    return JSONResponse(d.to_api_dict())


async def update_dict(request: Request) -> Response:
    rid = start_request(request)
    await _authorise(request, write="update pronunciation dictionaries")
    data = await _json_object(request, "PATCH body", UPDATE_FIELDS)
    items = parse_items(data["items"]) if data.get("items") is not None else None
    d = await _store(request).update(request.path_params["dict_id"], name=data.get("name"), items=items)
    logger.info("pronunciation dictionary %s updated: %s (request %s)", d.id,
                sorted(k for k, v in data.items() if v is not None), rid)
    return JSONResponse(d.to_api_dict())


async def delete_dict(request: Request) -> Response:
    rid = start_request(request)
    await _authorise(request, write="delete pronunciation dictionaries")
    dict_id = request.path_params["dict_id"]
    await _store(request).delete(dict_id)
    logger.info("pronunciation dictionary %s deleted (request %s)", dict_id, rid)
    return Response(status_code=204)


def routes() -> list[BaseRoute]:
    out: list[BaseRoute] = []
    for base in ("/pronunciation-dicts/", "/pronunciation-dicts"):
        out.append(Route(base, list_dicts, methods=["GET"]))
        out.append(Route(base, create_dict, methods=["POST"]))
    out += [
        Route("/pronunciation-dicts/{dict_id}", get_dict, methods=["GET"]),
        Route("/pronunciation-dicts/{dict_id}", update_dict, methods=["PATCH"]),
        Route("/pronunciation-dicts/{dict_id}", delete_dict, methods=["DELETE"]),
    ]
    return out
