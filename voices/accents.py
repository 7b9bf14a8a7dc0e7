"""A small static accent catalogue for ``GET /accents`` (Cartesia's is larger and server-defined).

Ids are catalogue slugs from the Cartesia SDK's ``VoiceAccent`` list, so voices tagged here stay
valid there. Voices may carry any slug-shaped accent id (``accent_id_problem``); display names such as
"British English" are rejected, as Cartesia's 2026-08-14 API does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_ACCENT_ID_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
#: the longest accent id accepted: the catalogue's longest is ~20 characters
MAX_ACCENT_ID_CHARS = 64


@dataclass(frozen=True, slots=True)
class Accent:
    """One catalogue entry, as ``GET /accents`` returns it."""

    id: str
    name: str
    locale: str  # BCP-47, e.g. "en-US"
    is_locale_default: bool = False
    is_localizable: bool = False  # POST /voices/localize is not served, so nothing is localizable

    @property
    def language(self) -> str:
        """ISO 639-1 subtag of ``locale`` ("en-US" -> "en")."""
        return self.locale.split("-")[0]

    def to_api_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "language": self.language, "locale": self.locale,
                "is_localizable": self.is_localizable, "is_locale_default": self.is_locale_default}


#: Sorted by id, like Cartesia's list.
ACCENTS: tuple[Accent, ...] = tuple(sorted((
    Accent("general-american", "General American English", "en-US", is_locale_default=True),
    Accent("southern-us", "Southern US English", "en-US"),
    Accent("new-york", "New York English", "en-US"),
    Accent("british", "British English", "en-GB", is_locale_default=True),
    Accent("australian", "Australian English", "en-AU", is_locale_default=True),
    Accent("canadian-english", "Canadian English", "en-CA", is_locale_default=True),
    Accent("indian-english", "Indian English", "en-IN", is_locale_default=True),
    Accent("irish", "Irish English", "en-IE", is_locale_default=True),
    Accent("new-zealand", "New Zealand English", "en-NZ", is_locale_default=True),
    Accent("south-african", "South African English", "en-ZA", is_locale_default=True),
    Accent("parisian", "Parisian French", "fr-FR", is_locale_default=True),
    Accent("canadian-french", "Canadian French", "fr-CA", is_locale_default=True),
    Accent("high-german", "High German", "de-DE", is_locale_default=True),
    Accent("castilian", "Castilian Spanish", "es-ES", is_locale_default=True),
    Accent("mexican", "Mexican Spanish", "es-MX", is_locale_default=True),
    Accent("chilean", "Chilean Spanish", "es-CL", is_locale_default=True),
    Accent("colombian", "Colombian Spanish", "es-CO", is_locale_default=True),
    Accent("peruvian", "Peruvian Spanish", "es-PE", is_locale_default=True),
    Accent("brazilian-portuguese", "Brazilian Portuguese", "pt-BR", is_locale_default=True),
    Accent("european-portuguese", "European Portuguese", "pt-PT", is_locale_default=True),
    Accent("italian", "Italian", "it-IT", is_locale_default=True),
    Accent("standard-japanese", "Standard Japanese", "ja-JP", is_locale_default=True),
    Accent("mandarin", "Mandarin Chinese", "zh-CN", is_locale_default=True),
    Accent("korean", "Korean", "ko-KR", is_locale_default=True),
    Accent("hindi", "Hindi", "hi-IN", is_locale_default=True),
    Accent("randstad", "Randstad Dutch", "nl-NL", is_locale_default=True),
    Accent("polish", "Polish", "pl-PL", is_locale_default=True),
    Accent("russian", "Russian", "ru-RU", is_locale_default=True),
    Accent("stockholm", "Stockholm Swedish", "sv-SE", is_locale_default=True),
), key=lambda a: a.id))


#: Accent id -> its locale ("mexican" -> "es-MX"): a voice's accent tells the region its text is read for.
ACCENT_LOCALES: dict[str, str] = {a.id: a.locale for a in ACCENTS}


def accent_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a voice's accent (the message a 400 carries), or None when it can:
    a catalogue-shaped id ("southern-us") of at most MAX_ACCENT_ID_CHARS, not a display name
    ("Southern US")."""
    if len(value) > MAX_ACCENT_ID_CHARS:
        return f"accent: {len(value)} characters; the limit is {MAX_ACCENT_ID_CHARS}"
    if not _ACCENT_ID_RE.fullmatch(value):
        return f"accent: {value!r} is not a catalog accent id; send an id from GET /accents such as 'british'"
    return None
