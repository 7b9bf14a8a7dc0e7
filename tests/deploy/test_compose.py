"""docker-compose.yml and what it mounts: the Compose spec schema, health checks, settings that
exist, the two profiles, and the Prometheus/Grafana files it points at."""

from __future__ import annotations

import copy
import json
import re
from importlib import resources
from pathlib import Path, PurePosixPath

import jsonschema
import pytest
import yaml

from tests.deploy._support import REPO, gepard_names, exported_metric_names, settings_default, unknown_env_names

COMPOSE = REPO / "docker-compose.yml"
GATEWAYS = {"gateway": "gpu", "gateway-cpu": "cpu"}  # service -> its profile


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose_schema() -> dict:
    """The Compose specification's JSON schema, as vendored (offline) by check-jsonschema."""
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(vendored.read_text())


def schema_errors(document: dict, schema: dict) -> list[str]:
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_validates_against_the_compose_spec(compose, compose_schema):
    assert schema_errors(compose, compose_schema) == []


def test_the_schema_check_can_fail(compose, compose_schema):
    broken = copy.deepcopy(compose)
    broken["services"]["redis"]["healthcheck"]["intervall"] = "5s"
    broken["services"]["gateway"]["deploy"]["resources"]["reservations"]["devices"][0]["count"] = "one"
    assert len(schema_errors(broken, compose_schema)) >= 2


def healthy(service: dict) -> bool:
    check = service.get("healthcheck")
    return bool(check) and not check.get("disable") and check.get("test") not in (None, ["NONE"])


def test_every_service_has_a_healthcheck_or_waits_for_one(compose):
    services = compose["services"]
    for name, service in services.items():
        if healthy(service):
            continue
        deps = service.get("depends_on") or {}
        assert isinstance(deps, dict) and deps, f"{name}: no healthcheck and depends on nothing healthy"
        for dep, how in deps.items():
            assert how.get("condition") == "service_healthy" and healthy(services[dep]), \
                f"{name}: no healthcheck, and waits for {dep} without it being healthy"


def test_gateways_wait_for_redis_and_check_ready(compose):
    for name in GATEWAYS:
        service = compose["services"][name]
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "/ready" in service["healthcheck"]["test"]
        script = next(arg for arg in service["healthcheck"]["test"] if arg.endswith(".py"))
        assert (REPO / PurePosixPath(script).relative_to("/app")).is_file()  # the image copies the repo to /app


def test_gateway_environment_names_only_real_settings(compose):
    for name in GATEWAYS:
        env = compose["services"][name]["environment"]
        assert isinstance(env, dict)
        assert unknown_env_names(set(env)) == [], f"{name} sets variables the gateway does not read"
        for secret in ("GEPARD_API_KEYS", "GEPARD_TOKEN_SECRET", "GEPARD_METRICS_TOKEN", "HF_TOKEN"):
            value = str(env.get(secret, ""))
            assert value == "" or re.fullmatch(r"\$\{[A-Z_]+:-\}", value), f"{name}: {secret} holds a literal value"
        assert env["REDIS_URL"] == "redis://redis:6379/0"


def test_stop_grace_period_outlasts_the_drain(compose):
    drain_s = float(settings_default("GEPARD_DRAIN_TIMEOUT_S"))
    for name in GATEWAYS:
        service = compose["services"][name]
        configured = re.fullmatch(r"\$\{GEPARD_DRAIN_TIMEOUT_S:-(\d+(?:\.\d+)?)\}", service["environment"]["GEPARD_DRAIN_TIMEOUT_S"])
        assert configured and float(configured.group(1)) == drain_s  # the same default as the code
        grace = re.fullmatch(r"(\d+)s", service["stop_grace_period"])
        assert grace and int(grace.group(1)) > drain_s + 5


def active_services(compose: dict, profiles: set[str]) -> set[str]:
    """What Compose starts for these active profiles: services without profiles always."""
    return {name for name, service in compose["services"].items()
            if not service.get("profiles") or profiles & set(service["profiles"])}


def dotenv_profiles() -> set[str]:
    values = dict(line.split("=", 1) for line in (REPO / ".env").read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
    return {p.strip() for p in values["COMPOSE_PROFILES"].split(",")}


def test_plain_up_runs_the_gpu_gateway_and_the_cpu_profile_replaces_it(compose):
    base = {"redis", "prometheus", "grafana"}
    # `docker compose up`: COMPOSE_PROFILES from .env; `--profile cpu`: the flag replaces it
    assert active_services(compose, dotenv_profiles()) == base | {"gateway"}
    assert active_services(compose, {"cpu"}) == base | {"gateway-cpu"}
    gpu, cpu = compose["services"]["gateway"], compose["services"]["gateway-cpu"]
    assert gpu["build"]["target"] == "cuda" and cpu["build"]["target"] == "cpu"
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices and devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert "deploy" not in cpu
    for service in (gpu, cpu):  # either one is the `gateway` Prometheus scrapes, on :8000
        assert "gateway" in service["networks"]["default"]["aliases"]
        assert service["ports"] == ["8000:8000"]
    secrets_in_dotenv = [line for line in (REPO / ".env").read_text().splitlines()
                         if line.strip() and not line.startswith("#") and not line.startswith("COMPOSE_")]
    assert secrets_in_dotenv == []


def test_redis_keeps_an_append_only_file_on_a_named_volume(compose):
    redis = compose["services"]["redis"]
    assert "--appendonly" in redis["command"] and redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    volume, _, target = redis["volumes"][0].partition(":")
    assert target == "/data" and volume in compose["volumes"]


def host_path(service: dict, container_path: str) -> Path:
    """Where a container path of ``service`` lives in this repository, through its bind mounts."""
    path = PurePosixPath(container_path)
    for mount in service.get("volumes", []):
        source, _, rest = mount.partition(":")
        target = PurePosixPath(rest.split(":")[0])
        if source.startswith("./") and (path == target or target in path.parents):
            return REPO / source / path.relative_to(target)
    raise AssertionError(f"{container_path} is not bind-mounted from the repository")


def test_prometheus_scrapes_the_gateway_and_loads_the_alerts(compose):
    service = compose["services"]["prometheus"]
    config = yaml.safe_load(host_path(service, "/etc/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for sc in jobs["gepard"]["static_configs"] for t in sc["targets"]]
    gateway_port = str(settings_default("GEPARD_PORT"))
    assert targets == [f"gateway:{gateway_port}"]
    assert jobs["gepard"].get("metrics_path", "/metrics") == "/metrics"
    for rule_file in config["rule_files"]:
        rules = yaml.safe_load(host_path(service, rule_file).read_text())
        assert rules["groups"] and all(rule["expr"] for group in rules["groups"] for rule in group["rules"])


def test_alerts_use_only_exported_metrics(compose):
    alerts = yaml.safe_load((REPO / "deploy/prometheus/alerts.yml").read_text())
    used = set().union(*(gepard_names(rule["expr"]) for group in alerts["groups"] for rule in group["rules"]))
    assert used and sorted(used - exported_metric_names()) == []


def test_grafana_provisions_the_datasource_and_an_existing_dashboard(compose):
    service = compose["services"]["grafana"]
    provisioning = host_path(service, "/etc/grafana/provisioning")
    datasources = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())["datasources"]
    assert [d["url"] for d in datasources if d["type"] == "prometheus"] == ["http://prometheus:9090"]
    assert "9090:9090" in compose["services"]["prometheus"]["ports"]
    providers = yaml.safe_load((provisioning / "dashboards/gepard.yml").read_text())["providers"]
    for provider in providers:
        folder = host_path(service, provider["options"]["path"])
        assert folder.is_dir() and list(folder.glob("*.json")), f"{provider['options']['path']} has no dashboard"
    home = service["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    dashboard = json.loads(host_path(service, home).read_text())
    assert dashboard["uid"] and dashboard["panels"]


def test_every_bind_mount_exists(compose):
    for name, service in compose["services"].items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name} mounts {source}, which does not exist"
            else:
                assert source in compose["volumes"], f"{name} uses volume {source}, not declared"
