"""Every example in docs/text-normalisation.md is what the server says: the page is the tests'
table, so it cannot drift from the rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api.text.normalization import normalize

DOC = Path(__file__).resolve().parents[3] / "docs" / "text-normalisation.md"
LANGUAGES = {"English": "en", "Spanish": "es", "Portuguese": "pt", "Dutch": "nl"}
# | Language | `written` | said |, the language maybe with a locale: "English (en-GB)"
_ROW_RE = re.compile(r"^\| (?P<language>\w+)(?: \((?P<locale>[a-z]{2}-[A-Z]{2})\))? \| `(?P<written>[^`]+)` \| "
                     r"(?P<said>[^|]+?) \|$")


def _examples() -> list[tuple[str, str, str]]:
    rows = [m for line in DOC.read_text(encoding="utf-8").splitlines() if (m := _ROW_RE.match(line))]
    for m in rows:
        assert m.group("locale") is None or m.group("locale").startswith(LANGUAGES[m.group("language")] + "-"), m.group()
    return [(m.group("locale") or LANGUAGES[m.group("language")], m.group("written"), m.group("said")) for m in rows]


def test_every_table_row_is_an_example_in_every_language():
    rows = [line for line in DOC.read_text(encoding="utf-8").splitlines()
            if line.startswith("|") and not line.startswith(("| Language |", "|---"))]
    assert [row for row in rows if not _ROW_RE.match(row)] == []  # none left out of the check
    examples = _examples()
    assert len(examples) >= 60
    assert {language.split("-")[0] for language, _, _ in examples} == set(LANGUAGES.values())


@pytest.mark.parametrize("language, written, said", _examples())
def test_each_example_is_read_as_the_page_says(language, written, said):
    assert normalize(written, language).text == said
