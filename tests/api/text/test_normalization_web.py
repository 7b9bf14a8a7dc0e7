"""Email and web addresses (api/text/normalization_web.py), and signs, scales, ratings and time
ranges around numbers."""

from __future__ import annotations

import pytest

from api.text.normalization import normalize
from tests.api.text.reading import assert_reads

READINGS = [
    ("en", "Email john.doe@gmail.com today.", "Email john dot doe at gmail dot com today."),
    ("en", "Write to TTS-Team@Acme.IO", "Write to TTS dash Team at Acme dot IO"),
    ("en", "See https://www.example.com/docs?x=1 now", "See w w w dot example dot com slash docs now"),
    ("en", "Go to acme.com/pricing.", "Go to acme dot com slash pricing."),
    ("en", "at www.acme.co.uk:8080/a-b_c", "at w w w dot acme dot co dot uk eight zero eight zero slash a dash b underscore c"),
    ("en", "(see docs.acme.io)", "(see docs dot acme dot io)"),
    ("es", "Escribe a soporte@acme.es", "Escribe a soporte arroba acme punto es"),
    ("pt", "Veja https://acme.com.br/ajuda", "Veja acme ponto com ponto br barra ajuda"),
    ("nl", "Mail info@acme.nl", "Mail info apenstaartje acme punt nl"),
    # a query after a bare domain's path is not said; after the domain alone "?" is the question's
    ("en", "Track it at ups.com/track?id=1Z999 today.", "Track it at ups dot com slash track today."),
    ("en", "Is it acme.com?", "Is it acme dot com?"),
    # a file's name with a common extension; "node.js" has none
    ("en", "Open report_v2.pdf and index.html, not node.js.", "Open report underscore v two dot pdf and index dot "
     "html, not node.js."),
    # a hex code, a keyboard shortcut, a path through menus (not a comparison)
    ("en", "Error 0x8007001F: press Ctrl+Shift+Esc", "Error zero x eight zero zero seven zero zero one F: press "
     "Control Shift Escape"),
    ("en", "Go to Settings > Privacy → Location; if x > y", "Go to Settings, Privacy, Location; if x > y"),
    # signs around numbers
    ("en", "2 + 2 = 4", "two plus two equals four"),
    ("en", "our #1 fan", "our number one fan"),
    ("en", "Ticket #A12345 is open.", "Ticket number A one two three four five is open."),
    ("en", "Order #A-12345, ref ABC-1234-XYZ; an F-150, COVID-19", "Order number A one two three four five, ref ABC one two three four XYZ; an F one fifty, COVID nineteen"),
    ("en", "±5%, 5 ± 0.1, 5 +/- 1 and +/-5", "plus or minus five percent, five plus or minus zero point one, five plus or minus one and plus or minus five"),
    ("es", "±5 %", "más o menos cinco por ciento"),
    ("en", "Q&A, AT&T, R&D", "Q and A, AT and T, R and D"),
    ("es", "una sesión de Q&A", "una sesión de Q y A"),
    ("en", "~$20 or ~20 min", "about twenty dollars or about twenty minutes"),
    ("en", "50+ people at +5°C", "fifty plus people at plus five degrees Celsius"),
    ("en", "Call +1 (555) 123-4567.", "Call plus one, (five five five) one two three, four five six seven."),
    ("en", "up 5-10% or 5–10 %", "up five to ten percent or five to ten percent"),
    ("es", "2 + 2 = 4, el #1", "dos más dos igual a cuatro, el número uno"),
    ("nl", "~20 min", "ongeveer twintig minuten"),
    ("en", "<5 min, > 10 items, >=18, ≥ 18, <=$20", "less than five minutes, more than ten items, at least eighteen, "
     "at least eighteen, at most twenty dollars"),
    ("es", "<5 min, > 10 personas", "menos de cinco minutos, más de diez personas"),
    ("pt", "≥ 18 anos", "no mínimo dezoito anos"),
    ("nl", "<5 km", "minder dan vijf kilometer"),
    # retirement plans are names: said as Americans say them, not "four hundred and one( k)"
    ("en", "my 401(k), a 403b and a 457(b).", "my four oh one k, a four oh three b and a four five seven b."),
    ("es", "el plan 401(k)", "el plan cuatro cero uno k"),
    ("en", "1.2k steps, 2.5M users, 3bn", "one point two thousand steps, two point five million users, three billion"),
    ("es", "1,5M de usuarios", "uno coma cinco millones de usuarios"),
    ("en", "1M+ users, 100k+ downloads, $1M+ raised", "one million plus users, one hundred thousand plus downloads, one million dollars plus raised"),
    ("es", "10k+ seguidores", "más de diez mil seguidores"),
    # after "a", before the word it describes, an amount is an adjective: its currency singular
    ("en", "a $20 gift card, an $8 fee, a 10 USD charge, a $5.5bn deal", "a twenty dollar gift card, an eight dollar fee, a ten dollar charge, a five point five billion dollar deal"),
    ("en", "a $20 or $30 fee, a $20.", "a twenty dollars or thirty dollars fee, a twenty dollars."),
    ("en", "$9.99/mo or $99/yr, $3.49/gal", "nine dollars and ninety-nine cents per month or ninety-nine dollars per year, three dollars and forty-nine cents per gallon"),
    ("es", "Nos vemos el 5/6, o el 29/2.", "Nos vemos el cinco de junio, o el veintinueve de febrero."),  # a date, not a fraction
    ("nl", "Op 3/4 hebben we een afspraak.", "Op drie april hebben we een afspraak."),
    ("en", "on 5/6", "on May sixth"),
    ("nl", "Nummer #1, ongeveer ~20.", "Nummer één, ongeveer twintig."),  # the sign's word is said already
    ("en", "1.5x faster, 2× more, 3 × 4", "one point five times faster, two times more, three times four"),
    ("es", "2x más rápido, 3 × 4", "dos veces más rápido, tres por cuatro"),
    ("en", "Rated 4.5/5 stars.", "Rated four point five out of five stars."),
    ("nl", "4,5/5 sterren", "vier komma vijf uit vijf sterren"),
    # a whole score out of ten or a hundred; "1/10" and "3/10 of" are fractions, "on 10/10" a date
    ("en", "I give it 10/10. 9/10 dentists agree, 95/100 overall.", "I give it ten out of ten. nine out of ten dentists agree, ninety-five out of one hundred overall."),
    ("en", "1/10 of it, 3/10 of the budget.", "one tenth of it, three tenths of the budget."),
    ("en", "rated 4/5 stars, but 1/5 of it", "rated four out of five stars, but one fifth of it"),
    ("es", "4/5 estrellas", "cuatro de cinco estrellas"),
    ("en", "Come on 10/10.", "Come on October tenth."),
    ("es", "Le doy un 9/10, 3/10 de la gente.", "Le doy un nueve de diez, tres décimos de la gente."),
    ("en", "Open 9am-5pm daily.", "Open nine a m to five p m daily."),
    # hours before one meridiem share it; a 24-hour range, or pages, have none
    ("en", "The meeting is 2-3pm EST, or 2-3 pm, or 11-12am.", "The meeting is two to three p m EST, or two to three p m, or eleven to twelve a m."),
    ("en", "2:30-3pm, pages 2-3, 13-14pm", "two thirty to three p m, pages two to three, thirteen to fourteen pm"),
    ("en", "Apt. 5B", "Apartment five B"),
    ("es", "De 9:00-17:30.", "De nueve a diecisiete y treinta."),
]


@pytest.mark.parametrize("language, text, expected", READINGS)
def test_addresses_and_signs_are_read(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("text", [
    "I was done.So I left.",   # a missing space after a full stop: the "domain" is capitalised
    "node.js and index.htm1",  # no common top-level domain, nor a file's extension
    "e.g. this",
    "#hashtag, E+ grade, A++ code",
    "a 4K video, 5m, a 3x4 grid",  # "K" (video), "m" (meters? minutes?) and dimensions are no scale or times
    "A 401k plan, a 4k TV, a 5k race, 3M makes tape.",  # a whole number and "k"/"M" is as often a name
    "3D/VR, 4K/HDR, 2FA/MFA, 3pm/EST, 10am/noon, Room 101/B, 10/Jan",  # no amount per unit
    "He arrived.at noon, I know.it works",  # a missing space: "at", "it" are words, not domains
    "+ Apples. Fruit: + Pears",  # list bullets
    "> Quoted, a -> b, if a > b, <b>bold</b>, =>",  # a comparison sign only before a number is a word
])
def test_what_is_no_address_or_signed_number_stays(text):
    norm = normalize(text, "en")
    said = set(norm.text.replace(",", " ").split())
    assert not {"dot", "plus", "number", "thousand", "million", "times", "per", "than", "least", "most"} & said, norm.text


def test_a_hashtag_that_starts_with_digits_is_no_number():
    assert not normalize("#2024goals", "en").text.startswith("number")
    assert normalize("#2024", "en").text == "number twenty twenty-four"
