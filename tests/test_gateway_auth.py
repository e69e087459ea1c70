"""API keys and per-key token buckets: pure functions."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstream.apps.gateway.auth import Bucket, parse_keys, take, tenant_for

KEYS = parse_keys(json.dumps({"k" * 20: "acme", "z" * 32: "globex"}))


def test_keys_map_to_their_tenants_and_unknown_keys_to_none() -> None:
    assert tenant_for(KEYS, "k" * 20) == "acme"
    assert tenant_for(KEYS, "z" * 32) == "globex"
    assert tenant_for(KEYS, "k" * 19) is None
    assert tenant_for(KEYS, "") is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "not JSON"),
        ("[]", "non-empty JSON object"),
        ("{}", "non-empty JSON object"),
        ('{"short": "acme"}', "shorter than 16"),
        ('{"aaaaaaaaaaaaaaaaaaaa": "bad tenant!"}', "invalid tenant"),
    ],
)
def test_bad_key_tables_are_clear_errors(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_keys(raw)


def test_the_table_keeps_no_plain_key() -> None:
    assert all(len(k) == 32 and b"k" * 20 not in k for k in KEYS)  # sha256 digests only


def test_a_bucket_allows_its_burst_then_refuses_with_the_wait() -> None:
    bucket = None
    for _ in range(3):
        bucket, wait = take(bucket, 100.0, rate=2.0, burst=3)
        assert wait == 0.0
    bucket, wait = take(bucket, 100.0, rate=2.0, burst=3)
    assert wait == pytest.approx(0.5)
    bucket, wait = take(bucket, 100.5, rate=2.0, burst=3)  # one token back after 1 / rate
    assert wait == 0.0


@given(
    st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), min_size=1, max_size=60),
    st.floats(min_value=0.5, max_value=50),
    st.integers(min_value=1, max_value=20),
)
def test_a_bucket_never_admits_more_than_burst_plus_rate_times_elapsed(
    gaps: list[float], rate: float, burst: int
) -> None:
    bucket: Bucket | None = None
    now, admitted = 0.0, 0
    for gap in gaps:
        now += gap
        bucket, wait = take(bucket, now, rate, burst)
        admitted += wait == 0.0
        assert 0.0 <= bucket.tokens <= burst
    assert admitted <= burst + rate * now + 1e-6
