"""``memstream eval locomo``: what an agent gets from memstream's recall at fixed token budgets, against
flat retrieval over the raw turns, scored on the text returned rather than on the ids it claims.

Each LoCoMo conversation becomes one user of ``tenant`` (its two speakers as roles, each session's
date_time as dialogue time, turn ids = the dataset's dia_ids, a shared photo's caption appended to its
turn, as ``memstream replay --format locomo`` sends them). The turns go through the pipeline's own handlers in
process (``memstream.streams.offline``: the configured writer, extractive without an LLM) on a fresh embedded
store, then every question is asked through ``memstream.core.recall.engine.recall`` with ``now`` = the day
after the last session.

The same run ranks the user's raw turns for each question with the flat baselines of
``memstream.apps.baselines`` (hybrid, weighted by the ``FLAT_HYBRID`` preset; dense; BM25; same embedder) and
fills the same budgets with them (recall runs on the ``DEFAULT`` preset), and builds an oracle: the
question's evidence turns only, in dialogue order, rendered like the baselines.

Scores (``memstream.apps.scoring``), per budget, per category and over all questions ("all"):

* ``text``: share of evidence turns whose content (the turn as ingested, without the speaker's name) is
  in the returned texts: memstream's items' texts, a baseline's lines;
* ``answer``: share of the gold answer's content words in the context within the budget (memstream's
  rendered ``context``; a baseline's lines joined by newlines);
* ``id`` (memstream only): share of evidence ids among the returned items' ``source_turn_ids``.

Questions without evidence in the conversation are skipped (counted in ``skipped_questions``). LoCoMo's
adversarial questions (category 5) mostly have no ``answer``: the right reply is that the conversation
does not say, and their ``adversarial_answer`` is the trap, so it is never scored; such questions count
for ``text`` and ``id`` only. An answer without content words ("No") has no answer score either; each
cell reports ``questions`` and ``answered`` (the questions its answer mean is over).

Every per-question row carries what its scores were computed from: the evidence turns' contents, the gold
answer, and per budget and system the returned items or turn ids and the context, so that the means can
be recomputed from the report alone (``tests/test_evaluate.py`` does).
"""

from __future__ import annotations

import re
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from tqdm import tqdm

from memstream.adapters.embedders import make_embedder
from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import EdgeShards
from memstream.apps import baselines
from memstream.apps.baselines import RawTurn
from memstream.apps.datasets import locomo_turns, parse_locomo_time, session_numbers
from memstream.apps.scoring import answer_recall, id_recall, text_recall
from memstream.core.embedder import Embedder
from memstream.core.memories import memories_spec
from memstream.core.recall.config import FLAT_HYBRID
from memstream.core.recall.engine import Ask, recall
from memstream.core.recall.rank import tokens
from memstream.core.unit_views import views_spec
from memstream.core.units import render_text, units_spec
from memstream.schemas.events import DEFAULT_TENANT, partition_key
from memstream.streams.offline import InProcess

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
MEMSTREAM = "memstream"
ORACLE = "oracle"
SYSTEMS = (MEMSTREAM, *baselines.ORDERS, ORACLE)
SCORES = ("text", "answer", "id")


@dataclass(frozen=True)
class Question:
    sample_id: str
    text: str
    category: int
    evidence: tuple[str, ...]  # dia_ids, unique, in the dataset's order
    answer: str | None  # None: no gold answer (most adversarial questions)
    adversarial_answer: str | None


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    user_key: str
    now: datetime  # when its questions are asked
    turns: list[RawTurn]  # in dialogue order
    contents: dict[str, str]  # dia_id -> the turn's content as ingested, without the speaker
    questions: list[Question]


def load(path: Path, tenant: str = DEFAULT_TENANT) -> tuple[list[Conversation], int]:
    """The conversations of a LoCoMo-format file, and how many questions were skipped (no evidence
    turn of the conversation)."""
    by_user: dict[str, list[RawTurn]] = defaultdict(list)
    contents: dict[str, dict[str, str]] = defaultdict(dict)
    for turn in locomo_turns(path, tenant=tenant):
        by_user[turn.key].append(RawTurn(turn.turn_id, render_text(turn.messages), turn.ts))
        contents[turn.key][turn.turn_id] = " ".join(m.content for m in turn.messages)
    conversations: list[Conversation] = []
    skipped = 0
    for sample in orjson.loads(path.read_bytes()):
        sample_id = sample["sample_id"]
        key = partition_key(tenant, sample_id)
        conv = sample["conversation"]
        last = session_numbers(conv)[-1]
        asked: list[Question] = []
        for qa in sample["qa"]:
            # A few evidence strings are malformed ("D8:6; D9:17"): read every D<n>:<m> in them.
            found = (e for raw in qa.get("evidence", []) for e in re.findall(r"D\d+:\d+", raw))
            evidence = tuple(dict.fromkeys(e for e in found if e in contents[key]))
            if not evidence:
                skipped += 1
                continue
            asked.append(
                Question(
                    sample_id,
                    qa["question"],
                    int(qa["category"]),
                    evidence,
                    _text_or_none(qa.get("answer")),
                    _text_or_none(qa.get("adversarial_answer")),
                )
            )
        now = parse_locomo_time(conv[f"session_{last}_date_time"]) + timedelta(days=1)
        conversations.append(Conversation(sample_id, key, now, by_user[key], contents[key], asked))
    return conversations, skipped


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)  # a few answers are bare years (2022)


async def build_memory(settings: Settings, embedder: Embedder, path: Path, tenant: str) -> EdgeShards:
    """Ingest and consolidate the whole file on a fresh store under ``settings.storage.data_dir``."""
    shards = EdgeShards(
        settings.storage.data_dir / "store",
        [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)],
    )
    await InProcess(settings, embedder, shards).run(locomo_turns(path, tenant=tenant))
    return shards


async def evaluate(
    settings: Settings,
    path: Path,
    budgets: Sequence[int],
    tenant: str = DEFAULT_TENANT,
    progress: bool = True,
) -> dict[str, Any]:
    conversations, skipped = load(path, tenant)
    total = sum(len(c.questions) for c in conversations)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memstream-eval-") as tmp:
        settings = settings.replace(data_dir=Path(tmp))
        embedder = make_embedder(settings.embedding)
        shards = await build_memory(settings, embedder, path, tenant)
        bar = tqdm(total=total, desc="questions", disable=not progress)
        for conv in conversations:
            lines = [t.line for t in conv.turns]
            position = {t.turn_id: i for i, t in enumerate(conv.turns)}
            turn_vectors = embedder.embed([t.text for t in conv.turns])
            question_vectors = embedder.embed([q.text for q in conv.questions])
            for q, vector in zip(conv.questions, question_vectors, strict=True):
                cosines = (turn_vectors @ vector).tolist()
                orders = baselines.rankings(conv.turns, cosines, q.text, FLAT_HYBRID)
                orders[ORACLE] = sorted(position[e] for e in q.evidence)
                evidence_turns = [conv.contents[e] for e in q.evidence]
                cells: dict[str, Any] = {}
                for budget in budgets:
                    ask = Ask(conv.user_key, q.text, conv.now, budget_tokens=budget)
                    result = recall(shards.get(0), embedder, ask)
                    items = [item for item, _ in result.items]
                    cell: dict[str, Any] = {
                        MEMSTREAM: {
                            "items": [
                                {
                                    "id": i.id,
                                    "kind": i.kind,
                                    "level": i.level,
                                    "tokens": tokens(i.text),
                                    "text": i.text,
                                    "source_turn_ids": list(i.source_turn_ids),
                                }
                                for i in items
                            ],
                            "context": result.context,
                            "scores": {
                                "text": text_recall(evidence_turns, [i.text for i in items]),
                                "answer": _answer(q, result.context, budget),
                                "id": id_recall(q.evidence, (t for i in items for t in i.source_turn_ids)),
                            },
                        }
                    }
                    for name, order in orders.items():
                        taken = baselines.fill(lines, order, budget)
                        context = baselines.render(lines, taken)
                        cell[name] = {
                            "turn_ids": [conv.turns[i].turn_id for i in taken],
                            "context": context,
                            "scores": {
                                "text": text_recall(evidence_turns, [lines[i] for i in taken]),
                                "answer": _answer(q, context, budget),
                            },
                        }
                    cells[str(budget)] = cell
                rows.append(
                    {
                        "sample_id": q.sample_id,
                        "question": q.text,
                        "category": q.category,
                        "evidence": list(q.evidence),
                        "evidence_turns": dict(zip(q.evidence, evidence_turns, strict=True)),
                        "answer": q.answer,
                        "adversarial_answer": q.adversarial_answer,
                        "budgets": cells,
                    }
                )
                bar.update()
        bar.close()
        shards.close()
    return {
        "data": str(path),
        "tenant": tenant,
        "embedder": settings.embedding.embedder,
        "writer": "llm" if settings.llm.llm_base_url else "extractive",
        "budgets": list(budgets),
        "conversations": len(conversations),
        "questions": len(rows),
        "skipped_questions": skipped,
        "scores": aggregate(rows, budgets),
        "per_question": rows,
    }


def _answer(q: Question, context: str, budget: int) -> float | None:
    return None if q.answer is None else answer_recall(q.answer, context, budget)


def category_names(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The categories present, in LoCoMo's numbering, then "all"."""
    present = {row["category"] for row in rows}
    return [CATEGORIES.get(c, str(c)) for c in sorted(present)] + ["all"]


def aggregate(rows: Sequence[dict[str, Any]], budgets: Sequence[int]) -> dict[str, Any]:
    """Means of the rows' scores: budget -> system -> category -> score -> mean (4 decimals; None when
    no row has that score), with ``questions`` and ``answered`` counts."""
    out: dict[str, Any] = {}
    for budget in map(str, budgets):
        out[budget] = {}
        for system in SYSTEMS:
            by_category: dict[str, dict[str, Any]] = {}
            for name in category_names(rows):
                mine = [r for r in rows if name == "all" or CATEGORIES.get(r["category"]) == name]
                scores = [r["budgets"][budget][system]["scores"] for r in mine]
                cell: dict[str, Any] = {}
                for score in SCORES:
                    values = [s[score] for s in scores if s.get(score) is not None]
                    if score in scores[0]:
                        cell[score] = round(statistics.mean(values), 4) if values else None
                cell["questions"] = len(mine)
                cell["answered"] = sum(s["answer"] is not None for s in scores)
                by_category[name] = cell
            out[budget][system] = by_category
    return out


LABELS = {
    MEMSTREAM: "memstream",
    "hybrid": "flat hybrid",
    "dense": "flat dense",
    "bm25": "flat BM25",
    ORACLE: "oracle (evidence)",
}


def format_table(report: dict[str, Any]) -> str:
    """The report's means as percentages: per budget, every system's text, multi-hop text, answer and id
    recall, then text and answer per category."""

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f}"

    out = [
        f"{report['questions']} questions over {report['conversations']} conversations "
        f"(tenant {report['tenant']}, writer {report['writer']}, embedder {report['embedder']}; "
        f"{report['skipped_questions']} without evidence skipped). Scores in %."
    ]
    categories = category_names(report["per_question"])
    for budget, systems in report["scores"].items():
        out.append("")
        out.append(
            f"{'budget ' + budget + ' tokens':<22} {'text':>5} {'multi-hop text':>15} {'answer':>7} {'id':>5}"
        )
        for system, cells in systems.items():
            multi_hop = cells.get("multi-hop", {}).get("text")
            everything = cells["all"]
            out.append(
                f"  {LABELS[system]:<20} {pct(everything['text']):>5} {pct(multi_hop):>15} "
                f"{pct(everything['answer']):>7} {pct(everything.get('id')):>5}"
            )
        for score in ("text", "answer"):
            out.append(f"  {score + ' by category':<20} " + " ".join(f"{c:>11}" for c in categories))
            for system, cells in systems.items():
                row = " ".join(f"{pct(cells[c][score]):>11}" for c in categories)
                out.append(f"  {LABELS[system]:<20} {row}")
    return "\n".join(out)
