"""Which partitions' stores a worker holds through rebalances (memstream/streams/partitions.py): those of
every data topic it is assigned, none of another topic's, and none once revoked."""

from __future__ import annotations

from pathlib import Path

import faust
from faust.types import TP

from memstream.adapters.settings import Settings, StorageSettings
from memstream.schemas.topics import CONSOLIDATION, MEMORY_UPDATES, TURNS
from memstream.streams.faust_adapter import faust_settings
from memstream.streams.partitions import Partitions


def test_a_worker_holds_the_stores_of_the_data_partitions_it_is_assigned_until_revoked(
    tmp_path: Path,
) -> None:
    settings = Settings(storage=StorageSettings(data_dir=tmp_path))
    partitions = Partitions(
        faust.App("partitions-test", **faust_settings(settings)), settings.kafka, lambda: 0.0, 60.0
    )
    turns, updates = settings.kafka.topic(TURNS.name), settings.kafka.topic(MEMORY_UPDATES.name)
    consolidation = settings.kafka.topic(CONSOLIDATION.name)
    changelog = f"{settings.kafka.app_id}-window-state-changelog"  # a table's changelog: no store of its own

    held = partitions.take({TP(turns, 0), TP(updates, 2), TP(consolidation, 0), TP(changelog, 5)})
    assert held == {0, 2} == partitions.held()

    assert partitions.revoke({TP(updates, 2), TP(changelog, 5)}) == [2]
    assert partitions.held() == {0}

    assert partitions.take({TP(turns, 1)}) == {1}  # an assignment replaces what was held
    held_now = partitions.held()
    held_now.add(7)  # a copy: the caller cannot change what the worker holds
    assert partitions.held() == {1}
