"""The Helm chart (deploy/helm/acidclean) renders, lints, and every manifest validates.

Rendering is Helm's own (``helm template``; the test skips, saying how to install it, when no ``helm``
is found: on the PATH, ``$HELM``, or ``~/go/bin/helm`` from ``go install helm.sh/helm/v3/cmd/helm``).
Core resources are validated strictly against Kubernetes' schemas by ``kubernetes-validate`` (the
``dev`` extra; it bundles the schemas). It has none for the CRDs (KEDA ScaledObject and
TriggerAuthentication, Prometheus operator ServiceMonitor and PrometheusRule, Strimzi KafkaTopic and
KafkaUser): those are checked here against what acidclean itself computes instead: the rendered
properties file is loaded by acidclean's settings loader, and the group, topic names and metrics the
CRDs name must be the ones the cleaner uses.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from acidclean.consumers.cleaner_process import CLEANER_TOPICS, cleaner_group_id
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.shared.settings import TopicNames, load_settings

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the dev extra)")

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "acidclean"
KUBERNETES = "1.30.0"
CRD_GROUPS = ("keda.sh/", "monitoring.coreos.com/", "kafka.strimzi.io/")


def helm_binary() -> str | None:
    candidates = [os.environ.get("HELM"), shutil.which("helm"), str(Path.home() / "go" / "bin" / "helm")]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


HELM = helm_binary()
pytestmark = pytest.mark.skipif(
    HELM is None, reason="helm not found (PATH, $HELM, ~/go/bin): go install helm.sh/helm/v3/cmd/helm@v3.19.0"
)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)


def render(*sets: str) -> list[dict[str, Any]]:
    flags = [flag for value in sets for flag in ("--set", value)]
    result = helm("template", "acidclean-analytics", str(CHART), "--kube-version", KUBERNETES, *flags)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


VARIANTS = {
    "defaults (KEDA, monitoring, Strimzi)": (),
    "plain (own Secret, fixed replicas, no CRDs)": (
        "strimzi.enabled=false",
        "autoscaling.enabled=false",
        "monitoring.serviceMonitor.enabled=false",
        "monitoring.prometheusRule.enabled=false",
        "kafkaCredentials.username=cleaner",
        "kafkaCredentials.password=secret",
    ),
    "existing Secret": ("kafkaCredentials.existingSecret=acidclean-creds",),
}


def test_the_chart_lints() -> None:
    result = helm("lint", str(CHART), "--kube-version", KUBERNETES, "--strict")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("sets", VARIANTS.values(), ids=VARIANTS.keys())
def test_every_rendered_core_manifest_validates_strictly(sets: tuple[str, ...]) -> None:
    docs = render(*sets)
    checked = []
    for doc in docs:
        if doc["apiVersion"].startswith(CRD_GROUPS):
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):  # so a bundled schema is never ignored
                kubernetes_validate.validate(doc, KUBERNETES, strict=True)
            continue
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        checked.append(doc["kind"])
    assert {"Deployment", "ConfigMap", "Service"} <= set(checked)


def test_the_deployment_probes_the_cleaner_endpoints_and_runs_locked_down() -> None:
    (deployment,) = of_kind(render(), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    (port,) = container["ports"]
    assert container["args"][container["args"].index("--metrics-port") + 1] == str(port["containerPort"])
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert not container["image"].endswith(":latest")
    assert of_kind(render(), "PodDisruptionBudget")[0]["spec"]["maxUnavailable"] == 1


def test_keda_never_scales_past_the_topic_partitions() -> None:
    (scaled,) = of_kind(render(), "ScaledObject")
    assert scaled["spec"]["maxReplicaCount"] <= 6
    result = helm("template", "t", str(CHART), "--kube-version", KUBERNETES, "--set", "autoscaling.maxReplicas=7")
    assert result.returncode != 0
    assert "autoscaling.maxReplicas (7) exceeds kafka.partitions (6)" in result.stderr


def test_the_crds_name_the_group_topics_and_prefixes_the_cleaner_uses(tmp_path: Path) -> None:
    docs = render("tenant=acme")
    (config_map,) = of_kind(docs, "ConfigMap")
    properties = tmp_path / "acidclean.properties"
    properties.write_text(config_map["data"]["acidclean.properties"])
    settings = load_settings(config_file=properties, environ={})
    assert settings.tenant == "acme"
    assert settings.create_topics is False  # Strimzi's KafkaTopics make them; the user may not

    (scaled,) = of_kind(docs, "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["consumerGroup"] == cleaner_group_id(settings)
    assert trigger["metadata"]["topic"] == settings.topic("vacuum_committed")
    assert scaled["spec"]["scaleTargetRef"]["name"] == of_kind(docs, "Deployment")[0]["metadata"]["name"]

    topics = {doc["spec"]["topicName"]: doc for doc in of_kind(docs, "KafkaTopic")}
    assert set(topics) == {settings.topic(name) for name in TopicNames.model_fields}
    assert {settings.topic(name) for name in CLEANER_TOPICS} <= set(topics)
    assert all(doc["spec"]["partitions"] == settings.topic_partitions for doc in topics.values())

    (user,) = of_kind(docs, "KafkaUser")
    resources = [acl["resource"] for acl in user["spec"]["authorization"]["acls"]]
    assert not any("Create" in acl["operations"] for acl in user["spec"]["authorization"]["acls"])

    def allowed(kind: str, name: str) -> bool:
        return any(
            r["type"] == kind and (name.startswith(r["name"]) if r["patternType"] == "prefix" else name == r["name"])
            for r in resources
        )

    assert all(allowed("topic", topic) for topic in topics)
    assert allowed("group", cleaner_group_id(settings))
    assert allowed("group", cleaner_group_id(settings, dry_run=True))
    # Another tenant, even one whose name starts with this one's, is named by no ACL.
    other = settings.model_copy(update={"tenant": "acmecorp", "topic_prefix": "acmecorp."})
    assert not allowed("group", cleaner_group_id(other))
    assert not any(allowed("topic", other.topic(name)) for name in TopicNames.model_fields)


def test_the_alerts_use_metrics_the_cleaner_exports() -> None:
    (rule,) = of_kind(render(), "PrometheusRule")
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    exported = {
        family.name + suffix
        for family in CleanerMetrics().registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }
    alerts = {r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert {"AcidcleanStuckCleanups", "AcidcleanOldestPendingVacuum", "AcidcleanDeadLetters"} <= set(alerts)
    for name, expression in alerts.items():
        used = set(re.findall(r"\bacidclean_cleaner_[a-z_]+", expression))
        assert used and used <= exported, (name, used - exported)


def test_the_service_monitor_scrapes_the_metrics_service_port() -> None:
    docs = render()
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (service,) = of_kind(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert service["spec"]["publishNotReadyAddresses"] is True  # an unready cleaner's metrics matter most
