"""Recall's items say when what they tell happened (issue 30): a unit's semantic time, through the
worker's wire and the gateway's response, not the time it was said."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import orjson

from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.settings import Settings, StorageSettings
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.gateway.routes.recall import recall_item
from memstream.core.memories import memories_spec
from memstream.core.recall.engine import Ask, recall
from memstream.core.recall.tools import run_tool
from memstream.core.recall.wire import recalled_from_wire, recalled_to_wire
from memstream.core.unit_views import views_spec
from memstream.core.units import units_spec
from memstream.schemas.events import Message, Turn
from memstream.streams.ingest import Incoming, IngestProcessor

MONDAY = datetime(2023, 5, 8, 18, 30, tzinfo=UTC)
SAID = {
    "race": ("I ran my first 10k race last weekend, in the rain.", MONDAY),
    "plain": ("My favourite trainers are the blue Pegasus pair.", datetime(2023, 5, 9, 9, 0, tzinfo=UTC)),
}


def ingested(tmp_path: Path) -> tuple[EdgeShards, str]:
    """The turns of SAID ingested by the pipeline's processor; the store and the user's key."""
    turns = [
        Turn(
            tenant="t",
            user_id="ana",
            session_id="s1",
            turn_id=turn_id,
            ts=ts,
            timezone="UTC",
            messages=[Message(speaker="Ana", content=text)],
        )
        for turn_id, (text, ts) in SAID.items()
    ]
    shards = EdgeShards(tmp_path / "store", [units_spec(384), views_spec(384), memories_spec(384)])
    asyncio.run(
        IngestProcessor(
            Settings(storage=StorageSettings(data_dir=tmp_path)), HashingEmbedder(384), shards
        ).process([Incoming(t.to_bytes(), t.key, "turns", 0, n) for n, t in enumerate(turns)], {})
    )
    return shards, turns[0].key


def recalled_through_the_gateway(tmp_path: Path, query: str) -> dict[str, dict[str, object]]:
    """A recall as the gateway runs it with the embedded store: the worker's answer, over the wire, into
    the API's items (as JSON), by turn."""
    shards, user_key = ingested(tmp_path)
    embedder = HashingEmbedder(384)
    ask = Ask(
        user_key=user_key,
        query=query,
        now=datetime(2023, 5, 10, 12, 0, tzinfo=UTC),
        budget_tokens=500,
        zone="UTC",
        levels=None,
    )
    worker = recall(shards.get(0), embedder, ask)
    at_gateway = recalled_from_wire(orjson.loads(orjson.dumps(recalled_to_wire(worker))))
    items = [orjson.loads(recall_item(item, score).model_dump_json()) for item, score in at_gateway.items]
    return {item["source_turn_ids"][0]: item for item in items}


def test_a_unit_said_on_monday_about_last_weekend_is_dated_that_weekend(tmp_path: Path) -> None:
    items = recalled_through_the_gateway(tmp_path, "What did I run last weekend?")
    race = items["race"]
    assert race["dialogue_time"] == "2023-05-08T18:30:00Z"  # said on Monday
    assert (race["event_start"], race["event_end"]) == ("2023-05-06T00:00:00Z", "2023-05-08T00:00:00Z")


def test_a_unit_naming_no_time_happened_when_it_was_said(tmp_path: Path) -> None:
    plain = recalled_through_the_gateway(tmp_path, "Which trainers do I like?")["plain"]
    assert plain["event_start"] == plain["dialogue_time"] == "2023-05-09T09:00:00Z"
    assert plain["event_end"] is None  # an instant


def test_the_tools_date_a_unit_by_the_same_interval_and_filter_by_it(tmp_path: Path) -> None:
    """One vocabulary: a tool's start/end are recall's event_start/event_end, and its time window reads
    them: the weekend finds what Monday's turn said about it, not what was said on the weekend."""
    shards, user_key = ingested(tmp_path)
    weekend = {"start": "2023-05-06T00:00:00Z", "end": "2023-05-08T00:00:00Z", "time_op": "within"}
    found = run_tool(
        "semantic_retrieve", {"query": "race", **weekend}, shards.get(0), HashingEmbedder(384), user_key
    )
    (race,) = found.items
    assert race.source_turn_ids == ["race"]
    assert (race.start.isoformat(), race.end and race.end.isoformat()) == (
        "2023-05-06T00:00:00+00:00",
        "2023-05-08T00:00:00+00:00",
    )
    assert race.recorded_at == MONDAY
