"""The pure core of hierarchical recall: TiMem's leaf activation and tree propagation, TSM's rerank.

Everything here works on plain :class:`Item`s (no store, no embedder, no clock), so recall's ranking
is deterministic and unit-testable. The intended pipeline, for one query:

    complexity = plan_complexity(query, has_time_intent)
    leaves     = activate(items, query, complexity)             # top-k level-1 memories
    scored     = propagate(leaves, by_id, complexity)           # + their ancestors, per-level budgets
    scored     = keep_valid(scored, asks_change, at)            # bi-temporal validity of facts
    scored     = temporal_rerank(scored, inside, distance)      # in the query's interval first
    context    = render_context(order(gate(scored, budget_tokens)), zone)

Parameters follow ``DESIGN.md`` ("Parameters from the papers"): leaf score λ·cosine + (1−λ)·BM25 with
λ = 0.9, 20 leaves, and TiMem's per-level budgets for simple / hybrid / complex questions.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

Complexity = Literal["simple", "hybrid", "complex"]

# TiMem per-level budgets (level -> how many memories of that level recall may keep).
BUDGETS: dict[Complexity, dict[int, int]] = {
    "simple": {1: 20, 2: 4, 5: 1},
    "hybrid": {1: 20, 2: 4, 3: 2, 5: 1},
    "complex": {1: 20, 2: 8, 3: 4, 4: 2, 5: 1},
}
LAMBDA = 0.9  # weight of the dense cosine in a leaf's score (TiMem)
LEVEL_DECAY = 0.9  # an ancestor n levels above a leaf scores leaf_score * LEVEL_DECAY**n
LEAF_LEVEL = 1
COVERING_KINDS = frozenset({"episode", "session", "day", "week", "profile", "topic", "persona"})
CHARS_PER_TOKEN = 4

# A small English stop-word list: enough to stop "what/did/the" from dominating BM25 on short questions.
_STOP_WORDS = """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
_TOKEN = re.compile(r"[a-z0-9]+")

# plan_complexity rules, checked in this order (first match wins):
#   complex: why / how (except how many, much, often, old, long, far) / compare / difference / summarise /
#            "over the last|past ... months|years" / multi-hop ("and then", "after|before ... what|where|who")
#   hybrid:  a time intent, or an aggregation over a period (how many / how much / how often / list / all
#            the / every / total / times)
#   simple:  everything else (short single-fact questions: "what is X's favourite ...", "where does X live")
_COMPLEX = re.compile(
    r"\bwhy\b|\bhow\b(?!\s+(?:many|much|often|old|long|far)\b)|\bcompar\w*|\bdifferen\w*|\bsummar\w*"
    r"|\bover the (?:last|past)\b.*\b(?:months|years)\b|\band then\b"
    r"|\b(?:after|before)\b.*\b(?:what|where|who|which)\b"
)
_AGGREGATE = re.compile(r"\bhow (?:many|much|often)\b|\blist\b|\ball the\b|\bevery\b|\btotal\b|\btimes\b")
_MONTH_NAMES = "January February March April May June July August September October November December"
_MONTHS = tuple(_MONTH_NAMES.split())  # not strftime("%B"): that is locale-dependent


@dataclass(frozen=True)
class Item:
    """A candidate memory or unit, as recall sees it."""

    id: str
    kind: str  # "unit", "episode", "fact", "session", "day", "week", "profile", "topic", "persona"
    level: int
    text: str
    start: datetime  # aware; the time it is about
    end: datetime | None  # exclusive; None = still holds
    recorded_at: datetime
    source_turn_ids: tuple[str, ...]
    parent_id: str | None = None
    children: tuple[str, ...] = ()
    current: bool = True  # False: a superseded fact, kept for history
    dense: float = 0.0  # cosine to the query, filled by the caller


Scored = tuple[Item, float]


def plan_complexity(query: str, has_time_intent: bool) -> Complexity:
    """Which TiMem budget a question needs; the rules are listed above ``_COMPLEX``."""
    text = query.lower()
    if _COMPLEX.search(text):
        return "complex"
    if has_time_intent or _AGGREGATE.search(text):
        return "hybrid"
    return "simple"


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOP_WORDS]


def bm25_scores(query: str, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Okapi BM25 of ``query`` against each of ``docs`` (the corpus), normalised to [0, 1] by the max."""
    tokenized = [tokenize(d) for d in docs]
    terms = list(dict.fromkeys(tokenize(query)))  # unique, in query order, so sums are deterministic
    if not tokenized or not terms:
        return [0.0] * len(docs)
    avgdl = sum(map(len, tokenized)) / len(tokenized)
    if avgdl == 0:
        return [0.0] * len(docs)
    n = len(tokenized)
    df = Counter(t for doc in tokenized for t in set(doc))
    # Lucene's idf is never negative: a common term cannot rank a matching doc below a non-matching one.
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}
    raw: list[float] = []
    for doc in tokenized:
        tf = Counter(doc)
        norm = k1 * (1 - b + b * len(doc) / avgdl)
        raw.append(sum(idf[t] * tf[t] * (k1 + 1) / (tf[t] + norm) for t in terms if tf[t]))
    top = max(raw)
    return [s / top for s in raw] if top > 0 else [0.0] * len(docs)


def leaf_scores(items: Sequence[Item], query: str, lam: float = LAMBDA) -> list[float]:
    """TiMem's leaf score: lam * cosine + (1 - lam) * BM25 (normalised over ``items``)."""
    sparse = bm25_scores(query, [i.text for i in items])
    return [lam * i.dense + (1 - lam) * s for i, s in zip(items, sparse, strict=True)]


def _ranked(scored: Sequence[Scored]) -> list[Scored]:
    return sorted(scored, key=lambda p: (-p[1], p[0].id))


def activate(items: Sequence[Item], query: str, complexity: Complexity, lam: float = LAMBDA) -> list[Scored]:
    """The top ``BUDGETS[complexity][1]`` leaves (units, episodes, facts) by leaf score; ties by id."""
    leaves = [i for i in items if i.level == LEAF_LEVEL]
    scored = list(zip(leaves, leaf_scores(leaves, query, lam), strict=True))
    return _ranked(scored)[: BUDGETS[complexity].get(LEAF_LEVEL, 0)]


def propagate(activated: Sequence[Scored], by_id: Mapping[str, Item], complexity: Complexity) -> list[Scored]:
    """The activated leaves plus their ancestors (parent_id links), within the per-level budgets.

    An ancestor scores the max over its activated descendants of leaf_score * LEVEL_DECAY**(levels above the
    leaf), so a session directly over a strong unit outranks a week far above it. Levels without a budget keep
    no ancestors, but the walk goes through them (a simple question still reaches the profile)."""
    leaf_ids = {item.id for item, _ in activated}
    best: dict[str, Scored] = {}
    for leaf, score in activated:
        seen = {leaf.id}  # guards against a malformed cycle of parent links
        parent_id = leaf.parent_id
        while parent_id is not None and parent_id not in seen and parent_id in by_id:
            seen.add(parent_id)
            node = by_id[parent_id]
            decayed = score * LEVEL_DECAY ** max(1, node.level - leaf.level)
            if node.id not in leaf_ids and (node.id not in best or decayed > best[node.id][1]):
                best[node.id] = (node, decayed)
            parent_id = node.parent_id
    budget = BUDGETS[complexity]
    kept: list[Scored] = []
    for level in sorted({item.level for item, _ in best.values()}):
        at_level = [p for p in best.values() if p[0].level == level]
        kept.extend(_ranked(at_level)[: budget.get(level, 0)])
    return [*activated, *kept]


def temporal_rerank(
    scored: Sequence[Scored], inside: Callable[[Item], bool], distance: Callable[[Item], float]
) -> list[Scored]:
    """TSM's rerank: inside the query's interval first, then by score, then closer in time; ties by id."""
    return sorted(scored, key=lambda p: (not inside(p[0]), -p[1], distance(p[0]), p[0].id))


def _holds_at(item: Item, at: datetime) -> bool:
    return item.start <= at and (item.end is None or at < item.end)


def _valid(item: Item, at: datetime | None) -> bool:
    return item.kind != "fact" or (item.current and (at is None or _holds_at(item, at)))


def keep_valid(scored: Sequence[Scored], asks_change: bool, at: datetime | None) -> list[Scored]:
    """Drop facts that no longer hold (superseded) or do not hold at ``at``; a change question keeps them all,
    since "where did I live before Porto?" is answered by the superseded fact."""
    if asks_change:
        return list(scored)
    return [p for p in scored if _valid(p[0], at)]


def tokens(text: str) -> int:
    """A cheap token estimate (about four characters per token), no tokenizer needed."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def gate(scored: Sequence[Scored], budget_tokens: int) -> list[Scored]:
    """Fit ``scored`` into ``budget_tokens``, greedily in the given order.

    A unit whose source turns are all covered by an episode or summary kept before it is redundant: dropped.
    An item that does not fit is skipped, so a later, smaller one may still use the remaining budget."""
    kept: list[Scored] = []
    covered: set[str] = set()
    used = 0
    for pair in scored:
        item = pair[0]
        if item.kind == "unit" and item.source_turn_ids and covered.issuperset(item.source_turn_ids):
            continue
        cost = tokens(item.text)
        if used + cost > budget_tokens:
            continue
        used += cost
        kept.append(pair)
        if item.kind in COVERING_KINDS:
            covered.update(item.source_turn_ids)
    return kept


def order(selected: Sequence[Scored], closeness: Callable[[Item], float] | None = None) -> list[Scored]:
    """Presentation order: broad to narrow (profile/topic, week, day, session, leaves), then by temporal
    closeness to the asked time (``closeness``: 0 inside it), then chronological."""
    return sorted(
        selected, key=lambda p: (-p[0].level, closeness(p[0]) if closeness else 0.0, p[0].start, p[0].id)
    )


def _format_date(d: date) -> str:
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def _date_span(item: Item, zone: ZoneInfo) -> str:
    first = item.start.astimezone(zone).date()
    if item.end is None or item.end <= item.start:
        return _format_date(first)
    # end is exclusive: a week [1 May 00:00, 8 May 00:00) is "1 May – 7 May".
    last = (item.end - timedelta(microseconds=1)).astimezone(zone).date()
    if last <= first:
        return _format_date(first)
    return f"{_format_date(first)} – {_format_date(last)}"


def render_context(selected: Sequence[Scored], zone: ZoneInfo) -> str:
    """One line per item, "[<kind> <date or date range in zone>] <text>", text folded onto one line."""
    return "\n".join(
        f"[{item.kind} {_date_span(item, zone)}] {' '.join(item.text.split())}" for item, _ in selected
    )
