"""The query gateway's agent tools (REMem): their arguments, their results, and OpenAI tool schemas.

The argument models are the contract an LLM agent sees: ``openai_tools()`` generates the tool schemas from
them (docstring -> tool description, field descriptions -> parameter descriptions), so the schemas and the
validation of a call's arguments never drift apart. ``memstream.core.recall.tools`` runs the tools.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, Field, model_validator

from memstream.schemas.events import Record
from memstream.schemas.memory import Triple

ToolKind = Literal[
    "unit", "episode", "fact", "observation", "session", "day", "week", "profile", "topic", "persona"
]
TimeOp = Literal["within", "overlaps", "before", "after"]
OrderBy = Literal["start", "-start", "recorded_at", "-recorded_at"]
Relation = Literal["node", "parent", "child", "before", "after"]

_KINDS_HELP = (
    "Only return memories of these kinds. unit = one raw exchange (verbatim dialogue); episode = a summary "
    "of related exchanges; fact = one subject-predicate-object statement; observation = what one speaker "
    "said in one exchange, in the third person and dated; session, day, week = summaries of "
    "that period; profile = a monthly profile of the user; topic, persona = durative themes and traits. "
    "Omit to search every kind."
)
Start = Annotated[
    AwareDatetime | None,
    Field(
        description="Start of the time window, ISO 8601 with a UTC offset (e.g. 2023-05-01T00:00:00Z). "
        "Omit for no lower bound."
    ),
]
End = Annotated[
    AwareDatetime | None,
    Field(
        description="End of the time window, exclusive, ISO 8601 with a UTC offset. Omit for no upper bound."
    ),
]
TimeOpField = Annotated[
    TimeOp,
    Field(
        description="How a memory's time must relate to the window [start, end). A memory's time is the "
        "interval it is about (a fact: from when it holds until it stops; a fact that still holds has no "
        "end). overlaps: shares any moment with the window. within: lies entirely inside it (a fact that "
        "still holds is never within a window with an end). before: ends no later than the window's "
        "earliest bound. after: starts at or after the window's latest bound. So for 'before X' or "
        "'after X' you may give X as start alone. Ignored when neither start nor end is given."
    ),
]
Kinds = Annotated[list[ToolKind] | None, Field(min_length=1, description=_KINDS_HELP)]


def _check_window(start: AwareDatetime | None, end: AwareDatetime | None) -> None:
    if start is not None and end is not None and end <= start:
        raise ValueError("end must be after start")


class _Retrieve(Record):
    query: str = Field(min_length=1, max_length=2000, description="What to look for, in natural language.")
    start: Start = None
    end: End = None
    time_op: TimeOpField = "overlaps"
    kinds: Kinds = None
    limit: int = Field(default=10, ge=1, le=100, description="Maximum number of memories to return.")

    @model_validator(mode="after")
    def _window(self) -> _Retrieve:
        _check_window(self.start, self.end)
        return self


class SemanticRetrieve(_Retrieve):
    """Find the user's memories closest in meaning to a query (dense vector search), best first. Use it
    for open questions where the wording of the memory may differ from the question ("what does the user
    do for fitness?"). Optionally restrict to a time window and to kinds of memory. Each result has its
    id (for find_memory_contexts), kind, text, the time it is about, and a similarity score."""


class LexicalRetrieve(_Retrieve):
    """Find the user's memories that contain the query's keywords (BM25), best first. Use it for exact
    names, places, numbers or rare words that semantic search may blur ("Lisbon", "marathon", "Bella").
    Memories sharing no keyword with the query are not returned. Optionally restrict to a time window
    and to kinds of memory."""


class FindMemoryContexts(Record):
    """Show the context of one memory: the memory itself, its parent in the memory tree (the session,
    day, week or profile summary above it), its children (what it was built from: exchanges under a
    session, facts under an episode, days under a week...), and its neighbours in time (the memories of
    the same kind just before and just after it). Use it to expand a retrieved memory: read the raw
    exchanges behind a summary, or what happened around an event."""

    memory_id: str = Field(
        min_length=1, max_length=256, description="The id of a memory returned by another tool."
    )
    neighbours: int = Field(
        default=2,
        ge=0,
        le=20,
        description="How many memories of the same kind to return on each side in time (0 for none).",
    )


class FindEntityContexts(Record):
    """Query the facts known about the user as subject-predicate-object triples, e.g. (user, lives in,
    Porto) or (Bella, is, user's dog). Each given field matches case-insensitively as a substring; omit a
    field to match anything. Use it to list, count or order facts over time: "every city the user lived
    in", "how many times did the user go hiking in May", "the first trip of the year". Facts that a later
    fact superseded (the user moved away) are left out unless include_superseded is true, which answers
    questions about change and history."""

    subject: str | None = Field(
        default=None, min_length=1, max_length=256, description="Substring of the triple's subject."
    )
    predicate: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Substring of the triple's predicate (the relation, e.g. 'lives in', 'likes').",
    )
    object: str | None = Field(
        default=None, min_length=1, max_length=1024, description="Substring of the triple's object."
    )
    start: Start = None
    end: End = None
    time_op: TimeOpField = "overlaps"
    order_by: OrderBy = Field(
        default="start",
        description="Order of the results: start = when the fact began to hold, recorded_at = when it "
        "was said; a leading '-' for newest first.",
    )
    limit: int = Field(default=20, ge=1, le=200, description="Maximum number of facts to return.")
    offset: int = Field(default=0, ge=0, description="How many ordered facts to skip (for paging).")
    aggregate: Literal["none", "count"] = Field(
        default="none", description="count: return only how many facts match (no items)."
    )
    include_superseded: bool = Field(
        default=False, description="Also return facts that no longer hold because a later fact replaced them."
    )

    @model_validator(mode="after")
    def _window(self) -> FindEntityContexts:
        _check_window(self.start, self.end)
        return self


class ToolItem(Record):
    """One memory as a tool returns it."""

    id: str
    kind: ToolKind
    level: int = Field(ge=1, le=5)
    text: str
    start: AwareDatetime = Field(description="start of the time it is about")
    end: AwareDatetime | None = Field(description="exclusive; None: an instant (unit) or still holds (fact)")
    recorded_at: AwareDatetime = Field(description="when it was said (dialogue time of its latest source)")
    source_turn_ids: list[str] = Field(description="provenance: the turns whose content its text carries")
    covers_turn_ids: list[str] = Field(
        default_factory=list, description="every turn beneath it (a tree node's subtree); a unit: its turn"
    )
    score: float | None = Field(default=None, description="retrieval score, higher is better")
    parent_id: str | None = None
    children: list[str] = Field(default_factory=list)
    triple: Triple | None = None
    current: bool = Field(default=True, description="False: a fact a later fact superseded")
    relation: Relation | None = Field(default=None, description="find_memory_contexts: how it relates")


class ToolResult(Record):
    items: list[ToolItem] = Field(default_factory=list)
    total: int | None = Field(default=None, description="matches before limit/offset, where known")
    count: int | None = Field(default=None, description="aggregate='count': the number of matches")


TOOLS: dict[str, type[BaseModel]] = {
    "semantic_retrieve": SemanticRetrieve,
    "lexical_retrieve": LexicalRetrieve,
    "find_memory_contexts": FindMemoryContexts,
    "find_entity_contexts": FindEntityContexts,
}


def openai_tools() -> list[dict[str, Any]]:
    """The tools in OpenAI's function-calling format, generated from the argument models."""
    tools: list[dict[str, Any]] = []
    for name, model in TOOLS.items():
        schema = model.model_json_schema()
        # The model's docstring is the tool's description, folded onto one line.
        description = " ".join(schema.pop("description").split())
        defs = schema.pop("$defs", {})
        parameters = _clean(_inline(schema, defs))
        tools.append(
            {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": parameters},
            }
        )
    return tools


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """Replace every ``{"$ref": "#/$defs/X"}`` by X itself, so each tool schema stands alone."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _clean(schema: Any) -> Any:
    """Drop pydantic's generated ``title``s (noise to an LLM); keys under ``properties`` are field names."""
    if isinstance(schema, list):
        return [_clean(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key == "properties":
            out[key] = {field: _clean(sub) for field, sub in value.items()}
        else:
            out[key] = _clean(value)
    return out
