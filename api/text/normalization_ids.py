"""Reading ids and numbers dialled, digit by digit: phone numbers ("912 345 678", "555-1234"), a
record's number ("order number 4821"), flights ("DL 123"), keypad presses and service codes ("press 1",
"*67"), extensions ("x123"), masked digits ("****1234"), digits that name a thing ("1080p", "BP 120/80",
an IP address, "401(k)") and digits mixed with letters ("COVID-19", "24/7"). A mixin of the token reader
(``api/text/normalization.py``).
"""

from __future__ import annotations

import re
from typing import Optional

from api.text.normalization_calendar import pluralize
from api.text.normalization_rules import LanguageRules
from api.text.normalization_tokens import DASHES, DOT_WORD, FRACTION_OF, RANGE_WORD, SENTENCE_END, Token, TokenContext
from api.text.normalization_units import UNIT_SYMBOLS

_EXTENSION_RE = re.compile(r"x(\d{1,5})")  # "555-0100 x123"
_KEYPAD_CODE_RE = re.compile(r"\*(?P<digits>\d{2,3})#?")  # "*67", "*69": a service code, dialled
# a mask of three or more "*", "•", "x" or "X" (more groups of two or more may follow, joined by
# "-"), then the digits it leaves: "****1234", "XXXX-XXXX-1234", "xxx-xx-1234"
_MASK_RE = re.compile(r"(?:[*•]{3,}|x{3,}|X{3,})(?:-?(?:[*•]{2,}|x{2,}|X{2,}))*")
_MASKED_DIGITS_RE = re.compile(rf"{_MASK_RE.pattern}[-\s]?(?P<digits>\d{{2,6}})")
_ELLIPSIS_DIGITS_RE = re.compile(r"(?:\.{3}|…)(?P<digits>\d{4})")  # "checking (...4821)": an account's last four
_FLIGHT_WORDS = frozenset({"flight", "flights", "flt", "flt.", "vuelo", "vuelos", "voo", "voos", "vlucht", "vluchten"})
_AIRLINE_CODE_RE = re.compile(r"[A-Z]{2}|[A-Z]\d|\d[A-Z]")  # "DL", "B6", "9W"
_IPV4_RE = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})")
_RESOLUTION_RE = re.compile(r"(480|576|720|1080|1440|2160|4320)p")
_PRESSURE_RE = re.compile(r"(\d{2,3})/(\d{1,3})")  # "120/80" after "BP"
# "401k", "401(k" (its ")" is split off as trailing punctuation), "403b", "457(b"
_PLAN_NAME_RE = re.compile(r"(?P<section>401|403|457)(?P<open>\(?)(?P<letter>[kb])")
_COUNTRY_CODE_RE = re.compile(r"\+\d{1,3}")  # "+34" before a phone number's groups
_IBAN_START_RE = re.compile(r"[A-Z]{2}\d{2}")  # "NL91", "ES91" before the account's groups of four
_IBAN_GROUP_RE = re.compile(r"[A-Z0-9]{4}")
_PIECE_RE = re.compile(r"\d+|[^\W\d_]+|\s+|.", re.UNICODE)


def stars_are_literal(raw: str) -> bool:
    """Whether the stars of ``raw`` are no Markdown: a keypad's service code ("*67") or masked
    digits ("****1234")."""
    return _is_mask(raw) or _KEYPAD_CODE_RE.fullmatch(raw.rstrip(".,;:!?")) is not None


def _is_mask(raw: str) -> bool:
    """Whether ``raw`` is masked digits or their mask ("***-**-6789", "****"), whose stars are no
    emphasis."""
    core = raw.rstrip(".,;:!?")
    return _MASKED_DIGITS_RE.fullmatch(core) is not None or _MASK_RE.fullmatch(core) is not None


class IdReading(TokenContext):
    """Ids, phone numbers, codes and digits mixed with letters."""

    def _read_area_code(self, i: int) -> tuple[Optional[str], int]:
        """"(555) 123-4567": a bracketed area code before a phone number, digit by digit."""
        tok, nxt = self.tokens[i], self._next(i)
        if not (len(tok.core) == 3 and tok.core.isdecimal() and tok.lead.endswith("(") and tok.trail == ")"):
            return None, 0
        if nxt is None or nxt.lead or not _is_phone_number(nxt.core):
            return None, 0
        return self.rules.digits(tok.core), 0

    def _after_digits_lead(self, i: int) -> bool:
        """Whether token ``i`` follows a word after which digits are read one by one ("PIN 4821",
        "your code is 123-456", "OTP: 4821"), past a copula, and past a word for "number" ("your PIN
        number is 4821") or, where adjectives follow their noun, an adjective before the copula
        ("sua senha temporária é 4821", "tu clave temporal es 4821")."""
        r = self.rules
        lead = self._word_back(i, r.copulas) if i > 0 and not self.tokens[i].lead else None
        if lead is None or self.tokens[lead].trail not in ("", ":"):
            return False
        word, before = self.tokens[lead].core.lower(), self.tokens[lead - 1] if lead > 0 else None
        if word in r.digits_lead_words:
            return True
        if before is None or before.trail or before.core.lower() not in r.digits_lead_words:
            return False
        return word in r.record_number_words or (
            r.adjective_after_noun and lead < i - 1 and word.isalpha() and self.tokens[lead].core.islower())

    def _numbers_a_record(self, i: int) -> bool:
        """Whether the number at token ``i`` is a record's (an order's, a booking's, a case's):
        after "<record> number" or "<record> #" or "no.", past "is" or a colon ("your order number
        is 4821", "case no. 5521", "pedido nº 4821"), after "número de <record>" ("su número de
        pedido es 4821"), after a Dutch "<record>nummer" ("klantnummer: 4821"), written "#4821"
        after the record's noun ("Order #4821"), or four or five digits right after it that count
        nothing ("Ticket 4521 is open"; "order 1500 units" and "order 2000" count, "case 2024" may be
        a year). A record's number is said digit by digit."""
        r, tok = self.rules, self.tokens[i]
        if not r.record_nouns:
            return False
        prev = self.tokens[i - 1]
        if tok.raw[len(tok.lead):].startswith("#"):  # "Order #4821": the sign's rest, read in its place
            return not prev.trail and prev.core.lower() in r.record_nouns
        if (not prev.trail and prev.core.lower() in r.record_nouns and tok.core.isdecimal() and len(tok.core) in (4, 5)
                and not tok.core.endswith("00") and not _YEAR_RE.fullmatch(tok.core) and not self._counts_a_plural(i)):
            return True
        lead = self._word_back(i, r.copulas)
        if lead is None or self.tokens[lead].trail not in ("", ":", ".", ".:"):
            return False
        word = self.tokens[lead].core.lower()
        if r.code == "nl" and word.endswith("nummer") and word[:-6] in r.record_nouns:
            return True  # "bestelnummer", "klantnummer"
        before = [t.core.lower() for t in self.tokens[max(0, lead - 2): lead] if not t.trail]
        if word in r.record_number_words:  # "order number", "pedido nº"
            return bool(before) and before[-1] in r.record_nouns
        # "número de pedido": the number's word, a link, the record
        return (word in r.record_nouns and len(before) == 2 and before[0] in r.record_number_words
                and before[1] in FRACTION_OF)

    def _before_its_place(self, i: int) -> bool:
        """Whether the number at token ``i`` is a postcode before its place, as an address ends after
        a comma: "Calle Mayor 5, 28013 Madrid", "Damrak 1, 1012 LG Amsterdam" (``postcode_before_place``
        against the number and the two words after it)."""
        pattern, nxt = self.rules.postcode_before_place, self._next(i)
        if pattern is None or nxt is None or self.tokens[i].trail or nxt.lead:
            return False
        if i > 0 and self.tokens[i - 1].trail != ",":
            return False
        after = self._next(i + 1)
        words = [self.tokens[i].core, nxt.core] + ([after.core] if after is not None and not nxt.trail else [])
        return pattern.fullmatch(" ".join(words)) is not None

    def _counts_a_plural(self, i: int) -> bool:
        """Whether a plural seems to follow the number at token ``i``: a lowercase word of three
        letters or more ending in "s" that is no verb of being ("1500 units"; "4521 was", "4521 is")."""
        nxt = self._next(i)
        if nxt is None or self.tokens[i].trail or nxt.lead or not nxt.core.isalpha() or not nxt.core.islower():
            return False
        return len(nxt.core) >= 3 and nxt.core.endswith("s") and nxt.core not in _BEING_WORDS

    def _flight_number(self, i: int) -> Optional[str]:
        """A flight's number, said in pairs where the language does ("Flight 2005", "flight DL
        2345" -> "twenty oh five", "DL twenty-three forty-five"), as "DL2345" written together is:
        three or four digits after "flight", or after an airline's code that follows it."""
        core = self.tokens[i].core
        if not (core.isdecimal() and len(core) in (3, 4)) or i == 0 or self.tokens[i].lead:
            return None
        before = self.tokens[max(0, i - 2): i]
        if before[-1].trail:
            return None
        if before[-1].core.lower() not in _FLIGHT_WORDS:
            if (len(before) < 2 or before[0].trail or before[0].core.lower() not in _FLIGHT_WORDS
                    or not _AIRLINE_CODE_RE.fullmatch(before[-1].core)):
                return None
        return self.rules.digit_pairs(core)

    def _airline_code_before_its_number(self, i: int) -> bool:
        """Whether token ``i`` is an airline's code with a digit ("G3", "B6") between a word for a
        flight and the flight's number ("voo G3 1234"): a pause after it keeps its digit apart from
        the number ("G três, mil duzentos...", not "G três mil duzentos...")."""
        tok, nxt = self.tokens[i], self._next(i)
        if i == 0 or tok.trail or nxt is None or nxt.lead or not (nxt.core.isdecimal() and len(nxt.core) <= 4):
            return False
        prev = self.tokens[i - 1]
        return (not prev.trail and prev.core.lower() in _FLIGHT_WORDS
                and _AIRLINE_CODE_RE.fullmatch(tok.core) is not None and any(c.isdecimal() for c in tok.core))

    def _is_id(self, i: int) -> bool:
        """Digits that name rather than count, read one by one: six or more written with no
        group separator and not round ("order 123456"; "1000000", "250500" count), a ZIP code after
        its state ("IL 62704"), a number after "PIN" or "ZIP", a record's number ("your order
        number is 4821", ``_numbers_a_record``), and a number dialled ("Call 911", "llama al 112";
        a round one counts: "call 100 people")."""
        r, core = self.rules, self.tokens[i].core
        if len(core) >= 6 and not core.endswith("00"):
            return True
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.lead or len(core) < 3:
            return False
        lead = self._word_back(i, r.copulas)  # "PIN 4821", "PIN: 4821", "your PIN is 4821", "ending in 4242"
        if lead is not None and self.tokens[lead].trail in ("", ":"):
            word = self.tokens[lead].core.lower()
            if len(core) == 4 and word in r.last_digits_phrases:  # "su tarjeta terminación 4321"
                return True
            if len(core) == 4 and lead > 0 and not self.tokens[lead - 1].trail:  # a card's last four
                if f"{self.tokens[lead - 1].core.lower()} {word}" in r.last_digits_phrases:
                    return True
        if self._after_digits_lead(i) or self._numbers_a_record(i) or self._before_its_place(i):
            return True
        if prev.trail:
            return False
        if len(core) == 5 and prev.core in r.postcode_lead_words:
            return True
        if len(core) == 5 and prev.core.lower() in r.short_code_links and i >= 3:  # "Text STOP to 55555"
            keyword, verb = self.tokens[i - 2], self.tokens[i - 3]
            if (keyword.core.isalpha() and keyword.core.isupper() and not keyword.trail.strip("\"'”’")
                    and not verb.trail and verb.core.lower() in r.dial_words):
                return True
        verb = self._word_back(i, r.dial_articles)  # "call 911", "llama al 112", "ligue para o 190"
        return not core.endswith("00") and verb is not None and self.tokens[verb].core.lower() in r.dial_words

    def _read_named_number(self, i: int) -> tuple[Optional[str], int]:
        """Digits that name a thing, said as people say that thing: an IP address ("192.168.1.1":
        each number digit by digit, "dot" between), a video resolution ("1080p": "ten eighty p"), a
        blood pressure after the language's word for it ("BP 120/80": "one twenty over eighty") and
        the US retirement plans named by their tax code section ("401(k)": "four oh one k")."""
        r, tok = self.rules, self.tokens[i]
        core = tok.core
        if (m := _IPV4_RE.fullmatch(core)) and all(int(part) <= 255 for part in m.groups()):
            return f" {r.symbol_words['.']} ".join(r.digits(part) for part in m.groups()), 0
        if m := _RESOLUTION_RE.fullmatch(core):
            return f"{r.digit_pairs(m.group(1)) or r.read_integer(m.group(1))} p", 0
        m = _PRESSURE_RE.fullmatch(core)
        lead = self._word_back(i, r.copulas) if m and i > 0 else None  # "BP 120/80", "BP was 128/82", "BP: 120/80"
        if lead is not None and self.tokens[lead].trail in ("", ":") \
                and self.tokens[lead].core.lower() in r.pressure_lead_words:
            high, low = m.group(1), m.group(2)
            said = f"{r.digit_pairs(high) or r.read_integer(high)} {r.pressure_word} {r.read_integer(low)}"
            nxt = self._next(i)
            if nxt is not None and not tok.trail and not nxt.lead and UNIT_SYMBOLS.get(nxt.core) == "mmHg":
                return f"{said} {r.units['mmHg'].many}", 1  # "120/80 mmHg": the unit after both numbers
            return said, 0
        m = _PLAN_NAME_RE.fullmatch(core)
        if m and (not m.group("open") or tok.trail.startswith(")")):
            if m.group("open"):  # the bracket is the name's, not punctuation
                self.tokens[i] = Token(tok.raw, tok.lead, tok.core, tok.trail[1:])
            section = m.group("section")  # digit by digit, English saying "oh" for 0: "four oh one k"
            said = " ".join("oh" if d == "0" else r.cardinal(int(d)) for d in section) if r.code == "en" else r.digits(section)
            return f"{said} {m.group('letter')}", 0
        return None, 0

    def _read_keypad(self, i: int) -> tuple[Optional[str], int]:
        """Keys of a phone's keypad: a service code ("*67" -> "star six seven", dialled digit by
        digit), a lone "*" or "#" after a verb that presses it ("press #" -> "press pound"), before
        or after the word for a key ("the # key", "la tecla #"), and one that goes on a list of keys that such a verb
        began in its sentence ("press 1, then #", "press 1 or # to repeat")."""
        r, tok = self.rules, self.tokens[i]
        if not r.keypad_words:
            return None, 0
        m = _KEYPAD_CODE_RE.fullmatch(tok.core)
        if m:
            said = f"{r.keypad_words['*']} {r.digits(m.group('digits'))}"
            return (f"{said} {r.keypad_words['#']}" if tok.core.endswith("#") else said), 0
        if tok.core not in r.keypad_words or tok.lead or i == 0:
            return None, 0
        prev, nxt = self.tokens[i - 1], self._next(i)
        if not prev.trail and (prev.core.lower() in r.keypad_verbs or prev.core.lower() in r.keypad_key_words):
            return r.keypad_words[tok.core], 0  # "press #", "la tecla #"
        if not tok.trail and nxt is not None and not nxt.lead and nxt.core.lower() in r.keypad_key_words:
            return r.keypad_words[tok.core], 0
        goes_on = prev.trail == "," or (not prev.trail and prev.core.lower() in r.keypad_list_words)
        return (r.keypad_words[tok.core] if goes_on and self._key_pressed_before(i) else None), 0

    def _key_pressed_before(self, i: int) -> bool:
        """Whether a verb that presses a key ("press", "dial") comes before token ``i`` in its
        sentence, at most 12 tokens back."""
        for j in range(i - 1, max(-1, i - 13), -1):
            tok = self.tokens[j]
            if j < i - 1 and any(mark in tok.trail for mark in SENTENCE_END):
                return False
            if tok.core.lower() in self.rules.keypad_verbs:
                return True
        return False

    def _read_extension(self, i: int) -> tuple[Optional[str], int]:
        """A phone number's extension written "x123" right after it: "extension one two three"
        (in the languages with an "ext." abbreviation)."""
        r, tok = self.rules, self.tokens[i]
        m = _EXTENSION_RE.fullmatch(tok.core)
        ext = r.abbreviations.get("ext.")
        prev = self.tokens[i - 1] if i > 0 else None
        if m is None or ext is None or prev is None or prev.trail.strip(",") or tok.lead:
            return None, 0
        if sum(c.isdecimal() for c in prev.core) < 7:  # "x123" after anything but a phone number is no extension
            return None, 0
        return f"{ext.expansion} {r.digits(m.group(1))}", 0

    def _read_masked_digits(self, i: int) -> tuple[Optional[str], int]:
        """The last digits of a card or account shown behind a mask: "****1234", "XXXX-1234",
        "•••• 1234", "(...1234)" -> "ending in one two three four" (the mask is not said; nor is the phrase again
        after "ending in")."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        m = _MASKED_DIGITS_RE.fullmatch(tok.core) or _ELLIPSIS_DIGITS_RE.fullmatch(tok.core)
        consumed = 0
        if (m is None and _MASK_RE.fullmatch(tok.core) and nxt is not None and not tok.trail and not nxt.lead
                and not self.line_starts[i + 1]):  # "***" alone on its line is a Markdown rule
            m, consumed = _MASKED_DIGITS_RE.fullmatch(tok.core + nxt.core), 1
        if m is None:
            return None, 0
        said = r.digits(m.group("digits"))
        prev = self.tokens[i - 2: i]
        after_phrase = (len(prev) == 2 and not prev[0].trail and not prev[1].trail
                        and f"{prev[0].core} {prev[1].core}".lower() in r.last_digits_phrases)
        if r.masked_digits_phrase and not after_phrase:
            noun = self.tokens[i - 1] if i > 0 and not self.tokens[i - 1].trail else None
            masculine = r.masked_digits_masculine is not None and noun is not None and r.noun_gender(noun.core) == "m"
            said = f"{r.masked_digits_masculine if masculine else r.masked_digits_phrase} {said}"
        return said, consumed

    def _dialled_groups(self, i: int) -> bool:
        """Whether token ``i`` is a phone number's digit groups by where it stands: after an area
        code in brackets ("(21) 3003-4000", "(555) 100-2000"), or seven digits or more after a
        verb that dials and before no plural ("Ligue 3003-4000"; "call 100-200 customers" and
        "call 3000-4000 customers" stay ranges)."""
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or self.tokens[i].lead:
            return False
        if prev.lead.endswith("(") and prev.trail.startswith(")") and prev.core.isdecimal() and 2 <= len(prev.core) <= 3:
            return True
        verb = self._word_back(i, self.rules.dial_articles)
        return (verb is not None and self.tokens[verb].core.lower() in self.rules.dial_words
                and sum(c.isdecimal() for c in self.tokens[i].core) >= 7 and not self._counts_a_plural(i))

    def _after_last_digits_phrase(self, i: int) -> bool:
        """Whether token ``i`` follows "ending in", "termina em" and the like: what follows is the
        end of a number read digit by digit ("Seu CPF termina em 123-45")."""
        if i < 2 or self.tokens[i].lead:
            return False
        before = self.tokens[i - 2: i]
        phrase = " ".join(t.core.lower() for t in before)
        return not any(t.trail for t in before) and phrase in self.rules.last_digits_phrases

    def _iban_groups_follow(self, i: int) -> bool:
        """Whether three groups of four letters or digits follow token ``i``, nothing between them,
        as an IBAN's account is written after its country and check digits ("NL91 ABNA 0417 1643 00")."""
        groups = self.tokens[i: i + 4]
        return (len(groups) == 4 and not any(t.trail for t in groups[:3]) and not any(t.lead for t in groups[1:])
                and all(_IBAN_GROUP_RE.fullmatch(t.core) for t in groups[1:]))

    def _read_mixed(self, i: int) -> tuple[Optional[str], int]:
        """Digits inside other text: "COVID-19" -> "COVID nineteen", "10-20" -> "ten to twenty",
        "555-1234" -> "five five five, one two three four" (see ``_is_code``)."""
        r, tok = self.rules, self.tokens[i]
        core = tok.core
        if not any(c.isdecimal() for c in core):
            return None, 0
        if _IBAN_START_RE.fullmatch(core) and self._iban_groups_follow(i):
            return f"{core[:2]} {r.digits(core[2:])}", 0  # an IBAN's country and check digits: "NL91 ABNA 0417..."
        # "1,000-2,000" (en) / "1.000-2.000" (es): grouped numbers are one number each, so the run
        # is a range of two, not four digit groups read as a code; after a code's word the groups
        # are the code's ("CPF: 123.456.789-09")
        pieces = _PIECE_RE.findall(core)
        if (self._after_digits_lead(i) or self._after_last_digits_phrase(i) or self._dialled_groups(i)) and all(
                p.isdecimal() or p in DASHES or p in "./" for p in pieces):
            code = set(range(len(pieces)))  # "your code is 123-456": digit groups, not a range
        else:
            pieces = _PIECE_RE.findall(_ungroup_numbers(core, r.group_sep))
            code = _code_pieces(pieces) | _id_digits(pieces)
        if _is_lettered_id(pieces):
            code |= set(range(2, len(pieces)))  # "HO-3-449821": a policy's id, not a range
        if self._numbers_a_record(i):  # "Part no. 4471-B", "case number 10-20": digits one by one, no range
            code |= {k for k, piece in enumerate(pieces)
                     if piece.isdecimal() or piece in DASHES and _between_digits(pieces, k)}
        if (  # "(555)123-4567": the area code belongs to the number
            tok.lead.endswith("(") and len(pieces) > 2 and len(pieces[0]) == 3 and pieces[0].isdecimal()
            and pieces[1] == ")" and _is_phone_number("".join(pieces[2:]))
        ):
            code.add(0)
        words: list[str] = []
        said_before: set[int] = set()  # pieces said with the one before them: "st" of "1st", "s" of "1990s"
        for k, piece in enumerate(pieces):
            if k in said_before:
                continue
            if k in code:
                if piece.isdecimal():
                    words.append(r.digits(piece))
                else:  # the break between groups is a short pause, as when it is said
                    words[-1] += ","
            elif piece.isdecimal() and _is_quarter_of_year(pieces) and k == 3:
                # "Q3-2024": "Q three twenty twenty-four"
                words.append(r.bare_year(int(piece)) or r.read_integer(piece))
            elif piece.isdecimal() and r.code == "en" and pieces[k + 1:] == ["ers"] and 10 < int(piece) < 100 \
                    and int(piece) % 10:
                said = r.read_integer(piece)  # "the 49ers", "the 76ers": "forty-niners", "seventy-sixers"
                words.append(said + ("rs" if said.endswith("e") else "ers"))
                said_before.add(k + 1)
            elif piece.isdecimal():
                # "1st-class", "3rd-party": digits and the ordinal's letters, then a break
                ordinal = (r.match_ordinal(piece + pieces[k + 1])
                           if k + 1 < len(pieces) and pieces[k + 1].isalpha()
                           and (k + 2 == len(pieces) or pieces[k + 2] in DASHES or pieces[k + 2] == "/") else None)
                if ordinal is not None:
                    said_before.add(k + 1)
                year = _year_after_word(pieces, k, r)
                if year is not None and k + 1 < len(pieces):
                    said_before.add(k + 1)
                # "UA1234", "A380", "RX7900": three or four digits after capitals name a flight or
                # a model, read in pairs where the language does ("UA twelve thirty-four"); so do
                # they after capitals and a dash when nothing else follows ("F-150", "A-380")
                named = (r.digit_pairs(piece) if k > 0 and _CAPITALS_RE.fullmatch(pieces[k - 1])
                         and (k + 1 == len(pieces) or not pieces[k + 1].isalpha()) else None)
                if (named is None and k == 2 == len(pieces) - 1 and pieces[1] in DASHES
                        and _CAPITALS_RE.fullmatch(pieces[0])):
                    named = r.digit_pairs(piece)
                if (named is None and k == 0 and len(piece) == 4 and len(pieces) == 3 and pieces[1] in DASHES
                        and re.fullmatch(r"[A-Z]{2,4}", pieces[2])):
                    named = r.digit_pairs(piece)  # a form's name: "1099-INT", "1040-SR" ("ten ninety-nine")
                words.append(ordinal or named or year or _year_of_range(pieces, k, r) or r.read_integer(piece))
            elif piece.isalpha():
                words.append(piece)
            elif piece in DASHES and _is_quarter_of_year(pieces):
                continue  # a quarter or a half and its year, no range: "Q3-2024", "H1-2025"
            elif piece in "-–.,:" and _between_digits(pieces, k):
                # between digits: "10-20" is a range, "3.5.1" a version; "," and ":" just separate
                if piece in "-–":
                    words.append(RANGE_WORD[r.code])
                elif piece == ".":
                    words.append(DOT_WORD[r.code])
            elif piece in DASHES and _between_labels(pieces, k):
                words.append(RANGE_WORD[r.code])  # "Q1-Q3", "FY24-FY26": a range of labelled numbers
            elif piece == "&":
                words.append(r.ampersand_word)
            elif piece == "+" and k == len(pieces) - 1 and k > 0 and pieces[k - 1].isdecimal():
                words.append(r.symbol_words["+"])  # "HDR10+", "USB3+": a name's "plus"
            elif piece in "-–/_" or piece.isspace():
                continue  # a word break
            elif piece in ("'", "’") and k + 1 < len(pieces) and _year_after_word(pieces, k + 1, r):
                continue  # the elision of "mid-'70s"
            elif words:
                words[-1] += piece  # other punctuation stays glued to the word before it
            else:
                words.append(piece)
        return (" ".join(words) if words else None), 0


def _is_lettered_id(pieces: list[str]) -> bool:
    """Whether ``pieces`` are capitals, a dash and two or more digit groups joined by dashes: a
    policy's or a claim's id ("HO-3-449821", "AB-12-345"), its digits read one by one."""
    return (len(pieces) >= 5 and re.fullmatch(r"[A-Z]{1,4}", pieces[0]) is not None and pieces[1] in DASHES
            and all(p.isdecimal() for p in pieces[2::2]) and all(p in DASHES for p in pieces[3::2])
            and pieces[-1].isdecimal())


def _is_quarter_of_year(pieces: list[str]) -> bool:
    """Whether ``pieces`` are a quarter or a half of a year and the year, joined by a dash:
    "Q3-2024", "H1-2025" (not a range from three to two thousand and twenty-four)."""
    if len(pieces) != 4 or pieces[2] not in DASHES or len(pieces[3]) != 4 or pieces[3][:2] not in ("19", "20"):
        return False
    return (pieces[0] == "Q" and pieces[1] in ("1", "2", "3", "4")) or (pieces[0] == "H" and pieces[1] in ("1", "2"))


def _ungroup_numbers(core: str, group_sep: str) -> str:
    """``core`` with the locale's thousands separators taken out of every grouped number
    ("1,000-2,000" -> "1000-2000" in English); a run like "555.123.4567" is no such number (its
    last group has four digits) and stays as it is."""
    g = re.escape(group_sep)
    grouped = re.compile(rf"(?<![\d{g}])\d{{1,3}}(?:{g}\d{{3}})+(?![\d{g}])")
    return grouped.sub(lambda m: m.group().replace(group_sep, ""), core)


def _between_digits(pieces: list[str], k: int) -> bool:
    return 0 < k < len(pieces) - 1 and pieces[k - 1].isdecimal() and pieces[k + 1].isdecimal()


def _between_labels(pieces: list[str], k: int) -> bool:
    """Whether the piece at ``k`` joins two numbers with the same letters before them: "Q1-Q3"."""
    return (2 <= k < len(pieces) - 2 and pieces[k - 1].isdecimal() and pieces[k + 2].isdecimal()
            and pieces[k + 1].isalpha() and pieces[k + 1] == pieces[k - 2])


_BEING_WORDS = frozenset({"was", "has", "is", "es", "fue", "está", "foi", "são"})
_YEAR_RE = re.compile(r"(?:19|20)\d\d")
_CAPITALS_RE = re.compile(r"[A-Z]{1,3}")  # an airline's or a maker's code before a number
_GROUP_SEPARATORS = "-–.,:"


def _code_pieces(pieces: list[str]) -> set[int]:
    """Indices of the pieces (digit groups and the separators between them) of every run of
    digit groups that ``_is_code`` says is a phone number or another code."""
    out: set[int] = set()
    k = 0
    while k < len(pieces):
        if not pieces[k].isdecimal():
            k += 1
            continue
        end = k
        while end + 2 < len(pieces) and pieces[end + 1] in _GROUP_SEPARATORS and pieces[end + 2].isdecimal():
            end += 2
        # "1-800-FLOWERS": digit groups and a word of capitals after a dash are a phone number
        vanity = (end > k and end + 2 < len(pieces) and pieces[end + 1] in DASHES
                  and pieces[end + 2].isupper() and len(pieces[end + 2]) >= 3)
        if vanity or _is_code(pieces[k : end + 1 : 2], set(pieces[k + 1 : end : 2])):
            out.update(range(k, end + 1))
        k = end + 1
    return out


def phone_groups(tokens: list[Token]) -> dict[int, str]:
    """Token indices of phone numbers written as digit groups between spaces ("912 345 678",
    "+1 555 123 4567", "020 123 4567"), each with the comma said after it (none after the last).
    A run needs three groups (two after a country code "+34"), seven digits or more and a group
    of three or more digits, and is not all round: "10 20 30" and "100 200 300" are counts."""
    out: dict[int, str] = {}
    i = 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and _is_digit_group(tokens[j]) and (j == i or not (tokens[j - 1].trail or tokens[j].lead)):
            j += 1
        groups = [t.core for t in tokens[i:j]]
        after_code = i > 0 and not tokens[i - 1].trail and _COUNTRY_CODE_RE.fullmatch(tokens[i - 1].core) is not None
        if (
            len(groups) >= (2 if after_code else 3)
            and sum(map(len, groups)) >= 7
            and any(len(g) >= 3 for g in groups)
            and not all(g.endswith("00") for g in groups)
        ):
            out.update((k, "," if k < j - 1 else "") for k in range(i, j))
        elif j == i and _TRUNK_AREA_RE.fullmatch(tokens[i].core) and not tokens[i].trail:
            # "020-123 4567", "085-123 45 67": a trunk "0" and the area code dashed to the first group,
            # then the other groups, all digit by digit
            k = i + 1
            while (k < len(tokens) and k - i <= 3 and not tokens[k].lead and not tokens[k - 1].trail
                   and _is_digit_group(tokens[k]) and 2 <= len(tokens[k].core) <= 4):
                k += 1
            if k > i + 1 and sum(len(t.core) for t in tokens[i:k]) >= 10:  # with the dash: 9 digits or more
                out.update((m, "," if m < k - 1 else "") for m in range(i, k))
        elif (j == i and _AREA_EXCHANGE_RE.fullmatch(tokens[i].core) and not tokens[i].trail and i + 1 < len(tokens)
              and not tokens[i + 1].lead and len(tokens[i + 1].core) == 4 and tokens[i + 1].core.isdecimal()
              and (i + 2 == len(tokens) or tokens[i + 1].trail or not _is_digit_group(tokens[i + 2]))
              and not tokens[i + 1].core.endswith("00")):
            out.update({i: ",", i + 1: ""})  # "555-123 4567": a North American number's area code and exchange
        i = max(j, i + 1)
    return out


_TRUNK_AREA_RE = re.compile(r"0\d{1,3}-\d{3,4}")  # a trunk "0", the area code and the first group: "020-123"
_AREA_EXCHANGE_RE = re.compile(r"[2-9]\d{2}-\d{3}")  # "555-123" before "4567"


def _is_digit_group(tok: Token) -> bool:
    return 1 <= len(tok.core) <= 5 and tok.core.isdecimal()  # "11 98765 4321" (Brazil)


def _id_digits(pieces: list[str]) -> set[int]:
    """Indices of the digit groups of an id of letters and digits (a dash between them or not),
    read digit by digit: five digits or more ("A12345", "A-12345", "1Z999AA1"), or three or more
    with letters on both sides ("ABC123DEF", "ABC-1234-XYZ").
    Short groups after letters are names and numbers: "MP3", "COVID-19", "B12", "UA1234"; so is
    a decade ("mid-1990s")."""
    out: set[int] = set()
    for k, piece in enumerate(pieces):
        if not piece.isdecimal():
            continue
        before = k > 0 and (pieces[k - 1].isalpha() or (k > 1 and pieces[k - 1] in DASHES and pieces[k - 2].isalpha()))
        # a lowercase word after a dash makes the number an adjective's count, no id: "100,000-mile"
        after = k + 1 < len(pieces) and (pieces[k + 1].isalpha() or (
            k + 2 < len(pieces) and pieces[k + 1] in DASHES and pieces[k + 2].isalpha()
            and not (pieces[k + 2].islower() and len(pieces[k + 2]) >= 3)))
        if pieces[k + 1:] == ["s"] and len(piece) == 4 and piece.endswith("0"):
            after = False  # a decade's "s": "mid-1990s"
        if (before or after) and (len(piece) >= 5 or (before and after and len(piece) >= 3)):
            out.add(k)
    return out


def _is_phone_number(core: str) -> bool:
    """"123-4567" after an area code "(555)": a code that starts with a three-digit group."""
    pieces = _PIECE_RE.findall(core)
    return bool(pieces) and len(pieces[0]) == 3 and _code_pieces(pieces) == set(range(len(pieces)))


def _is_code(groups: list[str], separators: set[str]) -> bool:
    """Whether digit groups joined by ``separators`` are read digit by digit: a phone number,
    ZIP+4 code or id ("1-800-555-1234", "555-1234", "94103-1234", "555.123.4567"), not a range
    ("10-20", "1990-1995"), a version or IP address ("3.11.4", "192.168.1.1") or a decimal."""
    if len(groups) < 2:
        return False
    if separators <= DASHES:
        return len(groups) >= 3 or not _is_range(groups[0], groups[1])
    if separators == {"."}:  # phone numbers only: the last two groups are 3 and 4 digits long
        return len(groups) >= 3 and len(groups[-2]) == 3 and len(groups[-1]) == 4
    return False  # mixed separators ("1,000-2,000"): no code


def _year_of_range(pieces: list[str], k: int, rules: LanguageRules) -> Optional[str]:
    """``pieces[k]`` read as a year (``bare_year``, as a lone "1999" is) where it is an end of a
    range ("1990-1995", "1914-18", "1200-1500 calories": English says "twelve hundred to fifteen
    hundred") or a year of a season ("2019/20", "2019/2020"); None elsewhere, and in the
    languages whose years are cardinals."""
    year = pieces[k]
    if len(year) != 4 or not year.isdecimal():
        return None

    def number_at(j: int) -> Optional[str]:
        return pieces[j] if 0 <= j < len(pieces) and pieces[j].isdecimal() else None

    after, before = number_at(k + 2), number_at(k - 2)
    link_after = pieces[k + 1] if after is not None else None
    in_range = (link_after in DASHES and _is_range(year, after)) or (
        before is not None and pieces[k - 1] in DASHES and _is_range(before, year))
    season = (link_after == "/" and after is not None and (
        (len(after) == 2 and int(after) == (int(year) + 1) % 100) or (len(after) == 4 and int(after) == int(year) + 1))
    ) or (before is not None and pieces[k - 1] == "/" and len(before) == 4 and int(year) == int(before) + 1)
    return rules.bare_year(int(year)) if in_range or season else None


def _year_after_word(pieces: list[str], k: int, rules: LanguageRules) -> Optional[str]:
    """``pieces[k]`` read as a year (``bare_year``, as a lone "2024" is) where it ends the token
    after a word and a dash ("mid-2024", "pre-2020", "Class-of-2024"), and with an "s" after it as
    an English decade ("mid-1990s" -> "mid nineteen nineties", "mid-70s" and "mid-'70s" -> "mid
    seventies"); None elsewhere, and in the languages whose years are cardinals."""
    year, rest = pieces[k], pieces[k + 1:]
    elided = k >= 3 and pieces[k - 1] in ("'", "’")  # "mid-'70s"
    before = k - 1 - elided
    if not year.isdecimal() or before < 1 or pieces[before] not in DASHES or not pieces[before - 1].isalpha():
        return None
    if len(year) == 2 and rest == ["s"] and year.endswith("0") and year != "00" and rules.code == "en":
        return pluralize(rules.cardinal(int(year)))  # "mid-70s": a decade, or temperatures in the seventies
    if len(year) != 4 or elided:
        return None
    said = rules.bare_year(int(year))
    if said is None or not rest:
        return said
    return pluralize(said) if rest == ["s"] and year.endswith("0") and rules.code == "en" else None


def _is_range(a: str, b: str) -> bool:
    """Whether "a-b" is a range of numbers. Short ones are ("10-20", "9-5", "1990-95"); between
    numbers of three digits or more only an ascending pair of three-digit numbers ("pages
    123-145"), a pair below 200 either way (a score: "112-108"), years ("1990-1995") or a round
    upper bound ("500-1000") is: phone numbers ("555-1234"), ZIP+4 ("94103-1234") and ids are not
    ranges, nor is anything with a leading 0."""
    if any(len(g) > 1 and int(g[0]) == 0 for g in (a, b)):
        return False
    if min(len(a), len(b)) < 3:
        return True
    if len(a) == len(b) == 3 and int(a) < 200 and int(b) < 200:
        return True  # a score, whichever side won: "112-108"
    if (len(a), a) >= (len(b), b):  # no leading zeros: the longer number is the larger (no int() of 5,000 digits)
        return False
    years = all(len(g) == 4 and 1000 <= int(g) <= 2099 for g in (a, b))
    return (len(a) == len(b) == 3) or years or int(b[-2:]) == 0
