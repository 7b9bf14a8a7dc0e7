"""Portuguese readings: "1.234,5", "R$ 3,50", "1º"/"2ª", "05/03/2024", "15h30", "Sra."."""

from __future__ import annotations

import functools
import re
from typing import Optional

from api.text.normalization_gender import PORTUGUESE
from api.text.normalization_rules import (
    SOUTH_AMERICAN_PESOS, Abbreviation, CurrencyNames, LanguageRules, ParsedNumber, UnitNames, spell,
)

__all__ = ["EuropeanPortugueseRules", "PortugueseRules"]

# Gepard's Portuguese voices are Brazilian (pt-BR), and so is plain "pt" here: num2words' "pt_BR"
# spells the teens and the billions as Brazil does ("dezessete", "um bilhão"), its "pt" as Portugal
# does ("dezassete", "mil milhões"; EuropeanPortugueseRules)
_BRAZIL, _PORTUGAL = "pt_BR", "pt"
_ORDINAL_RE = re.compile(r"(\d+)\.?(º|ª)")
_BIG = {"milhão", "milhões", "bilhão", "bilhões", "bilião", "biliões"}
_FEMININE = {"um": "uma", "dois": "duas"}


@functools.lru_cache(maxsize=4096)  # as spell's: the same counts recur
def _spelled(n: int, spelling: str = _BRAZIL) -> str:
    """``n`` spelled as Brazil (or Portugal, ``spelling``) says it, with the "e" num2words leaves
    out before a last group of millions or more that is round ("um bilhão e quinhentos milhões",
    "mil e duzentos milhões", as "um milhão e duzentos mil")."""
    words = spell(n, spelling)
    groups = [int(str(n)[max(0, k - 3):k]) for k in range(len(str(n)), 0, -3)]  # units first
    nonzero = [k for k, group in enumerate(groups) if group]
    if len(nonzero) < 2 or nonzero[0] < 2 or not (groups[nonzero[0]] < 100 or groups[nonzero[0]] % 100 == 0):
        return words
    last = spell(groups[nonzero[0]] * 1000 ** nonzero[0], spelling)  # "quinhentos milhões"
    head = words[: -len(last)].rstrip()
    return f"{head} e {last}" if words.endswith(" " + last) and not head.endswith(" e") else words


def _feminine_word(word: str) -> str:
    if word in _FEMININE:
        return _FEMININE[word]
    if word.endswith("entos"):  # duzentos -> duzentas, quinhentos -> quinhentas
        return word[: -len("os")] + "as"
    return word


class PortugueseRules(LanguageRules):
    code = "pt"
    spelling = _BRAZIL  # num2words' language: how the numbers are spelled
    decimal_sep = ","
    group_sep = "."
    lenient_decimal = True
    time_unit = "horas"
    nouns = PORTUGUESE
    feminine_before = frozenset({"às", "as", "das", "nas", "pelas"})
    minus_word = "menos"
    decimal_word = "vírgula"
    two_decimals_as_number = True
    adjective_after_noun = True
    duration_leads = frozenset(
        "dura duram durar durará duração leva levam levar levará demora demoram demorar".split())
    slash_prepositions = {"c": "com", "s": "sem"}
    slash_words = {"s/n": "sem número"}  # "Rua das Flores, s/n"
    percent_word = "por cento"
    currency_and_word = "e"
    ampersand_word = "e"
    months = (
        "janeiro", "fevereiro", "março", "abril", "maio", "junho",
        "julho", "agosto", "setembro", "outubro", "novembro", "dezembro",
    )
    currencies = {
        "USD": CurrencyNames(("dólar", "dólares"), ("centavo", "centavos")),
        "EUR": CurrencyNames(("euro", "euros"), ("cêntimo", "cêntimos")),
        "GBP": CurrencyNames(("libra", "libras"), ("pêni", "pence"), unit_gender="f"),
        "JPY": CurrencyNames(("iene", "ienes"), ("sen", "sen")),
        "BRL": CurrencyNames(("real", "reais"), ("centavo", "centavos")),
        "MXN": CurrencyNames(("peso", "pesos"), ("centavo", "centavos")),
        "INR": CurrencyNames(("rupia", "rupias"), ("paisa", "paisas"), unit_gender="f", cent_gender="f"),
        "CAD": CurrencyNames(("dólar canadense", "dólares canadenses"), ("centavo", "centavos")),
        "AUD": CurrencyNames(("dólar australiano", "dólares australianos"), ("centavo", "centavos")),
        **{code: CurrencyNames(("peso", "pesos"), ("centavo", "centavos")) for code in SOUTH_AMERICAN_PESOS.values()},
        "PEN": CurrencyNames(("sol", "soles"), ("cêntimo", "cêntimos")),
    }
    scale_words = {
        "k": ("mil", "mil"),
        "m": ("milhão", "milhões"),
        "b": ("bilhão", "bilhões"),
        "bn": ("bilhão", "bilhões"),
        "t": ("trilhão", "trilhões"),  # "R$ 4 trilhões", "R$1,2T" (money only)
    }
    spelled_scales = {"mil": "k", "milhão": "m", "milhões": "m", "bilhão": "b", "bilhões": "b", "trilhão": "t",
                      "trilhões": "t", "mi": "m", "bi": "b"}  # "R$ 2,5 bi": the press's short forms
    short_scales = {"mi": "m", "bi": "b"}
    power_words = {2: "ao quadrado", 3: "ao cubo"}
    power_word = "elevado a"
    symbol_words = {"@": "arroba", ".": "ponto", "/": "barra", "-": "hífen", "_": "sublinhado",
                    "+": "mais", "=": "igual a", "±": "mais ou menos", "#": "número", "~": "aproximadamente", "×": "vezes", "x": "vezes", "per": "por",
                    "out of": "de", "<": "menos de", ">": "mais de", "≤": "no máximo", "≥": "no mínimo"}
    fraction_names = {2: ("meio", "meios"), 3: ("terço", "terços"), 4: ("quarto", "quartos"),
                      5: ("quinto", "quintos"), 6: ("sexto", "sextos"), 7: ("sétimo", "sétimos"),
                      8: ("oitavo", "oitavos"), 9: ("nono", "nonos"), 10: ("décimo", "décimos")}
    and_a_half = "e meio"
    half_words = {"m": "meio", "f": "meia"}
    fraction_of_word = "de"
    sequence_words = frozenset(
        "passo etapa página pergunta parte foto imagem episódio rodada nível aula módulo".split())
    sequence_of_word = "de"
    part_nouns = frozenset({"parte", "partes"})
    sign_singulars = {"vezes": "vez"}
    more_than_words = "mais de"
    degree_sign_ordinal = True
    date_lead_words = frozenset({"dia", "em", "até", "desde"})
    month_year_link = "de"
    pressure_lead_words = frozenset({"pressão", "pa"})
    pressure_word = "por"
    roman_lead_words = frozenset({
        "capítulo", "parte", "volume", "tomo", "ato", "livro", "fase", "tipo", "classe", "seção", "secção", "nível",
        "título", "artigo", "século", "grau", "categoria",
    })
    month_abbreviations = {
        "jan": "janeiro", "fev": "fevereiro", "mar": "março", "abr": "abril", "mai": "maio", "jun": "junho",
        "jul": "julho", "ago": "agosto", "set": "setembro", "out": "outubro", "nov": "novembro", "dez": "dezembro",
    }
    day_month_link = "de"
    weekday_abbreviations = {
        "seg": "segunda", "ter": "terça", "qua": "quarta", "qui": "quinta", "sex": "sexta",
        "sáb": "sábado", "sab": "sábado", "dom": "domingo",
    }
    digits_lead_words = frozenset({"pin", "cep", "código", "otp", "verificação", "confirmação", "senha", "cpf", "cnpj",
                                   "rg", "ramal"})  # "ramal 204": an extension
    last_digits_phrases = frozenset({"terminado em", "terminada em", "termina em", "acaba em"})
    record_nouns = frozenset("""pedido confirmação referência reserva cliente conta fatura apólice caso protocolo
    rastreamento chamado solicitação""".split())
    record_number_words = frozenset({"número", "nº", "n.º", "#"})
    masked_digits_phrase = "final"  # "cartão final 1234"
    keypad_words = {"*": "asterisco", "#": "jogo da velha"}
    keypad_verbs = frozenset({"tecle", "digite", "pressione", "aperte", "disque"})
    keypad_key_words = frozenset({"tecla"})
    keypad_list_words = frozenset({"ou", "e", "depois"})
    dial_words = frozenset({"ligue", "liga", "ligar", "liguem", "disque", "disca", "discar", "sms"})
    dial_articles = frozenset({"para", "pro", "pra", "o"})
    copulas = frozenset({"é", "era"})
    rooms = {short: UnitNames("quarto", "quartos") for short in ("qto", "qtos", "qts")} | {
        "dorm": UnitNames("dormitório", "dormitórios"),
        # a prescription's tablets and capsules: "1 comp. de 8/8h", "2 cáps."
        **{short: UnitNames("comprimido", "comprimidos") for short in ("cp", "comp")},
        "cáps": UnitNames("cápsula", "cápsulas", "f")}
    units = {  # Brazilian spellings, as the money words ("milhão", "reais")
        key: UnitNames(*names) for key, names in {
            "km": ("quilômetro", "quilômetros"), "m": ("metro", "metros"), "cm": ("centímetro", "centímetros"),
            "mm": ("milímetro", "milímetros"), "ft": ("pé", "pés"),  # no "mi": "5 mi" is 5 million
            "in": ("polegada", "polegadas", "f"),
            "kg": ("quilograma", "quilogramas"), "g": ("grama", "gramas"), "mg": ("miligrama", "miligramas"),
            "lb": ("libra", "libras", "f"), "oz": ("onça", "onças", "f"), "l": ("litro", "litros"),
            "floz": ("onça fluida", "onças fluidas", "f"),
            "ml": ("mililitro", "mililitros"),
            "piece": ("peça", "peças", "f"),
            "acre": ("acre", "acres"),
            "m2": ("metro quadrado", "metros quadrados"), "km2": ("quilômetro quadrado", "quilômetros quadrados"),
            "cm2": ("centímetro quadrado", "centímetros quadrados"),
            "mm2": ("milímetro quadrado", "milímetros quadrados"), "ft2": ("pé quadrado", "pés quadrados"),
            "m3": ("metro cúbico", "metros cúbicos"), "cm3": ("centímetro cúbico", "centímetros cúbicos"),
            "kg/m2": ("quilograma por metro quadrado", "quilogramas por metro quadrado"),
            "km/h": ("quilômetro por hora", "quilômetros por hora"), "mph": ("milha por hora", "milhas por hora", "f"),
            "mpg": ("milha por galão", "milhas por galão", "f"), "star": ("estrela", "estrelas", "f"),
            "m/s": ("metro por segundo", "metros por segundo"),
            "°C": ("grau Celsius", "graus Celsius"), "°F": ("grau Fahrenheit", "graus Fahrenheit"),
            "°": ("grau", "graus"),
            "KB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"),
            "TB": ("terabyte", "terabytes"),
            "Hz": ("hertz", "hertz"), "kHz": ("quilohertz", "quilohertz"), "MHz": ("megahertz", "megahertz"),
            "GHz": ("gigahertz", "gigahertz"),
            "bps": ("bit por segundo", "bits por segundo"), "kbps": ("kilobit por segundo", "kilobits por segundo"),
            "bp": ("ponto-base", "pontos-base"),  # basis points: "25 bps" (UNDER_A_THOUSAND)
            "Mbps": ("megabit por segundo", "megabits por segundo"),
            "Gbps": ("gigabit por segundo", "gigabits por segundo"),
            "fps": ("quadro por segundo", "quadros por segundo"),
            "bpm": ("batimento por minuto", "batimentos por minuto"),
            "mmHg": ("milímetro de mercúrio", "milímetros de mercúrio"),
            "mg/dL": ("miligrama por decilitro", "miligramas por decilitro"),
            "mmol/L": ("milimol por litro", "milimoles por litro"),
            "W": ("watt", "watts"), "kW": ("quilowatt", "quilowatts"), "MW": ("megawatt", "megawatts"),
            "kWh": ("quilowatt-hora", "quilowatts-hora"),
            "ms": ("milissegundo", "milissegundos"), "s": ("segundo", "segundos"), "min": ("minuto", "minutos"),
            "h": ("hora", "horas", "f"), "wk": ("semana", "semanas", "f"), "mo": ("mês", "meses"),
            "yr": ("ano", "anos"),
            "tbsp": ("colher de sopa", "colheres de sopa", "f"), "tsp": ("colher de chá", "colheres de chá", "f"),
        }.items()
    }
    abbreviations = {
        "sr.": Abbreviation("senhor", title=True),
        "sra.": Abbreviation("senhora", title=True),
        "srta.": Abbreviation("senhorita", title=True),
        "dr.": Abbreviation("doutor", title=True),
        "dra.": Abbreviation("doutora", title=True),
        "prof.": Abbreviation("professor", title=True),
        "profa.": Abbreviation("professora", title=True),
        "sto.": Abbreviation("santo", title=True),
        "sta.": Abbreviation("santa", title=True),
        "av.": Abbreviation("avenida", title=True),
        "apto.": Abbreviation("apartamento", before_number=True),
        "ap.": Abbreviation("apartamento", before_number=True),  # "Rua Augusta, 1500, ap. 42"
        "apto": Abbreviation("apartamento", before_number=True),  # written without its period too
        "nº": Abbreviation("número"),  # never a word of its own: "el nº de pedido"
        "etc.": Abbreviation("etcétera", can_end=True),
        "p.ex.": Abbreviation("por exemplo"),
        "aprox.": Abbreviation("aproximadamente"),
        # "máx. 24 °C", "mín. de 15 °C": before a number or "de" only ("el máx." stays)
        "máx.": Abbreviation("máximo", before_number=True, nouns=frozenset({"de"}), agrees=True),
        "mín.": Abbreviation("mínimo", before_number=True, nouns=frozenset({"de"}), agrees=True),
        "vs.": Abbreviation("versus"),
        "pág.": Abbreviation("página", before_number=True),
        "n.º": Abbreviation("número"),
        "tel.": Abbreviation("telefone"),
        "cel.": Abbreviation("celular", before_number=True),  # "cel. (11) 91234-5678"
        "p/": Abbreviation("para", after_number="por"),  # "frete grátis p/ capitais", "R$ 10 p/ pessoa"
        "c/": Abbreviation("com", title=True, not_before_number=True),  # "frete grátis c/ cupom"
        "s/": Abbreviation("sem", title=True, not_before_number=True),  # "parcelas s/ juros"
        # a road's kilometre post: "no km 23 da BR-116" ("23 km" is the unit, read with its number)
        "km": Abbreviation("quilômetro", before_number=True),
        "km.": Abbreviation("quilômetro", before_number=True),
    }

    def cardinal(self, n: int, gender: str = "m", before_noun: bool = False) -> str:
        words = _spelled(n, self.spelling).split()
        if gender == "f":
            last_big = max((i for i, w in enumerate(words) if w in _BIG), default=-1)
            words = words[: last_big + 1] + [_feminine_word(w) for w in words[last_big + 1 :]]
        return " ".join(words)

    def ordinal(self, n: int, gender: str = "m") -> str:
        words = spell(n, self.spelling, "ordinal")
        if gender == "f":
            words = " ".join(w[:-1] + "a" if w.endswith("o") else w for w in words.split())
        return words

    def count_noun(self, n: int, names: tuple[str, str], gender: str) -> str:
        words = self.cardinal(n, gender, before_noun=True)
        return f"{words}{self.noun_link(words)} {names[0] if n == 1 else names[1]}"  # "um milhão de euros"

    def noun_link(self, words: str) -> str:
        return " de" if words.split()[-1] in _BIG else ""

    def takes_one_scale(self, num: ParsedNumber) -> bool:
        return num.integer.lstrip("0") == "1"  # "1,5 milhão": the whole part agrees, as in Brazil's press

    def scale_connector(self, scale: str) -> str:
        return "de " if scale in ("m", "b", "bn", "t") else ""

    def read_date(self, year: Optional[int], month: int, day: int) -> str:
        day_words = "primeiro" if day == 1 else self.cardinal(day)
        words = f"{day_words} de {self.month_name(month)}"
        return words if year is None else f"{words} de {self.read_year(year)}"

    def read_time(self, hour: int, minute: int, meridiem: Optional[str]) -> str:
        hours = self.cardinal(hour, "f")  # "uma hora", "duas e meia"
        if meridiem:
            words = hours if minute == 0 else f"{hours} e {self.cardinal(minute)}"
            return f"{words} {self.read_meridiem(meridiem)}"
        if minute == 0:
            return f"{hours} hora" if hour == 1 else f"{hours} horas"
        return f"{hours} e {self.cardinal(minute)}"

    def read_meridiem(self, meridiem: str) -> Optional[str]:
        return "a eme" if meridiem == "am" else "pê eme"

    def match_ordinal(self, core: str, next_gender: Optional[str] = None) -> Optional[str]:
        m = _ORDINAL_RE.fullmatch(core)
        if not m:
            return None
        return self.ordinal(int(m.group(1)), "f" if m.group(2) == "ª" else "m")


def _portugal(word: str) -> str:
    """A unit's name as Portugal writes it: "quilômetro" is "quilómetro" there."""
    return word.replace("quilômetro", "quilómetro")


class EuropeanPortugueseRules(PortugueseRules):
    """Portuguese as Portugal says and writes it (pt-PT): the teens and the big numbers of
    num2words' "pt" ("dezasseis", "mil milhões"; "um bilião" is 10**12), "quilómetro", a keypad's
    "#" said "cardinal" after "prima", and "1,5 milhões" (Brazil's press says "1,5 milhão")."""

    spelling = _PORTUGAL
    scale_words = {
        **PortugueseRules.scale_words,
        "b": ("mil milhões", "mil milhões"),
        "bn": ("mil milhões", "mil milhões"),
        "t": ("bilião", "biliões"),  # "4 biliões de euros"
    }
    spelled_scales = {**PortugueseRules.spelled_scales, "mil milhões": "b", "bilião": "t", "biliões": "t"}
    units = {key: UnitNames(_portugal(n.one), _portugal(n.many), n.gender) for key, n in PortugueseRules.units.items()}
    abbreviations = {
        **PortugueseRules.abbreviations,
        "km": Abbreviation("quilómetro", before_number=True),
        "km.": Abbreviation("quilómetro", before_number=True),
    }
    keypad_words = {**PortugueseRules.keypad_words, "#": "cardinal"}
    keypad_verbs = PortugueseRules.keypad_verbs | {"prima", "carregue", "marque"}  # "prima # para confirmar"

    def takes_one_scale(self, num: ParsedNumber) -> bool:
        return LanguageRules.takes_one_scale(self, num)  # "1,5 milhões": only exactly one is singular
