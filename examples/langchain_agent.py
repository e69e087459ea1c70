"""A LangChain chain with memstream as its long-term memory (no paid API: the chat model is
LangChain's scripted fake; the memory is real).

The conversation goes in with ``add_messages``; a later question is answered by a chain whose
prompt gets the user's memories from ``MemstreamRetriever``.

    pip install 'memstream[langchain]'; memstream up &
    python examples/langchain_agent.py
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime

from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from memstream.client import MemoryClient, NotFound
from memstream.integrations.langchain import MemstreamRetriever, add_messages

USER = os.environ.get("AGENT_USER", "langchain-demo-user")
QUESTION = "What did my sister bring back from Kyoto?"
PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You remember the user. Their memories, dated:\n{memories}"), ("human", "{question}")]
)


def dated(docs: list[Document]) -> str:
    return "\n".join(f"[{d.metadata['dialogue_time'][:10]}] {d.page_content}" for d in docs)


def main() -> int:
    url = os.environ.get("MEMSTREAM_GATEWAY_URL", "http://127.0.0.1:8080")
    with MemoryClient(url, api_key=os.environ.get("MEMSTREAM_API_KEY")) as memory:
        conversation = [
            HumanMessage("My sister Ana just got back from Kyoto with a set of matcha bowls for me."),
            AIMessage("What a lovely gift! Will you use them for tea ceremonies?"),
        ]
        accepted = add_messages(memory, USER, conversation, ts=datetime(2026, 4, 12, 18, 0, tzinfo=UTC))
        deadline = time.monotonic() + 60
        while True:
            try:
                memory.turn(USER, accepted.turn_ids[-1])
                break
            except NotFound:
                if time.monotonic() > deadline:
                    sys.exit("the conversation was not stored within 60 s: is `memstream up` running?")
                time.sleep(0.5)
        retriever = MemstreamRetriever(client=memory, user_id=USER, budget_tokens=300)
        model = FakeListChatModel(responses=["She brought you matcha bowls."])  # scripted: no API key needed
        prompt_seen: list[str] = []
        chain = (
            {"memories": retriever | dated, "question": RunnablePassthrough()}
            | PROMPT
            | (lambda p: prompt_seen.append(p.to_string()) or p)
            | model
            | StrOutputParser()
        )
        answer = chain.invoke(QUESTION)
        print(prompt_seen[0])
        print(f"AI: {answer}")
        return 0 if "matcha bowls" in prompt_seen[0] else 1


if __name__ == "__main__":
    sys.exit(main())
