"""The Helm chart's ``values.schema.json``, built from code so it cannot drift from the settings.

The ``config`` block (the chart's ConfigMap) accepts exactly the settings in
``memstream/adapters/settings.py``
that the chart does not set itself, each with the type the settings object declares; secrets are
accepted only as Secret references.
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from memstream.adapters.settings import FIELDS, json_properties

# Settings the chart sets from its own values (so `config` must not repeat them), and why.
MANAGED: dict[str, str] = {
    "data_dir": "/data, an emptyDir (the root file system is read-only)",
    "bootstrap_servers": "kafka.bootstrapServers",
    "topic_partitions": "kafka.topics.partitions",
    "topic_replication_factor": "kafka.topics.replicationFactor",
    "topic_retention_ms": "kafka.topics.retentionMs",
    "kafka_security_protocol": "kafka.securityProtocol",
    "kafka_sasl_mechanism": "kafka.sasl.mechanism",
    "kafka_sasl_username": "kafka.sasl.username",
    "kafka_ssl_cafile": "kafka.tls.caSecret, mounted",
    "kafka_ssl_certfile": "kafka.tls.clientSecret, mounted",
    "kafka_ssl_keyfile": "kafka.tls.clientSecret, mounted",
    "store": "always qdrant (a Qdrant server) on Kubernetes",
    "qdrant_url": "qdrant.url",
    "roles": "one Deployment per role",
    "workers": "1 per pod: replicas are the workers",
    "gateway_port": "gateway.port (0 in worker pods)",
    "gateway_host": "0.0.0.0 in the gateway pod",
    "metrics_port": "workers.metricsPort",
    "metrics_host": "0.0.0.0 in worker pods",
    "minilm_threads": "gateway.minilmThreads, workers.<role>.minilmThreads",
}
# Settings of the embedded development setup, meaningless against Kafka and a Qdrant server.
NOT_APPLICABLE: dict[str, str] = {
    "embedded_broker_port": "the embedded broker is never started (bootstrap servers are set)",
    "broker": "the embedded broker is never started (bootstrap servers are set)",
    "kafka_libs": "the embedded broker is never started (bootstrap servers are set)",
    "tansu_quirks": "work-arounds for the embedded Tansu broker only",
    "stop_drain_s": "only `memstream up` with the embedded broker drains its in-memory log on stop",
    "worker_urls": "only for a gateway reading the embedded Edge store through workers",
    "worker_index": "set by `memstream up` for the workers it starts; a pod is one worker with its own /data",
    # On a Qdrant server every pod reads the store itself: a worker pod opens no internal port
    # (streams/app.py, serve_internal), so there is nothing to bind, expose or guard with a token.
    "internal_host": "workers open no internal port on a Qdrant server (the chart's store)",
    "internal_port": "workers open no internal port on a Qdrant server (the chart's store)",
    "internal_token": "workers open no internal port on a Qdrant server (the chart's store)",
}


def secret_fields() -> list[str]:
    """The secret settings the chart takes as Secret references (not those it never uses)."""
    return [
        n for n, (_, f) in FIELDS.items() if SecretStr in _members(f.annotation) and n not in NOT_APPLICABLE
    ]


def config_fields() -> list[str]:
    skip = set(MANAGED) | set(NOT_APPLICABLE) | set(secret_fields())
    return [n for n in FIELDS if n not in skip]


def _members(annotation: Any) -> tuple[Any, ...]:
    args = getattr(annotation, "__args__", None)
    return tuple(args) if args else (annotation,)


def _setting_schema(name: str, prop: dict[str, Any]) -> dict[str, Any]:
    """A setting's value in `config`: its declared type, or null (= unset); lists may also be
    given comma-separated and maps as JSON text, as in the environment."""
    choices = [dict(c) for c in prop.get("anyOf", [prop])]
    for c in choices:
        for k in ("title", "default", "description", "format", "writeOnly"):
            c.pop(k, None)
    kinds = {c.get("type") for c in choices}
    if "array" in kinds or "object" in kinds:
        choices.append({"type": "string"})
    if "null" not in kinds:
        choices.append({"type": "null"})
    out: dict[str, Any] = {"description": f"MEMSTREAM_{name.upper()}: {prop.get('description', '')}"}
    if "default" in prop and prop["default"] is not None:
        out["default"] = prop["default"]
    out["anyOf"] = choices
    return out


def _obj(props: dict[str, Any], required: list[str] | None = None, extra: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": extra}
    if required:
        out["required"] = required
    return out


STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
ANY_OBJ = {"type": "object"}
LIST = {"type": "array"}
MAP_STR = {"type": "object", "additionalProperties": {"type": "string"}}
RESOURCES = _obj({"requests": ANY_OBJ, "limits": ANY_OBJ})
PDB = _obj({"enabled": BOOL, "maxUnavailable": {"type": ["integer", "string"]}}, ["enabled"])
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
SECRET_REF = _obj({"name": STR, "key": {"type": "string", "minLength": 1}}, ["name", "key"])


def _placement() -> dict[str, Any]:
    return {
        "podAnnotations": MAP_STR,
        "nodeSelector": MAP_STR,
        "tolerations": LIST,
        "affinity": ANY_OBJ,
        "topologySpreadConstraints": LIST,
        "extraEnv": LIST,
    }


def _role() -> dict[str, Any]:
    return _obj(
        {
            "replicas": {"type": "integer", "minimum": 0},
            "minilmThreads": {"type": "integer", "minimum": 1},
            "resources": RESOURCES,
            "pdb": PDB,
            "keda": _obj(
                {
                    "minReplicas": {"type": "integer", "minimum": 0},
                    "maxReplicas": {"type": "integer", "minimum": 1},
                    "lagThreshold": {"type": "integer", "minimum": 1},
                },
                ["minReplicas", "maxReplicas", "lagThreshold"],
            ),
            **_placement(),
        },
        ["replicas", "minilmThreads", "resources", "pdb", "keda"],
    )


def values_schema() -> dict[str, Any]:
    props = json_properties()
    protocol = list(_members(FIELDS["kafka_security_protocol"][1].annotation))
    mechanism = list(_members(FIELDS["kafka_sasl_mechanism"][1].annotation))
    from memstream.schemas.topics import ALL_TOPICS

    topic_names = [spec.name for spec in ALL_TOPICS]
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "memstream Helm chart values",
        "description": "Generated by deploy/values_schema.py (make deploy-generate); do not edit.",
        **_obj(
            {
                "image": _obj(
                    {
                        "repository": {"type": "string", "minLength": 1},
                        "tag": STR,
                        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                    },
                    ["repository"],
                ),
                "imagePullSecrets": LIST,
                "nameOverride": STR,
                "fullnameOverride": STR,
                "kafka": _obj(
                    {
                        "bootstrapServers": STR,
                        "securityProtocol": {"enum": protocol},
                        "sasl": _obj(
                            {"mechanism": {"enum": mechanism}, "username": STR, "passwordSecret": SECRET_REF}
                        ),
                        "tls": _obj(
                            {
                                "caSecret": SECRET_REF,
                                "clientSecret": _obj(
                                    {"name": STR, "certKey": STR, "keyKey": STR},
                                    ["name", "certKey", "keyKey"],
                                ),
                            }
                        ),
                        "topics": _obj(
                            {
                                "partitions": {"type": "integer", "minimum": 1},
                                "replicationFactor": {"type": "integer", "minimum": 1},
                                "retentionMs": {
                                    "type": "object",
                                    "propertyNames": {"enum": topic_names},
                                    "additionalProperties": {"type": "integer", "minimum": -1},
                                },
                                "createJob": _obj(
                                    {
                                        "enabled": BOOL,
                                        "backoffLimit": {"type": "integer", "minimum": 0},
                                        "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
                                        "resources": RESOURCES,
                                    },
                                    ["enabled"],
                                ),
                            },
                            ["partitions", "replicationFactor"],
                        ),
                    },
                    ["bootstrapServers", "securityProtocol", "topics"],
                ),
                "qdrant": _obj({"url": STR, "apiKeySecret": SECRET_REF}, ["url"]),
                "secrets": _obj(
                    {"llmApiKey": SECRET_REF, "openaiApiKey": SECRET_REF, "gatewayApiKeys": SECRET_REF}
                ),
                "config": {
                    "type": "object",
                    "description": "every other setting (docs/configuration.md); null = unset",
                    "properties": {
                        f"MEMSTREAM_{n.upper()}": _setting_schema(n, props[n]) for n in config_fields()
                    },
                    "additionalProperties": False,
                },
                "gateway": _obj(
                    {
                        "enabled": BOOL,
                        "replicas": {"type": "integer", "minimum": 1},
                        "port": PORT,
                        "minilmThreads": {"type": "integer", "minimum": 1},
                        "resources": RESOURCES,
                        "autoscaling": _obj(
                            {
                                "enabled": BOOL,
                                "minReplicas": {"type": "integer", "minimum": 1},
                                "maxReplicas": {"type": "integer", "minimum": 1},
                                "targetCPUUtilizationPercentage": {"type": "integer", "minimum": 1},
                            },
                            ["enabled"],
                        ),
                        "service": _obj(
                            {
                                "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                                "port": PORT,
                                "annotations": MAP_STR,
                            }
                        ),
                        "pdb": PDB,
                        "startupSeconds": {"type": "integer", "minimum": 5},
                        "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
                        **_placement(),
                    },
                    ["enabled", "port"],
                ),
                "workers": _obj(
                    {
                        "metricsPort": PORT,
                        "ingest": _role(),
                        "consolidate": _role(),
                        "index": _role(),
                        "startupSeconds": {"type": "integer", "minimum": 5},
                        "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
                    },
                    ["metricsPort", "ingest", "consolidate", "index"],
                ),
                "keda": _obj(
                    {
                        "enabled": BOOL,
                        "pollingInterval": {"type": "integer", "minimum": 1},
                        "cooldownPeriod": {"type": "integer", "minimum": 0},
                    },
                    ["enabled"],
                ),
                "podSecurityContext": ANY_OBJ,
                "securityContext": ANY_OBJ,
                "dataVolume": _obj({"sizeLimit": STR}, ["sizeLimit"]),
                "tmpVolume": _obj({"sizeLimit": STR}, ["sizeLimit"]),
                "serviceAccountName": STR,
                "networkPolicy": _obj(
                    {"enabled": BOOL, "gatewayFrom": LIST, "metricsFrom": LIST, "egress": LIST}, ["enabled"]
                ),
                "metrics": _obj(
                    {
                        "serviceMonitor": _obj(
                            {"enabled": BOOL, "interval": STR, "labels": MAP_STR}, ["enabled"]
                        ),
                        "prometheusRule": _obj({"enabled": BOOL, "labels": MAP_STR}, ["enabled"]),
                        "grafanaDashboard": _obj({"enabled": BOOL, "labels": MAP_STR}, ["enabled"]),
                    }
                ),
                # `helm lint` and `helm template` pass `global` to every chart
                "global": ANY_OBJ,
            },
            ["image", "kafka", "qdrant", "config", "gateway", "workers"],
        ),
    }
