"""Structured logging: one line per event, text or JSON (``GEPARD_LOG_FORMAT``), credentials redacted.

Log calls carry ids in their message (``request %s``, ``context %s``); the JSON format adds
time, level and logger as fields so a collector can index them.

``configure_logging`` installs one handler on the root logger, and every logger reaches it:
ours, uvicorn's (``uvicorn.error`` writes the WebSocket handshake lines, query string included;
uvicorn runs with ``log_config=None``, so its loggers propagate), websockets', anything else's.
The handler carries ``RedactingFilter``, which rewrites every record before it is formatted:
message, arguments, exception text and stack. It replaces with ``[REDACTED]``:

    ?api_key=... / access_token=... (also URL-encoded)    query strings, forms
    Bearer <x>                                            any Authorization value, any scheme
    X-API-Key: <x>, ('x-api-key', '<x>'), "api_key": "x"  header lines, header lists, JSON/dicts
    gat1.<...>                                            an access token anywhere
    the configured API keys (GEPARD_API_KEYS)             anywhere, verbatim
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Iterable, Optional, TextIO

REDACTED = "[REDACTED]"
# the end of a value: quotes, separators and brackets of the forms a credential is logged in
_VALUE = r"(?!\[REDACTED\])[^\s'\"&#;,)\]}>]+"  # (not what an earlier pattern already redacted)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # query strings and forms: api_key=, access_token= (and URL-encoded spellings)
    (re.compile(r"(?i)((?:api|x-api|x%2Dapi)(?:_|-|%5F|%2D)?key=|access(?:_|%5F)token=)" + _VALUE), r"\1" + REDACTED),
    # Authorization values: "Authorization: Basic x", ('authorization', 'Bearer x'), {"authorization": "x"}
    (re.compile(r"(?i)(authorization['\"]?\s*[:=,]\s*b?['\"]?)((?:[A-Za-z][\w\-]*\s+)?)" + _VALUE), r"\1\2" + REDACTED),
    # Bearer <x> wherever it appears
    (re.compile(r"(?i)\b(bearer(?:\s+|%20|\+))" + _VALUE), r"\1" + REDACTED),
    # header lines / header lists / mappings: X-API-Key: x, (b'x-api-key', b'x'), "api_key": "x"
    (re.compile(r"(?i)((?:x-api-key|api_key|api-key|apikey|access_token)['\"]?\s*[:=,]\s*b?['\"]?)" + _VALUE),
     r"\1" + REDACTED),
    # access tokens anywhere else (base64url parts); last, so the forms above redact them whole
    (re.compile(r"gat1\.[A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]*)?"), "gat1." + REDACTED),
)


#: Every pattern above needs one of these (lower-cased) in the text; most lines have none, and
#: checking them first spares such a line the regex scans (a few us instead of tens).
_TRIGGERS = ("key", "token", "bearer", "authorization", "gat1.")


def redact(text: str, literals: Optional[re.Pattern[str]] = None) -> str:
    """``text`` with every credential form (module docstring) replaced by ``[REDACTED]``."""
    if literals is not None:
        text = literals.sub(REDACTED, text)
    lowered = text.lower()
    if not any(trigger in lowered for trigger in _TRIGGERS):
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record's message, exception text and stack with ``redact``; never drops one.

    secrets: literal strings (the configured API keys) also redacted wherever they appear.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        words = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._literals = re.compile("|".join(map(re.escape, words))) if words else None
        self._exc_formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep what there is, redacted
            message = f"{record.msg} {record.args}"
        cleaned = redact(message, self._literals)
        if cleaned != message:
            # flattened, so no handler formats the original arguments again
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._exc_formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self._literals)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self._literals)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info or record.exc_text:
            # exc_text first: the redacting filter has already rewritten it
            entry["exc"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str = "INFO", fmt: str = "text", *, secrets: Iterable[str] = (),
                      stream: Optional[TextIO] = None) -> logging.Handler:
    """One redacting handler on the root logger (to ``stream``, default stderr); returns it."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # every record must reach the redacting handler: no logger of the server's stack may keep
    # handlers of its own or stop propagation
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "websockets", "websockets.server"):
        named = logging.getLogger(name)
        named.handlers[:] = []
        named.propagate = True
    # uvicorn's access log duplicates our per-request lines; keep its errors
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    return handler
