"""api/logging_setup.py: every credential form is redacted from messages, arguments, exception text
and stacks, for every logger that reaches the root handler configure_logging installs."""

from __future__ import annotations

import io
import json
import logging

import pytest

from api.logging_setup import MAX_MESSAGE_CHARS, REDACTED, RedactingFilter, configure_logging, one_line, redact

KEY = "sk_live_Zx81kQ0pR2"
TOKEN = "gat1.eyJ2IjoyLCJncmFudHMiOlsidHRzIl19.q0Ml-bV3_Xy9"


@pytest.mark.parametrize("text", [
    f'127.0.0.1:5123 - "WebSocket /tts/websocket?api_key={KEY}&cartesia_version=2026-08-14" [accepted]',
    f'127.0.0.1:5123 - "WebSocket /tts/websocket?cartesia_version=2026-08-14&access_token={TOKEN}" 401',
    f'"POST /tts/bytes?api_key={KEY} HTTP/1.1" 200',
    f"GET /tts/websocket?api%5Fkey={KEY}",
    f"Authorization: Bearer {KEY}",
    f"authorization: bearer {TOKEN}",
    f"Authorization: Basic {KEY}",
    f"X-API-Key: {KEY}",
    f"x-api-key={KEY}",
    f"[(b'authorization', b'Bearer {KEY}'), (b'x-api-key', b'{KEY}')]",
    f"{{'Authorization': 'Bearer {TOKEN}', 'X-API-Key': '{KEY}'}}",
    f'{{"api_key": "{KEY}", "token": "{TOKEN}"}}',
    f"the token {TOKEN} expired",
    f"api_key={KEY};access_token={TOKEN}",
])
def test_every_credential_form_is_redacted(text):
    cleaned = redact(text)
    assert KEY not in cleaned and TOKEN not in cleaned and "gat1.eyJ" not in cleaned, cleaned
    assert REDACTED in cleaned
    assert "[REDACTED]]" not in cleaned  # one pattern does not chew on another's output


@pytest.mark.parametrize("key", ["ab;cd-Zx81kQ0pR2", "ab,cd-Zx81kQ0pR2", "ab)cd-Zx81kQ0pR2", "ab]cd}ef>gh-Zx81"])
def test_a_query_string_key_is_redacted_whole_whatever_it_holds(key):
    # a key stored with `gepard keys add` is free text, and a client may send it unencoded
    line = f'127.0.0.1:5123 - "WebSocket /tts/websocket?api_key={key}&cartesia_version=2026-08-14" 401'
    cleaned = redact(line)
    assert cleaned == '127.0.0.1:5123 - "WebSocket /tts/websocket?api_key=[REDACTED]&cartesia_version=2026-08-14" 401'
    assert redact(f'"GET /voices?access_token={key} HTTP/1.1" 401') == '"GET /voices?access_token=[REDACTED] HTTP/1.1" 401'


def test_ordinary_text_is_left_alone():
    for text in ("request 1f0c done in 12 ms", "voice key=value", "api usage: 3 calls",
                 'WebSocket /tts/websocket?cartesia_version=2026-08-14 [accepted]'):
        assert redact(text) == text


def _capture(secrets=(), fmt="text"):
    stream = io.StringIO()
    handler = configure_logging("DEBUG", fmt, secrets=secrets, stream=stream)
    return stream, handler


@pytest.fixture(autouse=True)
def restore_root_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    access_level = logging.getLogger("uvicorn.access").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("uvicorn.access").setLevel(access_level)


def test_the_root_handler_redacts_arguments_exceptions_and_literal_keys():
    stream, _ = _capture(secrets=["plainkey-without-marker"])
    log = logging.getLogger("some.library")
    log.info("upgrade %s from %s", f"/tts/websocket?api_key={KEY}", "127.0.0.1")
    try:
        raise ValueError(f"bad header Authorization: Bearer {TOKEN}")
    except ValueError:
        log.exception("request failed for %s", "plainkey-without-marker")
    log.warning("stack", stack_info=True, extra={"unused": KEY})
    text = stream.getvalue()
    assert KEY not in text and TOKEN not in text and "plainkey-without-marker" not in text
    assert "Traceback" in text and "ValueError: bad header Authorization: Bearer [REDACTED]" in text
    assert "upgrade /tts/websocket?api_key=[REDACTED] from 127.0.0.1" in text


def test_json_format_redacts_the_exception_too():
    stream, _ = _capture(fmt="json")
    try:
        raise RuntimeError(f"GET /x?access_token={TOKEN}")
    except RuntimeError:
        logging.getLogger("api.test").exception("failed with X-API-Key: %s", KEY)
    entry = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert entry["msg"] == "failed with X-API-Key: [REDACTED]"
    assert "access_token=[REDACTED]" in entry["exc"] and TOKEN not in entry["exc"]


def test_uvicorn_and_websockets_loggers_reach_the_redacting_handler():
    # even if something gave them handlers of their own or stopped propagation before
    logging.getLogger("uvicorn.error").addHandler(logging.StreamHandler(io.StringIO()))
    logging.getLogger("uvicorn.error").propagate = False
    stream, handler = _capture()
    logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    for name in ("uvicorn.error", "uvicorn.access", "websockets.server", "websockets.client"):
        logger = logging.getLogger(name)
        assert logger.propagate and not logger.handlers
        logger.info('%s - "WebSocket %s" [accepted]', "127.0.0.1:1", f"/tts/websocket?api_key={KEY}")
    assert stream.getvalue().count("api_key=[REDACTED]") == 4 and KEY not in stream.getvalue()
    assert any(isinstance(f, RedactingFilter) for f in handler.filters)


def test_records_without_credentials_keep_their_arguments():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "context %s done", ("c1",), None)
    assert RedactingFilter().filter(record) and record.args == ("c1",)


# --- what a client puts into a line cannot forge another or grow it without bound ------------------------

FORGED = "2026-12-01 00:00:00,000 ERROR api.auth FORGED: admin key accepted"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_client_values_cannot_forge_a_line_or_make_a_huge_one(fmt):
    stream, _ = _capture(fmt=fmt)
    context_id = "x\n" + FORGED + "\r\n" + FORGED + "\u2028" + FORGED + "\x1b[2K"
    voice_id = "V\n" + FORGED + "A" * 900_000
    logging.getLogger("api.connection").info("context %s opened (voice %s, %s)", context_id, voice_id, "pcm")
    lines = stream.getvalue().splitlines()  # splitlines: every kind of line break a reader may honour
    assert len(lines) == 1, lines[:3]
    assert len(lines[0]) < MAX_MESSAGE_CHARS + 300  # bounded: time, level, logger (JSON: its keys) + message
    message = json.loads(lines[0])["msg"] if fmt == "json" else lines[0]
    assert message.count(FORGED) == 4 and "\\n" + FORGED in message  # still readable, escaped
    assert "\x1b" not in message and "\\x1b[2K" in message and "\\u2028" in message
    assert message.endswith("AAAA, pcm)")  # the middle is cut, the tail (the server's part) stays
    assert "characters cut" in message


def test_exception_lines_are_indented_so_only_a_record_starts_a_line():
    stream, _ = _capture()
    try:
        raise ValueError("bad voice 'x\n" + FORGED + "'")
    except ValueError:
        logging.getLogger("api.errors").exception("request %s failed", "r-1")
    first, *rest = stream.getvalue().rstrip("\n").split("\n")
    assert first.endswith("ERROR api.errors request r-1 failed")
    assert rest[0] == "    Traceback (most recent call last):" and "    " + FORGED + "'" in rest
    assert all(line.startswith("    ") for line in rest)


def test_one_line_leaves_ordinary_text_alone():
    text = "context 1f0c:abc opened (voice 6f1d5f1e-3f0b-5a3e-9a4e-0d5d2f6a9c11, raw\tpcm_s16le 22050 Hz)"
    assert one_line(text) is text
    assert one_line("a\nb") == "a\\nb" and len(one_line("y" * 10_000, 100)) == 100
