"""Every record that travels on a memstream topic, as a pydantic v2 model.

Models are the contract: JSON Schemas in ``schemas/json/`` are exported from them
(``memstream schemas export``) and CI checks the committed copies still match.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

# Limits are part of the contract, so they live here and show up in the JSON Schemas.
MAX_CONTENT_CHARS = 16_000
MAX_ID_CHARS = 256
MAX_METADATA_KEYS = 32
MAX_METADATA_VALUE_CHARS = 1_024

# Deterministic ids: uuid5 under one project namespace, so redelivery rewrites the same point.
NAMESPACE = uuid.UUID("6f1c1c8e-3a43-5b7e-9a55-6d656d737472")

# Any id a record may carry: what was accepted before ids had to be one path segment (below), so
# that units, memories and tombstones of such a user still flow, and the user can be forgotten
# (`memstream forget --user-key`).
StoredIdentifier = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$")
]
# The one grammar of the ids a client sends (user_id, session_id, turn_id): one URL path segment,
# so that every user route (`/v1/users/{user_id}/...`) addresses every accepted id once it is
# percent-encoded. Routing decodes the path before matching, so "/" (%2F) would split the id, and
# clients and proxies remove the dot segments "." and ".." (RFC 3986 5.2.4) before sending. An id
# the routes could not reach could not be forgotten, so it is refused at ingest (422 at the
# gateway, a dead letter with reason invalid_identifier at the ingest processor) rather than
# answered by routes that take any text (`{user_id:path}` cannot tell "a/timeline" the user from
# the timeline of "a").
ID_GRAMMAR = "1 to 256 characters, no control characters and no '/', and not '.' or '..'"
ID_PATTERN = r"^(?!\.\.?$)[^\x00-\x1f\x7f/]{1,256}$"  # the JSON Schema's (ECMA-262) form of the grammar


def _one_path_segment(v: str) -> str:
    if "/" in v or v in (".", ".."):
        raise PydanticCustomError("invalid_identifier", "an id is one URL path segment: " + ID_GRAMMAR)
    return v


Identifier = Annotated[
    StoredIdentifier,
    AfterValidator(_one_path_segment),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS, "pattern": ID_PATTERN}),
]
TenantId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
# 64-bit integers and finite floats: what JSON round-trips (orjson writes no wider integer, and
# NaN/Infinity would come back as null).
MetadataValue = (
    str
    | Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
    | Annotated[float, Field(allow_inf_nan=False)]
    | bool
    | None
)


_NUMBER = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


def _iso_text(v: object) -> object:
    # pydantic would read a number (or numeric text) as epoch seconds; the contract, and the JSON
    # Schema, say ISO 8601 text.
    if isinstance(v, int | float) or (isinstance(v, str) and _NUMBER.match(v)):
        raise ValueError("expected an ISO 8601 date-time string")
    return v


IsoDatetime = Annotated[datetime, BeforeValidator(_iso_text)]
IsoAwareDatetime = Annotated[AwareDatetime, BeforeValidator(_iso_text)]


def _from_base64(v: object) -> object:
    if isinstance(v, str):
        try:
            return base64.b64decode(v, validate=True)
        except binascii.Error as exc:
            raise ValueError("not valid base64") from exc
    return v


# Raw bytes in Python, base64 text in JSON: a dead letter keeps the original bytes exactly,
# even when they are not UTF-8.
RawBytes = Annotated[
    bytes,
    BeforeValidator(_from_base64),
    PlainSerializer(lambda b: base64.b64encode(b).decode("ascii"), return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "contentEncoding": "base64"}),
]


class Record(BaseModel):
    """Base for topic records: strict about unknown fields, serialised with orjson."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))

    @classmethod
    def from_bytes(cls, data: bytes) -> Any:
        # pydantic parses the JSON itself, with its own nesting limit, so any bad input is a
        # ValidationError (a ValueError). orjson.loads nests up to 1024 levels, and a value that
        # deep in an enum field made the enum's error message (its repr) raise RecursionError.
        return cls.model_validate_json(data)


# The tenant of a gateway without API keys, and of what `memstream replay` writes when a file names none:
# one constant, so that replaying a file and asking the gateway, both with defaults, meet.
DEFAULT_TENANT = "default"


def partition_key(tenant: str, user_id: str) -> str:
    """Every topic is keyed by ``tenant/user_id``: one user's events stay ordered on one partition."""
    return f"{tenant}/{user_id}"


_NAMESPACE_BYTES = NAMESPACE.bytes
# A hex digit with its top two bits set to 10 (the RFC 4122 variant): 0, 4, 8, c -> 8; 1, 5, 9, d -> 9...
_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}


def name_id(name: str) -> str:
    """``str(uuid.uuid5(NAMESPACE, name))``, formatted from the SHA-1 digest directly: a third of the cost
    without the UUID object (~0.9 us against 2.7), and ingest makes one a turn. Version 5 goes in the
    13th hex digit, the RFC 4122 variant (binary 10) in the top bits of the 17th."""
    h = hashlib.sha1(_NAMESPACE_BYTES + name.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


def unit_id_for(tenant: str, user_id: str, turn_id: str) -> str:
    return name_id(f"unit/{tenant}/{user_id}/{turn_id}")


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


MAX_SPEAKER_CHARS = 64
SPEAKER_GRAMMAR = (
    f"1 to {MAX_SPEAKER_CHARS} printable characters (no line breaks, no bidi or other format "
    "characters), not starting with '[' or a space, not ending with a space"
)


def _plain_speaker(v: str) -> str:
    # A unit's text opens with its speaker, and a recall context is read line by line under
    # "[date]" headers: a speaker must not be able to start a line, look like a header or reorder
    # what follows (bidi controls are format characters, so not printable).
    if not v.isprintable() or v.startswith("[") or v != v.strip():
        raise PydanticCustomError("invalid_speaker", SPEAKER_GRAMMAR)
    return v


Speaker = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_SPEAKER_CHARS),
    AfterValidator(_plain_speaker),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_SPEAKER_CHARS,
            "pattern": r"^(?![\[ ])[^\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f"
            r"\u202a-\u202e\u2066-\u2069]*(?<! )$",
            "description": SPEAKER_GRAMMAR,
        }
    ),
]


def _message_text(v: str) -> str:
    if not v.strip():
        raise ValueError("content is empty")
    if "\x00" in v:
        raise ValueError("content contains a NUL byte")
    return v


MessageText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS),
    AfterValidator(_message_text),
    Field(description="the message text: not blank, no NUL bytes"),
]


class Message(Record):
    speaker: Speaker
    role: Role = Role.USER
    content: MessageText


class Turn(Record):
    """One exchange sent by a client: a user message and its reply, or two speakers' messages.

    ``ts`` is the dialogue time (ISO 8601). A naive ``ts`` is read in ``timezone``
    (an IANA name) or, without it, in the deployment's default time zone.
    """

    tenant: TenantId
    user_id: Identifier
    session_id: Identifier
    turn_id: Identifier = Field(description="client-supplied idempotency key, unique per user")
    ts: IsoDatetime = Field(
        description="dialogue time, ISO 8601; from MEMSTREAM_MIN_TS (default 1970-01-01T00:00:00Z) to "
        "MEMSTREAM_MAX_FUTURE_SKEW_S (default a day) past now, else 422 timestamp_out_of_range"
    )
    timezone: str | None = Field(default=None, description="IANA zone for naive ts and windows")
    messages: list[Message] = Field(min_length=1, max_length=2)
    metadata: dict[str, MetadataValue] = Field(default_factory=dict, max_length=MAX_METADATA_KEYS)

    @field_validator("metadata")
    @classmethod
    def _small_metadata(cls, v: dict[str, MetadataValue]) -> dict[str, MetadataValue]:
        for key, value in v.items():
            if len(key) > 128 or (isinstance(value, str) and len(value) > MAX_METADATA_VALUE_CHARS):
                raise ValueError(f"metadata entry {key[:32]!r} is too long")
        return v

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.user_id)


class Granularity(StrEnum):
    DAY = "day"
    WEEK = "week"
    WEEKEND = "weekend"
    MONTH = "month"
    SEASON = "season"
    YEAR = "year"
    MOMENT = "moment"


class EventTime(Record):
    """When something happened (TSM semantic time), as a half-open interval [start, end)."""

    start: AwareDatetime
    end: AwareDatetime
    granularity: Granularity
    expression: str = Field(description="the text span the interval was read from")

    @model_validator(mode="after")
    def _ordered(self) -> EventTime:
        if self.end <= self.start:
            raise ValueError("event time interval must have end > start")
        return self


class Unit(Record):
    """A stored exchange: TiMem level 1, RecMem's subconscious memory. No LLM has touched it."""

    unit_id: str
    tenant: TenantId
    user_id: StoredIdentifier
    session_id: StoredIdentifier
    turn_id: StoredIdentifier
    ts: AwareDatetime = Field(description="dialogue time")
    timezone: str
    text: str = Field(description="the exchange rendered as 'speaker: content' lines")
    speakers: list[str]
    event_times: list[EventTime] = Field(default_factory=list)
    content_hash: str = Field(description="sha256 of the turn's messages: detects a reused turn_id")
    level: Literal[1] = 1

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.user_id)


class ConsolidationRequest(Record):
    """RecMem trigger: a topic recurred for this user; consolidate the cluster's units."""

    request_id: str = Field(description="uuid5 of the sorted unit ids: redelivery is idempotent")
    tenant: TenantId
    user_id: StoredIdentifier
    trigger_unit_id: str
    unit_ids: list[str] = Field(min_length=1)
    similarities: list[float] = Field(description="cosine of each unit to the trigger unit")
    theta_sim: float
    theta_count: int
    fired_at: AwareDatetime = Field(description="dialogue time of the trigger unit")

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.user_id)


class WindowLevel(StrEnum):
    SESSION = "session"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class CloseReason(StrEnum):
    NEW_SESSION = "new_session"
    SESSION_GAP = "session_gap"
    BOUNDARY = "boundary"
    IDLE = "idle"


class WindowClosed(Record):
    """A TiMem window ended: the summarizer for ``level`` may run over [start, end)."""

    window_id: str
    tenant: TenantId
    user_id: StoredIdentifier
    level: WindowLevel
    start: AwareDatetime
    end: AwareDatetime
    timezone: str
    session_id: str | None = Field(default=None, description="only for level=session")
    first_ts: AwareDatetime = Field(description="dialogue time of the first event in the window")
    last_ts: AwareDatetime = Field(description="dialogue time of the last event in the window")
    events: int = Field(ge=1)
    reason: CloseReason

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.user_id)


class Deferred(Record):
    """Consolidation work put off (token budget spent, LLM unavailable): it goes back to its topic
    at ``not_before``. Never dropped."""

    source_topic: str = Field(description="the topic name (without prefix) the work came from")
    key: str
    value: RawBytes = Field(description="the original record, base64 in JSON")
    reason: str
    not_before: AwareDatetime


class DeadLetterStage(StrEnum):
    DECODE = "decode"
    VALIDATE = "validate"
    IDEMPOTENCY = "idempotency"
    CONSOLIDATE = "consolidate"


class DeadLetter(Record):
    """Input we could not process, kept whole with the reason so nothing is lost silently."""

    original: RawBytes = Field(description="the record's value bytes, base64 in JSON")
    key: str | None
    source_topic: str
    partition: int | None = None
    offset: int | None = None
    stage: DeadLetterStage
    reason: str = Field(description="short machine-readable reason, also the metric label")
    detail: str = Field(description="human-readable explanation")
    at: AwareDatetime


class Tombstone(Record):
    """A user forgotten through the gateway: every unit and memory of theirs deleted at ``deleted_at``."""

    tenant: TenantId
    user_id: StoredIdentifier
    deleted_at: AwareDatetime
    units: int = Field(ge=0, description="units deleted")
    memories: int = Field(ge=0, description="memories deleted")

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.user_id)
