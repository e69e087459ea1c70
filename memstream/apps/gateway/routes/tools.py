"""The agent tools: their OpenAI schemas, and a call of one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from fastapi import Path as PathParam
from pydantic import ValidationError

from memstream.apps.gateway.deps import Svc, Tenant
from memstream.core.recall.tools import run_tool
from memstream.schemas.api import Problem, ToolCall
from memstream.schemas.events import partition_key
from memstream.schemas.tools import TOOLS, ToolResult, openai_tools

router = APIRouter(tags=["tools"])


@router.get("/v1/tools")
def get_tools() -> list[dict[str, Any]]:
    """The agent tools as OpenAI tool schemas; call one with ``POST /v1/tools/{name}``."""
    return openai_tools()


@router.post(
    "/v1/tools/{name}",
    response_model=ToolResult,
    responses={404: {"model": Problem, "description": "no such tool"}},
)
def post_tool(
    name: Annotated[str, PathParam(json_schema_extra={"enum": sorted(TOOLS)})],
    body: ToolCall,
    tenant: Tenant,
    svc: Svc,
) -> ToolResult:
    """Run one agent tool for ``user_id`` with the arguments its schema describes."""
    if name not in TOOLS:
        raise HTTPException(404, f"unknown tool {name!r}; GET /v1/tools lists them")
    key = partition_key(tenant, body.user_id)
    try:
        return run_tool(name, body.arguments, svc.store(key), svc.embedder, key)
    except ValidationError as exc:
        errors = [
            {"loc": ["body", "arguments", *e["loc"]], "msg": e["msg"], "type": e["type"]}
            for e in exc.errors()
        ]
        raise HTTPException(422, errors) from exc
