"""``memstream eval consolidation``: how much of what an LLM memory should hold the pipeline's consolidated
memory holds, scored against a LoCoMo-format file's gold annotations, with the baselines in the same run.

**What is measured: the production path.** The command starts ``memstream up`` as a child process on a
fresh temporary directory (embedded Tansu broker, embedded Qdrant Edge store, one worker, a gateway on
127.0.0.1; the configured embedder and writer: extractive without ``MEMSTREAM_LLM_BASE_URL``), produces the
file with ``memstream replay``'s producer (each conversation one user, as ``replay --format locomo`` sends
it), waits until every session window has closed and consolidation settled, reads each user's memory
through the gateway's ``GET /v1/users/{id}/timeline?min_level=1``, and stops the child. Nothing is
consolidated in this process. Two timers are shortened so that the run ends in minutes: the idle close
(``--idle-close``, default 20 s instead of 30 minutes, checked every second), so that each conversation's
last session closes (a session whose turns wait longer than that in the worker closes early, and shows as
a split), and the durative delay (2 s instead of 60 s: when a closed month's topic and persona memories
are written; they are not scored here).

**Scores** (``memstream.apps.consolidation_scoring``), per conversation and over the file:

* ``observations``: gold observations held by level-1 memory (the kinds of ``LEVEL_ONE_KINDS``), by
  facts alone, and by the raw turns at their ``dia_id``s (the reference: what the turns themselves hold);
* ``tokens``: level-1 memory's size against the raw conversation's (turns as ingested), in memstream's
  token count;
* ``sessions``: each session node against its session's gold summary, ROUGE-1 F1 and ROUGE-2 recall, and
  the lead of the same length (the session's raw turns cut to the node's tokens). A session whose
  conversation session made no node scores 0; one that made two nodes (a split) is scored on both texts;
* ``events``: gold events held by the day and week nodes;
* checks: session splits (one conversation session, two or more session nodes) and markup in a
  node's header.

Every per-conversation row carries the counts and per-session scores its aggregates come from
(``aggregate`` recomputes them; ``tests/test_eval_consolidation.py`` does so from a written report), and a
few examples: a gold statement and the memory text that holds most of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from zoneinfo import ZoneInfo

import orjson

from memstream.adapters.broker import free_port
from memstream.adapters.processes import stop_session
from memstream.adapters.settings import Settings
from memstream.apps import consolidation_scoring as sc
from memstream.apps.datasets import locomo_turns, parse_locomo_time, read_records, session_numbers
from memstream.apps.replay import replay
from memstream.apps.status import fetch_status, settled
from memstream.core.recall.rank import tokens
from memstream.core.units import render_text
from memstream.schemas.events import DEFAULT_TENANT

# The memories that count as level-1 memory: what consolidation distils from turns. "observation" is
# listed ahead of the kind (issue 27): it counts as soon as the pipeline writes it.
LEVEL_ONE_KINDS = ("episode", "fact", "observation")
FACTS = ("fact",)
EVENT_KINDS = ("day", "week")
# The worker's counters the report keeps: LLM calls by stage and outcome, its tokens, the
# consolidations by trigger and outcome, the dead letters.
COUNTERS = (
    "memstream_llm_calls",
    "memstream_llm_tokens",
    "memstream_consolidations",
    "memstream_dead_letters",
)
EXAMPLES = 3  # held and missed examples kept per metric and conversation
EXAMPLE_CHARS = 300


@dataclass(frozen=True)
class Statement:
    speaker: str
    text: str
    dia_ids: tuple[str, ...]
    session: int


@dataclass(frozen=True)
class Session:
    number: int
    start: datetime  # naive, as LoCoMo gives it (the pipeline reads it in its default zone)
    lines: tuple[str, ...]  # its raw turns as ingested, "Speaker: text [shares a photo: ...]"
    summary: str | None


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    turns: dict[str, str]  # dia_id -> the turn as ingested ("Speaker: text [shares a photo: ...]")
    observations: tuple[Statement, ...]
    events: tuple[Statement, ...]


@dataclass(frozen=True)
class Node:
    """One memory as the timeline returns it."""

    id: str
    kind: str
    level: int
    text: str
    start: datetime | None


class BadData(ValueError):
    """The file is not in the LoCoMo format."""


def load(path: Path) -> list[Conversation]:
    """The conversations of a LoCoMo-format file with their gold annotations (missing ones: none);
    :class:`BadData` when the file is not in that format."""
    try:
        return _load(path)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadData(f"{path} is not a LoCoMo-format file ({type(exc).__name__}: {exc})") from exc


def _load(path: Path) -> list[Conversation]:
    ingested: dict[str, dict[str, str]] = {}
    for turn in locomo_turns(path):
        ingested.setdefault(turn.user_id, {})[turn.turn_id] = render_text(turn.messages)
    out = []
    for sample in orjson.loads(path.read_bytes()):
        conv = sample["conversation"]
        sessions = []
        for n in session_numbers(conv):
            turns = conv[f"session_{n}"]
            start = parse_locomo_time(conv[f"session_{n}_date_time"])
            summary = sample.get("session_summary", {}).get(f"session_{n}_summary")
            sessions.append(
                Session(
                    n,
                    start,
                    tuple(ingested[sample["sample_id"]][t["dia_id"]] for t in turns),
                    summary or None,
                )
            )
        out.append(
            Conversation(
                sample["sample_id"],
                (conv["speaker_a"], conv["speaker_b"]),
                tuple(sessions),
                ingested.get(sample["sample_id"], {}),
                tuple(_observations(sample.get("observation", {}))),
                tuple(_events(sample.get("event_summary", {}))),
            )
        )
    return out


def sample(
    data: list[dict[str, Any]], conversations: int | None = None, sessions: int | None = None
) -> list[dict[str, Any]]:
    """The first ``conversations`` conversations of a LoCoMo-format file, each cut to its first
    ``sessions`` sessions (None: all): the turns and every gold annotation keyed by a later session
    are left out, so a small run is scored against its own sessions only. The questions are dropped:
    their evidence may lie in a session left out, and this command does not read them."""
    out = []
    for conv in data[:conversations]:
        kept = set(session_numbers(conv["conversation"])[:sessions])
        cut = {
            part: {k: v for k, v in conv[part].items() if _kept(k, kept)}
            for part in ("conversation", "observation", "session_summary", "event_summary")
            if part in conv
        }
        out.append({**conv, **cut, "qa": []})
    return out


def _kept(key: str, sessions: set[int]) -> bool:
    found = re.search(r"session_(\d+)", key)
    return found is None or int(found.group(1)) in sessions


def _session_of(key: str) -> int:
    found = re.search(r"session_(\d+)", key)
    if not found:
        raise ValueError(f"no session number in {key!r}")
    return int(found.group(1))


def _observations(gold: dict[str, Any]) -> Iterable[Statement]:
    for key, by_speaker in gold.items():
        for speaker, items in by_speaker.items():
            for text, *ids in items:
                # dia_ids come as "D1:3", a list of them, or "D8:6; D9:17": read every D<n>:<m>.
                found = re.findall(r"D\d+:\d+", " ".join(map(str, ids)))
                yield Statement(speaker, str(text), tuple(dict.fromkeys(found)), _session_of(key))


def _events(gold: dict[str, Any]) -> Iterable[Statement]:
    for key, by_speaker in gold.items():
        for speaker, items in by_speaker.items():
            if speaker == "date" or not isinstance(items, list):
                continue
            for text in items:
                yield Statement(speaker, str(text), (), _session_of(key))


# --- scoring: pure, over a conversation and its nodes ------------------------------------------------


class _Examples:
    """The first few statements held and missed by one system, with the text that held most of each."""

    def __init__(self) -> None:
        self.held: list[dict[str, Any]] = []
        self.missed: list[dict[str, Any]] = []

    def add(self, s: Statement, match: sc.Match, texts: Sequence[str]) -> None:
        examples = self.held if sc.held(match) else self.missed
        if len(examples) < EXAMPLES:
            best = texts[match.best][:EXAMPLE_CHARS] if match.best is not None else None
            examples.append(
                {"statement": s.text, "speaker": s.speaker, "share": round(match.share, 4), "best": best}
            )

    def as_dict(self) -> dict[str, list[dict[str, Any]]]:
        return {"held": self.held, "missed": self.missed}


class _Texts:
    """Memory texts and their distinct words, matched against statements."""

    def __init__(self, texts: Sequence[str], examples: _Examples) -> None:
        self.texts = list(texts)
        self.words = [frozenset(sc.words(t)) for t in texts]
        self.examples = examples

    def holds(self, s: Statement, wanted: frozenset[str]) -> bool:
        match = sc.best_match(wanted, self.words)
        self.examples.add(s, match, self.texts)
        return sc.held(match)


def _held_counts(
    statements: Iterable[Statement], systems: dict[str, Callable[[Statement], _Texts]]
) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    unscored = 0
    for s in statements:
        wanted = sc.statement_words(s.text, s.speaker)
        if not wanted:
            unscored += 1
            continue
        counts["scored"] += 1
        for name, texts_for in systems.items():
            counts[name] += texts_for(s).holds(s, wanted)
    return {"scored": counts["scored"], "unscored": unscored, **{name: counts[name] for name in systems}}


def assign_sessions(conv: Conversation, nodes: Sequence[Node], zone: ZoneInfo) -> dict[int, list[Node]]:
    """Session nodes by the conversation session they summarise: the last session starting at or before
    the node's start (session nodes start at their first turn); nodes before every session: key 0."""
    starts = [(s.start.replace(tzinfo=zone), s.number) for s in conv.sessions]
    out: dict[int, list[Node]] = {}
    for node in nodes:
        if node.kind != "session" or node.start is None:
            continue
        number = max((n for start, n in starts if start <= node.start), default=0)
        out.setdefault(number, []).append(node)
    return out


def score_conversation(conv: Conversation, nodes: Sequence[Node], zone: ZoneInfo) -> dict[str, Any]:
    """One conversation's row: every count and per-session score the aggregates are computed from."""
    level_one = [n for n in nodes if n.kind in LEVEL_ONE_KINDS]
    examples = {name: _Examples() for name in ("level_one", "facts", "raw_turns", "day_week")}
    memory = _Texts([n.text for n in level_one], examples["level_one"])
    facts = _Texts([n.text for n in level_one if n.kind in FACTS], examples["facts"])

    def raw(s: Statement) -> _Texts:  # the reference: each statement against its own turns
        return _Texts([conv.turns[i] for i in s.dia_ids if i in conv.turns], examples["raw_turns"])

    observations = _held_counts(
        conv.observations, {"level_one": lambda _: memory, "facts": lambda _: facts, "raw_turns": raw}
    )
    summaries = _Texts([n.text for n in nodes if n.kind in EVENT_KINDS], examples["day_week"])
    events = _held_counts(conv.events, {"day_week": lambda _: summaries})
    by_session = assign_sessions(conv, nodes, zone)
    sessions = [_session_row(s, by_session.get(s.number, [])) for s in conv.sessions if s.summary]
    return {
        "sample_id": conv.sample_id,
        "turns": len(conv.turns),
        "sessions": len(conv.sessions),
        "memories_by_kind": dict(sorted(Counter(n.kind for n in nodes).items())),
        "tokens": {
            "level_one": sum(tokens(n.text) for n in level_one),
            "raw": sum(tokens(t) for t in conv.turns.values()),
        },
        "observations": observations,
        "events": events,
        "session_scores": sessions,
        "splits": [
            {"session": n, "nodes": [x.id for x in group]}
            for n, group in sorted(by_session.items())
            if len(group) > 1 and n
        ],
        "sessions_without_node": [s.number for s in conv.sessions if s.number not in by_session],
        "markup_headers": [
            {"id": n.id, "kind": n.kind, "header": n.text.split("\n", 1)[0][:EXAMPLE_CHARS]}
            for n in nodes
            if n.level >= 2 and sc.has_markup(n.text)
        ],
        "examples": {
            "observations_held_by_level_one": examples["level_one"].as_dict(),
            "observations_held_by_facts": examples["facts"].as_dict(),
            "observations_held_by_raw_turns": examples["raw_turns"].as_dict(),
            "events_held_by_day_week": examples["day_week"].as_dict(),
        },
    }


def _session_row(session: Session, nodes: Sequence[Node]) -> dict[str, Any]:
    gold = session.summary or ""
    text = "\n".join(n.text for n in nodes)
    lead = sc.lead(session.lines, tokens(text)) if text else ""
    return {
        "session": session.number,
        "nodes": [n.id for n in nodes],
        "tokens": tokens(text) if text else 0,
        "rouge1_f1": round(sc.rouge1_f1(text, gold), 4),
        "rouge2_recall": round(sc.rouge2_recall(text, gold), 4),
        "lead_rouge1_f1": round(sc.rouge1_f1(lead, gold), 4),
        "lead_rouge2_recall": round(sc.rouge2_recall(lead, gold), 4),
        "summary": gold,
        "text": text,
    }


def aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The file's figures from its rows: shares over every scored statement, means over every gold
    session summary, tokens per conversation."""

    def total(section: str, field: str) -> int:
        return sum(int(r[section][field]) for r in rows)

    sessions = [s for r in rows for s in r["session_scores"]]
    kinds: Counter[str] = Counter()
    for r in rows:
        kinds.update(r["memories_by_kind"])
    markup = Counter(m["kind"] for r in rows for m in r["markup_headers"])
    return {
        "conversations": len(rows),
        "observations": {
            "scored": total("observations", "scored"),
            "held_by_level_one": sc.share(
                total("observations", "level_one"), total("observations", "scored")
            ),
            "held_by_facts": sc.share(total("observations", "facts"), total("observations", "scored")),
            "held_by_raw_turns": sc.share(
                total("observations", "raw_turns"), total("observations", "scored")
            ),
        },
        "tokens_per_conversation": {
            "level_one": sc.mean([r["tokens"]["level_one"] for r in rows]),
            "raw": sc.mean([r["tokens"]["raw"] for r in rows]),
        },
        "sessions": {
            "scored": len(sessions),
            **{k: sc.mean([s[k] for s in sessions]) for k in _SESSION_SCORES},
        },
        "events": {
            "scored": total("events", "scored"),
            "held_by_day_week": sc.share(total("events", "day_week"), total("events", "scored")),
        },
        "session_splits": sum(len(r["splits"]) for r in rows),
        "sessions_without_node": sum(len(r["sessions_without_node"]) for r in rows),
        "markup_headers": dict(sorted(markup.items())),
        "memories_by_kind": dict(sorted(kinds.items())),
    }


_SESSION_SCORES = ("rouge1_f1", "rouge2_recall", "lead_rouge1_f1", "lead_rouge2_recall")


def report(
    path: Path,
    conversations: Sequence[Conversation],
    timelines: dict[str, list[Node]],
    meta: dict[str, Any],
    zone: ZoneInfo,
) -> dict[str, Any]:
    rows = [score_conversation(c, timelines.get(c.sample_id, []), zone) for c in conversations]
    return {"data": str(path), **meta, "scores": aggregate(rows), "per_conversation": rows}


# --- the production path: memstream up, replay, the gateway's timeline ------------------------------


def _note(message: str, out: TextIO) -> None:
    print(f"[eval consolidation] {message}", file=out, flush=True)


def run_pipeline(
    settings: Settings, path: Path, idle_close_s: float, timeout_s: float, out: TextIO
) -> tuple[dict[str, list[Node]], dict[str, Any]]:
    """Replay ``path`` through a fresh ``memstream up`` and read every user's memory through its gateway:
    the nodes per user id, and what ran (see the module docstring)."""
    # The default tenant: the one the fresh gateway (no API keys) reads.
    records = list(read_records(path, "locomo", tenant=DEFAULT_TENANT))
    users = list(dict.fromkeys(_user_of(r.value) for r in records))
    sessions = len({(r.key, orjson.loads(r.value)["session_id"]) for r in records})
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="memstream-eval-consolidation-") as tmp:
        work = Path(tmp)
        fresh: dict[str, Any] = {
            "data_dir": work / "data",
            "bootstrap_servers": None,
            "embedded_broker_port": free_port(),
            "store": "edge",
            "workers": 1,
            "gateway_port": free_port(),
            "gateway_host": "127.0.0.1",
            "metrics_port": free_port(),
            "metrics_host": "127.0.0.1",
            "api_keys": None,
            "idle_close_s": idle_close_s,
            "idle_check_interval_s": 1.0,
            "durative_delay_s": 2.0,
        }
        child = settings.replace(**fresh)
        log = work / "pipeline.log"
        started = time.monotonic()
        proc = _start_up(fresh, log)
        try:
            _wait(
                lambda: fetch_status(child)["partitions"] == list(range(child.kafka.topic_partitions)),
                deadline,
                "the pipeline to start",
                proc,
                log,
                out,
            )
            _note(
                f"pipeline up after {time.monotonic() - started:.0f}s; "
                f"replaying {len(records)} turns of {len(users)} users",
                out,
            )
            result = asyncio.run(
                replay(
                    child,
                    records,
                    wait=True,
                    wait_timeout=max(1.0, deadline - time.monotonic()),
                    progress=False,
                )
            )
            if not result.processed:
                raise SystemExit(f"memstream: the pipeline did not process every turn in time; see {log}")
            ingested = time.monotonic()
            _note(
                f"every turn ingested after {ingested - started:.0f}s; "
                f"waiting for {sessions} sessions to close",
                out,
            )
            _wait(
                lambda: (
                    time.monotonic() - ingested >= idle_close_s + 1
                    and _sessions_closed(fetch_status(child)) >= sessions
                ),
                deadline,
                "every session window to close",
                proc,
                log,
                out,
            )
            _wait(lambda: asyncio.run(settled(child)), deadline, "consolidation to settle", proc, log, out)
            _note(f"settled after {time.monotonic() - started:.0f}s; reading the timelines", out)
            settled_s = time.monotonic() - started
            counters = fetch_status(child)
            timelines = {u: _timeline(child, u) for u in users}
        finally:
            stop_session(proc)
    meta = {
        "path": "memstream up (embedded broker and Qdrant Edge, 1 worker) + replay "
        "+ GET /v1/users/{id}/timeline?min_level=1",
        "embedder": settings.embedding.embedder,
        "writer": "llm" if settings.llm.llm_base_url else "extractive",
        "idle_close_s": idle_close_s,
        "level_one_kinds": list(LEVEL_ONE_KINDS),
        "settled_s": round(settled_s, 1),  # from starting memstream up until consolidation settled
        # What the consolidation took, as the worker counted it once settled (label values joined by "/").
        "counters": {name: counters.get(name, {}) for name in COUNTERS},
    }
    return timelines, meta


def _user_of(value: bytes) -> str:
    return str(orjson.loads(value)["user_id"])


def _sessions_closed(status: dict[str, Any]) -> int:
    closed = status.get("memstream_windows_closed", {})
    return sum(int(n) for label, n in closed.items() if label.startswith("session/"))


def _start_up(fresh: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    """``memstream up`` with this process's settings (embedder, writer, thresholds...), except what
    points at outside infrastructure, and ``fresh``."""
    env = {k: v for k, v in os.environ.items() if k not in _OUTSIDE}
    env.update({f"MEMSTREAM_{k.upper()}": str(v) for k, v in fresh.items() if v is not None})
    with log.open("wb") as fh:
        # Its own session, so that stopping it stops the broker and worker it starts, and nothing else.
        return subprocess.Popen(
            [sys.executable, "-m", "memstream.apps.cli", "up"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


# Settings that would attach the fresh pipeline to a running deployment: never passed on.
_OUTSIDE = frozenset(
    f"MEMSTREAM_{name.upper()}"
    for name in (
        "bootstrap_servers", "tansu_quirks", "topic_replication_factor", "kafka_security_protocol",
        "kafka_sasl_mechanism", "kafka_sasl_username", "kafka_sasl_password", "kafka_ssl_cafile",
        "kafka_ssl_certfile", "kafka_ssl_keyfile", "qdrant_url", "qdrant_api_key", "api_keys", "roles",
        "worker_index", "worker_urls",
    )
)  # fmt: skip


def _wait(
    predicate: Callable[[], bool],
    deadline: float,
    what: str,
    proc: subprocess.Popen[bytes],
    log: Path,
    out: TextIO,
) -> None:
    said = time.monotonic()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"memstream: memstream up exited ({proc.returncode}); see {log}")
        with contextlib.suppress(Exception):  # not up yet, or between two polls: ask again
            if predicate():
                return
        if time.monotonic() - said >= 10:
            _note(f"still waiting for {what}", out)
            said = time.monotonic()
        time.sleep(0.5)
    raise SystemExit(f"memstream: timed out waiting for {what}; see {log}")


def _timeline(child: Settings, user_id: str) -> list[Node]:
    user = urllib.parse.quote(user_id, safe="")
    url = f"http://127.0.0.1:{child.gateway.gateway_port}/v1/users/{user}/timeline?min_level=1"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = orjson.loads(resp.read())
    return [
        Node(
            n["id"],
            n["kind"],
            int(n["level"]),
            n["text"],
            datetime.fromisoformat(n["start"]) if n.get("start") else None,
        )
        for n in body["nodes"]
    ]


def evaluate(
    settings: Settings,
    path: Path,
    idle_close_s: float = 20.0,
    timeout_s: float = 1800.0,
    out: TextIO = sys.stderr,
    conversations: int | None = None,
    sessions: int | None = None,
) -> dict[str, Any]:
    """The report on ``path``, or on its :func:`sample` when ``conversations`` or ``sessions`` is given."""
    if conversations is None and sessions is None:
        return _evaluate(settings, path, path, idle_close_s, timeout_s, out)
    with tempfile.TemporaryDirectory(prefix="memstream-eval-sample-") as tmp:
        part = Path(tmp) / path.name
        try:
            data = orjson.loads(path.read_bytes())
            part.write_bytes(orjson.dumps(sample(data, conversations, sessions)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadData(f"{path} is not a LoCoMo-format file ({type(exc).__name__}: {exc})") from exc
        rep = _evaluate(settings, path, part, idle_close_s, timeout_s, out)
    return {**rep, "sample": {"conversations": conversations, "sessions": sessions}}


def _evaluate(
    settings: Settings, path: Path, data: Path, idle_close_s: float, timeout_s: float, out: TextIO
) -> dict[str, Any]:
    conversations = load(data)
    timelines, meta = run_pipeline(settings, data, idle_close_s, timeout_s, out)
    return report(path, conversations, timelines, meta, ZoneInfo(settings.windows.default_timezone))


# --- the table -----------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _num(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{scale * value:,.{digits}f}"


def format_table(rep: dict[str, Any]) -> str:
    s = rep["scores"]
    obs, ses, tok = s["observations"], s["sessions"], s["tokens_per_conversation"]
    rows = [
        (
            "gold observations held by level-1 memory",
            _pct(obs["held_by_level_one"]),
            f"raw turns at their dia_ids: {_pct(obs['held_by_raw_turns'])}",
        ),
        ("... by facts alone", _pct(obs["held_by_facts"]), ""),
        (
            "level-1 memory, tokens per conversation",
            _num(tok["level_one"], digits=0),
            f"raw conversation: {_num(tok['raw'], digits=0)}",
        ),
        (
            "session nodes vs gold summaries, ROUGE-1 F1",
            _num(ses["rouge1_f1"], 100),
            f"lead of the same length: {_num(ses['lead_rouge1_f1'], 100)}",
        ),
        (
            "... ROUGE-2 recall",
            _num(ses["rouge2_recall"], 100),
            f"lead: {_num(ses['lead_rouge2_recall'], 100)}",
        ),
        ("gold events held by day + week nodes", _pct(s["events"]["held_by_day_week"]), ""),
        (
            "session splits (one session, 2+ nodes)",
            str(s["session_splits"]),
            f"sessions without a node: {s['sessions_without_node']}",
        ),
        (
            "headers with markup",
            str(sum(s["markup_headers"].values())),
            ", ".join(f"{k} {v}" for k, v in s["markup_headers"].items()),
        ),
    ]
    head = (
        f"{rep['data']}: {s['conversations']} conversations, {obs['scored']} observations, "
        f"{ses['scored']} session summaries, {s['events']['scored']} events "
        f"(writer {rep['writer']}, embedder {rep['embedder']}; "
        f"level-1 kinds {', '.join(rep['level_one_kinds'])})\n"
        f"measured through: {rep['path']}; memories {s['memories_by_kind']}"
    )
    lines = [head, "", "| what | memstream | reference in the same run |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)
