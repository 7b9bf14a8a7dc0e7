"""api/synthesis.py ``speaking_language``: what a request is read in, given its voice's locale (the
routes' end of it is in tests/api/routes/test_voices.py)."""

from __future__ import annotations

import pytest

from api.synthesis import speaking_language


@pytest.mark.parametrize("requested, voice, spoken", [
    (None, "es-MX", "es-MX"),  # LiveKit's "language": null
    ("", "es-MX", "es-MX"),
    ("es", "es-MX", "es-MX"),  # the voice's language with no region: the voice's region
    ("ES", "es-MX", "es-MX"),
    ("es-ES", "es-MX", "es-ES"),  # a region asked for wins
    ("es_ES", "es-MX", "es_ES"),
    ("en", "es-MX", "en"),  # so does another language (a Spanish voice reading English)
    ("en", "en", "en"),
    (None, None, None),  # no voice locale known: the server's default
    ("pt", None, "pt"),
])
def test_a_request_is_read_in_its_own_language_else_its_voices(requested, voice, spoken):
    assert speaking_language(requested, voice) == spoken
