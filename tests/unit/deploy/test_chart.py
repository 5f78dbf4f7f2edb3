"""The Helm chart (deploy/helm/acidclean) renders, lints, and every manifest validates.

Rendering is Helm's own (``helm template``; the test skips, saying how to install it, when no ``helm``
is found: on the PATH, ``$HELM``, or ``~/go/bin/helm`` from ``go install helm.sh/helm/v3/cmd/helm``).
Core resources are validated strictly against Kubernetes' schemas by ``kubernetes-validate`` (the
``dev`` extra; it bundles the schemas). It has none for the CRDs (KEDA ScaledObject and
TriggerAuthentication, Prometheus operator ServiceMonitor and PrometheusRule, Strimzi KafkaTopic and
KafkaUser): those are checked here against what acidclean itself computes instead: the rendered
properties file is loaded by acidclean's settings loader, and the group, topic names and metrics the
CRDs name must be the ones the cleaner uses. With ``kerberos.enabled`` the rendered Kerberos settings are
loaded the same way and handed to the metastore transport, and the keytab and krb5.conf they name must
be where the Deployment mounts them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from acidclean.cli.hive_queue import hive_queue as hive_queue_command
from acidclean.cli.initiator import initiator as initiator_command
from acidclean.cli.vacuum_service import vacuum_service as vacuum_service_command
from acidclean.consumers.cleaner_process import CLEANER_TOPICS, cleaner_group_id
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.producers.hive_queue.bridge import LOG_TOPICS as HIVE_QUEUE_TOPICS
from acidclean.producers.hive_queue.metrics import HiveQueueMetrics
from acidclean.producers.initiator.process import INITIATOR_TOPICS, InitiatorMetrics, initiator_group_id
from acidclean.producers.vacuum_service import SERVICE_TOPICS, VacuumServiceMetrics, service_group_id
from acidclean.shared.metastore_transport import kerberos_from_settings
from acidclean.shared.settings import ENV_PREFIX, TopicNames, load_settings

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


def helm_with_values(values: dict[str, Any] | None, *args: str) -> subprocess.CompletedProcess[str]:
    """helm with ``values`` (if any) as a values file on its standard input (``-f -``)."""
    assert HELM is not None
    stdin = ["-f", "-"] if values is not None else []
    return subprocess.run(
        [HELM, *args, *stdin],
        input=yaml.safe_dump(values) if values is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
    )


def render(*sets: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    flags = [flag for value in sets for flag in ("--set", value)]
    result = helm_with_values(
        values, "template", "acidclean-analytics", str(CHART), "--kube-version", KUBERNETES, *flags
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def config_maps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ConfigMaps the components mount (all but the Grafana dashboard's)."""
    return [doc for doc in of_kind(docs, "ConfigMap") if not doc["metadata"]["name"].endswith("-dashboard")]


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


KRB5_CONF = """\
[libdefaults]
  default_realm = EXAMPLE.COM
[realms]
  EXAMPLE.COM = {
    kdc = kdc.example.com:88
  }
"""
KERBEROS: dict[str, Any] = {
    "kerberos": {
        "enabled": True,
        "metastorePrincipal": "hive/_HOST@EXAMPLE.COM",
        "clientPrincipal": "acidclean/analytics@EXAMPLE.COM",
        "keytab": {"existingSecret": "acidclean-analytics-keytab"},
        "krb5Conf": {"inline": KRB5_CONF},
    }
}
KERBEROS_EXISTING_KRB5: dict[str, Any] = {
    "kerberos": {
        **KERBEROS["kerberos"],
        "keytab": {"existingSecret": "metastore-keytabs", "key": "cleaner.keytab"},
        "krb5Conf": {"existingConfigMap": "realm-example", "key": "krb5.conf.example"},
    }
}
KERBEROS_VARIANTS = {"Kerberos, inline krb5.conf": KERBEROS, "Kerberos, existing ConfigMap": KERBEROS_EXISTING_KRB5}


@pytest.mark.parametrize("values", [None, KERBEROS], ids=["defaults", "Kerberos"])
def test_the_chart_lints(values: dict[str, Any] | None) -> None:
    result = helm_with_values(values, "lint", str(CHART), "--kube-version", KUBERNETES, "--strict")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("sets", VARIANTS.values(), ids=VARIANTS.keys())
def test_every_rendered_core_manifest_validates_strictly(sets: tuple[str, ...]) -> None:
    validate_core(render(*sets))


@pytest.mark.parametrize("values", KERBEROS_VARIANTS.values(), ids=KERBEROS_VARIANTS.keys())
def test_every_rendered_core_manifest_validates_strictly_with_kerberos(values: dict[str, Any]) -> None:
    validate_core(render(values=values))


def validate_core(docs: list[dict[str, Any]]) -> None:
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
    (config_map,) = config_maps(docs)
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


def exported_metrics() -> set[str]:
    """Every series name the cleaner, the initiator and the vacuum service export (counters carry
    prometheus_client's _total suffix, histograms their _bucket, _sum and _count)."""
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    registries = (
        CleanerMetrics().registry,
        InitiatorMetrics().registry,
        VacuumServiceMetrics().registry,
        HiveQueueMetrics().registry,
    )
    return {
        family.name + suffix
        for registry in registries
        for family in registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def test_the_alerts_use_metrics_the_components_export() -> None:
    (rule,) = of_kind(render(values=COMPONENTS), "PrometheusRule")
    exported = exported_metrics()
    alerts = {r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert {"AcidcleanStuckCleanups", "AcidcleanOldestPendingVacuum", "AcidcleanDeadLetters"} <= set(alerts)
    assert {"AcidcleanInitiatorLagging", "AcidcleanVacuumsFailing", "AcidcleanVacuumQueue"} <= set(alerts)
    assert "AcidcleanHiveQueueFailing" in alerts
    for name, expression in alerts.items():
        used = set(re.findall(r"\bacidclean_[a-z_]+", expression))
        assert used and used <= exported, (name, used - exported)
    # Each group selects its own component's metrics Service.
    services = {doc["metadata"]["name"] for doc in of_kind(render(values=COMPONENTS), "Service")}
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            (service,) = set(re.findall(r'service="([^"]+)"', alert["expr"]))
            assert service in services, (alert["alert"], service)


def test_the_dashboard_queries_only_metrics_the_components_export() -> None:
    docs = render("tenant=acme", values=COMPONENTS)
    (config_map,) = [doc for doc in of_kind(docs, "ConfigMap") if doc["metadata"]["name"].endswith("-dashboard")]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # what the Grafana sidecar loads
    (document,) = config_map["data"].values()
    dashboard = json.loads(document)
    assert dashboard["uid"] == "acidclean-acme" and "__" not in document  # every placeholder replaced
    exported = exported_metrics()
    services = {doc["metadata"]["name"] for doc in of_kind(docs, "Service")}
    used_by_all: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\bacidclean_[a-z_]+", target["expr"]))
            assert used and used <= exported, (panel["title"], used - exported)
            used_by_all |= used
            (pattern,) = re.findall(r'service=~"([^"]+)"', target["expr"])
            assert {name for name in services if re.fullmatch(pattern, name)} == services, (panel["title"], pattern)
    # What an operator looks at first: cleanups and bytes freed, parked vacuums, lateness, the oldest
    # waiting vacuum, dead letters, and the backlog of each component.
    wanted = {
        "acidclean_cleaner_events_total",
        "acidclean_cleaner_deleted_bytes_total",
        "acidclean_cleaner_requeues_total",
        "acidclean_cleaner_lateness_seconds_bucket",
        "acidclean_cleaner_oldest_pending_seconds",
        "acidclean_cleaner_dead_letters_total",
        "acidclean_initiator_lag",
        "acidclean_vacuum_service_queued",
    }
    assert wanted <= used_by_all, wanted - used_by_all
    assert not of_kind(render("monitoring.dashboard.enabled=false"), "ConfigMap")[1:]


def test_every_component_has_its_metrics_service_and_service_monitor() -> None:
    docs = render(values=COMPONENTS)
    services = {doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc for doc in of_kind(docs, "Service")}
    monitors = {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc for doc in of_kind(docs, "ServiceMonitor")
    }
    by_component = deployments(docs)
    assert (
        set(services) == set(monitors) == set(by_component) == {"cleaner", "initiator", "vacuum-service", "hive-queue"}
    )
    for component, deployment in by_component.items():
        service, monitor = services[component], monitors[component]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items(), component
        others = [d for c, d in by_component.items() if c != component]
        assert not any(
            service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items() for d in others
        ), f"the {component} metrics Service selects another component's pods"
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        (port,) = service["spec"]["ports"]
        assert port["name"] == monitor["spec"]["endpoints"][0]["port"] == "metrics"
        assert {"name": "metrics", "containerPort": port["port"], "protocol": "TCP"} in container["ports"]


AUTOSCALED: dict[str, Any] = {
    "initiator": {"enabled": True, "autoscaling": {"enabled": True}},
    "vacuumService": {"enabled": True, "master": "yarn", "autoscaling": {"enabled": True}},
}


def test_keda_scales_the_initiator_and_vacuum_service_on_their_own_groups_and_topics(tmp_path: Path) -> None:
    docs = render("tenant=acme", values=AUTOSCALED)
    settings = load_settings(config_file=config_map_properties_of(docs, tmp_path), environ={})
    by_component = deployments(docs)
    scaled = by_component_label(of_kind(docs, "ScaledObject"))
    assert set(scaled) == {"cleaner", "initiator", "vacuum-service"}
    expected = {
        "cleaner": (cleaner_group_id(settings), settings.topic("vacuum_committed")),
        "initiator": (initiator_group_id(settings), settings.topic("delta_committed")),
        "vacuum-service": (service_group_id(settings), settings.topic("vacuum_requests")),
    }
    for component, (group, topic) in expected.items():
        (trigger,) = scaled[component]["spec"]["triggers"]
        assert (trigger["metadata"]["consumerGroup"], trigger["metadata"]["topic"]) == (group, topic), component
        assert scaled[component]["spec"]["scaleTargetRef"]["name"] == by_component[component]["metadata"]["name"]
        assert "replicas" not in by_component[component]["spec"], f"KEDA owns the {component}'s replica count"
    fixed = deployments(render(values=COMPONENTS))
    assert fixed["initiator"]["spec"]["replicas"] == 1 and fixed["vacuum-service"]["spec"]["replicas"] == 1
    too_many = {**AUTOSCALED, "initiator": {"enabled": True, "autoscaling": {"enabled": True, "maxReplicas": 7}}}
    result = helm_with_values(too_many, "template", "t", str(CHART), "--kube-version", KUBERNETES)
    assert result.returncode != 0
    assert "initiator: autoscaling.maxReplicas (7) exceeds kafka.partitions (6)" in result.stderr


def test_with_kerberos_on_kubernetes_the_vacuum_executors_mount_the_keytab_too(tmp_path: Path) -> None:
    values = {**KERBEROS, "initiator": {"enabled": True}}
    values["vacuumService"] = {"enabled": True, "master": "k8s://https://kubernetes.default.svc"}
    docs = render(values=values)
    validate_core(docs)
    vacuum = deployments(docs)["vacuum-service"]["spec"]["template"]["spec"]
    (container,) = vacuum["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (config_mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert env["SPARK_CONF_DIR"] == config_mount["mountPath"]  # spark-defaults.conf comes from the ConfigMap
    (config_map,) = [d for d in config_maps(docs) if "acidclean.properties" in d["data"]]
    spark = dict(line.split(" ", 1) for line in config_map["data"]["spark-defaults.conf"].splitlines())
    driver_keytab, _ = mounted_file(vacuum, container, spark["spark.kerberos.keytab"])
    assert spark["spark.kerberos.principal"] == KERBEROS["kerberos"]["clientPrincipal"]
    template_path = spark["spark.kubernetes.executor.podTemplateFile"]
    assert template_path.startswith(config_mount["mountPath"] + "/")
    executor_pod = yaml.safe_load(config_map["data"][template_path.rsplit("/", 1)[1]])
    kubernetes_validate.validate(executor_pod, KUBERNETES, strict=True)
    (executor,) = executor_pod["spec"]["containers"]
    executor_env = {e["name"]: e["value"] for e in executor["env"]}
    keytab, _ = mounted_file(executor_pod["spec"], executor, executor_env["KRB5_CLIENT_KTNAME"])
    assert keytab["secret"] == driver_keytab["secret"]  # the same Secret and key as the driver's
    krb5, _ = mounted_file(executor_pod["spec"], executor, executor_env["KRB5_CONFIG"])
    assert krb5["configMap"]["name"] == mounted_file(vacuum, container, env["KRB5_CONFIG"])[0]["configMap"]["name"]
    # Without a Kubernetes master (local[*] in the pod, or YARN) there are no executor pods to dress.
    plain = render(values={**KERBEROS, **COMPONENTS})
    assert all("spark-defaults.conf" not in d["data"] for d in config_maps(plain))


def test_the_service_monitor_scrapes_the_metrics_service_port() -> None:
    docs = render()
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (service,) = of_kind(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert service["spec"]["publishNotReadyAddresses"] is True  # an unready cleaner's metrics matter most


def config_map_properties(docs: list[dict[str, Any]], directory: Path) -> Path:
    """The cleaner's acidclean.properties as rendered, written to ``directory``."""
    (deployment,) = of_kind(docs, "Deployment")
    name = deployment["metadata"]["name"]
    (config_map,) = [doc for doc in of_kind(docs, "ConfigMap") if doc["metadata"]["name"] == name]
    properties = directory / "acidclean.properties"
    properties.write_text(config_map["data"]["acidclean.properties"])
    return properties


def mounted_file(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The volume and the key in it that the container sees at ``path``, and that its mount is read-only."""
    directory, _, file_name = path.rpartition("/")
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert mount.get("readOnly") is True, mount
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    source = volume.get("secret") or volume["configMap"]
    (item,) = [i for i in source["items"] if i["path"] == file_name]
    return volume, item["key"]


@pytest.mark.parametrize("values", KERBEROS_VARIANTS.values(), ids=KERBEROS_VARIANTS.keys())
def test_kerberos_mounts_the_keytab_and_krb5_conf_the_settings_name(values: dict[str, Any], tmp_path: Path) -> None:
    kerberos = values["kerberos"]
    docs = render(values=values)
    (deployment,) = of_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}

    # Every ACIDCLEAN_* variable and every properties key is one acidclean's loader accepts (it refuses
    # unknown ones), and together they are the Kerberos settings the values asked for.
    environ = {name: "x" for name in env if name.startswith(ENV_PREFIX)}
    settings = load_settings(config_file=config_map_properties(docs, tmp_path), environ=environ)
    assert settings.metastore_sasl_enabled is True
    assert settings.metastore_kerberos_principal == kerberos["metastorePrincipal"]
    assert settings.metastore_client_principal == kerberos["clientPrincipal"]
    assert settings.metastore_client_ticket_cache == ""

    # The keytab: the Secret's key, read-only, where metastore_client_keytab points, group-readable only.
    volume, key = mounted_file(pod, container, settings.metastore_client_keytab)
    assert volume["secret"]["secretName"] == kerberos["keytab"]["existingSecret"]
    assert key == kerberos["keytab"].get("key", "acidclean.keytab")
    assert volume["secret"]["defaultMode"] == 0o440

    # krb5.conf: where KRB5_CONFIG points, from the ConfigMap given or the one the chart made of it.
    volume, key = mounted_file(pod, container, env["KRB5_CONFIG"]["value"])
    if "existingConfigMap" in kerberos["krb5Conf"]:
        assert volume["configMap"]["name"] == kerberos["krb5Conf"]["existingConfigMap"]
        assert key == kerberos["krb5Conf"]["key"]
        assert len(config_maps(docs)) == 1
    else:
        (krb5,) = [doc for doc in of_kind(docs, "ConfigMap") if doc["metadata"]["name"] == volume["configMap"]["name"]]
        assert krb5["data"][key] == KRB5_CONF
        assert "checksum/krb5" in deployment["spec"]["template"]["metadata"]["annotations"]

    # And the metastore transport takes them: the keytab (a stand-in file here) with its principal.
    keytab = tmp_path / "acidclean.keytab"
    keytab.write_bytes(b"\x05\x02")
    transport = kerberos_from_settings(settings.model_copy(update={"metastore_client_keytab": str(keytab)}))
    assert transport is not None
    assert transport.service_principal == kerberos["metastorePrincipal"]
    assert transport.client_principal == kerberos["clientPrincipal"] and transport.keytab == str(keytab)


def test_kerberos_is_off_by_default_and_renders_nothing_then(tmp_path: Path) -> None:
    docs = render()
    assert docs == render("kerberos.enabled=false")
    assert load_settings(config_file=config_map_properties(docs, tmp_path), environ={}).metastore_sasl_enabled is False
    (deployment,) = of_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "KRB5_CONFIG" not in {e["name"] for e in container["env"]}
    assert {v["name"] for v in pod["volumes"]} == {"config", "tmp"}
    assert len(config_maps(docs)) == 1


REFUSED = {
    "no service principal": ({"metastorePrincipal": ""}, "kerberos.metastorePrincipal"),
    "no client principal": ({"clientPrincipal": ""}, "kerberos.clientPrincipal"),
    "no keytab Secret": ({"keytab": {"existingSecret": ""}}, "kerberos.keytab.existingSecret"),
    "no krb5.conf": ({"krb5Conf": {"inline": ""}}, "kerberos.krb5Conf: the realm's krb5.conf is needed"),
    "two krb5.conf": (
        {"krb5Conf": {"inline": KRB5_CONF, "existingConfigMap": "x"}},
        "set existingConfigMap or inline, not both",
    ),
}


@pytest.mark.parametrize(("change", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_kerberos_values_that_could_not_authenticate_are_refused(change: dict[str, Any], message: str) -> None:
    values = {"kerberos": {**KERBEROS["kerberos"], **change}}
    result = helm_with_values(values, "template", "t", str(CHART), "--kube-version", KUBERNETES)
    assert result.returncode != 0
    assert message in result.stderr


def test_kerberos_settings_in_config_are_refused_for_kerberos_values() -> None:
    keytab_in_config = "config.metastore_client_keytab=/k"
    result = helm("template", "t", str(CHART), "--kube-version", KUBERNETES, "--set", keytab_in_config)
    assert result.returncode != 0
    assert "config.metastore_client_keytab: set Kerberos to the metastore with kerberos.*" in result.stderr


# The initiator and the vacuum service (initiator.enabled, vacuumService.enabled; both off by default).
COMPONENTS: dict[str, Any] = {
    "initiator": {"enabled": True},
    "vacuumService": {"enabled": True, "master": "yarn"},
    "hiveQueue": {"enabled": True, "pool": "acidclean"},
}


def by_component_label(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc for doc in docs}


def deployments(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return by_component_label(of_kind(docs, "Deployment"))


def parsed(command: click.Command, args: list[str], properties: Path) -> click.Context:
    """The rendered container arguments as the real command parses them (without running it)."""
    args = [str(properties) if arg == "/etc/acidclean/acidclean.properties" else arg for arg in args]
    return command.make_context(command.name, args[1:])


def test_the_initiator_and_vacuum_service_are_off_by_default_and_change_nothing_then() -> None:
    off = ("initiator.enabled=false", "vacuumService.enabled=false")
    template = ("template", "acidclean-analytics", str(CHART), "--kube-version", KUBERNETES)
    default, explicit = helm(*template), helm(*template, *(f for s in off for f in ("--set", s)))
    assert default.returncode == 0 and explicit.returncode == 0, default.stderr + explicit.stderr
    assert default.stdout == explicit.stdout  # byte for byte
    docs = render()
    assert set(deployments(docs)) == {"cleaner"}
    assert len(of_kind(docs, "PodDisruptionBudget")) == 1
    (user,) = of_kind(docs, "KafkaUser")
    acls = user["spec"]["authorization"]["acls"]
    groups = [acl["resource"]["name"] for acl in acls if acl["resource"]["type"] == "group"]
    assert groups == ["acidclean-cleaner.analytics", "acidclean-cleaner.analytics.dry-run"]


@pytest.mark.parametrize("kerberos", [False, True], ids=["plain", "Kerberos"])
def test_with_both_enabled_the_chart_lints_and_validates(kerberos: bool) -> None:
    values = {**COMPONENTS, **(KERBEROS if kerberos else {})}
    result = helm_with_values(values, "lint", str(CHART), "--kube-version", KUBERNETES, "--strict")
    assert result.returncode == 0, result.stdout + result.stderr
    docs = render(values=values)
    validate_core(docs)
    assert set(deployments(docs)) == {"cleaner", "initiator", "vacuum-service", "hive-queue"}


def test_the_initiator_and_vacuum_service_run_their_commands_in_their_images(tmp_path: Path) -> None:
    docs = render("tenant=acme", values=COMPONENTS)
    settings = load_settings(config_file=config_map_properties_of(docs, tmp_path), environ={})
    by_component = deployments(docs)
    cleaner = by_component["cleaner"]["spec"]["template"]["spec"]
    (cleaner_container,) = cleaner["containers"]

    initiator = by_component["initiator"]["spec"]["template"]["spec"]
    (container,) = initiator["containers"]
    assert container["image"] == cleaner_container["image"]  # pure Python: the cleaner image has all it needs
    context = parsed(initiator_command, container["args"], tmp_path / "acidclean.properties")
    assert container["args"][0] == "initiator"
    assert context.params["sweep_interval"] == "5m"
    assert initiator_group_id(settings.model_copy(update={"initiator_group_id": context.params["group"]})) == (
        "acidclean-initiator.acme"
    )

    vacuum = by_component["vacuum-service"]["spec"]["template"]["spec"]
    (container,) = vacuum["containers"]
    assert container["image"] == "registry.example.com/acidclean-vacuum:0.1.0"  # pyspark and a JDK
    assert container["args"][0] == "vacuum-service"
    context = parsed(vacuum_service_command, container["args"], tmp_path / "acidclean.properties")
    assert context.params["master"] == "yarn" and context.params["threads"] == 1
    assert service_group_id(settings.model_copy(update={"vacuum_service_group_id": context.params["group"]})) == (
        "acidclean-vacuum-service.acme"
    )

    for name in ("initiator", "vacuum-service", "hive-queue"):
        pod = by_component[name]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        (port,) = container["ports"]
        assert port["name"] == "metrics"
        assert container["args"][container["args"].index("--metrics-port") + 1] == str(port["containerPort"])
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        # Locked down, configured and credentialed as the cleaner is.
        assert pod["securityContext"] == cleaner["securityContext"]
        assert container["securityContext"] == cleaner_container["securityContext"]
        assert container["env"] == cleaner_container["env"]
        assert container["volumeMounts"] == cleaner_container["volumeMounts"]
        assert [v["name"] for v in pod["volumes"]] == [v["name"] for v in cleaner["volumes"]]
        # Its own pods only: the cleaner's Service, PDB and KEDA never select them.
        labels = by_component[name]["spec"]["template"]["metadata"]["labels"]
        own = by_component[name]["metadata"]["name"]
        (pdb,) = [p for p in of_kind(docs, "PodDisruptionBudget") if p["metadata"]["name"] == own]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
        for selector in (of_kind(docs, "Service")[0]["spec"]["selector"], cleaner_selector(docs)):
            assert not selector.items() <= labels.items()
    (scaled,) = of_kind(docs, "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == by_component["cleaner"]["metadata"]["name"]
    # The vacuum service's first loop step waits for its SparkSession: liveness waits too, for it only.
    (container,) = vacuum["containers"]
    assert container["livenessProbe"]["initialDelaySeconds"] >= 60
    assert "initialDelaySeconds" not in cleaner_container["livenessProbe"]
    assert container["readinessProbe"] == cleaner_container["readinessProbe"]


def cleaner_selector(docs: list[dict[str, Any]]) -> dict[str, str]:
    return deployments(docs)["cleaner"]["spec"]["selector"]["matchLabels"]


def config_map_properties_of(docs: list[dict[str, Any]], directory: Path) -> Path:
    (config_map,) = config_maps(docs)
    properties = directory / "acidclean.properties"
    properties.write_text(config_map["data"]["acidclean.properties"])
    return properties


def test_with_kerberos_the_new_components_mount_the_keytab_and_krb5_conf_too() -> None:
    by_component = deployments(render(values={**COMPONENTS, **KERBEROS}))
    cleaner = by_component["cleaner"]["spec"]["template"]
    for name in ("initiator", "vacuum-service", "hive-queue"):
        template = by_component[name]["spec"]["template"]
        volumes = [v for v in template["spec"]["volumes"] if v["name"] != "tmp"]  # the vacuum's /tmp is larger
        assert volumes == [v for v in cleaner["spec"]["volumes"] if v["name"] != "tmp"]
        assert template["spec"]["containers"][0]["volumeMounts"] == cleaner["spec"]["containers"][0]["volumeMounts"]
        assert template["spec"]["containers"][0]["env"] == cleaner["spec"]["containers"][0]["env"]
        assert {"keytab", "krb5"} <= {v["name"] for v in template["spec"]["volumes"]}
        assert template["metadata"]["annotations"] == cleaner["metadata"]["annotations"]


def test_the_kafka_user_grants_the_new_components_groups_and_topics(tmp_path: Path) -> None:
    docs = render("tenant=acme", values=COMPONENTS)
    settings = load_settings(config_file=config_map_properties_of(docs, tmp_path), environ={})
    (user,) = of_kind(docs, "KafkaUser")
    acls = user["spec"]["authorization"]["acls"]

    def allowed(kind: str, name: str, operation: str) -> bool:
        return any(
            acl["resource"]["type"] == kind
            and operation in acl["operations"]
            and (
                name.startswith(acl["resource"]["name"])
                if acl["resource"]["patternType"] == "prefix"
                else name == acl["resource"]["name"]
            )
            for acl in acls
        )

    for group in (initiator_group_id(settings), service_group_id(settings)):
        assert allowed("group", group, "Read") and allowed("group", group, "Describe"), group
    for topic in {*INITIATOR_TOPICS, *SERVICE_TOPICS, *HIVE_QUEUE_TOPICS}:
        assert allowed("topic", settings.topic(topic), "Read") and allowed("topic", settings.topic(topic), "Write")
    topics = {doc["spec"]["topicName"] for doc in of_kind(docs, "KafkaTopic")}
    assert {settings.topic(name) for name in (*INITIATOR_TOPICS, *SERVICE_TOPICS)} <= topics
    assert settings.topic("vacuum_requests") in topics


def test_the_hive_queue_runs_its_command_in_the_cleaner_image_serving_its_pool(tmp_path: Path) -> None:
    docs = render("tenant=acme", values=COMPONENTS)
    by_component = deployments(docs)
    (cleaner_container,) = by_component["cleaner"]["spec"]["template"]["spec"]["containers"]
    queue = by_component["hive-queue"]
    (container,) = queue["spec"]["template"]["spec"]["containers"]
    assert container["image"] == cleaner_container["image"]  # pure Python: no Spark
    assert container["args"][0] == "hive-queue"
    context = parsed(hive_queue_command, container["args"], config_map_properties_of(docs, tmp_path))
    assert (context.params["pool"], context.params["interval"], context.params["metrics_port"]) == (
        "acidclean",
        5,
        9467,
    )
    assert queue["spec"]["replicas"] == 1  # no consumer group, no KEDA: replicas take entries by worker id
    assert "hive-queue" not in {
        doc["metadata"]["labels"]["app.kubernetes.io/component"] for doc in of_kind(docs, "ScaledObject")
    }
    assert "hive-queue" not in deployments(render())  # off by default
