"""The LLM layer of consolidation: an OpenAI-compatible chat client with structured (pydantic) output,
retries, bounded concurrency and a per-tenant daily token budget."""

from memstream.adapters.llm.budget import BudgetExhausted, LLMError, TokenBudget
from memstream.adapters.llm.client import (
    ChatResult,
    InvalidOutput,
    LLMClient,
    LLMUnavailable,
    StageConfig,
    TruncatedOutput,
    response_format,
    retry_after_s,
    stage_config,
)

__all__ = [
    "BudgetExhausted",
    "ChatResult",
    "InvalidOutput",
    "LLMClient",
    "LLMError",
    "LLMUnavailable",
    "StageConfig",
    "TokenBudget",
    "TruncatedOutput",
    "response_format",
    "retry_after_s",
    "stage_config",
]
