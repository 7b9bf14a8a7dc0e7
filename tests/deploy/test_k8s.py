"""deploy/k8s (Kustomize): renders, every object validates against the Kubernetes schemas, and the
manifests agree with the code: probe paths are routes, the HPA's metric is exported, the grace
period outlasts the drain, settings exist, selectors and ports line up."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy._support import (
    K8S_DIR, RUN_SH_ENV, app_route_paths, exported_metric_names, settings_default, unknown_env_names, walk, yaml_docs,
)

K8S_VERSION = "1.30.0"  # the oldest Kubernetes these manifests are meant for (autoscaling/v2, policy/v1)


def kustomization() -> dict:
    return yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())


def resource_files() -> list[Path]:
    return [K8S_DIR / name for name in kustomization()["resources"]]


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict]:
    """The objects of every resource file, by (kind, name)."""
    found: dict[tuple[str, str], dict] = {}
    for path in resource_files():
        for doc in yaml_docs(path):
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def validation_errors(doc: dict) -> list[str]:
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{doc['kind']}/{doc['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}"]
    return []


@pytest.mark.parametrize("path", resource_files(), ids=lambda p: p.name)
def test_each_resource_file_validates(path):
    docs = yaml_docs(path)
    assert docs
    assert [e for doc in docs for e in validation_errors(doc)] == []


def test_validation_can_fail(objects):
    broken = yaml.safe_load(yaml.safe_dump(objects[("Deployment", "gepard")]))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = ["http"]
    broken["spec"]["replicas"] = "two"
    assert validation_errors(broken)


def test_kustomize_renders_and_every_rendered_object_validates():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize deploy/k8s` cannot be tried here "
                    "(each resource file is still validated by test_each_resource_file_validates)")
    run = subprocess.run([kubectl, "kustomize", str(K8S_DIR)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rendered = [doc for doc in yaml.safe_load_all(run.stdout) if doc]
    assert {doc["kind"] for doc in rendered} >= {
        "Deployment", "Service", "StatefulSet", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Ingress", "ConfigMap",
        "NetworkPolicy"}
    assert [e for doc in rendered for e in validation_errors(doc)] == []
    namespace = kustomization()["namespace"]
    assert all(doc["metadata"]["namespace"] == namespace for doc in rendered)
    images = {c["image"] for doc in rendered for key, value in walk(doc) if key == "containers" for c in value}
    new = kustomization()["images"][0]
    assert f"{new['newName']}:{new['newTag']}" in images  # the image override reaches the Deployment


def gateway(objects) -> dict:
    return objects[("Deployment", "gepard")]["spec"]["template"]["spec"]["containers"][0]


def test_probes_point_at_routes_that_exist(objects):
    container = gateway(objects)
    routes = app_route_paths()
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        path = container[probe]["httpGet"]["path"]
        assert path in routes, f"{probe} asks {path}, which api/app.py does not serve"
        port = container[probe]["httpGet"]["port"]
        assert port in {p["name"] for p in container["ports"]} | {p["containerPort"] for p in container["ports"]}


PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def containers(objects) -> list[tuple[str, dict]]:
    """(kind/name, container) of every workload's pod template."""
    return [(f"{kind}/{name}", c) for (kind, name), doc in objects.items() if kind in ("Deployment", "StatefulSet")
            for c in doc["spec"]["template"]["spec"]["containers"]]


def test_probe_timeouts_outlast_the_health_checks(objects):
    """/health and /ready bound each check (Redis among them) at CHECK_TIMEOUT_S, so with a hung Redis
    they answer just after it: a probe timeout at Kubernetes' default of 1 s would fail every such
    probe (a startup probe that never passes, a liveness probe that restarts healthy replicas)."""
    from api.routes.health import CHECK_TIMEOUT_S

    checked = 0
    for where, container in containers(objects):
        for probe in PROBES:
            if "httpGet" in container.get(probe, {}):
                timeout_s = container[probe].get("timeoutSeconds", 1)  # Kubernetes' default
                assert timeout_s > CHECK_TIMEOUT_S + 0.5, f"{where} {probe}: timeoutSeconds {timeout_s}"
                checked += 1
    assert checked == len(PROBES)  # the gateway's three


def test_the_hpa_owns_the_replica_count(objects):
    """A Deployment the HPA scales must not set spec.replicas: every `kubectl apply -k` would reset the
    autoscaled count to it (the HPA's minReplicas is the floor)."""
    hpas = [doc for (kind, _), doc in objects.items() if kind == "HorizontalPodAutoscaler"]
    assert hpas
    for hpa in hpas:
        ref = hpa["spec"]["scaleTargetRef"]
        target = objects[(ref["kind"], ref["name"])]
        assert "replicas" not in target["spec"], f"{ref['kind']}/{ref['name']} sets replicas, which the HPA owns"
        assert hpa["spec"]["minReplicas"] >= 2  # the floor the Deployment no longer states


def test_grace_period_outlasts_prestop_plus_drain(objects):
    pod = objects[("Deployment", "gepard")]["spec"]["template"]["spec"]
    config = objects[("ConfigMap", "gepard-config")]["data"]
    drain_s = float(config["GEPARD_DRAIN_TIMEOUT_S"] if "GEPARD_DRAIN_TIMEOUT_S" in config
                    else settings_default("GEPARD_DRAIN_TIMEOUT_S"))
    command = gateway(objects)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    prestop_s = float(command[1])
    assert pod["terminationGracePeriodSeconds"] > prestop_s + drain_s


def test_gpu_requested_and_runs_as_the_image_user(objects):
    container = gateway(objects)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 1
    pod = objects[("Deployment", "gepard")]["spec"]["template"]["spec"]
    dockerfile = (K8S_DIR.parents[1] / "Dockerfile").read_text()
    assert f"USER {pod['securityContext']['runAsUser']}:" in dockerfile and pod["securityContext"]["runAsNonRoot"]


def test_settings_exist_and_secrets_come_from_a_secret(objects):
    container = gateway(objects)
    config = objects[("ConfigMap", "gepard-config")]["data"]
    names = set(config) | {e["name"] for e in container.get("env", [])}
    assert unknown_env_names(names - RUN_SH_ENV) == []
    env = {e["name"]: e for e in container["env"]}
    # every replica must read the same token secret, so a token minted by one verifies on all
    assert env["GEPARD_TOKEN_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "gepard-secrets"
    assert "optional" not in env["GEPARD_TOKEN_SECRET"]["valueFrom"]["secretKeyRef"]
    assert env["GEPARD_API_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == "gepard-secrets"
    assert not any(kind == "Secret" for kind, _ in objects), "a Secret with real data must not be committed"
    assert {ref["configMapRef"]["name"] for ref in container["envFrom"]} == {"gepard-config"}
    assert env["GEPARD_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "gepard-secrets", "key": "GEPARD_METRICS_TOKEN", "optional": True}
    for secret in ("GEPARD_TOKEN_SECRET", "GEPARD_API_KEYS", "GEPARD_METRICS_TOKEN"):
        assert secret not in config


def test_replicas_share_the_redis_of_the_kustomization(objects):
    url = objects[("ConfigMap", "gepard-config")]["data"]["REDIS_URL"]
    redis_service = objects[("Service", "gepard-redis")]
    redis_set = objects[("StatefulSet", "gepard-redis")]
    assert url == f"redis://{redis_service['metadata']['name']}:{redis_service['spec']['ports'][0]['port']}/0"
    assert redis_set["spec"]["serviceName"] == redis_service["metadata"]["name"]
    assert redis_set["spec"]["volumeClaimTemplates"], "Redis needs a volume to keep voices"
    args = redis_set["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"


def test_only_the_gateways_reach_redis(objects):
    """Redis has no password and holds the API keys (a pod that can SADD to the key set has a key) and the
    voices: a NetworkPolicy selects its pods and admits only the gateway's, on the Redis port. Policies
    add up, so every policy that selects the Redis pods is checked, and one must exist."""
    redis_pod = objects[("StatefulSet", "gepard-redis")]["spec"]["template"]
    redis_labels = redis_pod["metadata"]["labels"]
    redis_ports = {p["containerPort"] for c in redis_pod["spec"]["containers"] for p in c["ports"]} | {
        p["name"] for c in redis_pod["spec"]["containers"] for p in c["ports"]}
    gateway_labels = objects[("Deployment", "gepard")]["spec"]["template"]["metadata"]["labels"]
    policies = [doc for (kind, _), doc in objects.items() if kind == "NetworkPolicy"
                and doc["spec"]["podSelector"].get("matchLabels", {}).items() <= redis_labels.items()]
    assert policies, "no NetworkPolicy selects the Redis pods: every pod in the cluster can reach Redis"
    for policy in policies:
        spec = policy["spec"]
        assert "matchExpressions" not in spec["podSelector"] and spec["podSelector"].get("matchLabels")
        assert "Ingress" in spec["policyTypes"]
        assert spec.get("ingress"), "a policy without ingress rules would shut the gateways out too"
        for rule in spec["ingress"]:
            assert rule.get("from") and rule.get("ports"), f"{policy['metadata']['name']}: a rule open to all"
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, f"{peer}: only pods of this namespace, by label"
                selector = peer["podSelector"].get("matchLabels", {})
                # the gateway's pods match, and the selector is specific (not Redis itself, not every pod)
                assert selector and selector.items() <= gateway_labels.items(), selector
                assert not selector.items() <= redis_labels.items()
            assert {p["port"] for p in rule["ports"]} <= redis_ports
            assert all(p.get("protocol", "TCP") == "TCP" for p in rule["ports"])


def test_selectors_and_ports_line_up(objects):
    pod_labels = objects[("Deployment", "gepard")]["spec"]["template"]["metadata"]["labels"]
    service = objects[("Service", "gepard")]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert objects[("PodDisruptionBudget", "gepard")]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"]: p["containerPort"] for p in gateway(objects)["ports"]}
    assert ports["http"] == settings_default("GEPARD_PORT")
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    hpa = objects[("HorizontalPodAutoscaler", "gepard")]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gepard"}
    backend = objects[("Ingress", "gepard")]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == "gepard" and backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}


def test_hpa_scales_on_exported_metrics_served_by_the_adapter_rules(objects):
    hpa = objects[("HorizontalPodAutoscaler", "gepard")]
    targets: dict[str, float] = {}
    values = yaml.safe_load((K8S_DIR / "prometheus-adapter-values.yaml").read_text())
    for metric in hpa["spec"]["metrics"]:
        assert metric["type"] == "Pods"
        name = metric["pods"]["metric"]["name"]
        assert name in exported_metric_names()
        rules = [r for r in values["rules"]["custom"] if r["name"]["as"] == name]
        assert len(rules) == 1, f"the Prometheus adapter has no rule serving the HPA's {name}"
        rule = rules[0]
        assert rule["seriesQuery"].startswith(name + "{")
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}  # a pods metric
        assert "<<.Series>>" in rule["metricsQuery"] and "<<.LabelMatchers>>" in rule["metricsQuery"]
        target = str(metric["pods"]["target"]["averageValue"])
        targets[name] = float(target[:-1]) / 1000 if target.endswith("m") else float(target)
    assert set(targets) == {"gepard_saturation", "gepard_streams_open"}
    # each target is below the limit that refuses streams, so replicas are added before refusals:
    # saturation below the admission limit, open streams below GEPARD_MAX_STREAMS as deployed
    assert 0 < targets["gepard_saturation"] < settings_default("GEPARD_ADMIT_MAX_SATURATION")
    config = objects[("ConfigMap", "gepard-config")]["data"]
    max_streams = int(config.get("GEPARD_MAX_STREAMS", settings_default("GEPARD_MAX_STREAMS")))
    assert 0 < targets["gepard_streams_open"] < max_streams


def test_ingress_keeps_long_websockets_and_ends_tls_with_a_secret(objects):
    ingress = objects[("Ingress", "gepard")]
    notes = ingress["metadata"]["annotations"]
    idle_s = settings_default("GEPARD_WS_IDLE_TIMEOUT_S")
    for key in ("nginx.ingress.kubernetes.io/proxy-read-timeout", "nginx.ingress.kubernetes.io/proxy-send-timeout"):
        assert int(notes[key]) > idle_s, f"{key} would cut sockets the gateway keeps open"
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"  # SSE and streamed bytes
    (tls,) = ingress["spec"]["tls"]
    assert tls["secretName"] and tls["hosts"] == [ingress["spec"]["rules"][0]["host"]]


def readme_k8s_commands() -> str:
    """The first fenced block of the README's Kubernetes section: the commands a reader pastes."""
    section = (K8S_DIR.parents[1] / "README.md").read_text().split("\n### Kubernetes\n", 1)[1].split("\n### ", 1)[0]
    return section.split("\n```\n", 1)[1].split("\n```\n", 1)[0] + "\n"


def test_readme_commands_run_as_pasted_and_create_the_secret_the_deployment_reads(tmp_path, objects):
    """Pasted into bash (-e), the README's block makes one kubectl call per command: a comment after a
    line-continuing backslash would end the command there (kubectl would get a " " argument) and run
    the next --from-literal line as a command of its own. kubectl and openssl are stubs: kubectl
    records its arguments, one NUL-separated line per call."""
    log = tmp_path / "kubectl.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" >> {log}\necho >> {log}\n")
    (bin_dir / "openssl").write_text("#!/bin/sh\necho 0123abcd\n")
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    run = subprocess.run(["bash", "-e", "-c", readme_k8s_commands()], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    calls = [line.rstrip("\0").split("\0") for line in log.read_text().splitlines()]
    namespace = kustomization()["namespace"]
    secrets = [call for call in calls if call[:5] == ["-n", namespace, "create", "secret", "generic"]]
    assert len(secrets) == 1, calls
    (secret,) = secrets
    assert secret[5] == "gepard-secrets"
    literals = dict(arg.removeprefix("--from-literal=").split("=", 1) for arg in secret[6:])
    assert len(literals) == len(secret) - 6, f"not all arguments are --from-literal=KEY=VALUE: {secret}"
    # the keys the gateway reads from that Secret, and the generated values in full
    refs = {e["valueFrom"]["secretKeyRef"]["key"] for e in gateway(objects)["env"]
            if e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "gepard-secrets"}
    assert set(literals) == refs
    assert literals["GEPARD_TOKEN_SECRET"] == literals["GEPARD_METRICS_TOKEN"] == "0123abcd"
    assert calls[0] == ["create", "namespace", namespace] and calls[-1] == ["apply", "-k", "deploy/k8s"]
    assert len(calls) == 4, calls  # namespace, gepard-secrets, gepard-tls, apply
