"""The grammatical gender of the word after a number, for Spanish and Portuguese agreement.

A number agrees with the noun it counts: "una casa", "veintiuna horas", "doscientas personas",
"duas semanas", and Spanish shortens "uno" before a masculine noun only ("veintiún años", but
"el veintiuno de mayo"). With no dictionary at hand, ``NounGender`` guesses from the word's form,
as a reader does with a noun they have not met:

- ``not_nouns``: words that follow a number without being counted by it (articles,
  prepositions, conjunctions, common verbs, "esta", "cada"): None, so the number is read alone.
- ``masculine`` / ``feminine``: the common nouns whose ending misleads ("día", "problema",
  "mano", "vez", "noche").
- ``MASCULINE_ENDINGS``: "-ista" nouns are either gender and counted in the masculine when the
  sex is unknown ("21 turistas"); "-grama" ones are masculine ("diagramas", "quilogramas").
- ``feminine_endings``: "-a", "-ción", "-dad", ... in singular and plural; anything else is
  masculine, the default a number takes anyway.

Words are matched in lowercase. A wrong guess costs one vowel ("un"/"una"); a number before a
word this cannot place is read as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["NounGender", "PORTUGUESE", "SPANISH"]

MASCULINE_ENDINGS = ("ista", "istas", "grama", "gramas")


@dataclass(frozen=True, slots=True)
class NounGender:
    feminine_endings: tuple[str, ...]
    masculine: frozenset[str]
    feminine: frozenset[str]
    not_nouns: frozenset[str]

    def of(self, word: str) -> Optional[str]:
        """"f" or "m" for a word a number counts, None for one it does not (or not letters)."""
        low = word.lower()
        if not low.isalpha() or low in self.not_nouns:
            return None
        if low in self.masculine or low.endswith(MASCULINE_ENDINGS):
            return "m"
        if low in self.feminine or low.endswith(self.feminine_endings):
            return "f"
        return "m"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Greek "-ma" nouns and others in "-a" that are masculine, in singular and plural.
_ES_MASCULINE = _words("""
    día días mapa mapas problema problemas sistema sistemas programa programas tema temas idioma idiomas
    clima climas planeta planetas poema poemas esquema esquemas dilema dilemas drama dramas diploma
    diplomas sofá sofás tranvía tranvías pijama pijamas panorama panoramas síntoma síntomas fantasma
    fantasmas aroma aromas enigma enigmas emblema emblemas teorema teoremas lema
    lemas cometa cometas gorila gorilas guía guías policía policías papá papás
""")
_ES_FEMININE = _words("""
    vez veces mujer mujeres noche noches tarde tardes parte partes gente clase clases calle calles
    llave llaves leche muerte muertes suerte fuente fuentes frase frases imagen imágenes madre madres
    nave naves red redes sal piel pieles ley leyes flor flores mano manos foto fotos moto motos
    sede sedes serie series especie especies base bases fase fases torre torres nube nubes carne
    carnes mente mentes razón razones canción canciones opción opciones nación naciones región
    regiones religión religiones unión uniones cárcel cárceles miel col coles hambre
""")
_ES_NOT_NOUNS = _words("""
    a al ante bajo con contra de del desde durante en entre hacia hasta mediante para por según sin
    sobre tras y e o u ni pero sino que como cuando donde mientras si
    el la los las lo le les se me te nos os un una unos unas su sus mi mis tu tus
    es son era eran fue fueron será serán sería ha han había habían hay está están estaba estaban
    tiene tienen tenía tenían va van iba iban hace hacen dijo
    este esta estos estas ese esa esos esas aquel aquella aquellos aquellas esto eso
    aquí allí ahí ya no sí muy más menos también tampoco solo sólo todo toda todos todas cada otro
    otra otros otras mismo misma aproximadamente casi apenas
    izq izda izquierda dcha dch drcha derecha
""")  # the last line: a floor's side ("3º izq.": "tercero izquierda")
_ES_FEMININE_ENDINGS = ("a", "as", "ción", "ciones", "sión", "siones", "dad", "dades", "tad", "tades",
                        "tud", "tudes", "umbre", "umbres", "triz", "trices")

_PT_MASCULINE = _words("""
    dia dias mapa mapas problema problemas sistema sistemas programa programas tema temas idioma
    idiomas clima climas planeta planetas poema poemas esquema esquemas dilema dilemas drama dramas
    diploma diplomas sofá sofás telefonema telefonemas cinema cinemas pijama pijamas fantasma
    fantasmas aroma aromas panorama panoramas guia guias policia policias papa papas
""")
_PT_FEMININE = _words("""
    vez vezes mulher mulheres noite noites tarde tardes parte partes gente classe classes chave chaves
    morte mortes sorte fonte fontes frase frases mãe mães rede redes sede sedes série séries espécie
    espécies base bases fase fases torre torres nuvem nuvens carne carnes mente mentes flor flores
    cor cores dor dores lei leis mão mãos foto fotos moto motos ordem ordens árvore árvores pele peles
    febre fome neve arte artes razão razões canção canções opção opções nação nações região regiões
    religião religiões
""")
_PT_NOT_NOUNS = _words("""
    a à ao aos às as o os de do da dos das em no na nos nas num numa com contra por pelo pela pelos
    pelas para sem sobre entre até desde durante após e ou nem mas que como quando onde se
    um uma uns umas seu sua seus suas meu minha meus minhas
    é são era eram foi foram será serão seria há havia está estão estava estavam tem têm tinha
    tinham vai vão ia iam faz fazem disse
    este esta estes estas esse essa esses essas aquele aquela aqueles aquelas isto isso aquilo
    aqui ali já não sim muito mais menos também só todo toda todos todas cada outro outra outros
    outras mesmo mesma aproximadamente quase cerca
""")
_PT_FEMININE_ENDINGS = ("a", "as", "ção", "ções", "são", "sões", "dade", "dades", "agem", "agens",
                        "tude", "tudes", "triz", "trizes")

SPANISH = NounGender(_ES_FEMININE_ENDINGS, _ES_MASCULINE, _ES_FEMININE, _ES_NOT_NOUNS)
PORTUGUESE = NounGender(_PT_FEMININE_ENDINGS, _PT_MASCULINE, _PT_FEMININE, _PT_NOT_NOUNS)
