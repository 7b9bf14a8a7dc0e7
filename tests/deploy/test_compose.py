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


_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}")


def interpolate(node, env: dict[str, str]):
    """The compose file as `docker compose config` reads it with ``env``: ${VAR}, ${VAR:-default}
    (default when unset or empty), ${VAR-default} (default when unset), $$ (a literal $)."""
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if not isinstance(node, str):
        return node

    def value(match: re.Match) -> str:
        if match[0] == "$$":
            return "$"
        name, op, default = match[1], match[2], match[3]
        if op == ":-" and not env.get(name) or op == "-" and name not in env:
            return default
        return env.get(name, "")

    return _VARIABLE.sub(value, node)


def duration_s(text: str) -> float:
    """A Compose duration (Go's syntax: 45s, 1m15s, 1h) in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}
    return sum(float(n) * unit[u] for n, u in parts)


#: the gateway's shutdown after the drain (engine, codec and process exit): what the grace period
#: must leave on top of GEPARD_DRAIN_TIMEOUT_S and the cut streams' grace
SHUTDOWN_S = 5.0


def assert_grace_outlasts_drain(compose: dict, env: dict[str, str]) -> None:
    from api.lifecycle import CUT_GRACE_S

    rendered = interpolate(compose, env)
    for name in GATEWAYS:
        service = rendered["services"][name]
        drain_s = float(service["environment"]["GEPARD_DRAIN_TIMEOUT_S"])
        grace_s = duration_s(service["stop_grace_period"])
        assert grace_s >= drain_s + CUT_GRACE_S + SHUTDOWN_S, \
            f"{name} with {env}: SIGKILL after {grace_s:g} s, the drain can take {drain_s:g} + {CUT_GRACE_S:g} s"


def test_stop_grace_period_outlasts_the_drain(compose):
    drain_s = float(settings_default("GEPARD_DRAIN_TIMEOUT_S"))
    for name in GATEWAYS:
        service = compose["services"][name]
        configured = re.fullmatch(r"\$\{GEPARD_DRAIN_TIMEOUT_S:-(\d+(?:\.\d+)?)\}", service["environment"]["GEPARD_DRAIN_TIMEOUT_S"])
        assert configured and float(configured.group(1)) == drain_s  # the same default as the code
    assert_grace_outlasts_drain(compose, {})


def test_a_longer_drain_gets_a_longer_grace_period_as_the_readme_says(compose):
    """GEPARD_DRAIN_TIMEOUT_S is a variable, so the grace period must be one too: a fixed 45 s would
    SIGKILL a 60 s drain. The README's example command, rendered, gives the drain its time."""
    readme = (REPO / "README.md").read_text().split("\n### Docker Compose\n", 1)[1].split("\n### ", 1)[0]
    example = re.search(r"`((?:GEPARD_[A-Z_]+=\S+ )+)docker compose up`", readme)
    assert example, "the README does not show how to raise the drain timeout and the grace period together"
    env = dict(pair.split("=", 1) for pair in example[1].split())
    assert set(env) == {"GEPARD_DRAIN_TIMEOUT_S", "GEPARD_STOP_GRACE_PERIOD"}
    assert float(env["GEPARD_DRAIN_TIMEOUT_S"]) > settings_default("GEPARD_DRAIN_TIMEOUT_S")
    assert_grace_outlasts_drain(compose, env)
    with pytest.raises(AssertionError, match="SIGKILL after 45 s"):  # the drain alone: the default grace
        assert_grace_outlasts_drain(compose, {"GEPARD_DRAIN_TIMEOUT_S": env["GEPARD_DRAIN_TIMEOUT_S"]})


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


#: 5xx error codes GepardServerErrors leaves out, each for a reason: they are not failures of ours
NOT_SERVER_ERRORS = {
    "cloning_unavailable": "501: the torch codec cannot encode clips, a configuration, not a failure",
    "phonemes_unavailable": "501: this install has no eSpeak NG library, a configuration, not a failure",
    "not_implemented": "501: a client called a Cartesia endpoint this server does not serve",
    "service_unavailable": "503: starting or draining, every rollout and scale-in gives some",
}


def server_error_codes() -> set[str]:
    """Every error_code api/errors.py answers with a 5xx: its table, its own ApiError classes, and the
    internal_error every unmapped exception becomes."""
    import api.errors as errors

    codes = {rule.error_code for rule in errors._TABLE.values() if rule.status_code >= 500}
    codes.add(errors._INTERNAL.error_code)
    classes = [errors.ApiError]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        if cls.status_code >= 500:
            codes.add(cls.default_error_code)
    return codes


def alert_rule(name: str) -> dict:
    alerts = yaml.safe_load((REPO / "deploy/prometheus/alerts.yml").read_text())
    (rule,) = [rule for group in alerts["groups"] for rule in group["rules"] if rule.get("alert") == name]
    return rule


def test_server_errors_alert_covers_every_5xx_code():
    codes = server_error_codes()
    assert {"internal_error", "engine_unavailable", "auth_unavailable"} <= codes  # the enumeration works
    assert set(NOT_SERVER_ERRORS) <= codes, "an exemption names a code that is no longer a 5xx"
    listed = set(re.search(r'error_code=~"([^"]+)"', alert_rule("GepardServerErrors")["expr"]).group(1).split("|"))
    assert sorted(codes - set(NOT_SERVER_ERRORS) - listed) == [], "5xx codes the alert does not see"
    assert sorted(listed - codes) == [], "the alert lists codes that are not 5xx codes"


def readme_alert_table() -> dict[str, str]:
    """{alert: its README row} from the table under "What to alert on"."""
    section = (REPO / "README.md").read_text().split("\n### What to alert on\n", 1)[1].split("\n### ", 1)[0]
    return {m[1]: m[0] for m in re.finditer(r"^\| (Gepard[A-Za-z]+) \|.*$", section, flags=re.M)}


def metric_help(name: str) -> str:
    from api.metrics import Metrics

    (family,) = [f for f in Metrics().registry.collect() if f.name == name.removesuffix("_total")]
    return family.documentation


def test_the_gpu_engine_eager_alert_selects_what_gepard_engine_info_exports():
    """The alert's label matchers, applied (as Prometheus would, =~ anchored) to the series the
    gateway's collector exports for each kind of engine: it fires for a GPU engine without CUDA
    graphs only."""
    from types import SimpleNamespace

    from api.metrics import ServingInfo
    from engine.requests import EngineDescription

    selector = re.search(r"gepard_engine_info\{([^}]*)\}", alert_rule("GepardGpuEngineEager")["expr"]).group(1)
    matchers = re.findall(r'(\w+)\s*(=~|=)\s*"([^"]*)"', selector)
    assert len(matchers) == 2

    def fires(about: EngineDescription) -> bool:
        info = ServingInfo()
        info.engine = SimpleNamespace(description=about)  # what the collector reads of an engine
        [family] = [f for f in info.collect() if f.name == "gepard_engine_info"]
        [series] = family.samples
        return all(re.fullmatch(value, series.labels[label]) if op == "=~" else series.labels[label] == value
                   for label, op, value in matchers)

    assert fires(EngineDescription("torch", "fast", "cuda:0", "bfloat16", cuda_graphs=False, fused_kernels=True))
    assert fires(EngineDescription("torch", "reference", "cuda", "float32"))
    assert not fires(EngineDescription("torch", "fast", "cuda:0", "bfloat16", cuda_graphs=True, fused_kernels=True))
    assert not fires(EngineDescription("vllm", "v1", "cuda", "bfloat16", cuda_graphs=True))
    assert not fires(EngineDescription("torch", "reference", "cpu", "float32"))


def test_readme_alert_table_is_the_rules_and_says_what_they_mean():
    alerts = yaml.safe_load((REPO / "deploy/prometheus/alerts.yml").read_text())
    table = readme_alert_table()
    assert sorted(table) == sorted(rule["alert"] for group in alerts["groups"] for rule in group["rules"])
    # vLLM preempts a request when the KV cache runs out; a Gepard request cannot be recomputed, it fails
    assert "fails" in metric_help("gepard_engine_preemptions_total")
    assert "fails" in alert_rule("GepardKvCacheExhausted")["annotations"]["summary"]
    assert "fail" in table["GepardKvCacheExhausted"] and "recomput" not in table["GepardKvCacheExhausted"]


def test_refusal_reasons_are_documented_as_admission_counts_them():
    """gepard_streams_refused_total{reason}: every reason api/admission.py counts is in the metric's help
    and the README row; refusals of the drain gate are not among them (gepard_errors_total{route="drain"})."""
    import inspect

    import api.admission

    reasons = set(re.findall(r'self\._refuse\("([a-z_]+)"\)', inspect.getsource(api.admission)))
    assert {"process", "key", "load", "draining"} <= reasons
    help_text = metric_help("gepard_streams_refused_total")
    assert all(reason in help_text for reason in reasons), help_text
    block = (REPO / "README.md").read_text().split("<!-- metrics-table -->", 1)[1].split("<!-- /metrics-table -->", 1)[0]
    (row,) = [line for line in block.splitlines() if line.startswith("| `gepard_streams_refused_total` |")]
    assert reasons <= set(re.findall(r"`([a-z_]+)`", row))
    assert 'gepard_errors_total{route="drain"}' in row


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
