"""voices/ depends only downward: no api, no starlette, no HTTP; the package root skips redis."""

from __future__ import annotations

import subprocess
import sys

import voices

CHECK = """
import sys
import voices
assert 'redis' not in sys.modules, 'import voices loaded redis'
import voices.backends
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('api', 'starlette', 'uvicorn', 'pydantic', 'nemo'))
assert not bad, bad
"""


def test_voices_imports_nothing_above_it() -> None:
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_public_names_are_exported() -> None:
    capitalised = {n for n in dir(voices) if n[:1].isupper()}  # classes and constants
    assert capitalised <= set(voices.__all__)
    assert all(hasattr(voices, name) for name in voices.__all__)
