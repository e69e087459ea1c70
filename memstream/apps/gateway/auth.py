"""API keys to tenants, and a token bucket per key (or per client address without keys): pure
functions over plain data.

Keys are compared as SHA-256 digests with :func:`hmac.compare_digest` against every configured
key, so neither a key's length nor its position in the table shows in the response time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import TypeVar

import orjson

K = TypeVar("K")
TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def parse_keys(raw: str) -> dict[bytes, str]:
    """``{"<key>": "<tenant>"}`` JSON to {sha256(key): tenant}; ValueError with the reason."""
    try:
        table = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f'MEMSTREAM_API_KEYS is not JSON {{"<key>": "<tenant>"}}: {exc}') from exc
    if not isinstance(table, dict) or not table:
        raise ValueError('MEMSTREAM_API_KEYS must be a non-empty JSON object {"<key>": "<tenant>"}')
    out: dict[bytes, str] = {}
    for key, tenant in table.items():
        if len(key) < 16:
            raise ValueError("an API key is shorter than 16 characters")
        if not isinstance(tenant, str) or not TENANT.match(tenant):
            raise ValueError(f"API key mapped to an invalid tenant id {tenant!r}")
        out[digest(key)] = tenant
    return out


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def tenant_for(keys: dict[bytes, str], presented: str) -> str | None:
    """The tenant of ``presented``, or None; every key is compared, in constant time each."""
    probe = digest(presented)
    found: str | None = None
    for known, tenant in keys.items():
        if hmac.compare_digest(known, probe):
            found = tenant
    return found


@dataclass(frozen=True)
class Bucket:
    tokens: float
    at: float  # monotonic seconds of the last update


def take(bucket: Bucket | None, now: float, rate: float, burst: int) -> tuple[Bucket, float]:
    """Spend one token: the new bucket and 0.0, or the unchanged bucket and the seconds until a
    token is back (the request is refused)."""
    tokens = burst if bucket is None else min(burst, bucket.tokens + (now - bucket.at) * rate)
    if tokens >= 1.0:
        return Bucket(tokens - 1.0, now), 0.0
    return Bucket(tokens, now), (1.0 - tokens) / rate


def full(bucket: Bucket, now: float, rate: float, burst: int) -> bool:
    """Whether ``bucket`` has refilled: forgetting it then changes nothing (a new one starts full)."""
    return bucket.tokens + (now - bucket.at) * rate >= burst


def evict_full(buckets: dict[K, Bucket], now: float, rate: float, burst: int) -> dict[K, Bucket]:
    """The buckets still below their burst: the table holds only callers seen within the last
    ``burst / rate`` seconds, however many distinct ones there were before."""
    return {k: b for k, b in buckets.items() if not full(b, now, rate, burst)}


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The API key of ASGI request headers: ``Authorization: Bearer <key>``, else ``X-API-Key``."""
    found = dict(headers)
    bearer = found.get(b"authorization", b"")
    if bearer[:7].lower() == b"bearer ":
        return bearer[7:].strip().decode("latin-1")
    key = found.get(b"x-api-key")
    return None if key is None else key.decode("latin-1")
