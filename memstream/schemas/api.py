"""The query gateway's request and response bodies (its OpenAPI document is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from memstream.schemas.events import (
    Identifier,
    IsoAwareDatetime,
    IsoDatetime,
    MessageText,
    MetadataValue,
    Role,
    Speaker,
    StoredIdentifier,
    TenantId,
    Turn,
)
from memstream.schemas.memory import Memory, MemoryKind
from memstream.schemas.text import unicode_only

MAX_BATCH = 500
MAX_QUERY_CHARS = 2_000


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Request(Body):
    """A request body: any text in it must be valid Unicode (schemas/text.py)."""

    _unicode = field_validator("*", mode="before")(unicode_only)


class TurnIn(Turn):
    """A turn as a client posts it: the tenant comes from the API key (if given, it must match)."""

    tenant: TenantId | None = None  # type: ignore[assignment]
    _unicode = field_validator("*", mode="before")(unicode_only)


class TurnBatch(Body):
    turns: list[TurnIn] = Field(min_length=1, max_length=MAX_BATCH)


# The session a messages body goes to when it names none: one per user, which the windows still
# split by dialogue-time gap (MEMSTREAM_SESSION_GAP_S), so sessions follow idle gaps.
CHAT_SESSION = "chat"


class ChatMessage(Request):
    role: Role
    content: MessageText
    name: Speaker | None = Field(None, description="who said it; default: the role")


class MessagesIn(Request):
    """The shape chat APIs and other memory layers use: a user's messages, in order. Consecutive
    user + assistant messages become one turn; everything else is read from defaults (see the
    README's API section): turn ids from ``Idempotency-Key`` or the body's content, so a retry is
    stored once; ``ts`` now; the session by idle gap."""

    user_id: Identifier
    messages: list[ChatMessage] = Field(min_length=1, max_length=2 * MAX_BATCH)
    session_id: Identifier = Field(
        CHAT_SESSION, description="default: one session per user, split by idle gap"
    )
    ts: IsoDatetime | None = Field(None, description="dialogue time of the first message; default: now")
    timezone: str | None = Field(None, description="IANA zone for a naive ts and for windows")
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)


def _shape(body: object) -> str:
    """Which body shape a request is, by one key, so a 422 lists that shape's errors only."""
    if isinstance(body, dict):
        if "turns" in body:
            return "batch"
        if "turn_id" in body:
            return "turn"
    return "messages"


TurnsIn = Annotated[
    Annotated[TurnIn, Tag("turn")]
    | Annotated[TurnBatch, Tag("batch")]
    | Annotated[MessagesIn, Tag("messages")],
    Discriminator(_shape),
]


class TurnsAccepted(Body):
    accepted: int = Field(description="turns written to the turns topic (acks=all)")
    turn_ids: list[str]
    content_hashes: list[str] = Field(
        description="each turn's content hash, in the order of turn_ids: once the turn is stored, "
        "GET /v1/users/{user_id}/turns/{turn_id} answers the stored turn's hash; another hash there means "
        "this turn reused a stored turn_id with other content and was dead-lettered (turn_id_reused)"
    )


class TurnStored(Body):
    turn_id: str
    session_id: str
    ts: datetime = Field(description="dialogue time, as stored")
    content_hash: str = Field(description="of the stored turn: compare with the one POST /v1/turns answered")


class RecallRequest(Request):
    # Any stored id: in the body, so a user stored before ids had to be one path segment stays readable.
    user_id: StoredIdentifier
    query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
    now: IsoAwareDatetime | None = Field(None, description="the time the question is asked; default: now")
    budget_tokens: int = Field(
        1000,
        ge=50,
        le=32_000,
        description="the most tokens the returned context may take; tokens = ⌈characters / 4⌉ of the context",
    )
    levels: list[Annotated[int, Field(ge=1, le=5, strict=True)]] | None = Field(
        None,
        description="only memories of these levels (1 leaves, 2 session, 3 day, 4 week, 5 profile); "
        "default: leaves only (units, episodes, facts)",
    )


class RecallItem(Body):
    id: str
    kind: str = Field(description="unit, or a memory kind: " + ", ".join(k.value for k in MemoryKind))
    level: int
    text: str
    dialogue_time: datetime | None = Field(description="when it was said (latest source)")
    event_start: datetime | None = Field(description="when what it describes happened (semantic time)")
    event_end: datetime | None
    score: float
    current: bool = Field(description="false for a superseded fact")
    source_turn_ids: list[str] = Field(
        description="provenance: the turns whose content its text carries (the sentences it quotes, the ids"
        " an LLM cited); a unit: its own turn"
    )
    covers_turn_ids: list[str] = Field(
        description="every turn beneath it (a session, day or week node's subtree, an episode's units, a"
        " topic's facts); includes source_turn_ids. Coverage, not evidence"
    )


class RecallResponse(Body):
    items: list[RecallItem]
    context: str = Field(description="the items as dated lines, ready for a prompt")
    tokens: int = Field(description="tokens of context (⌈characters / 4⌉), never more than budget_tokens")
    complexity: str
    time_intent: list[tuple[datetime, datetime]] = Field(description="the intervals read from the query")


class AnswerResponse(Body):
    answer: str | None = Field(description="the model's answer; null when no model is configured")
    answered_by: str | None = Field(description="model name, or null")
    note: str | None = Field(None, description="why there is no answer, when there is none")
    recall: RecallResponse


class DeleteResult(Body):
    tenant: str
    user_id: str
    units: int
    memories: int
    tombstone: datetime


class TimelineNode(Body):
    id: str
    kind: str
    level: int
    text: str
    start: datetime | None
    end: datetime | None
    parent_id: str | None
    children: list[str]


class Timeline(Body):
    user_id: str
    nodes: list[TimelineNode] = Field(description="tree nodes overlapping the interval, by start time")


class MemoryPage(Body):
    memories: list[Memory] = Field(
        description="with provenance (source_turn_ids, covers_turn_ids, children); a page may hold fewer than"
        " limit when a level is asked for"
    )
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last")


class MemoryDeleted(Body):
    memory_id: str
    detail: str


class ToolCall(Request):
    user_id: StoredIdentifier
    arguments: dict[str, Any] = Field(default_factory=dict, description="as the tool's schema describes")


class Problem(Body):
    detail: str
