"""Forgetting a user, one path for the gateway's ``DELETE /v1/users/{user_id}`` and for
``memstream forget``; and finding the users stored before user ids had to be one URL path segment
(memstream.schemas.events ``Identifier``), which no user route can address, so that an operator can erase
them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer
from pydantic import TypeAdapter, ValidationError

from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import by_key, client_kwargs, partition_for
from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import Shards, all_stores
from memstream.apps.gateway.auth import parse_keys
from memstream.apps.gateway.stores import gateway_shards
from memstream.core.forgetting import erase_user
from memstream.core.memories import MEMORIES
from memstream.core.store import Filter, VectorStore, scroll_all
from memstream.core.unit_views import UNIT_VIEWS
from memstream.core.units import TENANT_FIELD, UNITS, USER_FIELD
from memstream.embedded_store.remote_store import RemoteStore
from memstream.schemas.events import DEFAULT_TENANT, Identifier, Tombstone, partition_key
from memstream.schemas.topics import TOMBSTONES

ERASED = (UNITS, MEMORIES, UNIT_VIEWS)
_ADDRESSABLE: TypeAdapter[str] = TypeAdapter(Identifier)


async def forget_user(
    store: VectorStore, producer: AIOKafkaProducer, topic: str, tenant: str, user_id: str
) -> Tombstone:
    """Delete every unit and memory of ``tenant/user_id`` from ``store`` (the user's partition),
    then record the tombstone on ``topic`` under the user's key, so that the workers drop their
    state of the user and whatever of theirs is still on its way (memstream/core/forgetting.py)."""
    key = partition_key(tenant, user_id)
    units, memories, _ = await asyncio.to_thread(erase_user, store, key, ERASED)
    stone = Tombstone(
        tenant=tenant, user_id=user_id, deleted_at=datetime.now(UTC), units=units, memories=memories
    )
    await producer.send_and_wait(topic, stone.to_bytes(), key=key.encode())
    return stone


def addressable(user_id: str) -> bool:
    """Whether POST /v1/turns would accept ``user_id`` now, so the user routes reach it."""
    try:
        _ADDRESSABLE.validate_python(user_id)
    except ValidationError:
        return False
    return True


def split_key(user_key: str) -> tuple[str, str]:
    """``tenant/user_id`` as its two parts: a tenant holds no "/", so the first one separates them."""
    tenant, sep, user_id = user_key.partition("/")
    if not sep or not tenant or not user_id:
        raise ValueError(f"a user key is tenant/user_id, not {user_key!r}")
    return tenant, user_id


def unaddressable(user_keys: Iterable[str]) -> list[str]:
    """The distinct user keys, sorted, whose user id no user route can address."""
    return sorted({k for k in user_keys if not addressable(split_key(k)[1])})


def stored_user_keys(stores: Sequence[VectorStore], tenants: Iterable[str]) -> set[str]:
    """Every user key holding a unit or a memory of one of ``tenants`` (read by tenant: a worker
    refuses a read of a whole partition)."""
    keys: set[str] = set()
    for tenant in tenants:
        mine = Filter(equals={TENANT_FIELD: tenant})
        for store in stores:
            for collection in (UNITS, MEMORIES):
                if isinstance(store, RemoteStore):  # a worker's shard: its keys only, not its texts
                    keys.update(store.user_keys(collection, tenant))
                else:
                    keys.update(hit.payload[USER_FIELD] for hit in scroll_all(store, collection, mine))
    return keys


def configured_tenants(settings: Settings) -> list[str]:
    """The tenants of the API keys, or the one tenant of a gateway without keys."""
    if not settings.gateway.api_keys:
        return [DEFAULT_TENANT]
    return sorted(set(parse_keys(settings.gateway.api_keys.get_secret_value()).values()))


def _shards(settings: Settings) -> Shards:
    # As a gateway reads them: through the workers that own the embedded shards (the pipeline
    # running), or the Qdrant server.
    return gateway_shards(settings, make_embedder(settings.embedding).dim)


def list_users(settings: Settings, tenants: Sequence[str], invalid_only: bool) -> list[str]:
    """The stored user keys of ``tenants``, sorted; only those no user route reaches if ``invalid_only``."""
    shards = _shards(settings)
    try:
        n = settings.kafka.topic_partitions
        # The workers' shards open none here (each partition is its owner's): read every partition.
        stores = all_stores(shards, n) or [shards.get(p) for p in range(n)]
        keys = stored_user_keys(stores, tenants)
    finally:
        shards.close()
    return unaddressable(keys) if invalid_only else sorted(keys)


async def forget_key(settings: Settings, user_key: str) -> Tombstone:
    """``memstream forget``: what DELETE /v1/users/{user_id} does, for any stored user key."""
    tenant, user_id = split_key(user_key)
    shards = _shards(settings)
    producer = AIOKafkaProducer(**client_kwargs(settings), partitioner=by_key, acks="all")
    await producer.start()
    try:
        store = shards.get(partition_for(user_key.encode(), settings.kafka.topic_partitions))
        return await forget_user(store, producer, settings.kafka.topic(TOMBSTONES.name), tenant, user_id)
    finally:
        await producer.stop()
        shards.close()
