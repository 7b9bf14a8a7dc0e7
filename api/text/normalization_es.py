"""Spanish readings: "1.234,5", "3,50 €", "1.º"/"2.ª", "5/3/2024", "15:45", "Sra."."""

from __future__ import annotations

import re
from typing import Optional

from api.text.normalization_gender import SPANISH
from api.text.normalization_rules import (
    SOUTH_AMERICAN_PESOS, Abbreviation, CurrencyNames, LanguageRules, UnitNames, spell,
)

__all__ = ["LatinAmericanSpanishRules", "SpanishRules"]

# "1º", "1.ª", "1er", and Latin America's endings of the word: "1ro", "2da", "3ra", "4to", "7mo", "8vo", "9no"
_ORDINAL_RE = re.compile(r"(\d+)\.?(º|ª|er|era|ero|[rdtmvn][oa])")
_BIG = {"millón", "millones", "billón", "billones"}  # masculine nouns: agreement stops here
_APOCOPE = {"uno": "un", "veintiuno": "veintiún"}
# "veintiún mil personas" keeps its apocope before "mil" (RAE accepts it), so only "uno" changes
_FEMININE = {"uno": "una", "veintiuno": "veintiuna"}


def _feminine_word(word: str) -> str:
    if word in _FEMININE:
        return _FEMININE[word]
    if word.endswith("ientos"):  # doscientos -> doscientas, quinientos -> quinientas
        return word[: -len("os")] + "as"
    return word


class SpanishRules(LanguageRules):
    code = "es"
    decimal_sep = ","
    group_sep = "."
    lenient_decimal = True
    time_unit = "horas"
    on_the_hour = "en punto"
    nouns = SPANISH
    feminine_before = frozenset({"la", "las"})
    minus_word = "menos"
    decimal_word = "coma"
    two_decimals_as_number = True
    adjective_after_noun = True
    duration_leads = frozenset(
        "dura duran durar durará duración tarda tardan tardar tardará demora demoran demorar".split())
    slash_prepositions = {"c": "con", "s": "sin"}
    slash_words = {"c/u": "cada uno", "s/n": "sin número"}  # "$50 c/u", "Calle Luna s/n"
    percent_word = "por ciento"
    currency_and_word = "con"
    ampersand_word = "y"
    months = (
        "enero", "febrero", "marzo", "abril", "mayo", "junio",
        "julio", "agosto", "septiembre", "octubre", "noviembre", "diciembre",
    )
    currencies = {
        "USD": CurrencyNames(("dólar", "dólares"), ("centavo", "centavos")),
        "EUR": CurrencyNames(("euro", "euros"), ("céntimo", "céntimos")),
        "GBP": CurrencyNames(("libra", "libras"), ("penique", "peniques"), unit_gender="f"),
        "JPY": CurrencyNames(("yen", "yenes"), ("sen", "sen")),
        "BRL": CurrencyNames(("real", "reales"), ("centavo", "centavos")),
        "MXN": CurrencyNames(("peso", "pesos"), ("centavo", "centavos")),
        "INR": CurrencyNames(("rupia", "rupias"), ("paisa", "paisas"), unit_gender="f", cent_gender="f"),
        "CAD": CurrencyNames(("dólar canadiense", "dólares canadienses"), ("centavo", "centavos")),
        "AUD": CurrencyNames(("dólar australiano", "dólares australianos"), ("centavo", "centavos")),
        **{code: CurrencyNames(("peso", "pesos"), ("centavo", "centavos")) for code in SOUTH_AMERICAN_PESOS.values()},
        "PEN": CurrencyNames(("sol", "soles"), ("céntimo", "céntimos")),
    }

    scale_words = {
        "k": ("mil", "mil"),
        "m": ("millón", "millones"),
        "b": ("mil millones", "mil millones"),
        "bn": ("mil millones", "mil millones"),
        "t": ("billón", "billones"),  # 10**12: "$4 billones", "$1,2T" (money only)
    }
    spelled_scales = {"mil": "k", "millón": "m", "millones": "m", "mil millones": "b", "billón": "t", "billones": "t"}
    power_words = {2: "al cuadrado", 3: "al cubo"}
    power_word = "elevado a"
    symbol_words = {"@": "arroba", ".": "punto", "/": "barra", "-": "guion", "_": "guion bajo",
                    "+": "más", "=": "igual a", "±": "más o menos", "#": "número", "~": "aproximadamente", "×": "por", "x": "veces", "per": "por",
                    "out of": "de", "<": "menos de", ">": "más de", "≤": "como máximo", "≥": "como mínimo"}
    fraction_names = {2: ("medio", "medios"), 3: ("tercio", "tercios"), 4: ("cuarto", "cuartos"),
                      5: ("quinto", "quintos"), 6: ("sexto", "sextos"), 7: ("séptimo", "séptimos"),
                      8: ("octavo", "octavos"), 9: ("noveno", "novenos"), 10: ("décimo", "décimos")}
    and_a_half = "y medio"
    half_words = {"m": "medio", "f": "media"}
    fraction_of_word = "de"
    sequence_words = frozenset(
        "paso página pregunta parte foto imagen episodio ronda nivel etapa lección módulo".split())
    sequence_of_word = "de"
    part_nouns = frozenset({"parte", "partes"})
    sign_singulars = {"veces": "vez"}
    more_than_words = "más de"
    degree_sign_ordinal = True
    date_lead_words = frozenset({"el", "del", "al", "día", "desde", "hasta"})
    month_year_link = "de"
    pressure_lead_words = frozenset({"presión", "tensión", "ta"})
    pressure_word = "sobre"
    roman_lead_words = frozenset({
        "capítulo", "parte", "volumen", "tomo", "acto", "libro", "fase", "tipo", "clase", "sección", "nivel",
        "título", "artículo", "siglo", "grado", "categoría",
    })
    month_abbreviations = {
        "ene": "enero", "feb": "febrero", "mar": "marzo", "abr": "abril", "may": "mayo", "jun": "junio",
        "jul": "julio", "ago": "agosto", "sep": "septiembre", "sept": "septiembre", "set": "septiembre",
        "oct": "octubre", "nov": "noviembre", "dic": "diciembre",
    }
    day_month_link = "de"
    weekday_abbreviations = {
        "lun": "lunes", "mar": "martes", "mié": "miércoles", "mie": "miércoles", "jue": "jueves",
        "vie": "viernes", "sáb": "sábado", "sab": "sábado", "dom": "domingo",
    }
    # "código postal 28001", "su código de verificación es 482 913"
    digits_lead_words = frozenset({
        "pin", "cp", "c.p.", "código", "otp", "postal", "verificación", "confirmación", "clave", "dni", "nie", "nif",
        "cif", "ext.", "ext", "extensión"})
    postcode_before_place = re.compile(r"[0-5]\d{4} [A-ZÁÉÍÓÚÑ][a-záéíóúñ]+(?: \S+)?")  # "28013 Madrid"
    last_digits_phrases = frozenset({"terminada en", "terminado en", "acaba en", "termina en", "terminación"})
    record_nouns = frozenset("""pedido confirmación referencia reserva cliente cuenta factura póliza caso ticket
    seguimiento socio expediente incidencia solicitud""".split())
    record_number_words = frozenset({"número", "nº", "n.º", "núm", "núm.", "#"})
    masked_digits_phrase = "terminada en"  # la tarjeta, la cuenta
    masked_digits_masculine = "terminado en"  # el número, el pedido
    keypad_words = {"*": "asterisco", "#": "almohadilla"}
    keypad_verbs = frozenset({"pulse", "presione", "marque", "oprima", "teclee"})
    keypad_key_words = frozenset({"tecla"})
    keypad_list_words = frozenset({"o", "y", "luego", "después"})
    dial_words = frozenset({"llama", "llame", "llamen", "llamar", "marca", "marque", "marquen", "marcar", "sms"})
    dial_articles = frozenset({"al", "el"})
    copulas = frozenset({"es", "era"})
    rooms = {"hab": UnitNames("habitación", "habitaciones", "f"), "dorm": UnitNames("dormitorio", "dormitorios"),
             "pers": UnitNames("persona", "personas", "f"),
             # a prescription's tablets and capsules: "1 cp. cada 8 h", "2 cáps."
             **{short: UnitNames("comprimido", "comprimidos") for short in ("cp", "comp")},
             "cáps": UnitNames("cápsula", "cápsulas", "f")}
    units = {
        key: UnitNames(*names) for key, names in {
            "km": ("kilómetro", "kilómetros"), "m": ("metro", "metros"), "cm": ("centímetro", "centímetros"),
            "mm": ("milímetro", "milímetros"), "ft": ("pie", "pies"),  # no "mi": it is "my"
            "in": ("pulgada", "pulgadas", "f"),
            "kg": ("kilogramo", "kilogramos"), "g": ("gramo", "gramos"), "mg": ("miligramo", "miligramos"),
            "lb": ("libra", "libras", "f"), "oz": ("onza", "onzas", "f"), "l": ("litro", "litros"),
            "floz": ("onza líquida", "onzas líquidas", "f"),
            "ml": ("mililitro", "mililitros"),
            "piece": ("pieza", "piezas", "f"),
            "acre": ("acre", "acres"),
            "m2": ("metro cuadrado", "metros cuadrados"), "km2": ("kilómetro cuadrado", "kilómetros cuadrados"),
            "cm2": ("centímetro cuadrado", "centímetros cuadrados"),
            "mm2": ("milímetro cuadrado", "milímetros cuadrados"), "ft2": ("pie cuadrado", "pies cuadrados"),
            "m3": ("metro cúbico", "metros cúbicos"), "cm3": ("centímetro cúbico", "centímetros cúbicos"),
            "kg/m2": ("kilogramo por metro cuadrado", "kilogramos por metro cuadrado"),
            "km/h": ("kilómetro por hora", "kilómetros por hora"), "mph": ("milla por hora", "millas por hora", "f"),
            "mpg": ("milla por galón", "millas por galón", "f"), "star": ("estrella", "estrellas", "f"),
            "m/s": ("metro por segundo", "metros por segundo"),
            "°C": ("grado Celsius", "grados Celsius"), "°F": ("grado Fahrenheit", "grados Fahrenheit"),
            "°": ("grado", "grados"),
            "KB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"),
            "TB": ("terabyte", "terabytes"),
            "Hz": ("hercio", "hercios"), "kHz": ("kilohercio", "kilohercios"), "MHz": ("megahercio", "megahercios"),
            "GHz": ("gigahercio", "gigahercios"),
            "bps": ("bit por segundo", "bits por segundo"), "kbps": ("kilobit por segundo", "kilobits por segundo"),
            "bp": ("punto básico", "puntos básicos"),  # basis points: "25 bps" (UNDER_A_THOUSAND)
            "Mbps": ("megabit por segundo", "megabits por segundo"),
            "Gbps": ("gigabit por segundo", "gigabits por segundo"),
            "fps": ("fotograma por segundo", "fotogramas por segundo"),
            "bpm": ("latido por minuto", "latidos por minuto"),
            "mmHg": ("milímetro de mercurio", "milímetros de mercurio"),
            "mg/dL": ("miligramo por decilitro", "miligramos por decilitro"),
            "mmol/L": ("milimol por litro", "milimoles por litro"),
            "W": ("vatio", "vatios"), "kW": ("kilovatio", "kilovatios"), "MW": ("megavatio", "megavatios"),
            "kWh": ("kilovatio hora", "kilovatios hora"),
            "ms": ("milisegundo", "milisegundos"), "s": ("segundo", "segundos"), "min": ("minuto", "minutos"),
            "h": ("hora", "horas", "f"), "wk": ("semana", "semanas", "f"), "mo": ("mes", "meses"),
            "yr": ("año", "años"),
            "tbsp": ("cucharada", "cucharadas", "f"), "tsp": ("cucharadita", "cucharaditas", "f"),
        }.items()
    }
    abbreviations = {
        "sr.": Abbreviation("señor", title=True),
        "sra.": Abbreviation("señora", title=True),
        "srta.": Abbreviation("señorita", title=True),
        "dr.": Abbreviation("doctor", title=True),
        "dra.": Abbreviation("doctora", title=True),
        "prof.": Abbreviation("profesor", title=True),
        "profa.": Abbreviation("profesora", title=True),
        "lic.": Abbreviation("licenciado", title=True),
        "ing.": Abbreviation("ingeniero", title=True),
        "sto.": Abbreviation("santo", title=True),
        "sta.": Abbreviation("santa", title=True),
        "ud.": Abbreviation("usted"),
        "uds.": Abbreviation("ustedes"),
        "av.": Abbreviation("avenida", title=True),
        "avda.": Abbreviation("avenida", title=True),
        "col.": Abbreviation("colonia", title=True),  # a Mexican address's neighbourhood: "Col. Juárez"
        # "C/ Mayor 5", "pizza c/ queso", "c/ 8 h" (cada)
        "c/": Abbreviation("con", title=True, before_capital="calle", before_digit="cada"),
        "s/": Abbreviation("sin", title=True, not_before_number=True),  # "café s/ azúcar"; "S/ 25" is soles
        "izq.": Abbreviation("izquierda", can_end=True),
        "dcha.": Abbreviation("derecha", can_end=True),
        "nº": Abbreviation("número"),  # never a word of its own: "el nº de pedido"
        "n.º": Abbreviation("número"),
        "etc.": Abbreviation("etcétera", can_end=True),
        "p.ej.": Abbreviation("por ejemplo"),
        "aprox.": Abbreviation("aproximadamente"),
        # "máx. 24 °C", "mín. de 15 °C": before a number or "de" only ("el máx." stays)
        "máx.": Abbreviation("máximo", before_number=True, nouns=frozenset({"de"}), agrees=True),
        "mín.": Abbreviation("mínimo", before_number=True, nouns=frozenset({"de"}), agrees=True),
        "vs.": Abbreviation("versus"),
        "pág.": Abbreviation("página", before_number=True),
        "núm.": Abbreviation("número", before_number=True),
        "tel.": Abbreviation("teléfono"),
        "cel.": Abbreviation("celular", before_number=True),  # "cel. 55 1234 5678"
        "ext.": Abbreviation("extensión", before_number=True),  # "ext. 204"
        "depto.": Abbreviation("departamento", can_end=True),  # a flat ("depto. 502") or a department
        "dpto.": Abbreviation("departamento", can_end=True),
        "ee.uu.": Abbreviation("Estados Unidos", can_end=True),
        "incl.": Abbreviation("incluido", can_end=True),  # "IVA incl."
        "háb.": Abbreviation("hábiles", can_end=True),  # "3-5 días háb."
        "c.p.": Abbreviation("código postal", before_number=True),
        "ref.": Abbreviation("referencia"),
        "expte.": Abbreviation("expediente"),
        # a road's kilometre post: "el km 23 de la A-6" ("23 km" is the unit, read with its number)
        "km": Abbreviation("kilómetro", before_number=True),
        "km.": Abbreviation("kilómetro", before_number=True),
    }

    def __init__(self, dollar_sign_code: str = "USD") -> None:
        self.dollar_sign_code = dollar_sign_code  # Spain's "$" is the dollar; Argentina's its peso
        super().__init__()

    def cardinal(self, n: int, gender: str = "m", before_noun: bool = False) -> str:
        words = spell(n, "es").split()
        # num2words writes "veintiuno mil": the apocope is due before mil/millón.
        for i in range(len(words) - 1):
            if words[i] in _APOCOPE and words[i + 1] in _BIG | {"mil"}:
                words[i] = _APOCOPE[words[i]]
        if gender == "f":
            last_big = max((i for i, w in enumerate(words) if w in _BIG), default=-1)
            words = words[: last_big + 1] + [_feminine_word(w) for w in words[last_big + 1 :]]
        elif before_noun and words[-1] in _APOCOPE:
            words[-1] = _APOCOPE[words[-1]]
        return " ".join(words)

    def ordinal(self, n: int, gender: str = "m") -> str:
        words = spell(n, "es", "ordinal")
        if gender == "f":
            words = " ".join(w[:-1] + "a" if w.endswith("o") else w for w in words.split())
        return words

    def count_noun(self, n: int, names: tuple[str, str], gender: str) -> str:
        words = self.cardinal(n, gender, before_noun=True)
        return f"{words}{self.noun_link(words)} {names[0] if n == 1 else names[1]}"  # "un millón de euros"

    def noun_link(self, words: str) -> str:
        return " de" if words.split()[-1] in _BIG else ""

    def scale_connector(self, scale: str) -> str:
        return "de " if scale in ("m", "b", "bn", "t") else ""

    def read_date(self, year: Optional[int], month: int, day: int) -> str:
        words = f"{self.cardinal(day)} de {self.month_name(month)}"
        return words if year is None else f"{words} de {self.read_year(year)}"

    def read_time(self, hour: int, minute: int, meridiem: Optional[str]) -> str:
        hours = self.cardinal(hour, "f")  # "la una", "las veintiuna"
        if meridiem:
            words = hours if minute == 0 else f"{hours} y {self.cardinal(minute)}"
            return f"{words} {self.read_meridiem(meridiem)}"
        if minute == 0:
            return f"{hours} en punto" if 1 <= hour <= 12 else f"{hours} horas"
        return f"{hours} y {self.cardinal(minute)}"

    def read_meridiem(self, meridiem: str) -> Optional[str]:
        return "a eme" if meridiem == "am" else "pe eme"

    def match_ordinal(self, core: str, next_gender: Optional[str] = None) -> Optional[str]:
        m = _ORDINAL_RE.fullmatch(core)
        if not m:
            return None
        n, suffix = int(m.group(1)), m.group(2)
        words = self.ordinal(n, "f" if suffix == "ª" or suffix.endswith("a") else "m")
        if suffix not in ("º", "ª", "er") and not words.endswith(suffix):  # "2do" is segundo, "5do" nothing
            return None
        # "1er piso", and "1º lugar" / "1ro lugar" before a masculine noun: primer, tercer ("el 1º de
        # mayo" keeps it)
        shortened = suffix == "er" or (suffix in ("º", "ro") and next_gender == "m")
        if shortened and words.endswith(("primero", "tercero")):
            words = words[:-1]
        return words


class LatinAmericanSpanishRules(SpanishRules):
    """Spanish as Mexico, the United States, Central America and the Caribbean write numbers: a
    decimal point and groups of three after commas ("$1,234.50", "1,500 personas", "3.5%": "tres
    punto cinco"), and in Mexico a bare "$" for its pesos."""

    decimal_sep = "."
    group_sep = ","
    lenient_decimal = True  # "3,5 km" as Spain writes it stays a decimal ("1,500" is a group)
    decimal_word = "punto"
