"""bench/normalizer.py: the normaliser's cost per call, measured in a child per checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.normalizer import TEXTS, main

ROOT = Path(__file__).resolve().parent.parent


def test_each_checkout_gets_a_row_per_language_from_its_own_child(tmp_path, capsys):
    out = tmp_path / "normalizer.json"
    assert main(["--calls", "3", "--alternations", "2", "--code", str(ROOT), "--out", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert {row["language"] for row in results} == set(TEXTS)
    for row in results:
        assert row["checkout"] == str(ROOT) and row["calls"] == 6  # 3 calls in each of 2 turns
        assert row["chars"] == len(TEXTS[row["language"]])
        assert 0 < row["p50_ms"] <= row["p90_ms"]
    table = capsys.readouterr().out
    assert "p50 ms" in table and table.count(str(ROOT)[-40:]) == len(TEXTS)


def test_a_folder_without_the_normaliser_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["--calls", "1", "--code", str(tmp_path)])
    assert refused.value.code == 2
    assert "has no api/text/normalization.py" in capsys.readouterr().err


def test_the_timed_texts_exercise_the_rules():
    """Every number in the timed texts is read by some rule: none reaches the model as digits."""
    from api.text.normalization import normalize

    for lang, text in TEXTS.items():
        said = normalize(text, lang).text
        assert not any(ch.isdigit() for ch in said), (lang, said)
