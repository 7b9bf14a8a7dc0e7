"""Email addresses and web addresses, read the way people say them.

A voice agent reads out "support@acme.com" and "https://docs.acme.io/setup"; handed as they are,
Gepard says "support acme com" at best. ``read_address`` reads a whole token core that is one:

- an email: "john.doe@gmail.com" -> "john dot doe at gmail dot com";
- a web address with a scheme or "www.": "https://www.acme.io/docs" -> "w w w dot acme dot io
  slash docs" (the scheme is not said, nor a query or fragment after "?" or "#");
- a bare domain, only with a common top-level domain written in lowercase, so that a missing
  space after a full stop ("done.So", "end.Next") is not taken for one: "acme.com", "acme.co.uk",
  "ups.com/track?id=1" (a query only after a path, and not said);
- a file's name with a common extension in lowercase: "report_v2.pdf" -> "report underscore v
  two dot pdf" (its period is no full stop).

Letters stay as written; digits are read one by one ("mp3" -> "mp three", port "8080" -> "eight
zero eight zero"); ".", "@", "/", "-" and "_" are the language's words for them
(``LanguageRules.symbol_words``).
"""

from __future__ import annotations

import re
from typing import Optional

from api.text.normalization_rules import LanguageRules

__all__ = ["read_address"]

# Top-level domains that make a bare "name.tld" a web address (with a scheme or "www." any will do).
# None that is also a word ("at", "in", "it", "me", "no", "so", "be", "us"): "arrived.at noon".
_COMMON_TLDS = (
    "com|org|net|edu|gov|io|ai|dev|app|co|info|biz|tv|uk|ca|au|de|fr|es|nl|pt|br|mx|ar|"
    "cl|jp|cn|eu|ch|se|dk|fi|ie|nz|za|ly|gg|sh|xyz|tech|site|online|store|cloud"
)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*\.[A-Za-z]{{2,24}}"
_EMAIL_RE = re.compile(rf"[A-Za-z0-9](?:[A-Za-z0-9._+-]{{0,62}}[A-Za-z0-9])?@{_DOMAIN}")
_PATH = r"(?::\d{1,5})?(?:/[^\s?#]*)?(?:[?#]\S*)?"
_URL_RE = re.compile(rf"(?:(?P<scheme>https?://)(?P<host>{_DOMAIN})|(?P<www>www\.{_DOMAIN})){_PATH}", re.IGNORECASE)
# case kept: a lowercase top-level domain, so "done.So" (a missing space) is no address
# a query or fragment only after a path ("ups.com/track?id=1"): "acme.com?" is a question
_BARE_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.(?:{_COMMON_TLDS})(?:/[^\s?#]*(?:[?#]\S*)?)?")
_FILE_EXTENSIONS = "pdf|docx?|xlsx?|pptx?|csv|txt|rtf|png|jpe?g|gif|svg|heic|zip|mp3|mp4|mov|wav|html?|json|xml|ics|apk|dmg|exe"
_FILE_RE = re.compile(rf"[A-Za-z0-9][\w-]*(?:\.[\w-]+)*\.(?:{_FILE_EXTENSIONS})")
_PIECE_RE = re.compile(r"[^\W\d_]+|\d+|.")


def read_address(core: str, rules: LanguageRules) -> Optional[str]:
    """The words for an email or web address or a file's name (module docstring), or None when
    ``core`` is none."""
    if "." not in core:  # every form has one: most tokens are out at once
        return None
    if _EMAIL_RE.fullmatch(core):
        return _say(core, rules)
    m = _URL_RE.fullmatch(core)
    if m:
        return _say(_without_query(core[len(m.group("scheme") or ""):]), rules)
    if _BARE_RE.fullmatch(core):
        return _say(_without_query(core), rules)
    if _FILE_RE.fullmatch(core):
        return _say(core, rules)
    return None


def _without_query(address: str) -> str:
    return re.split(r"[?#]", address, maxsplit=1)[0].rstrip("/")


def _say(address: str, rules: LanguageRules) -> str:
    words = []
    for piece in _PIECE_RE.findall(address):
        if piece.isdecimal():
            words.append(rules.digits(piece))
        elif piece.isalpha():
            words.append(" ".join(piece) if piece.lower() == "www" else piece)
        elif piece in rules.symbol_words:
            words.append(rules.symbol_words[piece])
        elif piece == ":":
            continue  # before a port
        else:
            words.append(piece)
    return " ".join(words)
