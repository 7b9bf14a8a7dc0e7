"""English readings: "1,234.5", "$5.99", "21st", "March 5th, 1999", "3:30 pm", "Dr."."""

from __future__ import annotations

import re
from typing import Optional

from api.text.normalization_rules import (
    SOUTH_AMERICAN_PESOS, Abbreviation, CurrencyNames, LanguageRules, UnitNames, spell,
)

__all__ = ["BritishEnglishRules", "EnglishRules"]

# What "min." and "max." are the minimum and maximum of, before a noun ("your min. payment")
_LIMITED_NOUNS = frozenset("""payment payments order orders purchase spend balance deposit amount fee charge stay
age capacity occupancy guests people speed temperature temp weight load height length width size quantity qty
price value score requirement""".split())
_ORDINAL_RE = re.compile(r"(\d+)(st|nd|rd|th)", re.IGNORECASE)


class EnglishRules(LanguageRules):
    code = "en"
    decimal_sep = "."
    group_sep = ","
    date_order = "mdy"
    leading_point_alone = True  # ".312", ".5 mm": "point three one two"
    months = (
        "January", "February", "March", "April", "May", "June",
        "July", "August", "September", "October", "November", "December",
    )
    currencies = {
        "USD": CurrencyNames(("dollar", "dollars"), ("cent", "cents")),
        "EUR": CurrencyNames(("euro", "euros"), ("cent", "cents")),
        "GBP": CurrencyNames(("pound", "pounds"), ("penny", "pence")),
        "JPY": CurrencyNames(("yen", "yen"), ("sen", "sen")),
        "BRL": CurrencyNames(("real", "reais"), ("centavo", "centavos")),
        "MXN": CurrencyNames(("peso", "pesos"), ("centavo", "centavos")),
        "INR": CurrencyNames(("rupee", "rupees"), ("paisa", "paise")),
        "CAD": CurrencyNames(("Canadian dollar", "Canadian dollars"), ("cent", "cents")),
        "AUD": CurrencyNames(("Australian dollar", "Australian dollars"), ("cent", "cents")),
        **{code: CurrencyNames(("peso", "pesos"), ("centavo", "centavos")) for code in SOUTH_AMERICAN_PESOS.values()},
        "PEN": CurrencyNames(("sol", "soles"), ("céntimo", "céntimos")),
    }
    scale_words = {
        "k": ("thousand", "thousand"),
        "m": ("million", "million"),
        "b": ("billion", "billion"),
        "bn": ("billion", "billion"),
        "t": ("trillion", "trillion"),  # "$4 trillion", "$1.2T" (money only: "4T" alone is no amount)
    }
    spelled_scales = {"thousand": "k", "million": "m", "billion": "b", "trillion": "t"}
    adjective_articles = frozenset({"a", "an"})
    amount_link_words = frozenset("""
        a an the and or nor but to per for of in on at by with from off each every plus minus
        more less than is was will would""".split())
    adjective_determiners = frozenset("the this that your our my their his her its".split())
    not_described_words = frozenset("""
        you i we they he she it that which who whom what when where if so as are were be been has have had
        do does did can could should shall may might must went goes go came come got get gets stays
        today tomorrow yesterday now then already instead too again only first upfront later ago total extra
        back cash up down over out here there still just even also""".split())
    # "due 12/1", "offer ends 11/30", "valid through 12/31"
    date_lead_words = frozenset({
        "on", "since", "until", "till", "til", "due", "ends", "starts", "begins", "through", "thru", "starting",
        "effective", "opens", "closes", "arrives", "arriving", "ships", "shipping", "shipped", "delivered",
        "expected", "scheduled", "dated", "departing", "departs", "returning", "returns", "leaving", "leaves",
        "ending", "renews", "renewing", "check-in", "checkout", "check-out",
    })  # not "expires": a card's "expires 12/27" is a month and a year, said "twelve twenty-seven"
    fraction_or_date_lead_words = frozenset({"by", "before", "after", "from"})
    pressure_lead_words = frozenset({"bp", "pressure"})
    roman_lead_words = frozenset({
        "chapter", "part", "volume", "act", "book", "phase", "type", "class", "section", "stage", "level", "round",
        "episode", "title", "article", "appendix", "schedule", "tier", "grade", "category", "step", "world war",
    })
    weekday_abbreviations = {
        "mon": "Monday", "tue": "Tuesday", "tues": "Tuesday", "wed": "Wednesday", "weds": "Wednesday",
        "thu": "Thursday", "thur": "Thursday", "thurs": "Thursday", "fri": "Friday", "sat": "Saturday", "sun": "Sunday",
    }
    sequence_words = frozenset(
        "step page question part slide item photo image card episode round level stage lesson module".split())
    digits_lead_words = frozenset({"pin", "zip", "otp", "ext.", "ext", "extension", "port", "code", "passcode"})
    last_digits_phrases = frozenset({"ending in", "ending with", "ends in", "ends with"})
    record_nouns = frozenset("""order confirmation reference ref ticket case tracking member membership policy claim
    booking reservation invoice account customer serial transaction incident request record loyalty e-ticket
    itinerary model part item product sku style lot batch""".split())
    record_number_words = frozenset({"number", "#", "no", "no.", "nr", "nr.", "num", "num."})
    masked_digits_phrase = "ending in"
    keypad_words = {"*": "star", "#": "pound"}
    keypad_verbs = frozenset({"press", "hit", "dial", "enter", "tap", "push"})
    keypad_key_words = frozenset({"key", "button"})
    keypad_list_words = frozenset({"or", "then", "and"})
    dial_words = frozenset({"call", "called", "calling", "dial", "dialed", "dialled", "dialing", "text", "phone", "ring"})
    copulas = frozenset({"is", "was"})
    short_code_links = frozenset({"to"})
    reads_feet_and_inches = True
    # US states (and DC): the 5-digit number after one is a ZIP code, "IL 62704"
    postcode_lead_words = frozenset("""
        AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM
        NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY""".split())
    rooms = {short: UnitNames("bedroom", "bedrooms") for short in ("bd", "br", "bdr", "bdrm")} | {
        short: UnitNames("bathroom", "bathrooms") for short in ("ba", "bth")}
    per_words = {"mo": "month", "yr": "year", "wk": "week", "gal": "gallon", "sqft": "square foot", "qtr": "quarter",
                 "ea": "each", "pc": "piece", "pp": "person"}
    units = {
        key: UnitNames(one, many) for key, (one, many) in {
            "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
            "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
            "in": ("inch", "inches"),
            "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"), "mg": ("milligram", "milligrams"),
            "lb": ("pound", "pounds"), "oz": ("ounce", "ounces"), "l": ("liter", "liters"),
            "floz": ("fluid ounce", "fluid ounces"),
            "ml": ("milliliter", "milliliters"),
            "piece": ("piece", "pieces"),
            "acre": ("acre", "acres"),
            "m2": ("square meter", "square meters"), "km2": ("square kilometer", "square kilometers"),
            "cm2": ("square centimeter", "square centimeters"), "mm2": ("square millimeter", "square millimeters"),
            "ft2": ("square foot", "square feet"), "m3": ("cubic meter", "cubic meters"),
            "kg/m2": ("kilogram per square meter", "kilograms per square meter"),
            "cm3": ("cubic centimeter", "cubic centimeters"),
            "km/h": ("kilometer per hour", "kilometers per hour"), "mph": ("mile per hour", "miles per hour"),
            "mpg": ("mile per gallon", "miles per gallon"), "star": ("star", "stars"),
            "m/s": ("meter per second", "meters per second"),
            "°C": ("degree Celsius", "degrees Celsius"), "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
            "°": ("degree", "degrees"),
            "KB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"),
            "TB": ("terabyte", "terabytes"),
            "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"),
            "GHz": ("gigahertz", "gigahertz"),
            "bps": ("bit per second", "bits per second"), "kbps": ("kilobit per second", "kilobits per second"),
            "bp": ("basis point", "basis points"),  # basis points: "25 bps" (UNDER_A_THOUSAND)
            "Mbps": ("megabit per second", "megabits per second"),
            "Gbps": ("gigabit per second", "gigabits per second"),
            "fps": ("frame per second", "frames per second"), "bpm": ("beat per minute", "beats per minute"),
            "mmHg": ("millimeter of mercury", "millimeters of mercury"),
            "mg/dL": ("milligram per deciliter", "milligrams per deciliter"),
            "mmol/L": ("millimole per liter", "millimoles per liter"),
            "W": ("watt", "watts"), "kW": ("kilowatt", "kilowatts"), "MW": ("megawatt", "megawatts"),
            "kWh": ("kilowatt hour", "kilowatt hours"),
            "ms": ("millisecond", "milliseconds"), "s": ("second", "seconds"), "min": ("minute", "minutes"),
            "h": ("hour", "hours"), "wk": ("week", "weeks"), "mo": ("month", "months"), "yr": ("year", "years"),
            "tbsp": ("tablespoon", "tablespoons"), "tsp": ("teaspoon", "teaspoons"),
        }.items()
    }
    abbreviations = {
        "mr.": Abbreviation("mister", title=True),
        "mrs.": Abbreviation("missus", title=True),
        "ms.": Abbreviation("miz", title=True),
        "dr.": Abbreviation("doctor", title=True),
        "prof.": Abbreviation("professor", title=True),
        "st.": Abbreviation("street", before_capital="saint", can_end=True),
        "mt.": Abbreviation("mount", title=True),
        "jr.": Abbreviation("junior", can_end=True),
        "sr.": Abbreviation("senior", can_end=True),
        "ave.": Abbreviation("avenue", can_end=True),
        "blvd.": Abbreviation("boulevard", can_end=True),
        "rd.": Abbreviation("road", can_end=True),
        "ste.": Abbreviation("suite", before_number=True),  # "Oak St. Ste. 310"
        "ste": Abbreviation("suite", before_number=True),  # "Ste 210"
        "ln.": Abbreviation("lane", can_end=True),
        "hwy.": Abbreviation("highway", can_end=True),
        "pkwy.": Abbreviation("parkway", can_end=True),
        "etc.": Abbreviation("et cetera", can_end=True),
        "e.g.": Abbreviation("for example"),
        "i.e.": Abbreviation("that is"),
        "vs.": Abbreviation("versus"),
        "vs": Abbreviation("versus"),  # "Lakers vs Celtics": never a word of its own
        "a.k.a.": Abbreviation("also known as"),
        "approx.": Abbreviation("approximately"),
        "qty": Abbreviation("quantity"),
        "pts": Abbreviation("points"),
        "pcs": Abbreviation("pieces"),
        "corp.": Abbreviation("corporation", can_end=True),
        "dept.": Abbreviation("department", can_end=True),
        "acct.": Abbreviation("account", can_end=True),
        "appt.": Abbreviation("appointment", can_end=True),
        "appt": Abbreviation("appointment"),  # never a word of its own: "your appt is on Tue"
        "ea.": Abbreviation("each", can_end=True),  # "$9.99 ea."
        "tel.": Abbreviation("telephone"),
        "approx": Abbreviation("approximately"),
        "bldg.": Abbreviation("building", can_end=True),
        "bldg": Abbreviation("building"),  # "Bldg C": never a word of its own
        "incl.": Abbreviation("including", at_end="included"),
        "p.a.": Abbreviation("per annum", can_end=True),  # "4.5% p.a."
        "int'l": Abbreviation("international"),
        "est.": Abbreviation("estimated", before_digit="established"),  # "Est. delivery", "Est. 1998"
        "rm": Abbreviation("room", before_number=True),
        "excl.": Abbreviation("excluding"),
        "bus.": Abbreviation("business", nouns=frozenset({"day", "days", "hours"})),  # "3-5 bus. days"
        "fl.": Abbreviation("fluid", nouns=frozenset({"oz", "oz.", "ounce", "ounces"})),  # "2 fl. oz"
        # A prescription's Latin, dotted ("take 1 tablet b.i.d."); undotted, "bid" is a word
        "q.d.": Abbreviation("once a day", can_end=True),
        "b.i.d.": Abbreviation("twice a day", can_end=True),
        "t.i.d.": Abbreviation("three times a day", can_end=True),
        "q.i.d.": Abbreviation("four times a day", can_end=True),
        "q.h.s.": Abbreviation("at bedtime", can_end=True),
        "p.r.n.": Abbreviation("as needed", can_end=True),
        "w/": Abbreviation("with"),
        "w/o": Abbreviation("without"),
        "w/in": Abbreviation("within"),
        "biz": Abbreviation("business", nouns=frozenset({"day", "days", "hours"})),  # "2 biz days"; "show biz" stays
        "inc.": Abbreviation("incorporated", can_end=True),
        "ltd.": Abbreviation("limited", can_end=True),
        "no.": Abbreviation("number", before_number=True, before_code=True),
        # Read only before a number ("Fig. 3", "Jan. 5"): elsewhere the dotted word may be a name
        # or a sentence's last word ("Jan." is also a name). Only dotted short forms are listed:
        # "May", "march" are words, and "May." is one before a full stop.
        "fig.": Abbreviation("figure", before_number=True),
        # "min. 3 nights", "max. 10 people"; after a number "5 min." is minutes (a unit)
        "min.": Abbreviation("minimum", before_number=True, nouns=_LIMITED_NOUNS),
        "max.": Abbreviation("maximum", before_number=True, nouns=_LIMITED_NOUNS),
        "max": Abbreviation("maximum", before_number=True),  # "max 3,000 mg/day"; "max out" stays
        # title: "P." is also an initial before a name ("J. P. Morgan"), so the segmenter must
        # not end a sentence at its period; before a number (the only place it is read) the flag
        # changes nothing.
        "p.": Abbreviation("page", title=True, before_number=True),
        "pp.": Abbreviation("pages", before_number=True),
        "vol.": Abbreviation("volume", before_number=True),
        "ch.": Abbreviation("chapter", before_number=True),
        "ext.": Abbreviation("extension", before_number=True),
        "ext": Abbreviation("extension", before_number=True),  # "555-0100 ext 204"
        "apt.": Abbreviation("apartment", before_number=True),
        "apt": Abbreviation("apartment", before_number=True),  # "Apt 4B"; "an apt remark" stays
        "opt.": Abbreviation("option", before_number=True),  # "press 1, opt. 2"
        "rm.": Abbreviation("room", before_number=True),
        "jan.": Abbreviation("January", before_number=True),
        "feb.": Abbreviation("February", before_number=True),
        "mar.": Abbreviation("March", before_number=True),
        "apr.": Abbreviation("April", before_number=True),
        "jun.": Abbreviation("June", before_number=True),
        "jul.": Abbreviation("July", before_number=True),
        "aug.": Abbreviation("August", before_number=True),
        "sep.": Abbreviation("September", before_number=True),
        "sept.": Abbreviation("September", before_number=True),
        "oct.": Abbreviation("October", before_number=True),
        "nov.": Abbreviation("November", before_number=True),
        "dec.": Abbreviation("December", before_number=True),
        "a.m.": Abbreviation("a m", can_end=True),
        "p.m.": Abbreviation("p m", can_end=True),
    }

    def read_year(self, year: int) -> str:
        return spell(year, "en", "year") if 1000 <= year <= 2099 else self.cardinal(year)

    def bare_year(self, year: int) -> Optional[str]:
        return spell(year, "en", "year") if 1100 <= year <= 2099 else None

    def digit_pairs(self, digits: str) -> Optional[str]:
        if not (digits.isdecimal() and len(digits) in (3, 4)) or digits[0] == "0":
            return None
        if digits.endswith("000"):
            return self.cardinal(int(digits))  # "one thousand"
        high, low = int(digits[:-2]), int(digits[-2:])
        if low == 0:
            return f"{self.cardinal(high)} hundred"  # "seventy-nine hundred"
        if low < 10:
            return f"{self.cardinal(high)} oh {self.cardinal(low)}"  # "twenty oh five"
        return f"{self.cardinal(high)} {self.cardinal(low)}"  # "ten eighty", "seven sixty-eight"

    def read_date(self, year: Optional[int], month: int, day: int) -> str:
        words = f"{self.month_name(month)} {self.ordinal(day)}"
        return words if year is None else f"{words} {self.read_year(year)}"

    def read_time(self, hour: int, minute: int, meridiem: Optional[str]) -> str:
        hour_words = "twelve" if (meridiem and hour == 0) else self.cardinal(hour)
        if minute == 0:
            if meridiem:
                words = hour_words
            elif hour == 0:
                words = "midnight"
            elif hour <= 12:
                words = f"{hour_words} o'clock"
            else:
                words = f"{hour_words} hundred"
        elif minute < 10:
            words = f"{hour_words} oh {self.cardinal(minute)}"
        else:
            words = f"{hour_words} {self.cardinal(minute)}"
        return f"{words} {self.read_meridiem(meridiem)}" if meridiem else words

    def read_meridiem(self, meridiem: str) -> Optional[str]:
        return "a m" if meridiem == "am" else "p m"

    def fraction_before(self, numerator: int, denominator: int, noun: str, unit: bool) -> Optional[str]:
        """A part of a unit: "3/4 mi" -> "three quarters of a mile", "1/2 h" -> "half an hour", "1/4
        lb" -> "a quarter of a pound". Not of other nouns: English cannot tell one ("1/2 price")."""
        fraction = self.read_fraction(numerator, denominator)
        if not unit or fraction is None:
            return None
        article = "an" if noun[0] in "aeiou" or noun.startswith("hour") else "a"
        if numerator == 1:
            return f"half {article}" if denominator == 2 else f"a {fraction.split()[-1]} of {article}"
        return f"{fraction} of {article}"

    def read_fraction(self, numerator: int, denominator: int) -> Optional[str]:
        if not (0 < numerator < denominator <= 10):
            return None
        name = {2: ("half", "halves"), 4: ("quarter", "quarters")}.get(denominator)
        if name is None:
            single = self.ordinal(denominator)
            name = (single, single + "s")
        return f"{self.cardinal(numerator)} {name[0] if numerator == 1 else name[1]}"

    def match_ordinal(self, core: str, next_gender: Optional[str] = None) -> Optional[str]:
        m = _ORDINAL_RE.fullmatch(core)
        return self.ordinal(int(m.group(1))) if m else None


class BritishEnglishRules(EnglishRules):
    """English as Britain, Ireland, Australia, India... write and say dates: the day first ("12/3"
    is the twelfth of March, "25/12" Christmas), said "the twelfth of March"."""

    date_order = "dmy"

    def read_date(self, year: Optional[int], month: int, day: int) -> str:
        words = f"the {self.ordinal(day)} of {self.month_name(month)}"
        return words if year is None else f"{words} {self.read_year(year)}"
