"""Dutch readings: "1.234,5", "€ 3,50", "1e"/"2de", "05-03-2024", "15:45", "bijv."."""

from __future__ import annotations

import re
from typing import Optional

from api.text.normalization_rules import (
    SOUTH_AMERICAN_PESOS, Abbreviation, CurrencyNames, LanguageRules, UnitNames, spell,
)

__all__ = ["DutchRules"]

_ORDINAL_RE = re.compile(r"(\d+)(e|ste|de)")


class DutchRules(LanguageRules):
    code = "nl"
    duration_leads = frozenset({"duurt", "duren", "duurde", "duurden"})  # "het duurt 1h30"
    decimal_sep = ","
    group_sep = "."
    lenient_decimal = True
    time_unit = "uur"
    minus_word = "min"
    decimal_word = "komma"
    two_decimals_as_number = True
    percent_word = "procent"
    currency_and_word = "en"
    ampersand_word = "en"
    months = (
        "januari", "februari", "maart", "april", "mei", "juni",
        "juli", "augustus", "september", "oktober", "november", "december",
    )
    currencies = {
        "USD": CurrencyNames(("dollar", "dollar"), ("cent", "cent")),
        "EUR": CurrencyNames(("euro", "euro"), ("cent", "cent")),
        "GBP": CurrencyNames(("pond", "pond"), ("penny", "pence")),
        "JPY": CurrencyNames(("yen", "yen"), ("sen", "sen")),
        "BRL": CurrencyNames(("real", "reais"), ("centavo", "centavos")),
        "MXN": CurrencyNames(("peso", "peso"), ("centavo", "centavo")),
        "INR": CurrencyNames(("roepie", "roepie"), ("paisa", "paise")),
        "CAD": CurrencyNames(("Canadese dollar", "Canadese dollar"), ("cent", "cent")),
        "AUD": CurrencyNames(("Australische dollar", "Australische dollar"), ("cent", "cent")),
        **{code: CurrencyNames(("peso", "peso"), ("centavo", "centavo")) for code in SOUTH_AMERICAN_PESOS.values()},
        "PEN": CurrencyNames(("sol", "sol"), ("céntimo", "céntimo")),
    }
    scale_words = {
        "k": ("duizend", "duizend"),
        "m": ("miljoen", "miljoen"),
        "b": ("miljard", "miljard"),
        "bn": ("miljard", "miljard"),
        "mln": ("miljoen", "miljoen"),
        "mld": ("miljard", "miljard"),
        "t": ("biljoen", "biljoen"),  # 10**12: "€4 biljoen", "€1,2T" (money only)
    }
    # "€5 mln", "€2,5 mld.": the short forms written apart too
    spelled_scales = {"duizend": "k", "miljoen": "m", "miljard": "b", "biljoen": "t", "mln": "mln", "mld": "mld"}
    short_scales = {"mln": "mln", "mld": "mld"}
    power_words = {2: "kwadraat", 3: "tot de derde macht"}
    power_word = "tot de macht"
    symbol_words = {"@": "apenstaartje", ".": "punt", "/": "slash", "-": "streepje", "_": "underscore",
                    "+": "plus", "=": "is", "±": "plus of min", "#": "nummer", "~": "ongeveer", "×": "keer", "x": "keer", "per": "per",
                    "out of": "uit", "<": "minder dan", ">": "meer dan", "≤": "hoogstens", "≥": "minstens"}
    fraction_names = {d: (name, name) for d, name in {
        2: "half", 3: "derde", 4: "kwart", 5: "vijfde", 6: "zesde", 7: "zevende", 8: "achtste", 9: "negende",
        10: "tiende"}.items()}  # "twee derde", "drie kwart"
    and_a_half = "en een half"
    # units that are het-words: "een half uur", "een half pond" (and "een halve liter")
    neuter_units = frozenset({"uur", "pond", "ons", "jaar"})
    date_lead_words = frozenset({"op", "tot", "vanaf"})
    dash_date_lead_words = frozenset({"op", "vanaf", "t/m", "t.e.m."})  # "tot 10-12 personen" is a range
    pressure_lead_words = frozenset({"bloeddruk"})
    roman_lead_words = frozenset({"hoofdstuk", "deel", "boek", "fase", "type", "klasse", "sectie", "niveau", "titel",
                                  "artikel", "categorie", "bedrijf"})
    month_abbreviations = {
        "jan": "januari", "feb": "februari", "mrt": "maart", "apr": "april", "jun": "juni", "jul": "juli",
        "aug": "augustus", "sep": "september", "sept": "september", "okt": "oktober", "nov": "november",
        "dec": "december",
    }
    weekday_abbreviations = {
        "ma": "maandag", "di": "dinsdag", "wo": "woensdag", "do": "donderdag", "vr": "vrijdag",
        "za": "zaterdag", "zo": "zondag",
    }
    postcode_before_place = re.compile(r"[1-9]\d{3} [A-Z]{2}(?: [A-Z][a-z]+)?")  # "1012 LG Amsterdam"
    sequence_words = frozenset(
        "stap pagina vraag deel foto afbeelding aflevering ronde niveau fase les module".split())
    sequence_of_word = "van"
    digits_lead_words = frozenset({"pin", "pincode", "postcode", "code", "otp", "verificatiecode", "bevestigingscode",
                                   "inlogcode", "beveiligingscode", "toegangscode"})
    last_digits_phrases = frozenset({"eindigend op", "eindigt op"})
    # "bestelnummer", "klantnummer" (a compound with "nummer"), "bestelling nr."
    record_nouns = frozenset({"bestel", "bestelling", "klant", "factuur", "referentie", "reservering", "dossier",
                              "order", "ticket", "polis", "zaak", "model", "artikel", "onderdeel"})
    record_number_words = frozenset({"nummer", "nr", "nr.", "#"})
    masked_digits_phrase = "eindigend op"
    keypad_words = {"*": "sterretje", "#": "hekje"}
    keypad_verbs = frozenset({"op", "toets", "kies"})
    keypad_key_words = frozenset({"toets"})
    keypad_list_words = frozenset({"of", "en", "dan"})  # "druk op #"
    dial_words = frozenset({"bel", "belt", "bellen"})
    dial_articles = frozenset({"naar"})
    copulas = frozenset({"is", "was"})
    rooms = {"slpk": UnitNames("slaapkamer", "slaapkamers"), "badk": UnitNames("badkamer", "badkamers"),
             "pers": UnitNames("persoon", "personen")}
    units = {  # after a number most units keep their singular: "vijf kilometer", "tien liter"
        key: UnitNames(one, many) for key, (one, many) in {
            "km": ("kilometer", "kilometer"), "m": ("meter", "meter"), "cm": ("centimeter", "centimeter"),
            "mm": ("millimeter", "millimeter"), "mi": ("mijl", "mijl"), "ft": ("voet", "voet"),
            "in": ("inch", "inch"),
            "kg": ("kilogram", "kilogram"), "g": ("gram", "gram"), "mg": ("milligram", "milligram"),
            "lb": ("pond", "pond"), "oz": ("ons", "ons"), "l": ("liter", "liter"),
            "floz": ("vloeibare ons", "vloeibare ons"),
            "ml": ("milliliter", "milliliter"),
            "piece": ("stuk", "stuks"),
            "acre": ("acre", "acre"),
            "m2": ("vierkante meter", "vierkante meter"), "km2": ("vierkante kilometer", "vierkante kilometer"),
            "cm2": ("vierkante centimeter", "vierkante centimeter"),
            "mm2": ("vierkante millimeter", "vierkante millimeter"), "ft2": ("vierkante voet", "vierkante voet"),
            "m3": ("kubieke meter", "kubieke meter"), "cm3": ("kubieke centimeter", "kubieke centimeter"),
            "kg/m2": ("kilogram per vierkante meter", "kilogram per vierkante meter"),
            "km/h": ("kilometer per uur", "kilometer per uur"), "mph": ("mijl per uur", "mijl per uur"),
            "mpg": ("mijl per gallon", "mijl per gallon"), "star": ("ster", "sterren"),
            "m/s": ("meter per seconde", "meter per seconde"),
            "°C": ("graad Celsius", "graden Celsius"), "°F": ("graad Fahrenheit", "graden Fahrenheit"),
            "°": ("graad", "graden"),
            "KB": ("kilobyte", "kilobyte"), "MB": ("megabyte", "megabyte"), "GB": ("gigabyte", "gigabyte"),
            "TB": ("terabyte", "terabyte"),
            "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"),
            "GHz": ("gigahertz", "gigahertz"),
            "bps": ("bit per seconde", "bit per seconde"), "kbps": ("kilobit per seconde", "kilobit per seconde"),
            "bp": ("basispunt", "basispunten"),  # basis points: "25 bps" (UNDER_A_THOUSAND)
            "Mbps": ("megabit per seconde", "megabit per seconde"),
            "Gbps": ("gigabit per seconde", "gigabit per seconde"),
            "fps": ("beeld per seconde", "beelden per seconde"), "bpm": ("slag per minuut", "slagen per minuut"),
            "mmHg": ("millimeter kwik", "millimeter kwik"),
            "mg/dL": ("milligram per deciliter", "milligram per deciliter"),
            "mmol/L": ("millimol per liter", "millimol per liter"),
            "W": ("watt", "watt"), "kW": ("kilowatt", "kilowatt"), "MW": ("megawatt", "megawatt"),
            "kWh": ("kilowattuur", "kilowattuur"),
            "ms": ("milliseconde", "milliseconden"), "s": ("seconde", "seconden"), "min": ("minuut", "minuten"),
            "h": ("uur", "uur"), "wk": ("week", "weken"), "mo": ("maand", "maanden"), "yr": ("jaar", "jaar"),
            "tbsp": ("eetlepel", "eetlepels"), "tsp": ("theelepel", "theelepels"),
        }.items()
    }
    abbreviations = {
        "dhr.": Abbreviation("de heer", title=True),
        "mevr.": Abbreviation("mevrouw", title=True),
        "mw.": Abbreviation("mevrouw", title=True),
        "dr.": Abbreviation("doctor", title=True),
        "prof.": Abbreviation("professor", title=True),
        "ir.": Abbreviation("ingenieur", title=True),
        "bijv.": Abbreviation("bijvoorbeeld"),
        "bv.": Abbreviation("bijvoorbeeld"),
        "d.w.z.": Abbreviation("dat wil zeggen"),
        "o.a.": Abbreviation("onder andere"),
        "enz.": Abbreviation("enzovoort", can_end=True),
        "etc.": Abbreviation("etcetera", can_end=True),
        "ca.": Abbreviation("circa"),
        "incl.": Abbreviation("inclusief"),  # "€ 950 incl. btw"
        "excl.": Abbreviation("exclusief"),
        "vs.": Abbreviation("versus"),
        "t.o.v.": Abbreviation("ten opzichte van"),
        "z.s.m.": Abbreviation("zo snel mogelijk"),
        "t/m": Abbreviation("tot en met"),
        "t.e.m.": Abbreviation("tot en met"),
        "t.w.v.": Abbreviation("ter waarde van"),
        "o.v.v.": Abbreviation("onder vermelding van"),  # "o.v.v. het factuurnummer"
        "p/m": Abbreviation("per maand"),  # "€ 19,95 p/m"
        "p.p.": Abbreviation("per persoon"),
        "p.m.": Abbreviation("per maand", can_end=True),  # "€ 25,- p.m.": Dutch tells time on a 24-hour clock
        "p.j.": Abbreviation("per jaar", can_end=True),
        "m.b.t.": Abbreviation("met betrekking tot"),
        "i.p.v.": Abbreviation("in plaats van"),
        "a.u.b.": Abbreviation("alstublieft", can_end=True),
        "nr.": Abbreviation("nummer", before_number=True, before_code=True),
        "blz.": Abbreviation("bladzijde", before_number=True),
        "max.": Abbreviation("maximaal", before_number=True),  # "max. 18 °C", "max. 23 kg"
        "min.": Abbreviation("minimaal", before_number=True),  # after a number "5 min." is minutes
        "dgn.": Abbreviation("dagen", can_end=True),  # "nog 3 dgn."
        "dgn": Abbreviation("dagen"),
        "mln.": Abbreviation("miljoen"),
        "mld.": Abbreviation("miljard"),
    }

    def fraction_before(self, numerator: int, denominator: int, noun: str, unit: bool) -> Optional[str]:
        """A part of a unit, said before its singular: "1/4 kg" -> "een kwart kilogram", "3/4 l" ->
        "drie kwart liter", "1/2 l" -> "een halve liter" ("een half uur")."""
        fraction = self.read_fraction(numerator, denominator)
        if not unit or fraction is None:
            return None
        if (numerator, denominator) == (1, 2):
            return "een half" if noun.split()[-1] in self.neuter_units else "een halve"
        return f"een {fraction.split()[-1]}" if numerator == 1 else fraction

    def read_year(self, year: int) -> str:
        return spell(year, "nl", "year") if 1000 <= year <= 2099 else self.cardinal(year)

    def bare_year(self, year: int) -> Optional[str]:
        """"1999" -> "negentien honderd negenennegentig"; from 2000 the cardinal is the year."""
        return spell(year, "nl", "year") if 1100 <= year <= 1999 else None

    def read_date(self, year: Optional[int], month: int, day: int) -> str:
        words = f"{self.cardinal(day)} {self.month_name(month)}"
        return words if year is None else f"{words} {self.read_year(year)}"

    def read_time(self, hour: int, minute: int, meridiem: Optional[str]) -> str:
        words = f"{self.cardinal(hour)} uur"
        words = words if minute == 0 else f"{words} {self.cardinal(minute)}"
        return f"{words} {self.read_meridiem(meridiem)}" if meridiem else words

    def read_meridiem(self, meridiem: str) -> Optional[str]:
        return "a em" if meridiem == "am" else "p em"

    def match_ordinal(self, core: str, next_gender: Optional[str] = None) -> Optional[str]:
        m = _ORDINAL_RE.fullmatch(core)
        return self.ordinal(int(m.group(1))) if m else None
