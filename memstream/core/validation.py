"""Decide whether a record on the turns topic is a valid ``Turn``: pure, no I/O.

Every rejection has a short machine-readable ``reason`` (the dead-letter metric label) and a
human-readable ``detail``; the record itself is kept whole in the dead letter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from memstream.schemas.events import DeadLetterStage, Turn


@dataclass(frozen=True)
class Rejection:
    stage: DeadLetterStage
    reason: str
    detail: str


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    min_ts: datetime
    max_future: timedelta
    default_zone: ZoneInfo


# pydantic error types -> our reasons; the first error decides.
_REASONS = {
    "missing": "missing_field",
    "extra_forbidden": "unknown_field",
    "string_too_long": "too_long",
    "too_long": "too_long",
    "too_short": "too_short",
    "string_too_short": "too_short",
    "datetime_parsing": "invalid_timestamp",
    "datetime_from_date_parsing": "invalid_timestamp",
    "datetime_type": "invalid_timestamp",
    "string_pattern_mismatch": "invalid_identifier",
    # memstream.schemas.events' own error types
    "invalid_identifier": "invalid_identifier",
    "invalid_speaker": "invalid_speaker",
}


def _reason(err: ValidationError) -> tuple[str, str]:
    first = err.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in first["loc"])
    kind = first["type"]
    msg = first["msg"]
    if kind == "value_error":
        if "empty" in msg:
            return "empty_text", f"{loc}: {msg}"
        if "NUL" in msg:
            return "control_characters", f"{loc}: {msg}"
        if "ISO 8601" in msg:
            return "invalid_timestamp", f"{loc}: {msg}"
    reason = _REASONS.get(kind)
    if reason is None:
        reason = "wrong_type" if kind.endswith("_type") or kind.endswith("_parsing") else "invalid"
    if reason == "too_long" and loc.endswith("content"):
        reason = "text_too_long"
    return reason, f"{loc}: {msg}"


def zone_of(turn: Turn, default: ZoneInfo) -> ZoneInfo:
    return ZoneInfo(turn.timezone) if turn.timezone else default


def validate(value: bytes | None, limits: Limits, now: datetime) -> Turn | Rejection:
    """The turn, or why it is rejected. ``now`` is wall-clock time (aware)."""
    if value is None:
        return Rejection(DeadLetterStage.DECODE, "empty_record", "record has no value")
    if len(value) > limits.max_bytes:
        return Rejection(
            DeadLetterStage.DECODE, "too_large", f"record is {len(value)} bytes, limit {limits.max_bytes}"
        )
    try:
        # pydantic parses the JSON itself: half the cost of loading a dict first.
        turn = Turn.model_validate_json(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            return Rejection(DeadLetterStage.DECODE, "malformed_json", first["msg"][:300])
        if first["type"] == "model_type" and not first["loc"]:
            return Rejection(DeadLetterStage.DECODE, "not_an_object", "expected a JSON object")
        reason, detail = _reason(exc)
        return Rejection(DeadLetterStage.VALIDATE, reason, detail[:500])
    try:
        zone = zone_of(turn, limits.default_zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: zoneinfo opens the name as a file, so an over-long name (ENAMETOOLONG) or a
        # tzdata directory ("America") fails with an OSError, not ZoneInfoNotFoundError.
        return Rejection(
            DeadLetterStage.VALIDATE,
            "unknown_timezone",
            f"timezone {str(turn.timezone)[:64]!r} is not an IANA zone",
        )
    ts = turn.ts.replace(tzinfo=zone) if turn.ts.tzinfo is None else turn.ts
    if ts < limits.min_ts or ts > now + limits.max_future:
        return Rejection(
            DeadLetterStage.VALIDATE,
            "timestamp_out_of_range",
            f"ts {ts.isoformat()} is outside [{limits.min_ts.isoformat()}, now + {limits.max_future}]",
        )
    return turn


def limits_from(max_bytes: int, min_ts: str, max_future_s: float, default_zone: ZoneInfo) -> Limits:
    parsed = datetime.fromisoformat(min_ts)
    return Limits(
        max_bytes=max_bytes,
        min_ts=parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC),
        max_future=timedelta(seconds=max_future_s),
        default_zone=default_zone,
    )


def check_key(key: str | None, turn: Turn) -> Rejection | None:
    """Why a valid turn's record key is unusable, or None. A user's turns are ordered, stored and
    found by the key ``tenant/user_id``: a keyless record lands on whatever partition its producer
    picks, so one user's turns could be read out of order; it is refused rather than keyed from its
    content (docs/reliability.md). A key naming another user would put the turn in that user's
    partition."""
    if key is None:
        return Rejection(
            DeadLetterStage.VALIDATE,
            "missing_key",
            f"record has no key; produce turns with the key tenant/user_id ({turn.key!r} for this one)",
        )
    if key != turn.key:
        return Rejection(
            DeadLetterStage.VALIDATE,
            "key_mismatch",
            f"record key {key[:200]!r} is not the turn's tenant/user_id {turn.key!r}",
        )
    return None
