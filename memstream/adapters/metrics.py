"""Prometheus metrics of the pipeline, declared once. Names are part of the operator contract:
dashboards and alerts (deploy/) query exactly these."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

TURNS_INGESTED = Counter("memstream_turns_ingested", "Turns read from the turns topic", ["tenant"])
UNITS_STORED = Counter("memstream_units_stored", "New units written to the units collection", ["tenant"])
DUPLICATE_TURNS = Counter(
    "memstream_duplicate_turns", "Redelivered turns recognised by id and content (not stored again)"
)
TURNS_REROUTED = Counter(
    "memstream_turns_rerouted",
    "Turns that arrived on a partition other than their key's (a producer with another partitioner) "
    "and were forwarded to it, by the partition they arrived on",
    ["partition"],
)
DEAD_LETTERS = Counter("memstream_dead_letters", "Records sent to the dead-letter topic", ["stage", "reason"])
EVENT_TIMES = Counter("memstream_event_times", "Event-time intervals found in turns", ["granularity"])
EMBED_SECONDS = Histogram(
    "memstream_embed_seconds",
    "Embedder latency per batch",
    ["embedder"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
STAGE_SECONDS = Histogram(
    "memstream_ingest_stage_seconds",
    "Time per ingest batch by stage",
    ["stage"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
BATCH_SIZE = Histogram(
    "memstream_ingest_batch_size",
    "Turns per ingest batch",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
RECURRENCE_CHECKS = Counter("memstream_recurrence_checks", "Units checked for topic recurrence")
CONSOLIDATION_REQUESTS = Counter(
    "memstream_consolidation_requests", "Consolidation requests published", ["trigger"]
)
WINDOWS_CLOSED = Counter("memstream_windows_closed", "Windows closed", ["level", "reason"])
LATE_EVENTS = Counter("memstream_late_events", "Turns older than their user's latest dialogue time")
CONSUMER_LAG = Gauge(
    "memstream_consumer_lag",
    "Records on the partition not yet read by the worker's agents (every topic after the gateway)",
    ["topic", "partition"],
)
CONSUMER_REWINDS = Counter(
    "memstream_consumer_rewinds",
    "Times a partition was sought back because a record arrived ahead of the next offset to deliver"
    " (fetched before a seek; streams/delivery.py)",
    ["topic"],
)

# --- consolidation LLM (memstream/adapters/llm/) ----------------------------------------------------
LLM_CALLS = Counter(
    "memstream_llm_calls",
    "LLM chat calls by outcome: ok / repaired / invalid once per completion received (parsed at once,"
    " parsed after the repair call, unparseable), retry per failed attempt that is retried, failed per"
    " call given up, budget per call refused by the daily token budget, truncated per answer cut at the"
    " token limit and unparseable, lengthened per one parsed on the retry with the larger limit,"
    " format_rejected per response format the endpoint refused (the client steps down to the next)",
    ["stage", "model", "tenant", "outcome"],
)
LLM_TOKENS = Counter(
    "memstream_llm_tokens",
    "LLM tokens billed, from the responses' usage",
    ["stage", "model", "tenant", "kind"],
)
LLM_SECONDS = Histogram(
    "memstream_llm_seconds",
    "Latency of one LLM HTTP call (every attempt, failed ones included)",
    ["stage", "model"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120),
)
LLM_IN_FLIGHT = Gauge("memstream_llm_in_flight", "LLM HTTP calls in flight in this process")
CONSOLIDATIONS = Counter(
    "memstream_consolidations",
    "Consolidation work handled, by trigger (recurrence, session, day, week, month) and outcome "
    "(done, nothing to write, deferred, invalid)",
    ["trigger", "outcome"],
)
CONSOLIDATION_IN_FLIGHT = Gauge(
    "memstream_consolidation_in_flight",
    "Records a consolidation stage (consolidation, windows, deferred) works on now, one per user at most",
    ["stage"],
)
CONSOLIDATION_QUEUED = Gauge(
    "memstream_consolidation_queued",
    "Records a consolidation stage has taken that wait behind their user's record in flight",
    ["stage"],
)
CONSOLIDATION_QUEUE_WAIT = Histogram(
    "memstream_consolidation_queue_wait_seconds",
    "Time from a record's write to its topic until its consolidation stage starts on it",
    ["stage"],
    buckets=(0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
CONSOLIDATION_ERRORS = Counter(
    "memstream_consolidation_errors",
    "Records whose consolidation handler raised (logged with the traceback); each is tried again in place",
    ["stage"],
)
MEMORY_UPDATES = Counter(
    "memstream_memory_updates", "Memory updates published to memory.updates", ["op", "kind"]
)
STORE_PAUSES = Counter(
    "memstream_store_pauses",
    "Times a stage found the vector store unavailable and paused (its batch is retried, not skipped)",
    ["stage"],
)
STORE_PAUSED = Gauge("memstream_store_paused", "1 while a stage waits for the vector store", ["stage"])

# --- query gateway ---------------------------------------------------------------------------
GATEWAY_REQUESTS = Counter(
    "memstream_gateway_requests", "Gateway requests by route and status code", ["route", "status"]
)
GATEWAY_SECONDS = Histogram(
    "memstream_gateway_request_seconds",
    "Gateway request latency by route (recall latency: route=/v1/recall)",
    ["route"],
    buckets=(0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
TURNS_ACCEPTED = Counter("memstream_gateway_turns_accepted", "Turns the gateway wrote to the log", ["tenant"])
GATEWAY_UPDATES = Counter(
    "memstream_gateway_updates_received", "memory.updates records read for live (SSE) subscribers"
)
RATE_LIMITED = Counter("memstream_gateway_rate_limited", "Requests refused with 429 (per-key rate limit)")
GATEWAY_SHED = Counter(
    "memstream_gateway_shed",
    "Requests refused before any work because too many were in flight: reason=gateway (503, "
    "MEMSTREAM_GATEWAY_MAX_IN_FLIGHT) or key (429, MEMSTREAM_GATEWAY_MAX_IN_FLIGHT_PER_KEY)",
    ["route", "reason"],
)
GATEWAY_IN_FLIGHT = Gauge(
    "memstream_gateway_in_flight", "Requests holding one of the gateway's in-flight slots"
)
USERS_DELETED = Counter("memstream_users_deleted", "Users forgotten through DELETE", ["tenant"])
WORKER_RECALL_SECONDS = Histogram(
    "memstream_worker_recall_seconds",
    "Recalls a worker ran for a gateway: queued = from the request read to its thread starting, "
    "run = the recall itself (engine and wire)",
    ["stage"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
WORKER_RECALLS_SHED = Counter(
    "memstream_worker_recalls_shed",
    "Recalls a worker refused with 503 because MEMSTREAM_WORKER_RECALL_CONCURRENCY were already running",
)


def snapshot() -> dict[str, dict[str, float]]:
    """Current counter values, and the consolidation stages' work in flight and queued, keyed by
    name and label values, for ``memstream status``."""
    out: dict[str, dict[str, float]] = {}
    for counter in (
        TURNS_INGESTED,
        UNITS_STORED,
        DUPLICATE_TURNS,
        TURNS_REROUTED,
        DEAD_LETTERS,
        CONSOLIDATION_REQUESTS,
        WINDOWS_CLOSED,
        LATE_EVENTS,
        RECURRENCE_CHECKS,
        LLM_CALLS,
        LLM_TOKENS,
        CONSOLIDATIONS,
        MEMORY_UPDATES,
    ):
        for metric in counter.collect():
            values = out.setdefault(metric.name, {})
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    values["/".join(sample.labels.values()) or "all"] = sample.value
    for gauge in (CONSOLIDATION_IN_FLIGHT, CONSOLIDATION_QUEUED):
        for metric in gauge.collect():
            out[metric.name] = {"/".join(s.labels.values()): s.value for s in metric.samples}
    return out


OWN_WRITES_WAIT = Histogram(
    "memstream_own_writes_wait_seconds",
    "Time consolidation waited for its earlier updates of a user to be indexed before reading",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
OWN_WRITES_TIMEOUTS = Counter(
    "memstream_own_writes_timeouts",
    "Times consolidation stopped waiting for its earlier updates to be indexed (index role behind or down)",
)
TAKEOVER_WAIT = Histogram(
    "memstream_takeover_wait_seconds",
    "Time the first consolidation on a newly assigned partition waited for the index to apply what "
    "was published there before",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
TAKEOVER_TIMEOUTS = Counter(
    "memstream_takeover_timeouts",
    "Times the first consolidation on a newly assigned partition stopped waiting for the index",
)
FORGOTTEN_RECORDS = Counter(
    "memstream_forgotten_records",
    "Records of a deleted user dropped because they were sent or made before the deletion",
    ["stage"],
)
