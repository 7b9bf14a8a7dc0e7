"""The README's configuration and metrics tables list every setting api/settings.py reads (with its
real default) and every gepard_* metric api/metrics.py exports."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from api.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"
_ROW = re.compile(r"^\| `(?P<env>[A-Z_]+)`(?: \(or `(?P<alt>[A-Z_]+)`\))? \| `(?P<default>[^`]*)` \| (?P<what>.+) \|$")


def readme_table() -> dict[str, tuple[str, str]]:
    """{variable: (default cell, description)} from the rows between the settings-table markers."""
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- settings-table -->", 1)[1].split("<!-- /settings-table -->", 1)[0]
    rows = [line for line in block.strip().splitlines()[2:]]  # after the header and its rule
    table: dict[str, tuple[str, str]] = {}
    for line in rows:
        match = _ROW.match(line)
        assert match, f"malformed settings row: {line!r}"
        assert match["env"] not in table, f"{match['env']} listed twice"
        table[match["env"]] = (match["default"], match["what"].strip())
        if match["alt"]:
            table[match["alt"]] = table[match["env"]]
    return table


def render_default(field: dataclasses.Field) -> str:
    """How the table writes a field's default."""
    if field.default is dataclasses.MISSING:
        return "random"  # generated per process (the token secret)
    value: Any = field.default
    if value is None or value == frozenset():
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Path):
        return str(value) if value.is_absolute() else f"./{value}"
    return str(value)


def env_fields() -> dict[str, dataclasses.Field]:
    out = {}
    for field in dataclasses.fields(Settings):
        if "env" in field.metadata:
            out[field.metadata["env"]] = field
            if field.metadata.get("fallback"):
                out[field.metadata["fallback"]] = field
    return out


def test_every_setting_is_in_the_readme_table_and_nothing_else():
    assert sorted(readme_table()) == sorted(env_fields())


def test_the_readme_defaults_are_the_real_ones():
    table = readme_table()
    wrong = {env: (table[env][0], render_default(field)) for env, field in env_fields().items()
             if table[env][0] != render_default(field)}
    assert not wrong, f"README default != Settings default: {wrong}"


def test_the_documented_defaults_parse_back_to_the_defaults():
    """Setting each variable to its documented default changes nothing (the table is usable as-is)."""
    table = readme_table()
    env = {name: default for name, (default, _) in table.items()
           if default not in ("none", "random") and name != "REDIS_URL"}
    settings = Settings.from_env(env)
    base = Settings(token_secret=settings.token_secret)
    for field in dataclasses.fields(Settings):
        if field.name in ("token_secret", "token_secret_ephemeral"):
            continue
        assert getattr(settings, field.name) == getattr(base, field.name), field.name


def test_every_gepard_metric_is_in_the_readme_metrics_table():
    from api.metrics import Metrics

    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- metrics-table -->", 1)[1].split("<!-- /metrics-table -->", 1)[0]
    listed = set(re.findall(r"^\| `(gepard_[a-z_]+)` \|", block, flags=re.M))
    exported = set()
    for family in Metrics().registry.collect():
        if family.name.startswith("gepard_"):
            exported.add(family.name + ("_total" if family.type == "counter" else ""))
    assert listed == exported


def test_the_readme_lists_every_route_label_value():
    from api.metrics import ERROR_ROUTES, ROUTES

    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- route-labels -->", 1)[1].split("<!-- /route-labels -->", 1)[0]
    rows = block.strip().splitlines()[2:]  # after the header and its rule
    listed = [re.match(r"^\| `([a-z_]+)` \|", row)[1] for row in rows]
    assert sorted(listed) == sorted(ERROR_ROUTES)
    assert set(ROUTES) <= set(ERROR_ROUTES)
