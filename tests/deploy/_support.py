"""What the deploy checks compare the files under deploy/ against: the settings, routes and metrics
the code really has (read from the code, never restated here)."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any, Iterator

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S_DIR = REPO / "deploy" / "k8s"

#: Environment names a gateway container may carry besides the GEPARD_* settings: read by the
#: settings as a fallback (REDIS_URL) or by libraries the gateway runs (Hugging Face, vLLM, Python).
ALLOWED_NON_SETTINGS_ENV = frozenset({
    "REDIS_URL", "HF_HOME", "HF_TOKEN", "VLLM_CACHE_ROOT", "PATH", "PYTHONUNBUFFERED",
})
#: GEPARD_* names that configure run.sh, not the gateway.
RUN_SH_ENV = frozenset({"GEPARD_TARGET", "GEPARD_VENV"})

_SUFFIXES = ("_bucket", "_count", "_sum")


@functools.lru_cache(maxsize=1)
def settings_env_names() -> frozenset[str]:
    """Every variable api/settings.py Settings reads (each field's env name and its fallback)."""
    from api.settings import Settings

    names: set[str] = set()
    for f in dataclasses.fields(Settings):
        for key in ("env", "fallback"):
            if f.metadata.get(key):
                names.add(f.metadata[key])
    return frozenset(names)


def settings_default(env_name: str) -> Any:
    """The default of the Settings field that ``env_name`` sets."""
    from api.settings import Settings

    for f in dataclasses.fields(Settings):
        if f.metadata.get("env") == env_name:
            return f.default
    raise AssertionError(f"{env_name} is not a setting in api/settings.py")


def unknown_env_names(names: set[str] | frozenset[str]) -> list[str]:
    """The names a gateway container must not carry: not a setting, not on the allow-list."""
    return sorted(n for n in names if n not in settings_env_names() and n not in ALLOWED_NON_SETTINGS_ENV)


@functools.lru_cache(maxsize=1)
def exported_metric_names() -> frozenset[str]:
    """Every name /metrics can show for a family of api/metrics.py's registry: the family name, and
    for counters also the ``_total`` sample name PromQL uses."""
    from api.metrics import Metrics

    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
    return frozenset(names)


def family_name(name: str) -> str:
    """A PromQL series name as its family: histogram series lose _bucket/_sum/_count."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def gepard_names(promql: str) -> set[str]:
    """Family names of every gepard_* series in a PromQL expression."""
    return {family_name(m) for m in re.findall(r"\bgepard_[a-zA-Z0-9_]+", promql)}


@functools.lru_cache(maxsize=1)
def app_route_paths() -> frozenset[str]:
    """Paths of the routes api/app.py build_app serves (the app is built, not started)."""
    from api.app import build_app
    from api.settings import Settings

    app = build_app(Settings(token_secret=b"deploy-tests-token-secret-0123456789"))
    return frozenset(route.path for route in app.routes)


def yaml_docs(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """(key, value) of every mapping entry anywhere in a YAML/JSON tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


def dashboard_exprs(dashboard: dict) -> list[str]:
    """Every PromQL expression of the dashboard's panels (rows' nested panels included)."""
    return [value for key, value in walk(dashboard.get("panels", [])) if key == "expr" and isinstance(value, str)]
