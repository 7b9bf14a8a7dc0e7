"""Validation shared by the wire models (api/protocol/requests.py): pydantic's errors turned into
one sentence that names the field path and the problem (``to_protocol_error``), strict JSON field
types (no ``"3"`` -> 3, no ``true`` -> 1) and the after-validators that check ranges, bounds and
language codes with one precise message each (``field_error``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Mapping, Optional, Union

from pydantic import AfterValidator, BeforeValidator, Strict, ValidationError
from pydantic_core import PydanticCustomError

from api.protocol.errors import (
    EmptyTranscriptError, InvalidFieldError, MissingFieldError, ProtocolError, UnsupportedVoiceModeError,
)
from engine.requests import SAMPLING_BOUNDS

#: Longest piece of a client's value quoted back in an error message.
MAX_ECHOED_VALUE_CHARS = 80
#: Longest language / locale code (BCP 47 tags in practice stay under 35 characters).
MAX_LANGUAGE_CODE_CHARS = 35

# ISO 639 code with optional subtags: "en", "pt-BR", "zh_Hans" (same rule as api/text/normalization.py)
_LANGUAGE_RE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")

# --- pydantic error -> one sentence -------------------------------------------------------------

_CUSTOM = "gepard_invalid"


def field_error(message: str, *, suffix: Optional[str] = None, error_code: Optional[str] = None) -> PydanticCustomError:
    """A validation error whose message is final (no pydantic wording). ``suffix`` extends the
    field path ("voice" + "id" -> "voice.id"); ``error_code`` overrides "invalid_request"."""
    return PydanticCustomError(
        _CUSTOM, "{message}", {"message": message, "suffix": suffix or "", "error_code": error_code or ""}
    )


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _path(loc: tuple[Union[str, int], ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _describe(err: Mapping[str, Any]) -> tuple[str, str, type[ProtocolError], str]:
    """One pydantic error -> (field path, problem, error class, error_code)."""
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    path = _path(tuple(err["loc"]))
    if kind == _CUSTOM:
        if ctx.get("suffix"):
            path = f"{path}.{ctx['suffix']}" if path else ctx["suffix"]
        code = ctx.get("error_code") or None
        cls: type[ProtocolError] = InvalidFieldError
        if code == UnsupportedVoiceModeError.default_error_code:
            cls = UnsupportedVoiceModeError
        elif code == EmptyTranscriptError.default_error_code:
            cls = EmptyTranscriptError
        elif code == MissingFieldError.default_error_code:
            cls = MissingFieldError
        return path, ctx["message"], cls, code or cls.default_error_code
    if kind == "missing":
        return path, "field required", MissingFieldError, MissingFieldError.default_error_code
    if value is None and kind.endswith("_type"):
        return path, "field required, got null", MissingFieldError, MissingFieldError.default_error_code
    got = json_type(value) if not isinstance(value, float) else repr(value)
    problems = {
        "string_type": f"expected a string, got {got}",
        "int_type": f"expected an integer, got {got}",
        "int_parsing": f"expected an integer, got {got}",
        "int_from_float": f"expected an integer, got {value!r}",
        "float_type": f"expected a number, got {got}",
        "float_parsing": f"expected a number, got {got}",
        "bool_type": f"expected true or false, got {got}",
        "bool_parsing": f"expected true or false, got {got}",
        "finite_number": "must be a finite number",
        "model_type": f"expected an object, got {got}",
        "model_attributes_type": f"expected an object, got {got}",
        "dict_type": f"expected an object, got {got}",
        "literal_error": f"{shown(value)} is not supported; expected {ctx.get('expected')}",
        "greater_than_equal": f"must be >= {ctx.get('ge')}, got {value!r}",
        "greater_than": f"must be > {ctx.get('gt')}, got {value!r}",
        "less_than_equal": f"must be <= {ctx.get('le')}, got {value!r}",
        "less_than": f"must be < {ctx.get('lt')}, got {value!r}",
    }
    problem = problems.get(kind, err.get("msg", "invalid value"))
    return path, problem, InvalidFieldError, InvalidFieldError.default_error_code


def to_protocol_error(exc: ValidationError, context_id: Optional[str]) -> ProtocolError:
    """All of a ValidationError's problems -> one ProtocolError (class and code of the first)."""
    parts: list[str] = []
    first: Optional[tuple[str, str, type[ProtocolError], str]] = None
    for err in exc.errors(include_url=False):
        described = _describe(err)
        first = first or described
        path, problem = described[0], described[1]
        text = f"{path}: {problem}" if path else problem
        if text not in parts:
            parts.append(text)
    assert first is not None  # a ValidationError always has at least one error
    return first[2]("; ".join(parts), field=first[0] or None, error_code=first[3], context_id=context_id)


# --- field types --------------------------------------------------------------------------------


def _json_int(value: object) -> object:
    """Integral JSON numbers (3000.0 from some clients) -> int; booleans are not integers."""
    if isinstance(value, bool):
        raise field_error(f"expected an integer, got {json_type(value)}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _json_float(value: object) -> object:
    if isinstance(value, bool):
        raise field_error(f"expected a number, got {json_type(value)}")
    return value


JsonInt = Annotated[int, BeforeValidator(_json_int), Strict()]
JsonFloat = Annotated[float, BeforeValidator(_json_float), Strict()]
JsonBool = Annotated[bool, Strict()]
JsonStr = Annotated[str, Strict()]


def in_range(lo: float, hi: float) -> Any:
    """After-validator: ``lo <= v <= hi`` with one precise message."""

    def check(value: Any) -> Any:
        if value is not None and not lo <= value <= hi:
            raise field_error(f"must be between {lo:g} and {hi:g}, got {shown(value)}")
        return value

    return AfterValidator(check)


def bounded(name: str) -> Any:
    """After-validator: the engine's own range for sampling knob ``name`` (SAMPLING_BOUNDS), so the
    wire, the settings defaults and both engines accept exactly the same values."""
    bound = SAMPLING_BOUNDS[name]

    def check(value: Any) -> Any:
        problem = None if value is None else bound.problem(value)
        if problem is not None:
            raise field_error(problem)
        return value

    return AfterValidator(check)


def non_empty() -> Any:
    def check(value: Any) -> Any:
        if value is not None and not value:
            raise field_error("must not be empty")
        return value

    return AfterValidator(check)


def shown(value: Any, limit: int = MAX_ECHOED_VALUE_CHARS) -> str:
    """A client's value quoted in an error message: strings and numbers as ``repr`` cut to about
    ``limit`` characters, arrays and objects by their JSON type only."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, (list, tuple, Mapping)):
        return json_type(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**21:
        digits = str(abs(value))  # 1e300 arrives as a 301-digit integer: show its magnitude
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def is_language_code(value: str) -> bool:
    """Whether ``value`` is an ISO 639 code with optional subtags, of at most MAX_LANGUAGE_CODE_CHARS."""
    return len(value) <= MAX_LANGUAGE_CODE_CHARS and _LANGUAGE_RE.fullmatch(value) is not None


def language_code(value: Optional[str]) -> Optional[str]:
    if value is not None and not is_language_code(value):
        raise field_error(f"{shown(value)} is not a language code; expected an ISO 639-1 code such as 'en' or 'pt-BR'")
    return value
