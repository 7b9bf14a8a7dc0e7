"""Units of measure after a number (api/text/normalization_units.py), read in each language."""

from __future__ import annotations

import pytest

from api.text.normalization import normalize, rules_for
from api.text.normalization_units import (
    SPACED_ONLY, STANDALONE, UNIT_KEYS, UNIT_SYMBOLS, attached_unit, number_range,
)
from tests.api.text.reading import assert_reads

READINGS = [
    ("en", "It is 30°C today, 86 °F tomorrow.", "It is thirty degrees Celsius today, eighty-six degrees Fahrenheit tomorrow."),
    ("en", "It was -5°C, then 1 °C, then 30° C.", "It was minus five degrees Celsius, then one degree Celsius, then thirty degrees Celsius."),
    ("en", "a 90° turn", "a ninety degree turn"),  # after "a", an adjective: the singular
    ("en", "Drive at 50 km/h, or 31 mph; wind 3 m/s.", "Drive at fifty kilometers per hour, or thirty-one miles per hour; wind three meters per second."),
    ("en", "1 km, 1.5 km, 2 kg, 500 mg, 21 lb, 6 ft", "one kilometer, one point five kilometers, two kilograms, five hundred milligrams, twenty-one pounds, six feet"),
    ("en", "The room is 20 m², the tank 3 m³.", "The room is twenty square meters, the tank three cubic meters."),
    ("en", "16GB of RAM, a 2TB disk, a 2.4 GHz chip", "sixteen gigabytes of RAM, a two terabyte disk, a two point four gigahertz chip"),
    ("en", "A 60W bulb uses 1 kWh.", "A sixty watt bulb uses one kilowatt hour."),
    ("en", "a 10 min walk, a 5 km run, 5 km away", "a ten minute walk, a five kilometer run, five kilometers away"),
    ("en", "500g flour", "five hundred grams flour"),
    ("en", "Wait 200ms or 30 min.", "Wait two hundred milliseconds or thirty minutes."),
    ("en", "I ran 5 m and drank 2 L.", "I ran five meters and drank two liters."),
    ("en", "It is 1,234.5 km away.", "It is one thousand two hundred and thirty-four point five kilometers away."),
    ("en", "Rent per m² rose.", "Rent per square meter rose."),
    ("en", "Highs of 30-35°C, speeds of 100-120 km/h.", "Highs of thirty to thirty-five degrees Celsius, speeds of one hundred to one hundred and twenty kilometers per hour."),
    ("en", "24 hrs, 5-10 mins, 24h, 10 sec", "twenty-four hours, five to ten minutes, twenty-four hours, ten seconds"),
    ("en", "Only $9.99/month, $20/hr, 5€/kg, 20km/day.", "Only nine dollars and ninety-nine cents per month, twenty dollars per hour, five euros per kilogram, twenty kilometers per day."),
    ("es", "Solo 9,99 €/mes, 30-35 °C, 24 h.", "Solo nueve euros con noventa y nueve céntimos por mes, treinta a treinta y cinco grados Celsius, veinticuatro horas."),
    ("pt", "R$ 9,90/mês", "nove reais e noventa centavos por mês"),
    ("nl", "€ 5/kg, 10-15 min", "vijf euro per kilogram, tien tot vijftien minuten"),
    ("es", "Hace 21 °C y 1 °C; corre a 21 km/h.", "Hace veintiún grados Celsius y un grado Celsius; corre a veintiún kilómetros por hora."),
    ("es", "21 lb, 1 lb, 1,5 km, 1.000.000 km", "veintiuna libras, una libra, uno coma cinco kilómetros, un millón de kilómetros"),
    ("es", "El 1° lugar, el 2° piso; hace 20° de calor.", "El primer lugar, el segundo piso; hace veinte grados de calor."),
    ("es", "Un piso de 80 m² con 2 GB.", "Un piso de ochenta metros cuadrados con dos gigabytes."),
    ("pt", "Faz 21°C, 2 lb, 1 kg e 1,5 km.", "Faz vinte e um graus Celsius, duas libras, um quilograma e um vírgula cinco quilômetros."),
    ("pt", "Ficou em 1° lugar.", "Ficou em primeiro lugar."),  # "°" typed for the ordinal "º"
    ("pt", "20ºC e o 20º lugar", "vinte graus Celsius e o vigésimo lugar"),  # "º" before C is a degree sign; alone an ordinal
    ("nl", "Het is 1 °C of 20 °C, 100 km/h.", "Het is één graad Celsius of twintig graden Celsius, honderd kilometer per uur."),
    ("nl", "1 min of 10 min, 5 kg", "één minuut of tien minuten, vijf kilogram"),
    # hours and minutes: after hours "m" is minutes, and the "m" says "2h" is no time of day
    ("en", "It took 2h 30m, then 1h30, then 2h30m.", "It took two hours thirty minutes, then one hour thirty minutes, then two hours thirty minutes."),
    ("es", "Tardó 2h 30min y 1h 1m; a las 15h30.", "Tardó dos horas treinta minutos y una hora un minuto; a las quince y treinta."),
    ("pt", "Levou 2h30m, às 15h30.", "Levou duas horas trinta minutos, às quinze e trinta."),
    ("nl", "Het duurde 2h 30m.", "Het duurde twee uur dertig minuten."),
    # a number and a unit joined by a dash: an adjective, the unit singular; "4-H" is a name
    ("en", "A 30-min call, a 5-km run, a 10-lb bag, a 4-H club.", "A thirty minute call, a five kilometer run, a ten pound bag, a four H club."),
    ("en", "up to 1Gbps, a 100 Mbps plan", "up to one gigabit per second, a one hundred megabit per second plan"),
    ("nl", "100 Mbps", "honderd megabit per seconde"),
    # a fraction of a unit (English)
    ("en", "1/4 lb, 3/4 mi, 1/2 h.", "a quarter of a pound, three quarters of a mile, half an hour."),
    # dimensions: "x" between numbers is "by", and a unit after them belongs to the last
    ("en", "The room is 3x4 meters, a 10x20 cm photo.", "The room is three by four meters, a ten by twenty centimeters photo."),
    ("en", "Dimensions: 1.5x2.5 m, 2×3×4", "Dimensions: one point five by two point five meters, two by three by four"),
    ("es", "Una foto de 10x15 cm.", "Una foto de diez por quince centímetros."),
    ("nl", "Een kamer van 3x4 m.", "Een kamer van drie bij vier meter."),
    # square units written with "sq"
    ("en", "A 900 sq ft flat, 1,200 sq. ft. in all, 50 sq m or 1200sqft.",
     "A nine hundred square foot flat, one thousand two hundred square feet in all, fifty square meters or "
     "one thousand two hundred square feet."),
    ("es", "50 sq m", "cincuenta metros cuadrados"),
    # a unit's own period is no full stop inside a sentence, and still is at its end or before a capital
    ("en", "Add 5 lbs. of flour, 2lbs. of sugar and ~5 oz. of salt. Wait 5 min. Then 10 min.",
     "Add five pounds of flour, two pounds of sugar and about five ounces of salt. Wait five minutes. "
     "Then ten minutes."),
]


@pytest.mark.parametrize("language, text, expected", READINGS)
def test_units_are_read_in_the_language(language, text, expected):
    # the alignment stays whole: every token as written, a spaced unit read with its number
    assert_reads(language, text, expected)


def test_a_spaced_unit_is_read_by_its_number_and_keeps_its_punctuation():
    norm = normalize("Go 50 km/h, now.", "en")
    assert [(a.original, a.normalized) for a in norm.alignment] == [
        ("Go", ("Go",)), ("50", ("fifty", "kilometers", "per", "hour,")), ("km/h,", ()), ("now.", ("now.",))]


@pytest.mark.parametrize("text", [
    "I have 5m left.",      # five million, or minutes: "m" only spaced
    "There are 5 in the box.",  # "in" is never an inch
    "A 5G phone, 7 G.",     # "G" is no gram
    "5 mb, 5 Gb",           # case matters: only "MB", "GB"
    "Chapter 5 (km)",       # a unit inside brackets is not the number's
    "in 5. Km",             # punctuation between them
    "Get 5g speeds",        # a network generation, not grams
    "Route 66 W, the 90 s", # a direction; "s" is never a second
])
def test_what_is_not_surely_a_unit_is_left_to_the_other_rules(text):
    units = {w for key in UNIT_KEYS for w in rules_for("en").units[key].many.split()}
    assert not units & set(normalize(text, "en").text.replace(",", " ").replace(".", " ").split()), normalize(text, "en").text


def test_each_language_names_every_unit_but_its_own_words():
    left_out = {"en": set(), "nl": set(), "es": {"mi"}, "pt": {"mi"}}  # "mi": "my" (es), million (pt)
    for code, words in left_out.items():
        assert set(rules_for(code).units) == UNIT_KEYS - words, code


def test_a_unit_symbol_that_is_a_word_of_the_language_is_not_read():
    assert " mi " in normalize("En 2020 mi vida cambió.", "es").text  # "my"
    # Portuguese "mi" is the press's million, never miles
    assert normalize("São 5 mi de pessoas.", "pt").text == "São cinco milhões de pessoas."


def test_symbols_attach_to_a_number_unless_spaced_only():
    assert attached_unit("30°C") == (None, "30", "°C") and attached_unit("-1,5km/h") == (None, "-1,5", "km/h")
    assert attached_unit("16GB") == (None, "16", "GB") and attached_unit("2.4GHz") == (None, "2.4", "GHz")
    assert attached_unit("30-35°C") == ("30", "35", "°C")
    for symbol in SPACED_ONLY:
        assert attached_unit(f"5{symbol}") is None
    assert attached_unit("km") is None and attached_unit("5") is None
    assert number_range("100-120") == ("100", "120") and number_range("100") is None
    assert STANDALONE == {s for s in UNIT_SYMBOLS if s.endswith(("²", "³"))}
