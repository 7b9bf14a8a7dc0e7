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

Then ``OneLineFilter`` makes whatever a client put into a record harmless: log calls quote client
values (a context_id, a voice id, a path), so a value with a newline could otherwise write a line
that looks like one of ours, and a huge one a line of any size. It escapes the message's control
characters as Python writes them (a line break becomes backslash-n, ESC backslash-x1b; also the
other characters ``str.splitlines`` breaks at, and the bidi overrides) and cuts the middle out of a
message over ``MAX_MESSAGE_CHARS`` (exception text: ``MAX_EXC_CHARS``). It does so in both formats,
so the JSON ``msg`` printed raw cannot forge a line either. The text format indents an exception's
lines, so only a record starts a line.
HTTP requests are logged once each by api/access_log.py.
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
# a query-string value ends only at the next parameter, the fragment, a quote or whitespace: a key may
# hold ';', ',' or ')' (keys stored with `gepard keys add` are free text), sent unencoded in a URL
_QUERY_VALUE = r"(?!\[REDACTED\])[^\s'\"&#]+"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # query strings and forms: api_key=, access_token= (and URL-encoded spellings)
    (re.compile(r"(?i)((?:api|x-api|x%2Dapi)(?:_|-|%5F|%2D)?key=|access(?:_|%5F)token=)" + _QUERY_VALUE),
     r"\1" + REDACTED),
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


#: Longest message written (a context line quoting a 512-character context_id and a 256-character
#: voice id is under 1,000); a longer one keeps its head and its tail.
MAX_MESSAGE_CHARS = 8192
#: Longest exception text or stack written (a chained traceback of a few frames is a few KiB).
MAX_EXC_CHARS = 65536
# C0 and C1 controls and DEL (tab aside: it breaks no line), the other line breaks of
# str.splitlines(), and the bidi controls that reorder what a terminal shows
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r"}

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


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def _cut_middle(text: str, limit: int) -> str:
    """``text`` if at most ``limit`` characters, else its head and tail around a note of what was cut."""
    if len(text) <= limit:
        return text
    note = f" ... ({len(text) - limit} characters cut) ... "
    keep = max(limit - len(note), 0)
    return text[: keep - keep // 2] + note + text[len(text) - keep // 2:]


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` with every line break and control character escaped, at most ``limit`` long."""
    if len(text) <= limit and not _UNSAFE.search(text):
        return text  # nearly every line: one scan, no copy
    return _cut_middle(_UNSAFE.sub(_escape_char, text), limit)


class OneLineFilter(logging.Filter):
    """Makes a record's message one bounded line (module docstring), and bounds its exception text
    and stack, escaping their control characters but for the line breaks. Runs after
    RedactingFilter: cutting first could leave half of a secret that no pattern recognises."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: left to the formatter's own error report
            return True
        cleaned = one_line(message)
        if cleaned is not message:
            record.msg, record.args = cleaned, None
        if record.exc_text:
            record.exc_text = _bounded_block(record.exc_text)
        if record.stack_info:
            record.stack_info = _bounded_block(record.stack_info)
        return True


def _bounded_block(text: str) -> str:
    """A traceback or stack: its lines kept, every other control character escaped, at most MAX_EXC_CHARS."""
    lines = (_UNSAFE.sub(_escape_char, line) for line in text.split("\n"))
    return _cut_middle("\n".join(lines), MAX_EXC_CHARS)


class TextFormatter(logging.Formatter):
    """``time level logger message``; an exception's or stack's lines follow, indented, so that only
    a record starts a line (a forged record inside an exception message stays visibly inside it)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        # the message is one line (OneLineFilter): every line break left is an exception's or stack's
        return super().format(record).replace("\n", "\n    ")


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
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RedactingFilter(secrets))
    handler.addFilter(OneLineFilter())  # after redaction (see OneLineFilter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # every record must reach the redacting handler: no logger of the server's stack may keep
    # handlers of its own or stop propagation
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "websockets", "websockets.server"):
        named = logging.getLogger(name)
        named.handlers[:] = []
        named.propagate = True
    # uvicorn's access log would repeat api/access_log.py's line for every request, with the
    # client's raw path and query string; keep its errors
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    return handler
