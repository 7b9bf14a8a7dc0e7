"""Voice records as plain data: the Cartesia ``Voice`` fields, the prompt the engine needs, and
the stored record that joins them.

    Voice        Cartesia Voice fields (API 2026-08-14) + model_fingerprint + builtin flag
    VoicePrompt  what synthesis needs: voice_id, prefix [K, hidden] float32, model_fingerprint,
                 and the locale the voice reads text in
    VoiceRecord  Voice + the speaker prefix tensor + optionally the reference codes [T, 32]

Nothing here does I/O; ``voices/serialization.py`` turns a VoiceRecord into msgpack bytes.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, Mapping, Optional, get_args

import torch

from voices.accents import ACCENT_LOCALES
from voices.errors import InvalidVoiceError

Gender = Literal["masculine", "feminine", "gender_neutral"]
Access = Literal["private", "public"]
Visibility = Literal["owner", "all"]

GENDERS: frozenset[str] = frozenset(get_args(Gender))
ACCESS_VALUES: frozenset[str] = frozenset(get_args(Access))
VISIBILITY_VALUES: frozenset[str] = frozenset(get_args(Visibility))

#: Fields ``VoiceStore.update`` may change. Identity, timestamps and model data are immutable.
PATCHABLE_FIELDS: frozenset[str] = frozenset(
    {"name", "description", "gender", "accent", "tagline", "language", "country", "locales",
     "access", "visibility"}
)
#: The fields ``Voice.reading_locale`` reads. The prompt carries that locale, so a change of one of
#: them is a change of the prompt: the store gives the record a new generation (voices/store.py).
READING_FIELDS: frozenset[str] = frozenset({"language", "accent", "locales"})

MAX_NAME_CHARS = 256
MAX_DESCRIPTION_CHARS = 4096
MAX_TAGLINE_CHARS = 256  # a one-line blurb; every listed voice carries it, so it must stay small


def language_of(tag: str) -> str:
    """The language subtag of a language or locale tag, lower case ("es-MX", "es_mx" -> "es")."""
    return tag.strip().replace("_", "-").split("-")[0].lower()


def utc_now_iso() -> str:
    """Current time as ISO-8601 UTC with microseconds, e.g. ``2026-08-14T09:30:00.123456Z``."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_voice_id() -> str:
    """A fresh random voice id (UUID4, the shape Cartesia uses)."""
    return str(uuid.uuid4())


def normalize_created_at(created_at: str) -> str:
    """Fixed-width UTC form of ``created_at`` (27 chars) whose string order is time order.

    Stores order voices by ``(normalize_created_at(created_at), id)``: a total order, so
    cursors never loop. Naive timestamps are taken as UTC.
    """
    try:
        moment = datetime.fromisoformat(created_at)
    except (TypeError, ValueError) as exc:
        raise InvalidVoiceError(f"created_at={created_at!r} is not an ISO-8601 timestamp") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    moment = moment.astimezone(timezone.utc)
    return f"{moment.year:04d}-" + moment.strftime("%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Locale:
    """One locale a voice speaks, e.g. ``Locale("en-US", is_native=True)``."""

    locale: str
    is_native: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"locale": self.locale, "is_native": self.is_native}

    @classmethod
    def from_value(cls, value: "Locale | Mapping[str, Any]") -> "Locale":
        if isinstance(value, Locale):
            return value
        if isinstance(value, Mapping) and isinstance(value.get("locale"), str):
            return cls(locale=value["locale"], is_native=bool(value.get("is_native", True)))
        raise InvalidVoiceError(f"locales entries must be {{locale, is_native}}, got {value!r}")


@dataclass(frozen=True, slots=True)
class Voice:
    """A voice as the Cartesia API describes it (version 2026-08-14), plus our own bookkeeping.

    ``model_fingerprint`` names the weights the stored speaker prefix was computed with;
    ``builtin`` voices are server-provided and read-only. Invalid values raise InvalidVoiceError.
    """

    id: str
    name: str
    language: str
    created_at: str = field(default_factory=utc_now_iso)
    description: str = ""
    gender: Optional[str] = None
    is_owner: bool = True
    access: str = "private"
    visibility: str = "owner"
    tagline: str = ""
    locales: tuple[Locale, ...] = ()
    accent: Optional[str] = None
    country: Optional[str] = None
    user_id: str = ""
    model_fingerprint: str = ""
    builtin: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or self.id != self.id.strip() or " " in self.id:
            raise InvalidVoiceError(f"voice id must be a non-empty string without spaces, got {self.id!r}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidVoiceError(f"voice name must be a non-empty string, got {self.name!r}")
        if len(self.name) > MAX_NAME_CHARS:
            raise InvalidVoiceError(f"voice name is {len(self.name)} characters; the limit is {MAX_NAME_CHARS}")
        if not isinstance(self.description, str):
            raise InvalidVoiceError(f"description must be a string, got {self.description!r}")
        if len(self.description) > MAX_DESCRIPTION_CHARS:
            raise InvalidVoiceError(
                f"description is {len(self.description)} characters; the limit is {MAX_DESCRIPTION_CHARS}"
            )
        if not isinstance(self.language, str) or not self.language.strip():
            raise InvalidVoiceError(f"language must be a non-empty string, got {self.language!r}")
        if self.gender is not None and self.gender not in GENDERS:
            raise InvalidVoiceError(f"gender must be one of {sorted(GENDERS)} or null, got {self.gender!r}")
        if self.access not in ACCESS_VALUES:
            raise InvalidVoiceError(f"access must be one of {sorted(ACCESS_VALUES)}, got {self.access!r}")
        if self.visibility not in VISIBILITY_VALUES:
            raise InvalidVoiceError(f"visibility must be one of {sorted(VISIBILITY_VALUES)}, got {self.visibility!r}")
        if not isinstance(self.tagline, str):
            raise InvalidVoiceError(f"tagline must be a string, got {self.tagline!r}")
        if len(self.tagline) > MAX_TAGLINE_CHARS:
            raise InvalidVoiceError(f"tagline is {len(self.tagline)} characters; the limit is {MAX_TAGLINE_CHARS}")
        normalize_created_at(self.created_at)  # validates the timestamp
        # accept lists of dicts too, store an immutable tuple of Locale
        object.__setattr__(self, "locales", tuple(Locale.from_value(v) for v in (self.locales or ())))

    @property
    def order_key(self) -> tuple[str, str]:
        """The total order every store lists voices in: (created_at as UTC, id)."""
        return (normalize_created_at(self.created_at), self.id)

    @property
    def reading_locale(self) -> Optional[str]:
        """The language, with its region when the voice names one, that a request naming no language
        is read in ("es-MX": Mexico's numbers and "$" in Spanish): ``language`` when it has a
        region; else the locale of ``accent`` ("mexican", "british") or of a ``locales`` entry, the
        native ones first, when it is of the same language; else ``language`` alone. None when
        ``language`` is no two-letter language tag (a preloaded voice's sidecar may say "English")."""
        language = self.language.strip().replace("_", "-")
        base = language_of(language)
        if not (len(base) == 2 and base.isascii() and base.isalpha()):  # Cartesia's languages are ISO 639-1
            return None
        if "-" in language:
            return language
        candidates = [ACCENT_LOCALES.get(self.accent or "")]
        candidates += [loc.locale for loc in sorted(self.locales, key=lambda loc: not loc.is_native)]
        for locale in (c.replace("_", "-") for c in candidates if c):
            if "-" in locale and language_of(locale) == base:
                return locale
        return language

    def replace(self, **fields: Any) -> "Voice":
        """A copy with ``fields`` changed (validated again)."""
        return dataclasses.replace(self, **fields)

    def to_api_dict(self) -> dict[str, Any]:
        """The Cartesia ``Voice`` JSON object (2026-08-14). Optional fields are null when unset."""
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "language": self.language,
            "created_at": self.created_at,
            "is_owner": self.is_owner,
            "access": self.access,
            "visibility": self.visibility,
            "tagline": self.tagline,
            "locales": [loc.to_dict() for loc in self.locales],
            "gender": self.gender,
            "accent": self.accent,
            "country": self.country,
        }

    def to_metadata_dict(self) -> dict[str, Any]:
        """The Cartesia ``VoiceMetadata`` JSON object returned by clone and localize."""
        return {
            "id": self.id,
            "user_id": self.user_id,
            "name": self.name,
            "description": self.description,
            "language": self.language,
            "created_at": self.created_at,
            "access": self.access,
            "visibility": self.visibility,
            "tagline": self.tagline,
        }

    def to_dict(self) -> dict[str, Any]:
        """Every field, for storage (see ``from_dict``)."""
        out = self.to_api_dict()
        out.update(user_id=self.user_id, model_fingerprint=self.model_fingerprint, builtin=self.builtin)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Voice":
        """Inverse of ``to_dict``; unknown keys (from a newer writer) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True, slots=True)
class VoicePrompt:
    """What synthesis needs from a voice.

    prefix: [K, hidden] float32 on CPU (K = 8, hidden = 1024 for Gepard), placed before the text
    embeddings. ``model_fingerprint`` must match the loaded engine's ``ModelInfo.fingerprint``.
    ``language``: the voice's ``reading_locale`` ("en", "es-MX"), which a request naming no language
    (or only the same language, "es") is read in; None where no voice record stands behind it.
    """

    voice_id: str
    prefix: torch.Tensor
    model_fingerprint: str
    language: Optional[str] = None

    def __post_init__(self) -> None:
        if self.prefix.dim() != 2 or self.prefix.dtype != torch.float32:
            raise InvalidVoiceError(
                f"voice {self.voice_id!r}: expected prefix [K, hidden] float32, "
                f"got {tuple(self.prefix.shape)} {self.prefix.dtype}"
            )


@dataclass(frozen=True, slots=True)
class VoiceRecord:
    """A stored voice: metadata, speaker prefix, and optionally the reference codes.

    prefix: [K, hidden] in the dtype it was computed in (float32, bfloat16 or float16).
    ref_codes: [T, 32] integer NanoCodec codes of the reference clip (kept so the prefix can be
    recomputed for a new checkpoint), or None.
    """

    voice: Voice
    prefix: torch.Tensor
    ref_codes: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        if self.prefix.dim() != 2 or not self.prefix.is_floating_point():
            raise InvalidVoiceError(
                f"voice {self.voice.id!r}: expected a floating prefix [K, hidden], "
                f"got {tuple(self.prefix.shape)} {self.prefix.dtype}"
            )
        if self.ref_codes is not None and (
            self.ref_codes.dim() != 2 or self.ref_codes.is_floating_point()
        ):
            raise InvalidVoiceError(
                f"voice {self.voice.id!r}: expected integer ref_codes [T, 32], "
                f"got {tuple(self.ref_codes.shape)} {self.ref_codes.dtype}"
            )
        # detach from any graph/device so the record is plain CPU data
        object.__setattr__(self, "prefix", self.prefix.detach().to("cpu").contiguous())
        if self.ref_codes is not None:
            object.__setattr__(self, "ref_codes", self.ref_codes.detach().to("cpu").contiguous())

    @property
    def voice_id(self) -> str:
        return self.voice.id

    def prompt(self) -> VoicePrompt:
        """The engine-facing view: prefix as float32 [K, hidden]."""
        return VoicePrompt(
            voice_id=self.voice.id,
            prefix=self.prefix.to(torch.float32),
            model_fingerprint=self.voice.model_fingerprint,
            language=self.voice.reading_locale,
        )
