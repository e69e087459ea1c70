"""The messages shape (`{"user_id", "messages": [{"role", "content", "name"?}]}`) as turns: pure.

A turn is one exchange, so a user message and the assistant message right after it make one turn;
any other message is a turn of its own. Turn ids are derived, never random, so that a client which
retries the same request produces the same ids and the pipeline stores each turn once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta

import orjson

from memstream.schemas.api import ChatMessage, MessagesIn
from memstream.schemas.events import Role, Turn

# Messages of one request are a few milliseconds apart in dialogue time, so they keep their order
# in every window and view that sorts by time.
STEP = timedelta(milliseconds=1)


def exchanges(messages: Sequence[ChatMessage]) -> list[list[ChatMessage]]:
    """Consecutive (user, assistant) pairs as one exchange each; every other message alone."""
    out: list[list[ChatMessage]] = []
    i = 0
    while i < len(messages):
        pair = messages[i : i + 2]
        if len(pair) == 2 and pair[0].role == Role.USER and pair[1].role == Role.ASSISTANT:
            out.append(list(pair))
            i += 2
        else:
            out.append([messages[i]])
            i += 1
    return out


def request_key(body: MessagesIn, idempotency_key: str | None) -> str:
    """What identifies a request across retries: the client's ``Idempotency-Key``, else its content
    (user, session and messages; not ``ts``, which defaults to the time of each attempt)."""
    if idempotency_key is not None:
        return "key:" + idempotency_key
    content = orjson.dumps(
        [body.user_id, body.session_id, [m.model_dump(mode="json") for m in body.messages]]
    )
    return "body:" + hashlib.sha256(content).hexdigest()


def turn_id(key: str, index: int) -> str:
    return "m-" + hashlib.sha256(f"{key}\x00{index}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def turns_from_messages(
    body: MessagesIn, tenant: str, now: datetime, idempotency_key: str | None
) -> list[Turn]:
    """The turns a messages body stands for, in order, under ``tenant``."""
    key = request_key(body, idempotency_key)
    start = body.ts if body.ts is not None else now
    return [
        Turn.model_validate(
            {
                "tenant": tenant,
                "user_id": body.user_id,
                "session_id": body.session_id,
                "turn_id": turn_id(key, i),
                "ts": start + i * STEP,
                "timezone": body.timezone,
                "messages": [
                    {"speaker": m.name or m.role.value, "role": m.role.value, "content": m.content}
                    for m in pair
                ],
                "metadata": body.metadata,
            }
        )
        for i, pair in enumerate(exchanges(body.messages))
    ]
