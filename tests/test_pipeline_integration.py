"""The whole ingest pipeline against the real Tansu broker and a real `memstream up` process.

One run replays a generated set, LoCoMo (when present) and every kind of bad input, waits until
the pipeline has committed past all of it, lets idle windows close, stops the worker, and then
reads what it produced: the units collection (opened directly) and the output topics.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from memstream.adapters.broker import Broker
from memstream.adapters.kafka import read_topic, settled
from memstream.apps.datasets import RawRecord, read_records
from memstream.apps.replay import replay
from memstream.apps.sample_conversations import generate
from memstream.core.tree import covers
from memstream.schemas.events import (
    MAX_CONTENT_CHARS,
    ConsolidationRequest,
    DeadLetter,
    Turn,
    Unit,
    WindowClosed,
)
from memstream.schemas.memory import Memory, MemoryKind
from memstream.schemas.topics import CONSOLIDATION, DEAD_LETTER, WINDOWS
from tests.conftest import (
    LOCOMO,
    Pipeline,
    each_worker_owns_a_partition,
    make_pipeline,
    small_talk_requests,
    stored,
    wait_for,
)

pytestmark = pytest.mark.integration


def turn(
    turn_id: str, content: str = "I went hiking in the Alps last weekend.", **over: object
) -> dict[str, object]:
    t: dict[str, object] = {
        "tenant": "bad",
        "user_id": "mallory",
        "session_id": "s1",
        "turn_id": turn_id,
        "ts": "2025-03-03T10:00:00Z",
        "messages": [{"speaker": "Mallory", "role": "user", "content": content}],
    }
    t.update(over)
    return t


def rec(obj: object) -> RawRecord:
    return RawRecord("bad/mallory", obj if isinstance(obj, bytes) else orjson.dumps(obj))


# Each bad record is followed by a good one: the good ones must all be stored.
BAD_INPUTS: list[tuple[str, bytes]] = [
    ("malformed_json", b'{"tenant": "bad", "user_id": '),
    ("missing_field", orjson.dumps({k: v for k, v in turn("m").items() if k != "session_id"})),
    ("wrong_type", orjson.dumps(turn("w", messages="not a list"))),
    ("invalid_timestamp", orjson.dumps(turn("n", ts=12.5))),
    (
        "empty_text",
        orjson.dumps(turn("e", content="  \n ")),
    ),
    ("text_too_long", orjson.dumps(turn("o", content="x" * (MAX_CONTENT_CHARS + 1)))),
    ("invalid_timestamp", orjson.dumps(turn("i", ts="last tuesday"))),
    ("timestamp_out_of_range", orjson.dumps(turn("f", ts="2999-01-01T00:00:00Z"))),
    ("timestamp_out_of_range", orjson.dumps(turn("p", ts="1066-10-14T09:00:00Z"))),
    ("too_large", b'{"pad": "' + b"y" * 300_000 + b'"}'),
]


@dataclass
class Run:
    pipeline: Pipeline
    expected: dict[str, Turn]  # unit payload key -> turn
    units: list[Unit]
    memories: list[Memory]
    consolidation: list[ConsolidationRequest]
    windows: list[WindowClosed]
    dead_letters: list[DeadLetter]
    status: dict[str, Any]  # `memstream status --json` of the running pipeline


@pytest.fixture(scope="module")
def run(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("pipeline")
    # Two worker processes share the two partitions: the path a scaled-out deployment takes.
    pipeline = make_pipeline(broker, tmp, MEMSTREAM_WORKERS="2").start()
    settings = pipeline.settings
    try:
        # The duplicate count below is the test's own redeliveries only: no rebalance mid-replay.
        pipeline.wait(lambda: each_worker_owns_a_partition(settings), 120, "both workers to own a partition")
        generated = list(generate(users=4, days=40, seed=11))
        records = [RawRecord(t.key, t.to_bytes()) for t in generated]
        expected = {f"{t.key}/{t.turn_id}": t for t in generated}
        if LOCOMO.exists():
            # Through the CLI, as a user would run it.
            cli = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "memstream.apps.cli",
                    "replay",
                    str(LOCOMO),
                    "--format",
                    "locomo",
                    "--tenant",  # its own tenant, apart from the sample set's
                    "locomo",
                    "--wait",
                    "--timeout",
                    "240",
                ],
                env=pipeline.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert cli.returncode == 0, cli.stderr + pipeline.logs()
            assert "processed by the pipeline" in cli.stdout
            for r in read_records(LOCOMO, "locomo", tenant="locomo"):
                t = Turn.from_bytes(r.value)
                expected[f"{t.key}/{t.turn_id}"] = t
        for i, (_, bad) in enumerate(BAD_INPUTS):
            records.append(rec(bad))
            good = turn(f"good-{i}", ts=f"2025-03-03T10:{i:02d}:00Z")
            records.append(rec(good))
            expected[f"bad/mallory/good-{i}"] = Turn.model_validate(good)
        # A reused turn_id in the same replay (same batch), and a plain redelivery.
        records.append(rec(turn("good-0", content="Something else entirely.", ts="2025-03-03T10:00:00Z")))
        records.append(rec(turn("good-1", ts="2025-03-03T10:01:00Z")))

        report = asyncio.run(replay(settings, records, wait=True, wait_timeout=240, progress=False))
        assert report.processed, pipeline.logs()
        # Across batches: reuse of an already stored turn_id, then a redelivery of the same turn.
        again = [
            rec(turn("good-2", content="A different story.", ts="2025-03-03T10:02:00Z")),
            rec(turn("good-3", ts="2025-03-03T10:03:00Z")),
        ]
        report = asyncio.run(replay(settings, again, wait=True, wait_timeout=120, progress=False))
        assert report.processed, pipeline.logs()

        def windows_idle_closed() -> list[tuple[bytes | None, bytes]]:
            out = asyncio.run(read_topic(settings, settings.kafka.topic(WINDOWS.name)))
            return [w for w in out if b'"reason":"idle"' in w[1]]

        wait_for(windows_idle_closed, 60, "idle windows to close")
        wait_for(lambda: asyncio.run(settled(settings)), 120, "consolidation")
        status = subprocess.run(
            [sys.executable, "-m", "memstream.apps.cli", "status", "--json"],
            env=pipeline.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
    finally:
        pipeline.stop()

    units, memories = stored(settings)

    def topic(name: str) -> list[bytes]:
        return [v for _, v in asyncio.run(read_topic(settings, settings.kafka.topic(name)))]

    return Run(
        pipeline=pipeline,
        status=orjson.loads(status.stdout),
        expected=expected,
        units=units,
        memories=memories,
        consolidation=[ConsolidationRequest.from_bytes(v) for v in topic(CONSOLIDATION.name)],
        windows=[WindowClosed.from_bytes(v) for v in topic(WINDOWS.name)],
        dead_letters=[DeadLetter.from_bytes(v) for v in topic(DEAD_LETTER.name)],
    )


def test_every_turn_is_stored_exactly_once(run: Run) -> None:
    keys = Counter(f"{u.key}/{u.turn_id}" for u in run.units)
    assert set(keys) == set(run.expected)
    assert max(keys.values()) == 1
    assert len(run.units) == len(run.expected)


def test_units_carry_text_time_and_event_times(run: Run) -> None:
    by_key = {f"{u.key}/{u.turn_id}": u for u in run.units}
    for key, t in run.expected.items():
        unit = by_key[key]
        assert unit.session_id == t.session_id
        assert unit.text.endswith(t.messages[-1].content)
    with_times = [u for u in run.units if u.event_times]
    assert len(with_times) > len(run.units) * 0.2  # the generated set mentions times often


def test_consolidation_requests_fire_per_user_on_recurring_topics(run: Run) -> None:
    assert run.consolidation
    stored = {u.unit_id: u for u in run.units}
    for req in run.consolidation:
        members = [stored[i] for i in req.unit_ids]
        assert {m.user_id for m in members} == {req.user_id}  # never across users
        assert len(req.unit_ids) >= req.theta_count + 1
        assert all(s >= req.theta_sim for s in req.similarities)
    # The same unit never triggers twice, and no cluster fires twice.
    assert len({r.trigger_unit_id for r in run.consolidation}) == len(run.consolidation)
    assert len({r.request_id for r in run.consolidation}) == len(run.consolidation)


def test_windows_close_at_every_level(run: Run) -> None:
    levels = Counter(w.level.value for w in run.windows)
    assert set(levels) == {"session", "day", "week", "month"}
    reasons = {w.reason.value for w in run.windows}
    assert {"new_session", "boundary", "idle"} <= reasons
    ids = [w.window_id for w in run.windows]
    assert len(ids) == len(set(ids))


def test_each_bad_input_is_dead_lettered_with_its_reason(run: Run) -> None:
    reasons = Counter(d.reason for d in run.dead_letters)
    for reason, _ in BAD_INPUTS:
        assert reasons[reason] >= 1, reasons
    originals = {d.original for d in run.dead_letters}
    for _, bad in BAD_INPUTS:
        assert bad in originals  # the original bytes are kept whole
    for d in run.dead_letters:
        assert d.detail and d.source_topic.endswith("turns") and d.offset is not None


def test_reused_turn_id_is_dead_lettered_never_overwritten(run: Run) -> None:
    reused = [d for d in run.dead_letters if d.reason == "turn_id_reused"]
    assert len(reused) == 2  # one within a batch, one against the stored unit
    by_key = {f"{u.key}/{u.turn_id}": u for u in run.units}
    assert "hiking" in by_key["bad/mallory/good-0"].text
    assert "hiking" in by_key["bad/mallory/good-2"].text


def test_redelivered_turns_are_not_dead_letters(run: Run) -> None:
    assert len(run.dead_letters) == len(BAD_INPUTS) + 2


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo dev data not present in ../shared")
def test_locomo_conversations_fire_consolidation_and_windows(run: Run) -> None:
    locomo_users = {t.user_id for t in run.expected.values() if t.tenant == "locomo"}
    fired = {r.user_id for r in run.consolidation if r.tenant == "locomo"}
    assert fired == locomo_users
    closed = {(w.user_id, w.level.value) for w in run.windows if w.tenant == "locomo"}
    for user in locomo_users:
        assert {(user, lvl) for lvl in ("session", "day", "week", "month")} <= closed


def test_status_reports_what_the_topics_and_store_hold(run: Run) -> None:
    st = run.status
    assert st["workers"] == 2
    assert st["partitions"] == [0, 1]  # each partition owned by exactly one worker
    assert st["units_in_store"] == len(run.expected)
    assert sum(st["memstream_units_stored"].values()) == len(run.expected)
    assert st["memstream_consolidation_requests"]["recurrence"] == len(run.consolidation)
    assert sum(st["memstream_windows_closed"].values()) == len(run.windows)
    assert sum(st["memstream_dead_letters"].values()) == len(run.dead_letters)
    assert st["memstream_duplicate_turns"]["all"] == 2  # the two plain redeliveries
    assert sum(st["lag"].values()) == 0


def test_worker_logged_no_errors(run: Run) -> None:
    logs = Path(run.pipeline.log).read_text(errors="replace")
    assert "Traceback" not in logs, logs[-3000:]


def test_extractive_consolidation_builds_episodes_facts_and_the_tree(run: Run) -> None:
    """No LLM configured: the extractive writer consolidates every request and closed window."""
    by_kind = Counter(m.kind for m in run.memories)
    kinds = (MemoryKind.EPISODE, MemoryKind.FACT, MemoryKind.OBSERVATION, MemoryKind.SESSION, MemoryKind.DAY)
    for kind in (*kinds, MemoryKind.WEEK):
        assert by_kind[kind] > 0, by_kind
    assert all(m.extractive and m.model is None for m in run.memories)
    folded = {r for m in run.memories if m.kind == MemoryKind.EPISODE for r in m.request_ids}
    small_talk = small_talk_requests(run.consolidation, run.units)
    assert folded == {r.request_id for r in run.consolidation} - small_talk  # small talk only: nothing
    known_turns = {t.turn_id for t in run.expected.values()}
    for m in run.memories:
        assert set(m.source_turn_ids) <= known_turns
    if LOCOMO.exists():  # the LoCoMo conversations get episodes, facts and a tree too
        locomo = Counter(m.kind for m in run.memories if m.tenant == "locomo")
        assert locomo[MemoryKind.EPISODE] and locomo[MemoryKind.FACT] and locomo[MemoryKind.SESSION]
        assert locomo[MemoryKind.OBSERVATION]
        assert locomo[MemoryKind.PROFILE] and locomo[MemoryKind.TOPIC] and locomo[MemoryKind.PERSONA]


def test_tree_nodes_cover_their_children(run: Run) -> None:
    by_id = {m.memory_id: m for m in run.memories}
    parents = [m for m in run.memories if m.kind in (MemoryKind.DAY, MemoryKind.WEEK, MemoryKind.PROFILE)]
    assert parents
    for parent in parents:
        for child_id in parent.children:
            child = by_id[child_id]
            assert covers(parent, child) and child.parent_id == parent.memory_id
