"""The LangChain integration's pure parts: LangChain messages in, recall items out."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from memstream.integrations.langchain import chat_messages, documents
from memstream.schemas.api import RecallItem, RecallResponse


def test_only_what_the_user_and_the_assistant_said_goes_in() -> None:
    messages = [
        SystemMessage("You are helpful."),
        HumanMessage("I moved to Porto.", name="Dana"),
        AIMessage("Nice!"),
        ToolMessage("42", tool_call_id="c1"),
        AIMessage(""),  # a tool call with no text
    ]
    assert chat_messages(messages) == [
        {"role": "user", "content": "I moved to Porto.", "name": "Dana"},
        {"role": "assistant", "content": "Nice!"},
    ]


def test_each_recalled_item_is_a_document_with_its_provenance() -> None:
    item = RecallItem(
        id="m1",
        kind="fact",
        level=1,
        text="Dana lives in Porto.",
        dialogue_time=None,
        event_start=None,
        event_end=None,
        score=0.9,
        current=True,
        source_turn_ids=["t1"],
        covers_turn_ids=["t1"],
    )
    found = RecallResponse(items=[item], context="…", tokens=5, complexity="simple", time_intent=[])
    (doc,) = documents(found)
    assert doc.page_content == "Dana lives in Porto."
    assert (
        doc.metadata["kind"] == "fact"
        and doc.metadata["source_turn_ids"] == ["t1"]
        and "text" not in doc.metadata
    )


def test_an_mcp_tool_error_names_the_fields_not_the_users_input() -> None:
    from memstream.apps.mcp_server import reason

    detail = [
        {
            "loc": ["body", "messages", 0, "content"],
            "msg": "content contains a NUL byte",
            "input": "secret\x00",
        }
    ]
    assert reason(detail) == "body.messages.0.content: content contains a NUL byte"
    assert reason("missing or unknown API key") == "missing or unknown API key"
