"""``memstream cost``: LLM calls and tokens the pipeline spent, per stage and per 1,000 turns, next
to what an eager extractor (one LLM call per exchange, as Mem0-style ``add()`` does) would have
made. Built from the workers' ``/status`` counters; the counts are the responses' ``usage``."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

ANSWERED = ("ok", "repaired", "invalid")  # outcomes counted once per completion received


def cost_report(status: dict[str, Any]) -> dict[str, Any]:
    turns = sum(status.get("memstream_turns_ingested", {}).values())
    units = sum(status.get("memstream_units_stored", {}).values())
    stages: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    tenants: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for label, n in status.get("memstream_llm_calls", {}).items():
        stage, _model, tenant, outcome = label.split("/")
        if outcome in ANSWERED:
            stages[stage]["calls"] += n
            tenants[tenant]["calls"] += n
    for label, n in status.get("memstream_llm_tokens", {}).items():
        stage, _model, tenant, kind = label.split("/")
        stages[stage][f"{kind}_tokens"] += n
        tenants[tenant][f"{kind}_tokens"] += n
    calls = sum(s["calls"] for s in stages.values())
    prompt = sum(s["prompt_tokens"] for s in stages.values())
    completion = sum(s["completion_tokens"] for s in stages.values())

    def per_1000(x: float) -> float:
        return round(1000 * x / turns, 2) if turns else 0.0

    return {
        "turns": int(turns),
        "units": int(units),
        "llm_calls": int(calls),
        "prompt_tokens": int(prompt),
        "completion_tokens": int(completion),
        "per_1000_turns": {
            "llm_calls": per_1000(calls),
            "prompt_tokens": per_1000(prompt),
            "completion_tokens": per_1000(completion),
        },
        "eager_calls": int(units),
        "call_ratio": round(calls / units, 4) if units else None,
        "by_stage": {k: {m: int(v) for m, v in d.items()} for k, d in sorted(stages.items())},
        "by_tenant": {k: {m: int(v) for m, v in d.items()} for k, d in sorted(tenants.items())},
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"turns {report['turns']:,}  units {report['units']:,}",
        f"LLM calls {report['llm_calls']:,}  prompt tokens {report['prompt_tokens']:,}  "
        f"completion tokens {report['completion_tokens']:,}",
        f"per 1,000 turns: {report['per_1000_turns']['llm_calls']:,} calls, "
        f"{report['per_1000_turns']['prompt_tokens']:,.0f} prompt + "
        f"{report['per_1000_turns']['completion_tokens']:,.0f} completion tokens",
        f"eager extraction (one call per exchange) would have made {report['eager_calls']:,} calls; "
        + (f"ratio {report['call_ratio']:.3f}" if report["call_ratio"] is not None else "no units yet"),
    ]
    for stage, d in report["by_stage"].items():
        lines.append(
            f"  {stage:<10} {d.get('calls', 0):>7,} calls {d.get('prompt_tokens', 0):>10,} prompt "
            f"{d.get('completion_tokens', 0):>9,} completion"
        )
    for tenant, d in report["by_tenant"].items():
        lines.append(
            f"  tenant {tenant:<16} {d.get('prompt_tokens', 0) + d.get('completion_tokens', 0):>10,} tokens"
        )
    return "\n".join(lines)
