"""Every bad-input case maps to a clear, stable reason (pure validation, no broker)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import orjson
import pytest

from memstream.core.validation import Rejection, limits_from, validate
from memstream.schemas.events import MAX_CONTENT_CHARS, DeadLetterStage, Turn

LIMITS = limits_from(262_144, "1970-01-01T00:00:00Z", 86_400, ZoneInfo("UTC"))
NOW = datetime(2026, 11, 21, 12, tzinfo=UTC)


def good(**over: object) -> dict[str, object]:
    turn: dict[str, object] = {
        "tenant": "acme",
        "user_id": "u1",
        "session_id": "s1",
        "turn_id": "t1",
        "ts": "2026-11-20T10:00:00",
        "messages": [{"speaker": "Ann", "role": "user", "content": "I ran 10k yesterday."}],
    }
    turn.update(over)
    return turn


def check(value: bytes) -> Turn | Rejection:
    return validate(value, LIMITS, NOW)


def test_valid_turn_passes() -> None:
    assert isinstance(check(orjson.dumps(good())), Turn)


BAD = [
    (b"{not json", "malformed_json", DeadLetterStage.DECODE),
    (b"\xff\xfe\x00garbage", "malformed_json", DeadLetterStage.DECODE),
    (b"[1, 2]", "not_an_object", DeadLetterStage.DECODE),
    (
        orjson.dumps({k: v for k, v in good().items() if k != "user_id"}),
        "missing_field",
        DeadLetterStage.VALIDATE,
    ),
    (orjson.dumps(good(messages="hello")), "wrong_type", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(user_id=42)), "wrong_type", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(ts=1_700_000_000)), "invalid_timestamp", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(ts="1700000000")), "invalid_timestamp", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(messages=[])), "too_short", DeadLetterStage.VALIDATE),
    (
        orjson.dumps(good(messages=[{"speaker": "a", "content": "   "}])),
        "empty_text",
        DeadLetterStage.VALIDATE,
    ),
    (
        orjson.dumps(good(messages=[{"speaker": "a", "content": "x" * (MAX_CONTENT_CHARS + 1)}])),
        "text_too_long",
        DeadLetterStage.VALIDATE,
    ),
    (
        orjson.dumps(good(messages=[{"speaker": "a", "content": "a\x00b"}])),
        "control_characters",
        DeadLetterStage.VALIDATE,
    ),
    (orjson.dumps(good(ts="yesterday-ish")), "invalid_timestamp", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(ts="3024-01-01T00:00:00Z")), "timestamp_out_of_range", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(ts="1912-04-15T02:20:00Z")), "timestamp_out_of_range", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(timezone="Mars/Olympus_Mons")), "unknown_timezone", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(tenant="bad tenant/")), "invalid_identifier", DeadLetterStage.VALIDATE),
    (orjson.dumps(good(surprise=True)), "unknown_field", DeadLetterStage.VALIDATE),
    (b"x" * 300_000, "too_large", DeadLetterStage.DECODE),
    (None, "empty_record", DeadLetterStage.DECODE),
]


@pytest.mark.parametrize(("value", "reason", "stage"), BAD, ids=[b[1] + str(i) for i, b in enumerate(BAD)])
def test_bad_input_is_rejected_with_its_reason(
    value: bytes | None, reason: str, stage: DeadLetterStage
) -> None:
    result = validate(value, LIMITS, NOW)
    assert isinstance(result, Rejection), result
    assert (result.reason, result.stage) == (reason, stage)
    assert result.detail


def test_naive_ts_is_read_in_the_turns_zone_for_the_future_check() -> None:
    strict = limits_from(262_144, "1970-01-01T00:00:00Z", 0, ZoneInfo("UTC"))
    # 23:00 in Auckland on the 21st is 10:00 UTC: not in the future; 23:00 UTC is.
    ok = validate(orjson.dumps(good(ts="2026-11-21T23:00:00", timezone="Pacific/Auckland")), strict, NOW)
    assert isinstance(ok, Turn)
    late = validate(orjson.dumps(good(ts="2026-11-21T23:00:00")), strict, NOW)
    assert isinstance(late, Rejection) and late.reason == "timestamp_out_of_range"
