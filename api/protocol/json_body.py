"""Parsing one JSON body or WebSocket message, bounded before json.loads sees it (``load_json``):
nesting at most ``MAX_JSON_DEPTH`` deep (a linear scan; brackets inside strings do not count), text
that is UTF-8 (or UTF-16/32 with a BOM), no NaN or Infinity, and no unpaired surrogate escape
(``"\\ud800"``), since nothing could send it back as UTF-8.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Union

import numpy as np

from api.protocol.errors import InvalidJsonError

#: Deepest nesting of arrays/objects accepted in any JSON body or message. A Cartesia message needs
#: 3 (``output_format`` inside the message, ``__experimental_controls`` lists inside ``voice``);
#: Python's json module overflows its recursion limit near 1,000.
MAX_JSON_DEPTH = 32


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# +1 for an opening bracket, -1 for a closing one, 0 for every other byte (UTF-8 continuation
# bytes are >= 0x80, so never a bracket).
_BRACKET_STEPS = np.zeros(256, dtype=np.int8)
_BRACKET_STEPS[[ord("["), ord("{")]] = 1
_BRACKET_STEPS[[ord("]"), ord("}")]] = -1
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")


def _outside_strings(text: str) -> str:
    """``text`` without its JSON strings. Escaped backslashes, then escaped quotes, are dropped first,
    so every '"' left opens or closes a string; an unterminated string runs to the end. Outside a
    string a backslash is already a syntax error, and json.loads stops there, so what this makes of
    the text after one cannot matter."""
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    return "".join(unescaped.split('"')[0::2])


def _nesting_exceeds(text: str, limit: int) -> bool:
    """True when arrays/objects in ``text`` nest deeper than ``limit`` (brackets inside strings do
    not count). Linear and C-speed (str methods and numpy, about 10 ms for 1 MiB of brackets): a
    text with at most ``limit`` opening brackets returns at once; otherwise the running depth of the
    brackets outside strings is computed."""
    if text.count("[") + text.count("{") <= limit:
        return False
    outside = np.frombuffer(_outside_strings(text).encode("utf-8", "surrogatepass"), dtype=np.uint8)
    return int(np.cumsum(_BRACKET_STEPS[outside], dtype=np.int32).max(initial=0)) > limit


def _has_lone_surrogate(value: Any) -> bool:
    """True when a string anywhere in ``value`` (keys included) cannot be encoded as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def load_json(raw: Union[str, bytes, bytearray, Mapping[str, Any]], what: str) -> Any:
    """Parse one JSON body or message (``what`` names it in errors: "request body", "message").

    Raises InvalidJsonError for text that is not UTF-8, not JSON, nested deeper than
    ``MAX_JSON_DEPTH``, or holding an unpaired surrogate escape. A Mapping passes through.
    """
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, (bytes, bytearray)):
        try:  # the encodings json.loads itself accepts (UTF-8, or UTF-16/32 with their BOMs)
            text = bytes(raw).decode(json.detect_encoding(raw))
        except UnicodeDecodeError:
            raise InvalidJsonError(f"{what} is not valid JSON: it is not UTF-8 text") from None
    else:
        text = raw
    if _nesting_exceeds(text, MAX_JSON_DEPTH):
        raise InvalidJsonError(
            f"{what} is not accepted: arrays and objects nest more than {MAX_JSON_DEPTH} levels deep"
        )
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:  # unreachable under MAX_JSON_DEPTH; kept so no input can escape as a 500
        raise InvalidJsonError(f"{what} is not accepted: arrays and objects nest too deeply") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise InvalidJsonError(f"{what} is not valid JSON: {exc}") from None
    if _SURROGATE_ESCAPE_RE.search(text) and _has_lone_surrogate(data):
        raise InvalidJsonError(
            f"{what} is not valid JSON text: it has an unpaired UTF-16 surrogate escape (\\ud800-\\udfff "
            "without its pair), which is not a Unicode character"
        )
    return data
