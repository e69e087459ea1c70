"""`memstream mcp`: the gateway's memory as Model Context Protocol tools, for IDEs and agent runtimes.

A thin shell over ``memstream.client``: every tool is one gateway request, under the API key of
the caller (streamable HTTP: the request's ``Authorization: Bearer`` or ``X-API-Key``) or, without
one, the server's own (``MEMSTREAM_API_KEY``, the only key over stdio). It holds no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from memstream.client import AsyncMemoryClient, MemstreamError
from memstream.schemas.api import ChatMessage
from memstream.schemas.tools import FindEntityContexts, FindMemoryContexts, LexicalRetrieve, SemanticRetrieve

Transport = Literal["stdio", "streamable-http"]
INSTRUCTIONS = (
    "Long-term memory of the users you talk to. Call recall before answering a question that may depend on "
    "what a user said before (it returns dated lines ready for your context); call add_memory with the "
    "messages of an exchange worth remembering. The four retrieval tools answer precise questions: by "
    "meaning, by words and time, around a memory, or about an entity's facts."
)


class Recalled(BaseModel):
    context: str = Field(description="dated memory lines, ready to put in a prompt")
    items: int
    tokens: int


def caller_key(headers: Mapping[str, str] | None, default: str | None) -> str | None:
    """The API key of an HTTP caller (bearer, else X-API-Key), else the server's own."""
    if headers:
        lowered = {k.lower(): v for k, v in headers.items()}
        bearer = lowered.get("authorization", "")
        if bearer[:7].lower() == "bearer ":
            return bearer[7:].strip()
        if "x-api-key" in lowered:
            return lowered["x-api-key"]
    return default


def reason(detail: Any) -> str:
    """A gateway error without the inputs a 422 echoes: the SDK logs a tool's error, and an input
    may be the user's text."""
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in detail)
    return str(detail)


def build_server(gateway_url: str, api_key: str | None) -> MCPServer:
    server: MCPServer = MCPServer("memstream", instructions=INSTRUCTIONS)

    def client(ctx: Context) -> AsyncMemoryClient:
        return AsyncMemoryClient(gateway_url, api_key=caller_key(ctx.headers, api_key))

    async def call(ctx: Context, verb: str, *args: Any, **kwargs: Any) -> Any:
        async with client(ctx) as memory:
            try:
                return await getattr(memory, verb)(*args, **kwargs)
            except MemstreamError as exc:  # the gateway's reason, as the tool's error text
                raise ToolError(f"memstream answered {exc.status}: {reason(exc.detail)}") from exc

    @server.tool()
    async def add_memory(user_id: str, messages: list[ChatMessage], ctx: Context) -> dict[str, Any]:
        """Remember an exchange: the user's messages (role user or assistant, content, optional name).
        Consolidation happens in the background; the same messages sent again are stored once."""
        accepted = await call(ctx, "add", user_id, [m.model_dump(exclude_none=True) for m in messages])
        return dict(accepted.model_dump())

    @server.tool()
    async def recall(user_id: str, query: str, ctx: Context, budget_tokens: int = 1000) -> Recalled:
        """What the user's memory holds about ``query``: dated lines within ``budget_tokens``."""
        found = await call(ctx, "recall", user_id, query, budget_tokens=budget_tokens)
        return Recalled(context=found.context, items=len(found.items), tokens=found.tokens)

    @server.tool()
    async def forget(user_id: str, ctx: Context) -> dict[str, Any]:
        """Erase everything stored about the user (turns and memories). Irreversible."""
        deleted = await call(ctx, "forget", user_id)
        return dict(deleted.model_dump(mode="json"))

    async def run_tool(name: str, user_id: str, arguments: BaseModel, ctx: Context) -> dict[str, Any]:
        result = await call(
            ctx, "tool", name, user_id, **arguments.model_dump(mode="json", exclude_none=True)
        )
        return dict(result.model_dump(mode="json"))

    # The REMem tools, with the gateway's own argument models (so their schemas are the same).
    @server.tool(description=SemanticRetrieve.__doc__)
    async def semantic_retrieve(user_id: str, arguments: SemanticRetrieve, ctx: Context) -> dict[str, Any]:
        return await run_tool("semantic_retrieve", user_id, arguments, ctx)

    @server.tool(description=LexicalRetrieve.__doc__)
    async def lexical_retrieve(user_id: str, arguments: LexicalRetrieve, ctx: Context) -> dict[str, Any]:
        return await run_tool("lexical_retrieve", user_id, arguments, ctx)

    @server.tool(description=FindMemoryContexts.__doc__)
    async def find_memory_contexts(
        user_id: str, arguments: FindMemoryContexts, ctx: Context
    ) -> dict[str, Any]:
        return await run_tool("find_memory_contexts", user_id, arguments, ctx)

    @server.tool(description=FindEntityContexts.__doc__)
    async def find_entity_contexts(
        user_id: str, arguments: FindEntityContexts, ctx: Context
    ) -> dict[str, Any]:
        return await run_tool("find_entity_contexts", user_id, arguments, ctx)

    return server


def serve(gateway_url: str, api_key: str | None, transport: Transport, host: str, port: int) -> None:
    server = build_server(gateway_url, api_key)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
