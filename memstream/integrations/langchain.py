"""LangChain: recall as a retriever, and a conversation's LangChain messages into memory.

    from memstream.client import MemoryClient
    from memstream.integrations.langchain import MemstreamRetriever, add_messages

    memory = MemoryClient("http://127.0.0.1:8080", api_key=key)
    add_messages(memory, "user-1", [HumanMessage("I moved to Porto."), AIMessage("Nice!")])
    docs = MemstreamRetriever(client=memory, user_id="user-1").invoke("Where do I live?")

Each document is one recalled memory: its text, and its kind, times, score and provenance as
metadata. The budget is recall's (``budget_tokens``), so the documents fit a prompt together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from memstream.client import AsyncMemoryClient, MemoryClient
from memstream.schemas.api import RecallItem, RecallResponse, TurnsAccepted


class MemstreamRetriever(BaseRetriever):
    """The user's memories for a query, best first, within ``budget_tokens``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: MemoryClient | None = None
    async_client: AsyncMemoryClient | None = None
    user_id: str
    budget_tokens: int = 1000

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.client is None:
            raise ValueError("MemstreamRetriever needs client= (a MemoryClient) to run synchronously")
        return documents(self.client.recall(self.user_id, query, budget_tokens=self.budget_tokens))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_client is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        return documents(
            await self.async_client.recall(self.user_id, query, budget_tokens=self.budget_tokens)
        )


def documents(found: RecallResponse) -> list[Document]:
    return [Document(page_content=item.text, metadata=_metadata(item)) for item in found.items]


def _metadata(item: RecallItem) -> dict[str, Any]:
    return item.model_dump(mode="json", exclude={"text"})


def add_messages(
    client: MemoryClient, user_id: str, messages: Sequence[BaseMessage], **options: Any
) -> TurnsAccepted:
    """Store a conversation's human and AI messages (others, such as system and tool messages,
    are not what the user said and are left out); ``options`` as for ``MemoryClient.add``."""
    return client.add(user_id, chat_messages(messages), **options)


def chat_messages(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    out = []
    for m in messages:
        if isinstance(m, HumanMessage | AIMessage) and m.text.strip():
            message = {"role": "user" if isinstance(m, HumanMessage) else "assistant", "content": m.text}
            out.append(message | ({"name": m.name} if m.name else {}))
    return out
