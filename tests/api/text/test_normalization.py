"""Normalisation examples per language (frozen readings), alignment invariants and modes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.text.errors import NormalizationModeError
from api.text.normalization import NormalizationMode, known_abbreviations, normalize, rules_for
from tests.api.text.reading import assert_reads

# (input, expected normalised text). Each list covers numbers with the locale's separators,
# money, ordinals, dates, times, percentages and abbreviations.
ENGLISH = [
    ('It costs $5.', 'It costs five dollars.'),
    ('Pay $1,234.56 now', 'Pay one thousand two hundred and thirty-four dollars and fifty-six cents now'),
    ('£10 or €3,50', 'ten pounds or three euros and fifty cents'),
    ('5 USD', 'five dollars'),
    ('$2.5M', 'two point five million dollars'),
    ('-$3', 'minus three dollars'),
    ('It is 1,234.5 km', 'It is one thousand two hundred and thirty-four point five kilometers'),
    ('the 21st and 2nd and 3rd', 'the twenty-first and second and third'),
    ('on 2024-03-05', 'on March fifth twenty twenty-four'),
    ('on 03/05/2024', 'on March fifth twenty twenty-four'),
    ('on 13/05/2024', 'on May thirteenth twenty twenty-four'),
    ('March 5, 2024', 'March fifth, twenty twenty-four'),
    ('at 3:30 pm', 'at three thirty p m'),
    ('at 3:30pm', 'at three thirty p m'),
    ('at 15:45', 'at fifteen forty-five'),
    ('at 10:00', "at ten o'clock"),
    ('at 7 a.m.', 'at seven a m.'),
    ('at 10:05 a.m. Then', 'at ten oh five a m. Then'),
    ('in 1999', 'in nineteen ninety-nine'),
    ('the 1990s', 'the nineteen nineties'),
    ("the '80s and ’90s, '70s'", "the eighties and nineties, 'seventies'"),  # an apostrophe of elision is not said
    ('in 2000', 'in two thousand'),
    ('50% off', 'fifty percent off'),
    ('50 % off', 'fifty percent off'),
    ('Dr. Smith', 'Doctor Smith'),
    ('Main St.', 'Main Street.'),
    ('St. Louis', 'Saint Louis'),
    ('cats, dogs, etc. and more', 'cats, dogs, et cetera and more'),
    ('e.g. this', 'for example this'),
    ('i.e. that', 'that is that'),
    ('Mr. and Mrs. Jones', 'Mister and Missus Jones'),
    ('Apple vs. Orange', 'Apple versus Orange'),
    ('1st-class, 3rd-party, 21st-century, 2nd/3rd', 'first class, third party, twenty-first century, second third'),
    ('100s of users, 1,000s of them, 10s', 'hundreds of users, thousands of them, tens'),
    ('$45 (incl. tax), excl. VAT', 'forty-five dollars (including tax), excluding VAT'),
    ('Bldg. 4, w/ cheese, w/o onions', 'Building four, with cheese, without onions'),
    ('No. 5', 'Number five'),
    ('say No.', 'say No.'),
    ('Tom & Jerry', 'Tom and Jerry'),
    ('call 007', 'call zero zero seven'),
    ('COVID-19', 'COVID nineteen'),
    ('10-20 times', 'ten to twenty times'),
    ('v3.5.1', 'v three point five point one'),
    ('12345678901234567890', 'one two three four five six seven eight nine zero one two three four five six seven eight nine zero'),
    ('0.5', 'zero point five'),
    ('.5', 'point five'),  # as written: no integer part, none said
    ('-4', 'minus four'),
    ('He was 3.', 'He was three.'),
    ('Hello world!', 'Hello world!'),
    ('1/2 cup', 'one half cup'),
    ('3/4 of it', 'three quarters of it'),
    ('open 24/7', 'open twenty-four seven'),
]

SPANISH = [
    ('a las 14:30 h, a las 9:00h', 'a las catorce y treinta horas, a las nueve horas'),  # "h": the hour's unit
    ('C/ Mayor, Avda. de la Paz nº 12, 2º izq.', 'Calle Mayor, Avenida de la Paz número doce, segundo izquierda.'),
    ('Cuesta 3,50 €.', 'Cuesta tres euros con cincuenta céntimos.'),
    ('Son 1.234,56 dólares', 'Son mil doscientos treinta y cuatro dólares con cincuenta y seis centavos'),
    ('US$200', 'doscientos dólares'),
    ('€5', 'cinco euros'),
    ('5 EUR', 'cinco euros'),
    ('1.000.000 euros', 'un millón de euros'),
    ('21 libras', 'veintiuna libras'),
    ('1 libra', 'una libra'),
    ('El 1.º y la 2.ª', 'El primero y la segunda'),
    ('el 1er piso', 'el primer piso'),
    ('la 3era vez', 'la tercera vez'),
    ('el 05/03/2024', 'el cinco de marzo de dos mil veinticuatro'),
    ('el 2024-03-05', 'el cinco de marzo de dos mil veinticuatro'),
    ('a las 15:45', 'a las quince y cuarenta y cinco'),
    ('a las 15:00', 'a las quince horas'),
    ('a las 3:00', 'a las tres en punto'),
    ('a las 15:00 horas', 'a las quince horas'),
    ('el 12,5 %', 'el doce coma cinco por ciento'),
    ('el 50%', 'el cincuenta por ciento'),
    ('La Sra. García', 'La Señora García'),
    ('el Dr. Pérez', 'el Doctor Pérez'),
    ('la Dra. Ruiz', 'la Doctora Ruiz'),
    ('Ud. sabe', 'Usted sabe'),
    ('etc.', 'etcétera.'),
    ('p.ej. esto', 'por ejemplo esto'),
    ('vive en EE.UU. desde 2019', 'vive en Estados Unidos desde dos mil diecinueve'),
    ('precio con IVA incl.', 'precio con IVA incluido.'),
    ('tenía 3.5 puntos', 'tenía tres coma cinco puntos'),
    ('21000 personas', 'veintiún mil personas'),
    ('hace 21 años', 'hace veintiún años'),
    ('1 gato', 'un gato'),
    ('-3,5 grados', 'menos tres coma cinco grados'),
    ('en 1999', 'en mil novecientos noventa y nueve'),
]

PORTUGUESE = [
    ('às 9:00h', 'às nove horas'),
    ('Av. Paulista, apto. 12, nº 5', 'Avenida Paulista, apartamento doze, número cinco'),
    ('Custa R$ 3,50', 'Custa três reais e cinquenta centavos'),
    ('€1.234,56', 'mil duzentos e trinta e quatro euros e cinquenta e seis cêntimos'),
    ('2 libras', 'duas libras'),
    ('1 real', 'um real'),
    ('O 1º lugar', 'O primeiro lugar'),
    ('a 2ª vez', 'a segunda vez'),
    ('Às 15h30', 'Às quinze e trinta'),
    ('às 15h', 'às quinze horas'),
    ('às 2:00', 'às duas horas'),
    ('às 1:00', 'às uma hora'),
    ('em 05/03/2024', 'em cinco de março de dois mil e vinte e quatro'),
    ('no dia 01/03/2024', 'no dia primeiro de março de dois mil e vinte e quatro'),
    ('A Sra. Silva', 'A Senhora Silva'),
    ('o Dr. Costa', 'o Doutor Costa'),
    ('a Dra. Lima', 'a Doutora Lima'),
    ('n.º 5', 'número cinco'),
    ('pág. 10', 'página dez'),
    ('50%', 'cinquenta por cento'),
    ('12,5 %', 'doze vírgula cinco por cento'),
    ('1.000.000 euros', 'um milhão de euros'),
    ('200 euros', 'duzentos euros'),
    ('200 libras', 'duzentas libras'),
    ('p.ex. isto', 'por exemplo isto'),
    ('3.5 pontos', 'três vírgula cinco pontos'),
]

DUTCH = [
    ('om 14.30 uur', 'om veertien uur dertig'),  # "." in a time, before "uur" only
    ('versie 1.20 is uit', 'versie één komma twintig is uit'),  # two decimals said as a number in Dutch
    ('ma t/m vr, m.b.t. dat, i.p.v. dit, a.u.b.', 'maandag tot en met vrijdag, met betrekking tot dat, in plaats van dit, alstublieft.'),
    ('€ 3,50', 'drie euro en vijftig cent'),
    ('1.234,5 euro', 'duizendtweehonderdvierendertig euro en vijftig cent'),
    ('5 EUR', 'vijf euro'),
    ('€1,-', 'één euro'),
    ('De 1e keer', 'De eerste keer'),
    ('de 8ste', 'de achtste'),
    ('de 2de', 'de tweede'),
    ('op 05-03-2024', 'op vijf maart tweeduizendvierentwintig'),
    ('op 5.3.2024', 'op vijf maart tweeduizendvierentwintig'),
    ('om 15:45', 'om vijftien uur vijfenveertig'),
    ('om 9:00 uur', 'om negen uur'),
    ('om 9:30 uur', 'om negen uur dertig'),
    ('12,5%', 'twaalf komma vijf procent'),
    ('Dhr. Jansen', 'De heer Jansen'),
    ('mevr. De Vries', 'mevrouw De Vries'),
    ('bijv. dit', 'bijvoorbeeld dit'),
    ('d.w.z. dat', 'dat wil zeggen dat'),
    ('o.a. dit', 'onder andere dit'),
    ('enz.', 'enzovoort.'),
    ('nr. 12', 'nummer twaalf'),
    ('in 1999', 'in negentien honderd negenennegentig'),
    ('3.5 punten', 'drie komma vijf punten'),
    ('21 mensen', 'eenentwintig mensen'),
]

CASES = (
    [("en", x, y) for x, y in ENGLISH]
    + [("es", x, y) for x, y in SPANISH]
    + [("pt", x, y) for x, y in PORTUGUESE]
    + [("nl", x, y) for x, y in DUTCH]
)


@pytest.mark.parametrize("language, text, expected", CASES)
def test_reading(language, text, expected):
    assert normalize(text, language).text == expected


@pytest.mark.parametrize("language, text, expected", CASES)
def test_alignment_round_trip(language, text, expected):
    norm = normalize(text, language)
    # Every original token, exactly as written, in order.
    assert norm.original_words == text.split()
    assert [norm.original[a.start_char : a.start_char + len(a.original)] for a in norm.alignment] == text.split()
    # The normalised words are exactly the words of the normalised text.
    assert norm.normalized_words == norm.text.split()


def test_locale_separators_differ():
    assert normalize("1,234.5", "en").text == "one thousand two hundred and thirty-four point five"
    assert normalize("1.234,5", "es").text == "mil doscientos treinta y cuatro coma cinco"
    assert normalize("1.234,5", "pt").text == "mil duzentos e trinta e quatro vírgula cinco"
    assert normalize("1.234,5", "nl").text == "duizendtweehonderdvierendertig komma vijf"
    # "1,234" is a thousand-something in English but a decimal in Spanish.
    assert normalize("1,234", "en").text == "one thousand two hundred and thirty-four"
    assert normalize("1,234", "es").text == "uno coma dos tres cuatro"


def test_alignment_of_a_multi_token_unit_and_punctuation():
    norm = normalize('He paid "5 USD," then left.', "en")
    assert [(a.original, a.normalized) for a in norm.alignment] == [
        ("He", ("He",)),
        ("paid", ("paid",)),
        ('"5', ('"five', 'dollars,"')),  # the unit is read by the number's token...
        ('USD,"', ()),  # ...and the code's token becomes no words
        ("then", ("then",)),
        ("left.", ("left.",)),
    ]
    assert norm.text == 'He paid "five dollars," then left.'
    assert norm.timestamp_words(use_normalized=False) == ["He", "paid", '"5', 'USD,"', "then", "left."]
    assert norm.timestamp_words(use_normalized=True) == ["He", "paid", '"five', 'dollars,"', "then", "left."]


@pytest.mark.parametrize("language, text, expected", [
    # a scale written as a word is read as the suffix is ("$2.5M"): not "one dollar and fifty cents million"
    ("en", "$1.5 million", "one point five million dollars"),
    ("en", "$3 billion, $4.5 trillion", "three billion dollars, four point five trillion dollars"),
    ("en", "a $5 million deal", "a five million dollar deal"),
    ("en", "$5 Million dollars.", "five million dollars."),  # the currency's name after it is said once
    ("en", "€ 2 thousand", "two thousand euros"),
    ("en", "It was $5. Million people came.", "It was five dollars. Million people came."),  # a new sentence
    ("es", "$1,5 millones y €2 mil millones", "uno coma cinco millones de dólares y dos mil millones de euros"),
    ("es", "€2 mil", "dos mil euros"),
    ("pt", "R$ 2 bilhões", "dois bilhões de reais"),
    ("nl", "€1,5 miljoen", "één komma vijf miljoen euro"),
    # Dutch short forms written apart; their period ends a sentence only where one ends
    ("nl", "€5 mln. voor de bouw, €2,5 mld", "vijf miljoen euro voor de bouw, twee komma vijf miljard euro"),
    ("nl", "Het kost €5 mln. Dat is veel.", "Het kost vijf miljoen euro. Dat is veel."),
    # ranges of amounts: the currency once, at the end, unless the first has cents
    ("en", "$10-$20, $10–20", "ten to twenty dollars, ten to twenty dollars"),
    ("en", "$9.99-$19.99", "nine dollars and ninety-nine cents to nineteen dollars and ninety-nine cents"),
    ("en", "$1-2M, $1-2 million", "one to two million dollars, one to two million dollars"),
    ("en", "£5-£10 each", "five to ten pounds each"),
    ("es", "10-20 € al mes, £21-£30", "diez a veinte euros al mes, veintiuna a treinta libras"),
    ("nl", "€10-€20", "tien tot twintig euro"),
    # scales on both ends: said once when they agree, each where they differ
    ("en", "a salary of $80K-$120K, $80k-120k", "a salary of eighty to one hundred and twenty thousand dollars, "
                                               "eighty to one hundred and twenty thousand dollars"),
    ("en", "$500K-$1M, $2.5M-$3M", "five hundred thousand to one million dollars, two point five to three million dollars"),
    ("es", "$500K-$1M", "quinientos mil a un millón de dólares"),
    ("pt", "€10k-€20k", "dez a vinte mil euros"),
    ("nl", "€1,5mld-€2mld", "één komma vijf tot twee miljard euro"),
    # not rising: no range of prices (a drop, a sum), so both amounts in full, never a stray "$"
    ("en", "from $20-$10, $20-10", "from twenty dollars to ten dollars, twenty dollars to ten dollars"),
    ("en", "$1M-$500K, $5-$5", "one million dollars to five hundred thousand dollars, five dollars to five dollars"),
    ("es", "20-10 €", "veinte euros a diez euros"),
    # before a scale from a million up the number agrees with it, a masculine noun
    ("es", "$1M, $21M, ₹200M, ₹21k", "un millón de dólares, veintiún millones de dólares, "
                                     "doscientos millones de rupias, veintiuna mil rupias"),
    ("es", "$21 millones", "veintiún millones de dólares"),
])
def test_money_with_a_written_scale_and_ranges_of_money(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text, expected", [
    # cents alone: "$.99", and the cent sign, in the language's cents of a dollar
    ("en", "Pay $.50 now, $.99/lb", "Pay fifty cents now, ninety-nine cents per pound"),
    ("en", "99¢, only 99 ¢ each, 1¢, 99¢/lb", "ninety-nine cents, only ninety-nine cents each, one cent, "
                                               "ninety-nine cents per pound"),
    ("en", "a 50¢ stamp", "a fifty cent stamp"),
    ("es", "99¢, 1¢", "noventa y nueve centavos, un centavo"),
    ("nl", "99¢", "negenennegentig cent"),
])
def test_cents_alone(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text, expected", [
    # a code after an amount: said once, and it names the currency a bare "$" is
    ("en", "$100 USD, a $20 USD fee, $5 million USD.", "one hundred dollars, a twenty dollar fee, five million dollars."),
    ("en", "$1,500 MXN, $20 CAD, $10-$20 AUD", "one thousand five hundred pesos, twenty Canadian dollars, "
                                              "ten to twenty Australian dollars"),
    ("en", "C$100, CA$5, A$50, 1 CAD", "one hundred Canadian dollars, five Canadian dollars, fifty Australian dollars, "
                                        "one Canadian dollar"),
    ("es", "$1.500 MXN y $20 CAD", "mil quinientos pesos y veinte dólares canadienses"),
    ("pt", "A$ 100", "cem dólares australianos"),
    ("nl", "$100 CAD", "honderd Canadese dollar"),
    # a code the symbol cannot mean stays
    ("en", "€5 USD", "five euros USD"),
])
def test_a_currency_code_after_an_amount(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text, expected", [
    # a whole number and a fraction written apart are read as "2½" is
    ("en", "2 1/2 cups", "two and a half cups"),
    ("en", "Add 1 3/4, then 2 1/3 cup", "Add one and three quarters, then two and one third cup"),
    ("en", "2 1/2 kg", "two and a half kilograms"),
    ("es", "2 1/2 tazas, 2 1/2 kg", "dos y media tazas, dos y medio kilogramos"),
    ("pt", "2 1/2 xícaras", "duas e meia xícaras"),
    # not a mixed number: an improper fraction, an unusual denominator
    ("en", "3 4/3", "three four three"),  # as "4/3" alone is
    ("en", "10 1/5", "ten one fifth"),
])
def test_a_whole_number_and_a_fraction_written_apart(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text, expected", [
    # a Roman numeral after a word that numbers things is that number
    ("en", "Chapter IV, Part I, World War II. Type II diabetes, a Phase III trial",
     "Chapter four, Part one, World War two. Type two diabetes, a Phase three trial"),
    ("es", "el siglo XXI, Capítulo I", "el siglo veintiuno, Capítulo uno"),
    ("pt", "século XX", "século vinte"),
    ("nl", "Hoofdstuk IV", "Hoofdstuk vier"),
    # anywhere else it stays: a pronoun, a size, a monarch or a sequel, a full stop between, past XXXIX
    ("en", "I said size XL, Henry VIII, Rocky III, Chapter. IV, Super Bowl LVIII",
     "I said size XL, Henry VIII, Rocky III, Chapter. IV, Super Bowl LVIII"),
    ("es", "Felipe VI", "Felipe VI"),
])
def test_roman_numerals_after_a_word_that_numbers(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text, expected", [
    ("en", "1:05:30 left, 00:04:10 in, 2:00:00 total", "one hour, five minutes and thirty seconds left, "
     "four minutes and ten seconds in, two hours total"),
    ("en", "at 10:30:15, at 10:30:00", "at ten thirty and fifteen seconds, at ten thirty"),  # a time of day
    ("es", "quedan 1:05:30, a las 10:30:15", "quedan una hora, cinco minutos y treinta segundos, "
     "a las diez y treinta y quince segundos"),
    ("nl", "om 10:30:15", "om tien uur dertig en vijftien seconden"),
    ("en", "1:61:00", "one sixty-one zero zero"),  # no clock: left to the other rules
])
def test_hours_minutes_and_seconds(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text, expected", [
    # an ISO date and time, as a tool writes it and an LLM may pass it on
    ("en", "Due 2026-12-05T10:30:00Z, or 2026-12-05T10:30:15.123+05:30.",
     "Due December fifth twenty twenty-six at ten thirty UTC, or December fifth twenty twenty-six at ten "
     "thirty UTC plus five thirty."),
    ("en", "on 2026-12-05T00:00", "on December fifth twenty twenty-six at midnight"),
    ("es", "2026-12-05T01:30Z", "cinco de diciembre de dos mil veintiséis a la una y treinta UTC"),
    ("nl", "2026-12-05T10:30+01:00", "vijf december tweeduizendzesentwintig om tien uur dertig UTC plus één"),
    ("en", "2026-13-05T10:30", "two zero two six, one three, zero five T ten thirty"),  # no such month: a code
])
def test_iso_dates_with_their_time(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("text, expected", [
    ("Book min. 3 nights, max. 10 people; qty 5, 10 pcs.", "Book minimum three nights, maximum ten people; quantity five, ten pieces."),
    ("Acme Corp., a.k.a. Acme, Lakers vs Celtics", "Acme Corporation, also known as Acme, Lakers versus Celtics"),
    ("Your appt. for acct. 5, tel. 555-1234, approx 5 min", "Your appointment for account five, telephone five five five, "
     "one two three four, approximately five minutes"),
    ("$9.99 ea. Order now", "nine dollars and ninety-nine cents each. Order now"),  # its period ends the sentence too
    ("It took 5 min. then more, the max. That", "It took five minutes then more, the max. That"),  # "min." after a number is minutes
])
def test_english_short_forms(text, expected):
    assert_reads("en", text, expected)


@pytest.mark.parametrize("language, text, expected", [
    # a range of times whose dash stands alone or runs on from the first meridiem
    ("en", "Open 9 a.m.–5 p.m. daily, 9 AM-5 PM, 9am - 5pm, 9:00 AM – 5:00 PM",
     "Open nine a m to five p m daily, nine a m to five p m, nine a m to five p m, nine a m to five p m"),
    ("en", "10 - 20, 9 AM-X", "ten - twenty, nine AM-X"),  # no times on both sides: as written
    # times a unit, per a unit
    ("en", "3x/week, 1-2x daily", "three times per week, one to two times daily"),
    ("es", "2x/semana, 1-2x al día", "dos veces por semana, una a dos veces al día"),
])
def test_time_ranges_and_times_per_unit(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text, expected", [
    # health, tech and finance: what support and healthcare agents read out
    ("en", "BP 120/80, pulse 72 bpm, glucose 100 mg/dL or 5.5 mmol/L",
     "BP one twenty over eighty, pulse seventy-two beats per minute, glucose one hundred milligrams per "
     "deciliter or five point five millimoles per liter"),
    ("es", "presión 120/80", "presión ciento veinte sobre ochenta"),
    ("pt", "pressão 12/8", "pressão doze por oito"),
    ("en", "IP 192.168.1.1, port 8080, HTTP 404, error 500", "IP one nine two dot one six eight dot one dot one, "
     "port eight zero eight zero, HTTP four oh four, error five hundred"),
    ("en", "1080p at 60fps", "ten eighty p at sixty frames per second"),
    ("en", "$1.2T, $2-3T", "one point two trillion dollars, two to three trillion dollars"),
    # not those: a number after another word, four numbers past 255, a fraction with no pressure before it
    ("en", "Room 404, 10.0.0.256, 120/80", "Room four oh four, ten point zero point zero point two hundred "
     "and fifty-six, one hundred and twenty eighty"),
])
def test_health_tech_and_finance_readings(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("text, expected", [
    # what an LLM's reply carries of Markdown is not said
    ("This is **very** important, *Note:* use `pip install` (**now**)!",
     "This is very important, Note: use pip install (now)!"),
    ("## Step 2\nSee [our site](https://example.com/a_(b)) for **$5** off.",
     "Step two.\nSee our site for five dollars off."),
    # a list: its bullets unsaid, a pause after each item that has none ("," between items)
    ("Options:\n- Paris\n- Rome\n* **Berlin**\nWhich one?", "Options: Paris, Rome, Berlin.\nWhich one?"),
    ("\u2022 Fast\n\u2022 Cheap.\n+ 5 eggs", "Fast, Cheap. five eggs"),
    ("Steps:\n1. Mix it\n2) Bake 20 min\n3. Serve.", "Steps:\none. Mix it,\ntwo) Bake twenty minutes,\nthree. Serve."),
    ("- item one\n  - item two: done", "item one, item two: done"),  # a nested item; punctuation of its own kept
    # a line without punctuation before a list or a heading, and a heading's own line, end with a pause
    ("Here are the options\n- Paris\n- Rome", "Here are the options: Paris, Rome"),
    ("Intro\n## Part 1\nText here\nand here", "Intro. Part one.\nText here\nand here"),
    # a horizontal rule, a line of its own
    ("Intro.\n---\nMore.\n***", "Intro.\nMore."),
    # a table: its rule row unsaid, a pause after each cell; a code fence on its own line unsaid
    ("| Plan | Price |\n|------|:-----:|\n| Basic | $10 |\n| --- | --- |\n| Pro | $25 |\nPick one.",
     "Plan, Price. Basic, ten dollars. Pro, twenty-five dollars.\nPick one."),
    ("Run this:\n```bash\nnpm install\n```\nDone.", "Run this:\nnpm install\nDone."),
    ("A | B, or Use a pipe | here.", "A | B, or Use a pipe | here."),  # not a table's line
    # an item that ends in a bracket or a sign still gets its pause; a quotation's ">" is unsaid
    ("Plans\n- Basic ($9.99/mo)\n- Pro 50%\nPick one.",
     "Plans: Basic (nine dollars and ninety-nine cents per month), Pro fifty percent.\nPick one."),
    ("> Tip: restart it.\n> 10 items ship free", "Tip: restart it.\nmore than ten items ship free"),
    # marks that touch no word, or sit inside one, stay; so does a dash inside a line, and a line's
    # end outside lists and headings
    ("5 * 3, ** alone, snake_case_name, C# code", "five * three, ** alone, snake_case_name, C sharp code"),
    ("5 - 3 = 2\nWait - what\nok", "five - three equals two\nWait - what\nok"),
])
def test_markdown_is_not_read_aloud(text, expected):
    norm = assert_reads("en", text, expected)
    assert norm.original_words == text.split()  # timestamps still report the words as written


def test_markdown_stays_when_normalisation_is_off():
    assert normalize("**very**", "en", "off").text == "**very**"


def test_whitespace_between_tokens_is_kept():
    norm = normalize("  Pay\n$5\tnow ", "en")
    assert norm.text == "  Pay\nfive dollars\tnow "
    assert norm.alignment[1].start_char == 6


def test_off_mode_passes_through_unchanged():
    text = "Dr. Smith paid $5 on 2024-03-05."
    norm = normalize(text, "en", mode="off")
    assert norm.text == text
    assert [a.normalized for a in norm.alignment] == [(w,) for w in text.split()]
    assert normalize(text, "en", NormalizationMode.OFF).text == text


@pytest.mark.parametrize("language", ["fr", "de", "ja", "zh", "xx"])
def test_other_languages_pass_through(language):
    text = "Il coûte 5 € le 21/03, Dr. X."
    assert normalize(text, language).text == text


def test_locale_codes_and_none_language():
    assert normalize("$5", "en-GB").text == "five dollars"
    assert normalize("5 €", "pt_BR").text == "cinco euros"
    assert normalize("$5", None).text == "five dollars"
    # The protocol's `normalization` may carry a locale, which picks the language.
    assert normalize("1,5 %", "en", mode="es-ES").text == "uno coma cinco por ciento"
    assert rules_for("nl-BE") is rules_for("nl") and rules_for("fr") is None


def test_a_region_that_writes_otherwise_has_rules_of_its_own():
    assert rules_for("en-GB") is rules_for("en-au") is rules_for("en_IE") is not rules_for("en")
    assert rules_for("en-US") is rules_for("en-CA") is rules_for("en")
    assert rules_for("es-MX").dollar_sign_code == "MXN" and rules_for("es-US").dollar_sign_code == "USD"
    assert rules_for("es-Latn-MX") is rules_for("es-MX") and rules_for("es-US") is rules_for("es-PR")
    assert rules_for("es-VE") is rules_for("es-419") is rules_for("es-ES") is rules_for("es")  # Spain's way
    # Spain's way too, with its own peso for "$"
    assert [rules_for(f"es-{r}").dollar_sign_code for r in ("AR", "CL", "CO", "UY")] == ["ARS", "CLP", "COP", "UYU"]
    assert rules_for("es-AR").decimal_sep == rules_for("es").decimal_sep == "," and rules_for("es-PE").decimal_sep == "."
    assert rules_for("pt-PT") is rules_for("pt_ao") is not rules_for("pt") is rules_for("pt-BR") is rules_for("pt-CV")
    assert rules_for("pt-PT").cardinal(16) == "dezasseis" and rules_for("pt").cardinal(16) == "dezesseis"
    assert rules_for("es-MX").code == "es" and rules_for("en-GB").code == "en"  # the language's words and rules
    assert normalize("on 12/3", "en", mode="en-GB").text == "on the twelfth of March"
    assert normalize("$5 y 1,5 km", "es", mode="es-MX").text == "cinco pesos y uno punto cinco kilómetros"


@pytest.mark.parametrize("mode", ["", 3, "auto-ish", "english"])
def test_bad_mode_is_named(mode):
    with pytest.raises(NormalizationModeError, match=repr(mode).replace("(", r"\(")):
        normalize("hi", "en", mode=mode)


def test_invalid_dates_and_times_are_not_read_as_such():
    # not a date: three dash-joined groups read as a code, digit by digit (not "... to ... to ...")
    assert normalize("2024-02-30", "en").text == "two zero two four, zero two, three zero"
    assert normalize("25:61", "en").text == "twenty-five sixty-one"


@pytest.mark.parametrize("language, text, expected", [
    ("en", "Call 555-1234 now.", "Call five five five, one two three four now."),
    ("en", "1-800-555-1234", "one, eight zero zero, five five five, one two three four"),
    ("en", "Call (555) 123-4567.", "Call (five five five) one two three, four five six seven."),
    ("en", "(555)123-4567", "(five five five) one two three, four five six seven"),
    ("en", "555.123.4567", "five five five, one two three, four five six seven"),
    ("en", "ZIP 94103-1234", "ZIP nine four one zero three, one two three four"),
    ("es", "Llama al 555-1234.", "Llama al cinco cinco cinco, uno dos tres cuatro."),
    ("pt", "Ligue 555-1234", "Ligue cinco cinco cinco, um dois três quatro"),
    ("nl", "Bel 020-1234567", "Bel nul twee nul, één twee drie vier vijf zes zeven"),
    ("en", "Call 1-800-FLOWERS.", "Call one, eight zero zero FLOWERS."),  # a vanity number, not "one to eight hundred"
    # digit groups between spaces: three groups and seven digits or more, or two after a country code
    ("es", "Llámenos al +34 912 345 678.", "Llámenos al más treinta y cuatro, nueve uno dos, tres cuatro cinco, seis siete ocho."),
    ("en", "Call 555 123 4567 now, or +1 555 1234.", "Call five five five, one two three, four five six seven now, or plus one, five five five, one two three four."),
    ("nl", "Bel 020 123 4567.", "Bel nul twee nul, één twee drie, vier vijf zes zeven."),
    ("pt", "Ligue 11 98765 4321", "Ligue um um, nove oito sete seis cinco, quatro três dois um"),
    ("en", "10 20 30 40, 100 200 300, 1 2 3", "ten twenty thirty forty, one hundred two hundred three hundred, one two three"),
])
def test_phone_numbers_and_codes_are_read_digit_by_digit(language, text, expected):
    assert normalize(text, language).text == expected


@pytest.mark.parametrize("language, text, expected", [
    ("en", "10-20 times", "ten to twenty times"),
    # the ends of a range are read as a lone number is: a year as a year (English, Dutch up to 1999)
    ("en", "in 1990-1995", "in nineteen ninety to nineteen ninety-five"),
    ("en", "1914-18, 2023–24", "nineteen fourteen to eighteen, twenty twenty-three to twenty-four"),
    ("en", "(1856-1943)", "(eighteen fifty-six to nineteen forty-three)"),
    ("en", "1200-1500 calories", "twelve hundred to fifteen hundred calories"),
    ("en", "the 2019/20 season, 2019/2020", "the twenty nineteen twenty season, twenty nineteen twenty twenty"),
    ("en", "2018/2020", "two thousand and eighteen two thousand and twenty"),  # no season: two numbers
    ("nl", "1990-1995", "negentien honderd negentig tot negentien honderd vijfennegentig"),
    ("es", "1990-1995", "mil novecientos noventa a mil novecientos noventa y cinco"),  # Spanish years are cardinals
    # a range of labelled numbers; different labels are two names
    ("en", "Q1-Q3, FY24–FY26, A1-B2", "Q one to Q three, FY twenty-four to FY twenty-six, A one B two"),
    ("en", "pp. 123-145", "pages one hundred and twenty-three to one hundred and forty-five"),
    ("en", "500-1000 words", "five hundred to one thousand words"),
    ("es", "10-20 veces", "diez a veinte veces"),
    ("nl", "10-20 keer", "tien tot twintig keer"),
    ("en", "pi is 3.14", "pi is three point one four"),
    ("en", "v3.11.4", "v three point eleven point four"),  # a version keeps its numbers
    ("en", "(10) 20", "(ten) twenty"),  # brackets alone are no area code
    # grouped numbers in a range are two numbers, not four digit groups
    ("en", "1,000-2,000 people", "one thousand to two thousand people"),
    ("en", "10,000-20,000", "ten thousand to twenty thousand"),
    ("es", "1.000-2.000 personas", "mil a dos mil personas"),
    # after "between" a range's "to" is "and"
    ("en", "between 1–2 p.m., between $10-$20, between 9 a.m.–5 p.m.", "between one and two p m, between ten and "
     "twenty dollars, between nine a m and five p m."),
    ("en", "between Mon-Fri, from 1-2", "between Monday and Friday, from one to two"),
    ("es", "entre 5-10 días", "entre cinco y diez días"),
    ("nl", "tussen 9-17 uur", "tussen negen en zeventien uur"),
    ("en", "The Lakers won 112-108, then 99-101.", "The Lakers won one hundred and twelve to one hundred and eight, "
     "then ninety-nine to one hundred and one."),  # a score, not a code
    ("en", "ID 123-045, call 555-123", "ID one two three, zero four five, call five five five, one two three"),
    # a year joined to the word before it is read as a lone year is, and a decade as a decade
    ("en", "by mid-2024, pre-2020, Class-of-2024", "by mid twenty twenty-four, pre twenty twenty, Class of twenty twenty-four"),
    ("en", "the mid-1990s, late-1980s.", "the mid nineteen nineties, late nineteen eighties."),
    ("nl", "mid-1995", "mid negentien honderd vijfennegentig"),
    ("es", "pre-2020", "pre dos mil veinte"),  # Spanish years are cardinals
    # not those: no word before the dash, not a decade, an id
    ("en", "mid-1995s, A-12345", "mid one nine nine five s, A one two three four five"),
])
def test_ranges_decimals_and_versions_keep_their_numbers(language, text, expected):
    assert normalize(text, language).text == expected


@pytest.mark.parametrize("text, expected", [
    ("Jan. 5", "January fifth"),
    ("on Sept. 11 2001", "on September eleventh two thousand and one"),
    ("Dec. 25, 2024.", "December twenty-fifth, twenty twenty-four."),
    ("see Fig. 3 and p. 12", "see Figure three and page twelve"),
    ("Vol. 2, Ch. 7, ext. 204", "Volume two, Chapter seven, extension two zero four"),
    ("In May. 5 people came.", "In May. five people came."),  # a full stop after May, not "May fifth"
    ("march 5 and May 3", "march fifth and May third"),  # undotted months are words
    ("I saw Jan. She left.", "I saw Jan. She left."),  # not before a number: a name
])
def test_month_and_reference_abbreviations_before_a_number(text, expected):
    assert normalize(text, "en").text == expected


def test_sentence_final_abbreviations_keep_a_full_stop():
    assert normalize("We met at 5 p.m. Then we left.", "en").text == "We met at five p m. Then we left."
    assert normalize("He works at Acme Inc. in Ohio.", "en").text == "He works at Acme Incorporated in Ohio."
    assert normalize("Apples, pears, etc. Bananas too.", "en").text == "Apples, pears, et cetera. Bananas too."
    assert normalize("See Dr. Who.", "en").text == "See Doctor Who."


@pytest.mark.parametrize("language, text, expected", [
    ("en", "Open Mon-Fri 9am-5pm, Sat 10-2.", "Open Monday to Friday nine a m to five p m, Saturday ten to two."),
    ("en", "Open Mon.-Fri. 9-5; we are open Fri-Sun.", "Open Monday to Friday nine to five; we are open Friday to Sunday."),
    ("en", "Mon, Nov 3 at 3pm; Tue., Dec. 5", "Monday, November third at three p m; Tuesday, December fifth"),
    ("en", "Dec 25, 2024. Since Nov 2024.", "December twenty-fifth, twenty twenty-four. Since November twenty twenty-four."),
    # a day and month after a day's name; days of a month
    ("en", "Fri 9/12, Tuesday, 3/4", "Friday September twelfth, Tuesday, March fourth"),
    ("en", "Jan 1-5, Dec. 24th-26th", "January first to fifth, December twenty-fourth to twenty-sixth"),
    ("en", "I sat 3/4 of the way, Jan 1-50", "I sat three quarters of the way, January one to fifty"),  # no day, no date
    ("en", "Your bill (due 12/1). Offer ends 11/30, valid through 12/31.", "Your bill (due December first). "
     "Offer ends November thirtieth, valid through December thirty-first."),
    # a measure or "of" after it: a fraction even after a day's name or "on"
    ("en", "On Tuesday 3/4 cup of flour, on 3/4 of the budget", "On Tuesday three quarters cup of flour, "
     "on three quarters of the budget"),
    ("es", "el martes 1/2 taza", "el martes media taza"),
    ("es", "el martes 3/4, mar 3/4", "el martes tres de abril, mar tres cuartos"),
    # the day before the month, as British English writes it
    ("en", "On 3 March 2026, Wed 3 Dec and the 21 Sept. meeting", "On the third of March twenty twenty-six, "
     "Wednesday the third of December and the twenty-first of September meeting"),
    ("en", "32 March, 3 march", "thirty-two March, three march"),  # no day; no month (not capitalised)
    ("es", "Abierto lun-vie de 9 a 5, Lun-Sáb", "Abierto lunes a viernes de nueve a cinco, Lunes a sábado"),
    ("pt", "Aberto seg-sex", "Aberto segunda a sexta"),
    ("nl", "Open ma-vr", "Open maandag tot vrijdag"),
    # not before a date, or not a pair of days: words
    ("en", "the Sun is hot, we Sat down, a mid-Jan meeting, up-to-date", "the Sun is hot, we Sat down, a mid-Jan meeting, up-to-date"),
    # a day after a word that leads one, and the days of a list after it
    ("en", "See you on Fri. Bye. Due by Wed", "See you on Friday. Bye. Due by Wednesday"),
    ("en", "every Tues and Thurs, on Mon, Wed and Fri", "every Tuesday and Thursday, on Monday, Wednesday and Friday"),
    ("en", "on Sun morning, next Sat.", "on Sunday morning, next Saturday."),
    # "Sat" and "Sun" with a noun after them are words
    ("en", "we lay on Sun loungers", "we lay on Sun loungers"),
    ("es", "el mar, el Mar-Sol", "el mar, el Mar-Sol"),
    # outside English: a short month after its day, a short day before a date
    ("es", "Llega el mar. 8 de dic. a las 5", "Llega el martes ocho de diciembre a las cinco"),
    ("es", "Lun., 3 de feb.", "Lunes, tres de febrero."),
    ("pt", "Chega seg. 8 de dez.", "Chega segunda oito de dezembro."),
    ("nl", "za. 8 mrt. om 9 uur", "zaterdag acht maart om negen uur"),
    ("es", "voy al mar. Es azul, el mar. está", "voy al mar. Es azul, el mar. está"),  # the sea
    # a decade outside English is its number
    ("es", "en los 90s, los años 80s", "en los noventa, los años ochenta"),
    ("pt", "nos anos 90s", "nos anos noventa"),
    ("nl", "do-re-mi", "do-re-mi"),
])
def test_short_day_and_month_names(language, text, expected):
    assert normalize(text, language).text == expected


def test_punctuation_after_an_abbreviation_is_the_sentences_own():
    assert normalize("I live on Main St., Springfield.", "en").text == "I live on Main Street, Springfield."
    assert normalize("Go to St. Louis, Missouri.", "en").text == "Go to Saint Louis, Missouri."
    assert normalize("(apples, pears, etc.) Then we left.", "en").text == "(apples, pears, et cetera) Then we left."
    assert normalize("Acme Inc., a firm", "en").text == "Acme Incorporated, a firm"


@pytest.mark.parametrize("language, text, expected", [
    ("en", "Your order A12345 shipped.", "Your order A one two three four five shipped."),
    ("en", "Code ABC123DEF works.", "Code ABC one two three DEF works."),
    ("en", "ID 12345678 please", "ID one two three four five six seven eight please"),
    ("en", "Springfield, IL 62704", "Springfield, IL six two seven zero four"),  # a ZIP code after its state
    ("en", "ZIP 94103, PIN: 4821, your PIN is 1999.", "ZIP nine four one zero three, PIN: four eight two one, your PIN is one nine nine nine."),
    ("nl", "Je pincode is 1234", "Je pincode is één twee drie vier"),
    ("pt", "O CEP é 01310", "O CEP é zero um três um zero"),
    # a number dialled: "nine one one"; a round one counts, and so does any after another verb
    ("en", "Call 911 now. I called 911, dial 112 or text 55555.", "Call nine one one now. I called nine one one, dial one one two or text five five five five five."),
    ("en", "Call 100 people, call 3 friends; 911 is busy.", "Call one hundred people, call three friends; nine hundred and eleven is busy."),
    ("es", "Llama al 112 o marque el 061.", "Llama al uno uno dos o marque el cero seis uno."),
    ("pt", "Ligue para o 190 ou disque 192.", "Ligue para o um nove zero ou disque um nove dois."),
    ("nl", "Bel 112!", "Bel één één twee!"),
    # a card's last four digits; "ends in 100 days" counts
    ("en", "Your card ending in 4242 was charged; it ends in 100 days.", "Your card ending in four two four two was charged; it ends in one hundred days."),
    ("es", "Tu tarjeta terminada en 4242", "Tu tarjeta terminada en cuatro dos cuatro dos"),
    ("pt", "cartão terminado em 4242", "cartão terminado em quatro dois quatro dois"),
    ("nl", "kaart eindigend op 4242", "kaart eindigend op vier twee vier twee"),
    # masked digits: the mask unsaid, the digits left said as a card's last are
    ("en", "Sent to acct. ****1234, card •••• 4821.", "Sent to account ending in one two three four, card ending in four eight two one."),
    ("en", "XXXX-XXXX-XXXX-1234, SSN ***-**-6789, card ending in xxxx4242", "ending in one two three four, SSN ending "
     "in six seven eight nine, card ending in four two four two"),
    ("es", "tarjeta ****1234", "tarjeta terminada en uno dos tres cuatro"),
    ("pt", "cartão ****1234", "cartão final um dois três quatro"),
    ("nl", "rekening ****1234", "rekening eindigend op één twee drie vier"),
    # a code is read digit by digit, digit groups too (not a range); a status code in pairs
    ("en", "Your verification code is 4821, your OTP is 123-456.", "Your verification code is four eight two one, "
     "your OTP is one two three, four five six."),
    ("en", "area code 415, error code 404, pages 123-145", "area code four one five, error code four oh four, "
     "pages one hundred and twenty-three to one hundred and forty-five"),
    ("es", "Su código es 4821, código postal 28001", "Su código es cuatro ocho dos uno, código postal dos ocho cero cero uno"),
    ("es", "Pedido 4815162342", "Pedido cuatro ocho uno cinco uno seis dos tres cuatro dos"),
    # what counts stays a number: round, grouped, short, or a name with a number
    ("en", "1000000 people, 1,234,567 users, 12345 fans", "one million people, one million two hundred and thirty-four thousand five hundred and sixty-seven users, twelve thousand three hundred and forty-five fans"),
    ("en", "I paid 123456 dollars", "I paid one hundred and twenty-three thousand four hundred and fifty-six dollars"),
    ("en", "MP3, B12, Win11Pro, COVID-19", "MP three, B twelve, Win eleven Pro, COVID nineteen"),
    # a short code after "text KEYWORD to", and an extension, are dialled; a number sent elsewhere counts
    ("en", "Text STOP to 55555, or text \"HELP\" to 12345.", "Text STOP to five five five five five, or text \"HELP\" to one two three four five."),
    ("en", "Call ext. 204 or extension 2045.", "Call extension two zero four or extension two zero four five."),
    ("en", "Call (800) 555-0100 x123, a x123 model", "Call (eight zero zero) five five five, zero one zero zero extension "
     "one two three, a x one hundred and twenty-three model"),  # "x" after a phone number only
    ("en", "Send 55555 to me, go to 12345, text stop to 55555", "Send fifty-five thousand five hundred and fifty-five to me, go to twelve thousand three hundred and forty-five, text stop to fifty-five thousand five hundred and fifty-five"),
])
def test_ids_are_read_digit_by_digit_and_counts_as_numbers(language, text, expected):
    assert normalize(text, language).text == expected


@pytest.mark.parametrize("text, expected", [
    ("We have 1234 people waiting.", "We have one thousand two hundred and thirty-four people waiting."),
    ("1876 votes were cast.", "one thousand eight hundred and seventy-six votes were cast."),  # to 1899: any plural
    ("We sold 2025 tickets.", "We sold two thousand and twenty-five tickets."),
    # a year: a word that leads one, a noun that does not only count, no plural, a round hundred
    ("In 1876 votes were cast.", "In eighteen seventy-six votes were cast."),
    ("In 1999 people were happy.", "In nineteen ninety-nine people were happy."),
    ("Our 2024 models sold.", "Our twenty twenty-four models sold."),
    ("Back in 1984 was the year.", "Back in nineteen eighty-four was the year."),
    ("Since 1999, 1234 was the code.", "Since nineteen ninety-nine, twelve thirty-four was the code."),
    ("We served 1200 customers.", "We served twelve hundred customers."),
])
def test_four_digits_before_a_plural_count_it(text, expected):
    assert normalize(text, "en").text == expected


@pytest.mark.parametrize("language, text, expected", [
    # three or four digits after capitals name a flight or a model: read in pairs, as English says them
    ("en", "Flight UA1234 and AA100 land; BA2005 is late.", "Flight UA twelve thirty-four and AA one hundred land; BA twenty oh five is late."),
    ("en", "The A380, an F150, a GTX1080, the RX7900, H264", "The A three eighty, an F one fifty, a GTX ten eighty, the RX seventy-nine hundred, H two sixty-four"),
    ("en", "A1000, iOS17, SAVE20, COVID-19", "A one thousand, iOS seventeen, SAVE twenty, COVID nineteen"),  # lowercase or short: counts
    ("es", "El vuelo UA1234", "El vuelo UA mil doscientos treinta y cuatro"),  # pairs are English
    # so are they after "flight", and after an airline's code that follows it (a pause after a code
    # that ends in a digit: "six nine oh five" would be one number)
    ("en", "Flight DL 2345, flight 2005, Flight B6 905", "Flight DL twenty-three forty-five, flight twenty oh five, "
     "Flight B six, nine oh five"),
    ("en", "the flight 3 hours, flights 100 and 200", "the flight three hours, flights one hundred and two hundred"),
    # a size with a four-digit side, as screens are said; smaller sizes are counts
    ("en", "1920x1080, 1024x768 pixels, 3840×2160", "nineteen twenty by ten eighty, ten twenty-four by seven sixty-eight pixels, thirty-eight forty by twenty-one sixty"),
    ("en", "1200x800 mm, 100x200 cm, 1000x2000", "twelve hundred by eight hundred millimeters, one hundred by two hundred centimeters, one thousand by two thousand"),
    ("es", "1920x1080", "mil novecientos veinte por mil ochenta"),
    # feet and inches, with the inch mark only
    ("en", "He is 6'2\", she is 5′11″ and I'm 5'9\".", "He is six foot two, she is five foot eleven and I'm five foot nine."),
    ("en", "It's 6'2 maybe, or 6' tall", "It's six' two maybe, or six' tall"),
    # inches: the mark after a number, not one closing a quotation; sizes are "by"
    ("en", "Dimensions: 12\" x 8\" x 4\", a 12\" pizza, a 4.7″ display", "Dimensions: twelve inches by eight inches by four "
     "inches, a twelve inch pizza, a four point seven inch display"),
    ("en", "He said \"I am 12\", 10cm x 20cm, 2 x Widget", "He said \"I am twelve\", ten centimeters by twenty centimeters, "
     "two x Widget"),
    ("es", "pantalla de 6,1\"", "pantalla de seis coma uno pulgadas"),
])
def test_flight_and_model_numbers_sizes_and_heights(language, text, expected):
    assert normalize(text, language).text == expected


@pytest.mark.parametrize("language, text, expected", [
    # the keypad: a service code, and a key after a verb that presses it
    ("en", "Dial *67 first. Press # to confirm, *69#", "Dial star six seven first. Press pound to confirm, star six nine pound"),
    ("es", "Pulse # para confirmar", "Pulse almohadilla para confirmar"),
    ("nl", "Druk op # of toets *31", "Druk op hekje of toets sterretje drie één"),
    # not keys: a sign between numbers, a heading, a name
    ("en", "5 * 3, C# code\n## Step 2", "five * three, C sharp code. Step two"),
    # a list of keys goes on only in the sentence a pressing verb began
    ("en", "Press 1. Then # tags, or # signs.", "Press one. Then # tags, or # signs."),
    ("en", "Add 5, then # symbols.", "Add five, then # symbols."),
])
def test_keypad_keys(language, text, expected):
    assert normalize(text, language).text == expected


@pytest.mark.parametrize("language, text, expected", [
    # a fraction of a noun agrees with it, "half" has no article, and a unit is named (es, pt)
    ("es", "1/2 taza, 1/2 kg, 1/2 hora", "media taza, medio kilogramo, media hora"),
    ("es", "1/4 lb, 3/4 de taza, 1/4 de hora", "un cuarto de libra, tres cuartos de taza, un cuarto de hora"),
    ("pt", "1/2 xícara, 1/2 litro, 1/4 xícara", "meia xícara, meio litro, um quarto de xícara"),
    ("es", "1/2 y 3/4, el 5/6", "un medio y tres cuartos, el cinco de junio"),  # no noun: as before
    # a fraction character is a fraction as "1/2" is; a unit after a date's article makes it a fraction
    ("es", "½ taza, ¾ de taza, el 1/2 kg", "media taza, tres cuartos de taza, el medio kilogramo"),
    ("pt", "½ xícara, ¼ kg", "meia xícara, um quarto de quilograma"),
    ("es", "3/4 partes, 1/3 parte, 2/3 partes", "tres cuartas partes, una tercera parte, dos terceras partes"),
    ("pt", "3/4 partes", "três quartas partes"),
    # a whole number and a half agree with their noun, and a unit after them is named
    ("es", "1½ tazas, 2½ horas, 1½ kg, 1½", "una y media tazas, dos y media horas, uno y medio kilogramos, uno y medio"),
    ("pt", "1½ xícara, 2½ kg", "uma e meia xícara, dois e meio quilogramas"),
    ("en", "1½ cups, 1½ kg", "one and a half cups, one and a half kilograms"),
    # a part of a unit in English and Dutch; of another noun, the fraction alone (no noun is known)
    ("en", "½ mi, 1/4 hour, 1/2 price, ½ cup", "half a mile, a quarter of an hour, one half price, one half cup"),
    ("nl", "1/2 kg, ½ l, 1/2 uur, 1/2 brood", "een halve kilogram, een halve liter, een half uur, één half brood"),
    # "+" after a count: before it in Spanish and Portuguese, once
    ("es", "más de 50+ personas, 10k+ seguidores", "más de cincuenta personas, más de diez mil seguidores"),
    ("en", "50+ people, 1M+ users", "fifty plus people, one million plus users"),
    ("en", "Mortgage rates: 6.75%–7.0%, 5%-10%", "Mortgage rates: six point seven five to seven point zero percent, "
     "five to ten percent"),
    ("en", "~8.1B people, a 7.5B model, seat 8B", "about eight point one billion people, a seven point five billion model, "
     "seat eight B"),
    # sums written without spaces
    ("es", "2+2=4 y 1,5+1,5=3", "dos más dos igual a cuatro y uno coma cinco más uno coma cinco igual a tres"),
    ("en", "+34 600", "plus thirty-four six hundred"),  # a sign before a number is no sum
    # Dutch day and month with a dash after "op"/"vanaf"; a range elsewhere, and no 31 February
    ("nl", "op 15-12, tot 10-12 personen, op 31-2", "op vijftien december, tot tien tot twaalf personen, "
     "op eenendertig tot twee"),
    # "1x": one time, singular
    ("es", "1x al día, 2x más", "una vez al día, dos veces más"),
    ("pt", "1x por dia", "uma vez por dia"),
    # the rupee
    ("en", "₹1,250.50, 500 INR", "one thousand two hundred and fifty rupees and fifty paise, five hundred rupees"),
    ("es", "₹500", "quinientas rupias"),
    ("nl", "₹500", "vijfhonderd roepie"),
    # a card's last four, said another way
    ("es", "la tarjeta acaba en 4242", "la tarjeta acaba en cuatro dos cuatro dos"),
    ("pt", "o cartão termina em 4242", "o cartão termina em quatro dois quatro dois"),
])
def test_spanish_and_portuguese_fractions_times_rupees_and_card_endings(language, text, expected):
    assert normalize(text, language).text == expected


def test_known_abbreviations_for_the_segmenter():
    abbr = known_abbreviations()
    assert abbr["dr."] is False and abbr["e.g."] is False and abbr["sra."] is False
    assert abbr["etc."] is True and abbr["inc."] is True and abbr["enz."] is True
    assert abbr["p."] is False  # "page" before a number, but also an initial: "J. P. Morgan"


_TOKENS = st.sampled_from(
    ["$", "€", "5", "1,234.5", "1.234,5", "3.", "%", "USD", "pm", "p.m.", "Dr.", "etc.", "e.g.",
     "2024-03-05", "3:30", "1st", "1º", "1e", "-", "&", "/", "(", '"', "¿", "…", "\n", " ", "abc",
     "15h30", "9:00", "uur", "horas", "1/2", "£10,", "R$", "$2.5M", "1990s", "—", "12am",
     # the readings that look at their neighbours: ids, numbers dialled, phone groups, days, times
     "Call", "911", "al", "PIN", "is", "ending", "in", "4242", "A12345", "+34", "912", "4567",
     "Mon-Fri", "Sat", "Nov", "2-3pm", "1st-class", "30-min", "3x4", "10/10", "w/", "t/m",
     "9:00h", "14.30", "h", "IL", "62704"]
)


@settings(max_examples=150, deadline=None)
@given(tokens=st.lists(_TOKENS, max_size=12), language=st.sampled_from(["en", "es", "pt", "nl", "fr"]))
def test_never_fails_and_alignment_holds_on_arbitrary_token_soup(tokens, language):
    text = " ".join(tokens)
    norm = normalize(text, language)
    assert norm.original_words == text.split()
    assert norm.normalized_words == norm.text.split()


@pytest.mark.parametrize("text, expected", [
    ("We saw St Louis and St. Louis.", "We saw St Louis and Saint Louis."),  # before a name "St" may be Saint
    ("Route 66 W, Plan B, Vitamin E", "Route sixty-six W, Plan B, Vitamin E"),  # no street type before them
    ("noon-midnight, email me @ home", "noon-midnight, email me @ home"),  # no time written, no handle
])
def test_street_types_times_and_handles_stay_where_they_are_not(text, expected):
    assert normalize(text, "en").text == expected
