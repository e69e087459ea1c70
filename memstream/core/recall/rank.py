"""The pure core of recall: leaf scores, tree propagation within a token budget, order and rendering.

Plain :class:`Item`s in (no store, no embedder, no clock), so ranking is deterministic and unit-tested;
``engine.recall`` feeds it. The tunables are parameters, their values in ``config.RecallConfig``; how
``select`` propagates relevance up the tree and why: docs/recall.md.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

from memstream.core.dates import coarse_date, render_span
from memstream.core.lexical import K1, B, stem, tokenize
from memstream.core.plain_text import plain
from memstream.core.recall.config import DEFAULT
from memstream.core.sentences import bracketed, is_small_talk, split_sentences, without_small_talk

Complexity = Literal["simple", "hybrid", "complex"]

LEAF_LEVEL = 1
CHARS_PER_TOKEN = 4

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


@dataclass(frozen=True)
class Item:
    """A candidate memory or unit, as recall sees it."""

    id: str
    kind: str  # "unit", or a MemoryKind: "episode", "fact", "observation", "session", ..., "persona"
    level: int
    text: str
    start: datetime  # aware; the time it is about
    end: datetime | None  # exclusive; None = still holds
    recorded_at: datetime
    source_turn_ids: tuple[str, ...]  # the turns its text carries: what recall credits
    parent_id: str | None = None
    children: tuple[str, ...] = ()
    current: bool = True  # False: a superseded fact, kept for history
    dense: float = 0.0  # cosine to the query, filled by the caller
    session_id: str | None = None  # units: the dialogue session they were said in
    covers_turn_ids: tuple[str, ...] = ()  # every turn beneath it (Memory.covers_turn_ids); units: their turn
    # units: when what they tell happened (TSM semantic time), [start, end) and its granularity
    event_times: tuple[tuple[datetime, datetime, str], ...] = ()
    # units of several sentences: their sentence nearest the query ("Speaker: sentence"), what ``select``
    # may return in place of the unit when the whole does not fit; "" = none
    brief: str = ""


Scored = tuple[Item, float]


def event_interval(item: Item) -> tuple[datetime, datetime | None]:
    """When what ``item`` tells happened: a unit's semantic time, the span of the event times its text
    names ("I ran 10k last weekend", said on Monday: that Saturday to Monday), else the time it was said;
    a memory's own interval (``start``/``end`` already are the time it is about)."""
    if not item.event_times:
        return item.start, item.end
    return min(start for start, _, _ in item.event_times), max(end for _, end, _ in item.event_times)


def plan_complexity(query: str, has_time_intent: bool) -> Complexity:
    """Which TiMem budget a question needs; the rules are listed above ``_COMPLEX``."""
    text = query.lower()
    if _COMPLEX.search(text):
        return "complex"
    if has_time_intent or _AGGREGATE.search(text):
        return "hybrid"
    return "simple"


def bm25_scores(query: str, docs: Sequence[str], k1: float = K1, b: float = B) -> list[float]:
    """Okapi BM25 of ``query`` against each of ``docs`` (the corpus), normalised to [0, 1] by the max.

    Stop words count neither as terms nor towards a document's length. Only the query's terms are counted
    (recall scores a few hundred documents per question)."""
    return _bm25(tokenize(query), [tokenize(d) for d in docs], k1, b)


def _bm25(query: Sequence[str], words: Sequence[Sequence[str]], k1: float = K1, b: float = B) -> list[float]:
    """``bm25_scores`` of the query's words against each document's words."""
    terms = list(dict.fromkeys(query))  # unique, in query order, so sums are deterministic
    return _okapi([[w.count(t) for t in terms] for w in words], [len(w) for w in words], k1, b)


def _okapi(
    counts: Sequence[Sequence[int]], lengths: Sequence[int], k1: float = K1, b: float = B
) -> list[float]:
    """Okapi BM25 from each document's count of each query term and its length, normalised by the max."""
    if not counts or not counts[0]:
        return [0.0] * len(counts)
    avgdl = sum(lengths) / len(lengths)
    if avgdl == 0:
        return [0.0] * len(counts)
    n = len(counts)
    terms = range(len(counts[0]))
    df = [sum(1 for row in counts if row[j]) for j in terms]
    # Lucene's idf is never negative: a common term cannot rank a matching doc below a non-matching one.
    idf = [math.log(1 + (n - d + 0.5) / (d + 0.5)) for d in df]
    raw: list[float] = []
    for row, length in zip(counts, lengths, strict=True):
        norm = k1 * (1 - b + b * length / avgdl)
        raw.append(sum(idf[j] * f * (k1 + 1) / (f + norm) for j, f in enumerate(row) if f))
    top = max(raw)
    return [s / top for s in raw] if top > 0 else [0.0] * len(counts)


def leaf_scores(
    items: Sequence[Item], query: str, lam: float = DEFAULT.lam, stemmed: float = DEFAULT.stemmed
) -> list[float]:
    """TiMem's leaf score: lam * cosine + (1 - lam) * BM25 (normalised over ``items``). The BM25 is
    (1 - stemmed) * BM25 of the words + stemmed * BM25 of their stems (``lexical.stem``), each
    normalised: "Where has Melanie camped?" meets "camping at the beach"."""
    terms = tokenize(query)
    words = [tokenize(i.text) for i in items]
    sparse = _bm25(terms, words)
    if stemmed > 0:
        # A document's count of a stem is that of the words with that stem: the query's stems are looked
        # up among the candidates' distinct words once, not stemmed word by word in every document.
        forms: dict[str, list[str]] = {s: [] for s in dict.fromkeys(map(stem, terms))}
        for word in {t for w in words for t in w}:
            if (s := stem(word)) in forms:
                forms[s].append(word)
        counts = [[sum(map(w.count, same)) for same in forms.values()] for w in words]
        stems = _okapi(counts, [len(w) for w in words])
        sparse = [(1 - stemmed) * s + stemmed * t for s, t in zip(sparse, stems, strict=True)]
    return [lam * i.dense + (1 - lam) * s for i, s in zip(items, sparse, strict=True)]


def _ranked(scored: Sequence[Scored]) -> list[Scored]:
    return sorted(scored, key=lambda p: (-p[1], p[0].id))


def top(scored: Sequence[Scored], k: int) -> list[Scored]:
    """The ``k`` best by score; ties by id."""
    return _ranked(scored)[:k]


def smooth_neighbours(scored: Sequence[Scored], weight: float = DEFAULT.neighbour_weight) -> list[Scored]:
    """Each unit's score plus ``weight`` times the better score of its neighbours: the units just before and
    after it (by start, then id) among ``scored`` in the same session. In a dialogue the turn that answers is
    often next to the one that matches the question ("What pet do you have?" - "Two cats, Luna and
    Oliver"). Items without a session keep their score; neighbours are read from the input scores."""
    by_session: dict[str, list[int]] = defaultdict(list)
    for n, (item, _) in enumerate(scored):
        if item.session_id is not None:
            by_session[item.session_id].append(n)
    out = [score for _, score in scored]
    for members in by_session.values():
        members.sort(key=lambda n: (scored[n][0].start, scored[n][0].id))
        for pos, n in enumerate(members):
            around = [scored[members[p]][1] for p in (pos - 1, pos + 1) if 0 <= p < len(members)]
            if around:
                out[n] = scored[n][1] + weight * max(around)
    return [(item, score) for (item, _), score in zip(scored, out, strict=True)]


def session_mass(scored: Sequence[Scored], depth: int = DEFAULT.session_depth) -> dict[str, float]:
    """Each session's score: the sum of the ``depth`` best scores of its units among ``scored``, over
    ``depth`` (a session of fewer units scores less), by session id."""
    by_session: dict[str, list[float]] = defaultdict(list)
    for item, score in scored:
        if item.kind == "unit" and item.session_id is not None:
            by_session[item.session_id].append(score)
    return {s: sum(sorted(scores, reverse=True)[:depth]) / depth for s, scores in by_session.items()}


def lift_sessions(
    scored: Sequence[Scored], mass: Mapping[str, float], weight: float = DEFAULT.session_weight
) -> list[Scored]:
    """Each unit's score plus ``weight`` times its session's ``mass`` (``session_mass`` of the leaf
    scores). A session in which several turns meet the question is about it as a whole, and its other
    turns are likelier to hold the rest of the answer than a turn of another session that matches as
    well alone: passage retrieval's mix of a passage's score with its document's. Items without a
    session keep their score; 0: off."""
    if not weight:
        return list(scored)
    return [
        (item, score + weight * mass.get(item.session_id or "", 0.0) if item.kind == "unit" else score)
        for item, score in scored
    ]


def asks_only(item: Item) -> bool:
    """A unit that only asks: every sentence of it that is not small talk is a question, and it shares
    no photo ("Melanie: What kind of books have you got?"). It matches a question's words and tells
    nothing; what it asks is answered by the turn after it, which ``smooth_neighbours`` lifts."""
    if item.kind != "unit":
        return False
    contents = [line.partition(": ")[2] or line for line in item.text.splitlines()]
    if any(bracketed(c) for c in contents):
        return False
    said = [s for c in contents for s in split_sentences(c) if not is_small_talk(s)]
    return bool(said) and all(s.endswith("?") for s in said)


def said_by(item: Item) -> set[str]:
    """The speakers of a unit: each of its lines opens with one ("Melanie: ..."); none for other items."""
    if item.kind != "unit":
        return set()
    return {speaker for speaker, sep, _ in (line.partition(": ") for line in item.text.splitlines()) if sep}


def weigh_turns(
    scored: Sequence[Scored],
    named: Collection[str],
    speaker_weight: float = DEFAULT.speaker_weight,
    question_weight: float = DEFAULT.question_weight,
) -> list[Scored]:
    """Units said by a speaker the question ``named`` scored ``1 + speaker_weight`` times (what a question
    asks about a person, that person's own turns state first-hand); units that only ask (``asks_only``)
    ``1 - question_weight`` times. Other items as they are."""
    out: list[Scored] = []
    for item, score in scored:
        if item.kind == "unit":
            if named and any(speaker in named for speaker in said_by(item)):
                score *= 1 + speaker_weight
            if question_weight and asks_only(item):
                score *= 1 - question_weight
        out.append((item, score))
    return out


def phatic(item: Item, min_content_words: int = DEFAULT.min_content_words) -> bool:
    """A unit that states next to nothing: fewer than ``min_content_words`` distinct content words (stop
    words and speaker names left out), e.g. "Thanks, Jon!" or "Bye!". It spends a context line on a
    greeting or an acknowledgement; the turns around it keep their own scores."""
    if item.kind != "unit":
        return False
    said = " ".join(line.partition(": ")[2] or line for line in item.text.splitlines())
    return len(set(tokenize(said))) < min_content_words


def drop_phatic(scored: Sequence[Scored], min_content_words: int = DEFAULT.min_content_words) -> list[Scored]:
    return [p for p in scored if not phatic(p[0], min_content_words)]


def condensed(item: Item) -> Item:
    """A unit as recall returns it: each ``speaker: content`` line without its small-talk sentences
    (``sentences.without_small_talk``: greetings, thanks, bare reactions), captions kept, a line of
    small talk only kept whole. "Melanie: Wow, Caroline! Thanks! I ran a charity race last week." reads
    "Melanie: I ran a charity race last week."; other items as they are."""
    if item.kind != "unit":
        return item
    text = "\n".join(_condensed_line(line) for line in item.text.splitlines())
    return item if text == item.text else replace(item, text=text)


def _condensed_line(line: str) -> str:
    speaker, sep, content = line.partition(": ")
    return f"{speaker}{sep}{without_small_talk(content)}" if sep else line


def ancestor_ids(item: Item, by_id: Mapping[str, Item]) -> list[str]:
    """The ids above ``item`` by ``parent_id`` links that ``by_id`` holds, nearest first (cycles cut)."""
    out: list[str] = []
    seen = {item.id}
    parent_id = item.parent_id
    while parent_id is not None and parent_id not in seen and parent_id in by_id:
        seen.add(parent_id)
        out.append(parent_id)
        parent_id = by_id[parent_id].parent_id
    return out


def select(
    leaves: Sequence[Scored],
    by_id: Mapping[str, Item],
    budget_tokens: int,
    inside: Callable[[Item], bool] = lambda _: True,
    levels: Collection[int] | None = None,
    activated: int = DEFAULT.activated,
    level_decay: float = DEFAULT.level_decay,
    contained: float = DEFAULT.contained,
    *,
    zone: ZoneInfo,
    covered: float = DEFAULT.covered,
    briefs: bool = DEFAULT.briefs,
) -> list[Scored]:
    """Leaves and tree nodes whose rendered lines fit ``budget_tokens``, chosen greedily by gain per token.

    An item costs what it adds to ``render_context(..., zone)``: its line (``line_tokens``) and, for the
    first leaf of a day, the day's header (``header_tokens``), so the context of what is returned is never
    more than ``budget_tokens`` tokens (``tokens``; ``charged_tokens`` adds up the costs).

    The top ``activated`` leaves by score gain ``score - t``, t the score of the best leaf left out. A tree
    node above activated leaves (``parent_id`` links in ``by_id``) is worth the gains of those of them not
    yet represented: neither in the context nor below a node already kept. A leaf is charged the activated
    leaves' mean size, so leaves keep their score order, and a node competes with the leaves its tokens
    would buy: it enters when it stands for more relevant material than they would add. A leaf is never
    dropped because a node above it was kept (its text is the evidence; an extractive summary keeps a few
    sentences of a session). Items ``inside`` the asked time come first. Once activated leaves
    and nodes gain nothing more, the other leaves fill what is left in score order, then the remaining
    nodes above activated leaves. Items that do not fit are skipped; only items whose level is in
    ``levels`` (None: all) are returned. Scores: a leaf's own; a node's, the best activated leaf below it
    times ``level_decay`` per level above it. A leaf that says nothing new is skipped, and a kept leaf
    a later one says again dropped (``_Context.take``: ``contained``, ``covered``). With ``briefs``, the
    budget left at the end goes to the ``brief`` (the sentence nearest the query) of the units that did
    not fit whole, in queue order.
    """
    allow = (lambda level: True) if levels is None else levels.__contains__
    ranked = _ranked([p for p in leaves if p[0].level == LEAF_LEVEL])
    best = ranked[:activated]
    floor = ranked[activated][1] if len(ranked) > activated else 0.0
    gain = {item.id: max(0.0, score - floor) for item, score in best}
    context = _Context(ranked, zone, contained, covered)
    leaf_cost = max(1.0, sum(context.leaf_tokens(item) for item, _ in best) / len(best)) if best else 1.0

    tree = _tree(best, gain, by_id, allow, level_decay)
    node_ids, under, chains, node_score, mass = tree.ids, tree.under, tree.chains, tree.score, tree.mass
    node_cost = {node_id: line_tokens(by_id[node_id], zone) for node_id in node_ids}
    node_inside = {node_id: inside(by_id[node_id]) for node_id in node_ids}

    def represent(leaf_id: str) -> None:
        """The leaf is in the context, or below a kept node: no other node stands for it any more."""
        for node_id in chains.pop(leaf_id, ()):
            mass[node_id] -= gain[leaf_id]

    def fits(tokens: int) -> bool:
        return context.used + tokens <= budget_tokens

    queue = (
        sorted(ranked, key=lambda p: (not inside(p[0]), -gain.get(p[0].id, 0.0), -p[1], p[0].id))
        if allow(LEAF_LEVEL)
        else []
    )
    chosen: set[str] = set()
    skipped: list[Scored] = []  # leaves that did not fit whole, in queue order
    head = 0
    while True:
        while head < len(queue) and not fits(context.leaf_tokens(queue[head][0])):
            # Not taken up again whole: a leaf's cost falls by its day's header only once another leaf
            # paid that header from the same budget, or by a kept leaf said again (``covered``).
            skipped.append(queue[head])
            head += 1
        leaf = queue[head] if head < len(queue) else None
        leaf_key = (inside(leaf[0]), gain.get(leaf[0].id, 0.0) / leaf_cost) if leaf is not None else None
        open_nodes = [n for n in node_ids if n not in chosen and mass[n] > 1e-9 and fits(node_cost[n])]
        # The first best: ties go to the smaller id.
        node = max(open_nodes, key=lambda n: (node_inside[n], mass[n] / max(1, node_cost[n])), default=None)
        if node is not None and (
            leaf_key is None or (node_inside[node], mass[node] / max(1, node_cost[node])) > leaf_key
        ):
            context.add((by_id[node], node_score[node]), node_cost[node])
            chosen.add(node)
            for leaf_id in under[node]:
                represent(leaf_id)
        elif leaf is not None:
            head += 1
            represent(leaf[0].id)
            context.take(leaf)
        else:
            break
    if briefs:
        for item, score in skipped:
            if item.brief and item.id not in context.said:
                context.take_brief(item, score, budget_tokens)
    # Every leaf is in (a small store, a large budget): the broader context of the activated ones.
    for node_id in sorted(node_ids, key=lambda n: (not node_inside[n], -node_score[n], n)):
        if node_id not in chosen and fits(node_cost[node_id]):
            context.add((by_id[node_id], node_score[node_id]), node_cost[node_id])
    return context.kept


class _Context:
    """What ``select`` has kept so far, and what it costs: each leaf's line, and its day's header once."""

    def __init__(self, ranked: Sequence[Scored], zone: ZoneInfo, contained: float, covered: float) -> None:
        self.zone, self.contained, self.covered = zone, contained, covered
        self.cost = {item.id: line_tokens(item, zone) for item, _ in ranked}
        self.header = {item.id: day_header(item, zone) for item, _ in ranked}
        self.kept: list[Scored] = []
        self.said: dict[str, set[str]] = {}  # the rendered words of each leaf kept (rendered_words), by id
        self.opened: set[str] = set()  # the days whose header the context already holds
        self.used = 0

    def leaf_tokens(self, leaf: Item) -> int:
        day = self.header[leaf.id]
        return self.cost[leaf.id] + (0 if day in self.opened else header_tokens(day))

    def add(self, node: Scored, tokens: int) -> None:
        self.kept.append(node)
        self.used += tokens

    def take(self, leaf: Scored) -> None:
        """Keep ``leaf`` unless a kept leaf says what it says; drop the kept leaves it says again.

        Leaves are compared by what they say as rendered (``rendered_words``: the line and its day's
        header, so a date a fact or an episode spells out counts as said by the header of a unit of that
        day). A leaf that says nothing new is skipped: ``contained`` or more of its words are in one leaf
        already kept (a unit whose episode quotes it whole). A kept leaf that a later one says again is
        dropped and its tokens go back to the budget: ``covered`` or more of its words are in the later
        leaf (the fact "Caroline went to a support group (7 May 2023)" once the turn that said it is
        kept); above 1: never."""
        words = rendered_words(leaf[0], self.zone)
        if words and any(len(words & other) >= self.contained * len(words) for other in self.said.values()):
            return  # what it says is in the context already
        again = {
            i for i, other in self.said.items() if other and len(other & words) >= self.covered * len(other)
        }
        if again:
            self.kept = [p for p in self.kept if p[0].id not in again]
            for i in again:
                del self.said[i]
            self.opened = {self.header[i.id] for i, _ in self.kept if i.level == LEAF_LEVEL}
            self.used = charged_tokens(self.kept, self.zone)
        self.kept.append(leaf)
        self.said[leaf[0].id] = words
        self.used += self.leaf_tokens(leaf[0])
        self.opened.add(self.header[leaf[0].id])

    def take_brief(self, item: Item, score: float, budget_tokens: int) -> None:
        """Keep the unit's ``brief`` in its place when it fits."""
        short = replace(item, text=item.brief, brief="")
        self.cost[item.id] = line_tokens(short, self.zone)
        if self.used + self.leaf_tokens(short) <= budget_tokens:
            self.take((short, score))


@dataclass(frozen=True)
class _Tree:
    """The tree nodes above ``select``'s activated leaves."""

    ids: list[str]  # sorted, so ties go to the smaller id
    under: dict[str, list[str]]  # node -> the activated leaves it stands for
    chains: dict[str, list[str]]  # activated leaf -> the nodes above it, nearest first
    score: dict[str, float]  # node -> the best activated leaf below it, decayed by level
    mass: dict[str, float]  # node -> the gains of the leaves below it not yet represented


def _tree(
    best: Sequence[Scored],
    gain: Mapping[str, float],
    by_id: Mapping[str, Item],
    allow: Callable[[int], bool],
    level_decay: float,
) -> _Tree:
    """Which activated leaves each node (of a level ``allow``ed) stands for, and what they are worth."""
    under: dict[str, list[str]] = defaultdict(list)
    chains: dict[str, list[str]] = {}
    node_score: dict[str, float] = {}
    for item, score in best:
        chain = [
            n for n in ancestor_ids(item, by_id) if by_id[n].level > LEAF_LEVEL and allow(by_id[n].level)
        ]
        chains[item.id] = chain
        for node_id in chain:
            under[node_id].append(item.id)
            reported = score * level_decay ** max(1, by_id[node_id].level - item.level)
            node_score[node_id] = max(node_score.get(node_id, 0.0), reported)
    mass = {node_id: sum(gain[i] for i in ids) for node_id, ids in under.items()}
    return _Tree(sorted(mass), dict(under), chains, node_score, mass)


def rendered_words(item: Item, zone: ZoneInfo) -> set[str]:
    """The content words a leaf adds to a context: those of its line and of its day's header."""
    return set(tokenize(f"{day_header(item, zone)} {render_line(item, zone)}"))


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
    """memstream's one token count, for budgets and reported sizes: ⌈characters / 4⌉ (Python characters,
    i.e. Unicode code points). An estimate of an English BPE tokenizer's count, no tokenizer needed."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def line_tokens(item: Item, zone: ZoneInfo) -> int:
    """What ``item``'s own line costs in a rendered context (``render_line``) with the line break after
    it; a leaf's day header is charged apart (``header_tokens``), once per day."""
    return tokens(render_line(item, zone) + "\n")


def header_tokens(header: str) -> int:
    """What a day's header line (``day_header``) and its line break cost."""
    return tokens(header + "\n")


def charged_tokens(selected: Sequence[Scored], zone: ZoneInfo) -> int:
    """What ``select`` charges for ``selected``: every line, and the header of every day of a leaf once.
    Every line is charged a break though the last has none, and ⌈a/4⌉ + ⌈b/4⌉ ≥ ⌈(a+b)/4⌉, so this is at
    least ``tokens(render_context(selected, zone))`` in any order."""
    days = {day_header(item, zone) for item, _ in selected if item.level == LEAF_LEVEL}
    return sum(line_tokens(item, zone) for item, _ in selected) + sum(header_tokens(d) for d in days)


def order(selected: Sequence[Scored], closeness: Callable[[Item], float] | None = None) -> list[Scored]:
    """Presentation order: broad to narrow (profile/topic, week, day, session, leaves), then by temporal
    closeness to the asked time (``closeness``: 0 inside it), then chronological."""
    return sorted(
        selected, key=lambda p: (-p[0].level, closeness(p[0]) if closeness else 0.0, p[0].start, p[0].id)
    )


def _event_note(item: Item, zone: ZoneInfo) -> str:
    """The note " (about <when>)" for a unit's event times that do not contain the day it was said: "I ran
    a race last Saturday", said on 25 May, reads "I ran a race last Saturday. (about 20 May 2023)" under
    the header "[25 May 2023]"."""
    if not item.event_times:
        return ""
    said = item.start.astimezone(zone).date()
    named = dict.fromkeys(
        coarse_date(start, granularity, zone)
        for start, end, granularity in item.event_times
        if not start.astimezone(zone).date() <= said < end.astimezone(zone).date()
    )
    return f" (about {', '.join(named)})" if named else ""


def day_header(item: Item, zone: ZoneInfo) -> str:
    """The header line a leaf is rendered under: the day (or days, for a fact that holds over a span) it
    is about, "[8 May 2023]"."""
    return f"[{render_span(item.start, item.end, zone)}]"


def render_line(item: Item, zone: ZoneInfo) -> str:
    """The line an item takes in a context, its text made ``plain`` (no text can pass for a header,
    a node or another item): a leaf's text under its day's header (``day_header``), with a unit's
    event times when they differ from the day it was said (``_event_note``); "[<kind> <date range>]
    <text>" for a tree node. Leaves carry no kind: a fact reads
    as a statement, a unit opens with its speaker, and the tokens go to text."""
    text = plain(item.text)
    if item.level == LEAF_LEVEL:
        return f"{text}{_event_note(item, zone)}"
    return f"[{item.kind} {render_span(item.start, item.end, zone)}] {text}"


def render_context(selected: Sequence[Scored], zone: ZoneInfo) -> str:
    """One line per item (``render_line``), joined by line breaks; the leaves of one day under one header
    line, where the first of them stands in ``selected``, in their order there.

    One header per day rather than a date on every line: about a fifth of a leaf's tokens were its date,
    and the leaves of a conversation come in runs of one day. Days keep the order of ``selected``
    (``order``: chronological, or nearest the asked time first), so an agent reads a dated timeline and
    the turns of one day in the order they were said."""
    blocks: list[list[str]] = []
    days: dict[str, list[str]] = {}
    for item, _ in selected:
        if item.level != LEAF_LEVEL:
            blocks.append([render_line(item, zone)])
            continue
        header = day_header(item, zone)
        if header not in days:
            days[header] = [header]
            blocks.append(days[header])
        days[header].append(render_line(item, zone))
    return "\n".join(line for block in blocks for line in block)
