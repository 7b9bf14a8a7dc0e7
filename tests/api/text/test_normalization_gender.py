"""Spanish and Portuguese numbers agree with the noun they count (api/text/normalization_gender.py)."""

from __future__ import annotations

import pytest

from api.text.normalization import normalize
from api.text.normalization_gender import PORTUGUESE, SPANISH
from tests.api.text.reading import assert_reads

READINGS = [
    # a feminine noun after the number: one, twenty-one, the hundreds
    ("es", "Tengo 1 casa y 21 llaves.", "Tengo una casa y veintiuna llaves."),
    ("es", "Vinieron 200 personas en 1 semana.", "Vinieron doscientas personas en una semana."),
    ("es", "Lo dije 21 veces, 1 vez al día.", "Lo dije veintiuna veces, una vez al día."),
    ("es", "Faltan 31 horas y 501 canciones.", "Faltan treinta y una horas y quinientas una canciones."),
    ("es", "Hay 200.000 personas.", "Hay doscientas mil personas."),
    # masculine, and the "-a" nouns that are masculine: "uno" shortened before them
    ("es", "Tengo 1 hijo, 21 años y 1 problema; 1 día.", "Tengo un hijo, veintiún años y un problema; un día."),
    # a number that counts no noun is whole: "el veintiuno de mayo", not "veintiún de"
    ("es", "el 21 de mayo, capítulo 21 de 30, son 21 en total", "el veintiuno de mayo, capítulo veintiuno de treinta, son veintiuno en total"),
    ("es", "Llegaron 21 esta mañana; la página 1 era azul.", "Llegaron veintiuno esta mañana; la página uno era azul."),
    ("es", "Tengo 21, y tú 3.", "Tengo veintiuno, y tú tres."),
    # two numbers that count one noun both agree with it
    ("es", "1 o 2 personas, de 1 a 3 semanas, 1 o 2 días", "una o dos personas, de una a tres semanas, uno o dos días"),
    # an hour after its feminine article
    ("es", "a las 21, a la 1", "a las veintiuna, a la una"),
    # ordinals: "primer"/"tercer" before a masculine noun only
    ("es", "el 1º lugar, el 3º piso, el 1º de mayo, la 1ª casa", "el primer lugar, el tercer piso, el primero de mayo, la primera casa"),
    ("es", "Es 21x más rápido.", "Es veintiuna veces más rápido."),
    ("pt", "Tenho 1 casa e 2 chaves.", "Tenho uma casa e duas chaves."),
    ("pt", "Foram 2 horas e 2 minutos, 22 pessoas, 202 páginas.", "Foram duas horas e dois minutos, vinte e duas pessoas, duzentas e duas páginas."),
    ("pt", "1 dia, 2 problemas, 2 mapas", "um dia, dois problemas, dois mapas"),
    ("pt", "2 de maio, capítulo 2 e 3", "dois de maio, capítulo dois e três"),
    ("pt", "1 ou 2 semanas", "uma ou duas semanas"),
    ("pt", "às 2 da tarde, das 2 às 4", "às duas da tarde, das duas às quatro"),
    ("pt", "Ele é 2x mais rápido.", "Ele é duas vezes mais rápido."),
    ("pt", "o 1º dia, a 2ª vez", "o primeiro dia, a segunda vez"),
]


@pytest.mark.parametrize("language, text, expected", READINGS)
def test_numbers_agree_with_the_noun_they_count(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text, expected", [
    ("en", "1 house, 21 keys, 200 people", "one house, twenty-one keys, two hundred people"),
    ("nl", "1 huis en 21 sleutels", "één huis en eenentwintig sleutels"),
])
def test_languages_without_agreement_read_as_before(language, text, expected):
    assert normalize(text, language).text == expected


@pytest.mark.parametrize("nouns, word, gender", [
    (SPANISH, "casa", "f"), (SPANISH, "Casas", "f"), (SPANISH, "canciones", "f"), (SPANISH, "ciudad", "f"),
    (SPANISH, "vez", "f"), (SPANISH, "noche", "f"), (SPANISH, "mano", "f"),
    (SPANISH, "día", "m"), (SPANISH, "problemas", "m"), (SPANISH, "gato", "m"), (SPANISH, "turistas", "m"),
    (SPANISH, "de", None), (SPANISH, "esta", None), (SPANISH, "para", None), (SPANISH, "a", None),
    (SPANISH, "km/h", None), (SPANISH, "", None),
    (PORTUGUESE, "semana", "f"), (PORTUGUESE, "canções", "f"), (PORTUGUESE, "viagem", "f"), (PORTUGUESE, "vezes", "f"),
    (PORTUGUESE, "dia", "m"), (PORTUGUESE, "sistema", "m"), (PORTUGUESE, "livro", "m"),
    (PORTUGUESE, "da", None), (PORTUGUESE, "ou", None), (PORTUGUESE, "uma", None),
])
def test_the_gender_of_a_word(nouns, word, gender):
    assert nouns.of(word) == gender


def test_a_sign_after_a_number_that_takes_the_next_word_keeps_it():
    # "50+" reads "50" with what follows; agreement with the sign's word must not drop a unit
    assert normalize("50+ km", "es").text == "más de cincuenta kilómetros"
    assert normalize("50+ km", "en").text == "fifty kilometers plus"
