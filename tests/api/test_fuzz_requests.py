"""Fuzzing the request parsers, the HTTP routes and the access-token parser (issue 9, build item 5).

Generated inputs (hypothesis): random JSON, valid messages with one to three fields replaced by
wrong types, huge or non-finite numbers, deep nesting, long strings, unpaired surrogates or
unknown fields, truncated JSON, and bytes that are not UTF-8. The contracts:

- the parsers raise nothing but ProtocolError, and its error event stays small;
- POST /tts/bytes, /tts/sse and /access-token on a live gateway answer 2xx, or 4xx in the error
  shape; never 5xx, never a dropped connection;
- Authenticator.verify_token / principal_for raise nothing but AuthenticationError, for any string
  and for tokens whose MAC is valid over garbage (minted here with the server's secret).

The strategies are shared with tests/api/routes/test_fuzz_ws.py. Each example is a batch of 4-8
inputs (hypothesis's cost is per example). Measured per run: 830 TTS bodies (each parsed as /tts/bytes
and /tts/sse: 1,660 parses), 880 WebSocket messages (as bytes and as text: 1,760 parses), 420
access-token bodies, about 550 HTTP requests to the live routes plus 8 that synthesise, 830
credentials (1,470 verify_token calls, directly and through principal_for), and 300 checks of the
nesting pre-scan against the real depth.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.auth import TOKEN_PREFIX, Authenticator
from api.errors import AuthenticationError, error_event, error_response
from api.protocol.errors import ProtocolError
from api.protocol.requests import (
    WsCancelRequest,
    parse_access_token_request,
    parse_tts_request,
    parse_ws_message,
)

pytestmark = pytest.mark.timeout(300)

_FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                 database=None)


def fuzz(max_examples: int) -> settings:
    return settings(_FUZZ, max_examples=max_examples)
ERROR_BODY_KEYS = {"error_code", "title", "message", "request_id"}
MAX_ERROR_EVENT_CHARS = 4096  # message twice (message, legacy "error") + ids, all bounded


# --- JSON with hostile leaves ---------------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """A JSON text snippet json.dumps cannot produce (5,000-digit ints, 1e400, NaN, deep nesting)."""

    text: str


def render(value: Any) -> str:
    """A JSON-ish value (with Raw leaves) as compact JSON text."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    return json.dumps(value)


def nested(depth: int, opener: str = "[") -> str:
    """``depth`` arrays (or objects) one inside the other."""
    if opener == "[":
        return "[" * depth + "0" + "]" * depth
    return '{"k":' * depth + "0" + "}" * depth


HOSTILE = st.one_of(
    st.sampled_from([
        Raw("1" * 5000), Raw("-" + "9" * 4299), Raw("1e400"), Raw("-1e400"), Raw("NaN"), Raw("Infinity"),
        Raw("-Infinity"), Raw("1.5e-400"), Raw('"\\ud800"'), Raw('"\\udfff\\ud800"'), Raw('"\\u0000\\u001f"'),
        Raw(json.dumps("x" * 100_000)), Raw(json.dumps("é" * 5000)), Raw("[]"), Raw("{}"), Raw('""'),
        Raw(str(2**63)), Raw(str(-2**63 - 1)), Raw("0.1e1"), Raw("-0"), Raw("1E+2"),
    ]),
    st.integers(1, 5000).map(lambda d: Raw(nested(d))),
    st.sampled_from([31, 32, 33, 34, 1100]).map(lambda d: Raw(nested(d, "{"))),
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=16),
    st.sampled_from([0, 1, -1, 0.5, 2**63, 10**300, 1e300, -1e-300, "", " ", "en", "raw", "id", "sonic-3"]),
)
JSON_VALUES = st.recursive(
    st.one_of(SCALARS, HOSTILE),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children, max_size=3)),
    max_leaves=5,
)

UNKNOWN_VOICE = "fz-no-such-voice"  # bulk bodies never reach synthesis: a valid one stops at the voice
RAW_FMT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}
FIELDS = [
    "model_id", "transcript", "voice", "voice.id", "voice.mode", "voice.__experimental_controls",
    "output_format", "output_format.container", "output_format.encoding", "output_format.sample_rate",
    "output_format.bit_rate", "language", "locale", "normalization", "generation_config",
    "generation_config.speed", "generation_config.volume", "generation_config.emotion", "speed",
    "add_timestamps", "add_phoneme_timestamps", "use_normalized_timestamps", "duration", "save",
    "pronunciation_dict_id", "temperature", "top_k", "seed", "max_frames", "cfg_scale", "cfg_frames",
    "stop_threshold", "repetition_penalty", "context_id", "continue", "flush", "max_buffer_delay_ms",
    "cancel", "grants", "grants.tts", "expires_in", "unknown_field", "__proto__", "",
]


def tts_body(voice: str = UNKNOWN_VOICE, **extra: Any) -> dict:
    return {"model_id": "sonic-3", "transcript": "Hello there.", "voice": {"mode": "id", "id": voice},
            "output_format": dict(RAW_FMT), "language": "en", **extra}


def mutate(base: dict, changes: list[tuple[str, str, Any]]) -> dict:
    """Apply (op, dotted field, value) changes: op "set" or "del"; a missing parent is created."""
    out = json.loads(json.dumps(base))
    for op, path, value in changes:
        *parents, leaf = path.split(".") if path else [""]
        node = out
        for name in parents:
            if not isinstance(node.get(name), dict):
                node[name] = {}
            node = node[name]
        if op == "del":
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return out


CHANGES = st.lists(
    st.tuples(st.sampled_from(["set", "set", "del"]), st.sampled_from(FIELDS), JSON_VALUES), min_size=1, max_size=3
)


def bodies(base: dict) -> st.SearchStrategy[bytes]:
    """Body bytes built from ``base``: mutated, truncated, random JSON, random text or bytes."""
    mutated = CHANGES.map(lambda c: render(mutate(base, c)).encode("utf-8", "surrogatepass"))
    return st.one_of(
        mutated, mutated, mutated,
        st.tuples(CHANGES, st.floats(0, 1)).map(
            lambda t: (lambda s: s[: int(len(s) * t[1])])(render(mutate(base, t[0])).encode("utf-8", "surrogatepass"))),
        JSON_VALUES.map(lambda v: render(v).encode("utf-8", "surrogatepass")),
        st.text(max_size=40).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.binary(max_size=64),
        st.binary(max_size=16).map(lambda b: render(tts_body()).encode()[:-1] + b', "x": "' + b + b'"}'),
    )


# --- the parsers --------------------------------------------------------------------------------


def assert_bounded_error(exc: ProtocolError) -> None:
    assert isinstance(exc, ProtocolError) and 400 <= exc.status_code < 500
    event = error_event(exc, "req-fuzz").to_json()
    assert len(event) < MAX_ERROR_EVENT_CHARS, event[:300]
    event.encode("utf-8")  # sendable as a text frame
    body = json.loads(error_response(exc, "req-fuzz").body)
    assert set(body) == ERROR_BODY_KEYS


def batches(strategy: st.SearchStrategy) -> st.SearchStrategy[list]:
    """Several inputs per example: hypothesis's cost is mostly per example, not per draw."""
    return st.lists(strategy, min_size=4, max_size=8)


@fuzz(150)
@given(batch=batches(bodies(tts_body())))
def test_tts_body_parser_raises_only_protocol_errors(batch):
    for body in batch:
        for sse in (False, True):
            try:
                parse_tts_request(body, sse=sse)
            except ProtocolError as exc:
                assert_bounded_error(exc)


@fuzz(150)
@given(batch=batches(bodies(tts_body(context_id="fz-ctx", **{"continue": True}))))
def test_ws_message_parser_raises_only_protocol_errors_with_an_echoable_context_id(batch):
    for body in batch:
        for raw in (body, body.decode("utf-8", "replace")):
            try:
                msg = parse_ws_message(raw)
            except ProtocolError as exc:
                assert_bounded_error(exc)
                assert exc.context_id is not None and len(exc.context_id) <= 512  # always routable
                exc.context_id.encode("utf-8")
            else:
                assert isinstance(msg, WsCancelRequest) or msg.context_id


@fuzz(80)
@given(batch=batches(bodies({"grants": {"tts": True, "stt": False}, "expires_in": 60})))
def test_access_token_body_parser_raises_only_protocol_errors(batch):
    for body in batch:
        try:
            parse_access_token_request(body)
        except ProtocolError as exc:
            assert_bounded_error(exc)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_TRICKY_TEXT = st.text(st.sampled_from('[]{}"\\\\/ ,:aé\u2028'), max_size=12)
_NESTED = st.recursive(
    st.one_of(st.none(), st.integers(), _TRICKY_TEXT),
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(_TRICKY_TEXT, c, max_size=3)),
    max_leaves=40,
)


@fuzz(300)
@given(value=_NESTED, limit=st.integers(0, 12), ensure_ascii=st.booleans())
def test_nesting_scan_agrees_with_the_real_depth(value, limit, ensure_ascii):
    """The linear pre-parse scan sees exactly the depth json.loads would (strings with brackets,
    quotes and backslashes in them included)."""
    from api.protocol.json_body import _nesting_exceeds

    text = json.dumps(value, ensure_ascii=ensure_ascii)
    assert _nesting_exceeds(text, limit) == (_depth(value) > limit)


def test_null_stop_threshold_means_unset():
    assert parse_tts_request(tts_body(stop_threshold=None)).stop_threshold is None


# --- the live HTTP routes ---------------------------------------------------------------------------


def check_http_answer(r: httpx.Response, path: str) -> None:
    assert r.status_code < 500, (path, r.status_code, r.text[:300])
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == ERROR_BODY_KEYS and body["error_code"] and body["message"], body
        assert len(r.content) < MAX_ERROR_EVENT_CHARS
    elif path == "/access-token":
        assert r.json()["token"].startswith(TOKEN_PREFIX)
    elif path == "/tts/sse":
        events = [json.loads(line[len("data: "):]) for line in r.text.split("\n") if line.startswith("data: ")]
        assert events and events[-1]["type"] in ("done", "error")
        assert all(e["status_code"] < 500 for e in events), events[-1]


ROUTE_BODIES = st.one_of(
    st.tuples(st.just("/tts/bytes"), bodies(tts_body())),
    st.tuples(st.just("/tts/sse"), bodies(tts_body(context_id="fz-sse"))),
    st.tuples(st.just("/access-token"), bodies({"grants": {"tts": True}, "expires_in": 60})),
)


def test_http_routes_answer_every_generated_body_in_the_error_shape(gateway):
    with httpx.Client(base_url=gateway.url, timeout=30) as client:

        @fuzz(100)
        @given(batch=batches(ROUTE_BODIES), content_type=st.sampled_from(["application/json", "text/plain", None]))
        def post(batch, content_type):
            headers = {"content-type": content_type} if content_type else {}
            for path, body in batch:
                check_http_answer(client.post(path, content=body, headers=headers), path)

        post()


VALID_TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60).filter(str.strip)


def test_http_routes_speak_generated_transcripts(gateway, default_voice_id):
    """A few valid bodies with odd transcripts and languages reach synthesis: 200 (or a 4xx)."""
    with httpx.Client(base_url=gateway.url, timeout=60) as client:

        @fuzz(8)
        @given(path=st.sampled_from(["/tts/bytes", "/tts/sse"]), transcript=VALID_TEXT,
               language=st.sampled_from(["en", "es", "pt", "nl", "fr", "zh", None]), timing=st.booleans())
        def speak(path, transcript, language, timing):
            # with timing, SSE adds word and phoneme events (the text goes through eSpeak's process)
            extra = {"add_timestamps": True, "add_phoneme_timestamps": True} if timing else {}
            r = client.post(path, json=tts_body(default_voice_id, transcript=transcript, language=language, **extra))
            check_http_answer(r, path)

        speak()


# --- the access-token parser ------------------------------------------------------------------------

SECRET = b"fuzz-token-secret-0123456789abcdef"
API_KEY = "sk_fuzz_key_0123456789abcdef"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign(payload: bytes, secret: bytes = SECRET) -> str:
    """A token whose MAC is valid over ``payload`` (whatever it holds)."""
    signed = TOKEN_PREFIX + b64(payload)
    return f"{signed}.{b64(hmac.new(secret, signed.encode('ascii'), hashlib.sha256).digest())}"


def authenticator() -> Authenticator:
    return Authenticator([API_KEY], SECRET, require_auth=True)


# Leaves of the MAC'd payloads; non-finite numbers and deep nesting are pinned by the two tests below.
_SAFE_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-10**300, 10**300),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=24),
)
_SAFE_JSON = st.recursive(
    _SAFE_SCALARS, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)),
    max_leaves=8,
)
_CLAIMS = st.fixed_dictionaries(
    {},
    optional={"v": st.one_of(st.integers(0, 3), _SAFE_SCALARS), "grants": st.one_of(
        st.lists(st.sampled_from(["tts", "stt", "agent", "x"]), max_size=4), _SAFE_JSON),
        "iat": st.one_of(st.integers(0, 2**40), _SAFE_SCALARS), "exp": st.one_of(st.integers(0, 2**40), _SAFE_SCALARS),
        "jti": st.one_of(st.text(max_size=20), _SAFE_JSON), "kid": st.one_of(st.text("0123456789abcdef", max_size=70), _SAFE_JSON),
        "sub": _SAFE_JSON},
)
CREDENTIALS = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=80),  # headers and query strings carry no surrogates
    st.text(max_size=60).map(lambda s: TOKEN_PREFIX + s.encode("utf-8", "surrogatepass").decode("ascii", "replace")),
    st.tuples(st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.=", max_size=60),
              st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.=", max_size=60)).map(lambda t: f"{TOKEN_PREFIX}{t[0]}.{t[1]}"),
    st.binary(max_size=80).map(sign),  # valid MAC over random bytes
    _SAFE_JSON.map(lambda v: sign(json.dumps(v).encode())),  # valid MAC over random JSON
    _CLAIMS.map(lambda c: sign(json.dumps(c).encode())),  # valid MAC over claim-shaped JSON
    _CLAIMS.map(lambda c: sign(json.dumps(c).encode(), secret=b"another-secret-0123456789")),
    st.binary(max_size=80).map(lambda p: sign(p)[:-2] + "AA"),  # MAC of the wrong payload
)


def test_token_parser_raises_only_authentication_errors():
    auth = authenticator()
    loop = asyncio.new_event_loop()
    try:

        @fuzz(150)
        @given(batch=batches(CREDENTIALS))
        def check(batch):
            for credential in batch:
                for parse in (auth.verify_token, lambda c: loop.run_until_complete(auth.principal_for(c))):
                    try:
                        parse(credential)
                    except AuthenticationError as exc:
                        assert exc.status_code == 401 and len(exc.message) < 1024

        check()
    finally:
        loop.close()


def test_token_with_a_valid_mac_over_an_infinite_expiry_is_a_401():
    claims = b'{"v":2,"grants":["tts"],"iat":1,"exp":1e400,"jti":"00","kid":null}'
    with pytest.raises(AuthenticationError):
        authenticator().verify_token(sign(claims))


def test_token_with_a_valid_mac_over_deeply_nested_json_is_a_401():
    with pytest.raises(AuthenticationError):
        authenticator().verify_token(sign(b"[" * 5000 + b"]" * 5000))
