"""Recall's tunables in one typed config, and the named presets that recall and the eval use.

Why each default is what it is, with the runs behind it: docs/recall.md and bench/RESULTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RecallConfig:
    lam: float  # weight of the cosine in a leaf's score: lam * cosine + (1 - lam) * BM25
    neighbour_weight: float  # share of the better neighbour's score a unit gains (rank.smooth_neighbours)
    min_content_words: int  # a unit with fewer distinct content words is phatic and dropped (rank.phatic)
    activated: int  # leaves whose gains the tree nodes above them stand for (rank.select)
    level_decay: float  # a node n levels above a leaf reports leaf score * level_decay**n (display only)
    unit_candidates: int  # the user's units nearest the query, fetched densely
    lexical_candidates: int  # units fetched by the store's BM25 besides them; 0 = dense only
    candidates: int  # nearest episodes, and nearest facts, fetched
    session_candidates: int  # nearest session nodes fetched, for their children lists
    max_session_lookups: int  # activated units whose session is looked up when it was not fetched
    levels: tuple[int, ...]  # levels returned when the caller names none (1: leaves)
    # A unit's dense score: turn_weight * its whole-turn cosine + sentence_weight * the best cosine of its
    # sentences + context_weight * the cosine of its context vector (memstream.core.unit_views).
    turn_weight: float
    sentence_weight: float
    context_weight: float
    view_candidates: int  # the user's units nearest the query by context, and by sentences, fetched (each)
    # A leaf with at least this share of its content words in one leaf already selected is skipped
    # (rank.select); above 1: never.
    contained: float
    # A question naming a speaker of the conversation (recall.speakers) is also embedded without the name:
    # a unit's dense score is (1 - w) * its score for the question + w * its score for the question without
    # the name, w this weight; its BM25 words leave the name out. 0: off (no extra embedding or search).
    speakerless_weight: float
    # The lexical score is (1 - stemmed) * BM25 of the words + stemmed * BM25 of their stems (lexical.stem)
    # over the candidates (rank.leaf_scores); 0: the words only.
    stemmed: float
    # A unit is returned and rendered without its small-talk sentences (rank.condensed: greetings, thanks,
    # bare reactions), so the budget holds more turns; scored on its whole text all the same.
    condense: bool
    # A kept leaf with at least this share of its rendered words (rank.rendered_words) in a leaf selected
    # after it is dropped and its tokens go back to the budget (rank.select); above 1: never.
    covered: float
    # The budget left once no whole leaf fits goes to the sentence nearest the query (Item.brief) of the
    # units that did not fit, in queue order (rank.select).
    briefs: bool
    # A unit said by a speaker the question names scores (1 + speaker_weight) times (rank.weigh_turns).
    speaker_weight: float
    # A unit that only asks (rank.asks_only) scores (1 - question_weight) times, once it has lifted its
    # neighbours (rank.weigh_turns).
    question_weight: float
    # After the neighbour smoothing, a unit scores session_weight times its session's mass more: the mean
    # of the session_depth best leaf scores of its session's units (rank.session_mass, rank.lift_sessions);
    # 0: off.
    session_weight: float
    session_depth: int


DEFAULT = RecallConfig(
    # Not TiMem's 0.9: MiniLM's cosines of relevant and unrelated turns differ by a few hundredths, so at
    # 0.9 BM25 hardly moves the order; 0.7 is better on LoCoMo dev at every budget.
    lam=0.7,
    # The answer is often the turn next to the one that matches the question. 0.4, not 0.3: LoCoMo dev
    # (bench/RESULTS.md, "Recall without repeats"), text 82.5 -> 83.6 at 500 tokens; 0.35 and 0.5 gave
    # 83.4 and 83.0, 0.2 81.3.
    neighbour_weight=0.4,
    # 3, not 4: at 4 short answers ("Yes, two cats") were dropped too and text recall fell.
    min_content_words=3,
    # Wider than TiMem's 20: a node only helps with relevant leaves the budget cannot hold, and about 20
    # leaves fit 1,000 tokens.
    activated=60,
    level_decay=0.9,
    unit_candidates=300,  # BM25 and the neighbour smoothing rerank within these
    # A unit that says the question's words is a candidate even beyond the dense list (thousands of units
    # a user); about what a budget can use, with room for an imperfect lexical order.
    lexical_candidates=100,
    candidates=40,
    session_candidates=64,
    max_session_lookups=8,
    # Leaves only: extractive tree nodes chosen by gain per token cost text and answer recall on LoCoMo
    # dev; they stay reachable by asking for their levels.
    levels=(1,),
    # Equal thirds (picked among four mixes on LoCoMo dev, bench/RESULTS.md): sentences lift questions
    # whose answer is one sentence of a long turn, the context view replies that only make sense after
    # the turn they answer; together they beat either.
    turn_weight=1 / 3,
    sentence_weight=1 / 3,
    context_weight=1 / 3,
    # The unit candidates' number (unit_candidates + lexical_candidates): a unit beyond them scores the
    # last hit's cosine (engine._unit_cosines).
    view_candidates=400,
    # 0.9: a unit an episode quotes whole, or a fact its unit states; skipping them raised text recall
    # at 1000 tokens by 0.3 on LoCoMo dev (0.6 % of returned items), changed nothing at 500.
    contained=0.9,
    # LoCoMo dev (docs/recall.md, "Questions that name a speaker"): text 77.6 -> 81.8 / 85.5 -> 88.4 and
    # multi-hop text 33.1 -> 39.5 / 50.3 -> 59.5 at 500 / 1000 tokens, no category lower; 0.2-0.5 within
    # a point of each other. Costs questions that name a speaker one embedding and one more search.
    speakerless_weight=0.3,
    # LoCoMo dev (docs/recall.md, "Stems in BM25"): multi-hop text 39.5 -> 45.3 / 59.5 -> 62.0 and answer
    # 75.6 -> 76.9 / 81.0 -> 81.3 at 500 / 1000 tokens, text 81.8 -> 82.1 / 88.4 -> 88.6; stems alone (1.0)
    # cost text at 500 tokens (80.9).
    stemmed=0.5,
    # LoCoMo dev (docs/recall.md, "A unit without its small talk"): 7 % more units at 500 tokens, text
    # 82.1 -> 82.5 / 88.6 -> 89.5 and answer 76.9 -> 77.1 / 81.3 -> 81.7 at 500 / 1000 tokens.
    condense=True,
    # 0.9, as ``contained``: the same test the other way round. LoCoMo dev (bench/RESULTS.md, "Recall
    # without repeats"): 5 % of the tokens returned at 500 were a fact or an episode that a returned unit
    # says again.
    covered=0.9,
    # Off: a brief was the sentence whose view the approximate search of the views found nearest, and
    # that search differed with how a partition's store was written, so one worker and two gave
    # different recalls of the same memory (tests/test_replicas.py); it is exact now (the sentence rows
    # of the activated units, engine._nearest_sentences). On, LoCoMo dev (bench/RESULTS.md, "Recall
    # without repeats"): answer recall +0.9 at 500 tokens and +1.0 at 250, text unchanged, on the default
    # of then; on today's default, nothing moves at 250, 500 or 1000 (bench/RESULTS.md, 2026-11-27).
    briefs=False,
    # A question that names a speaker is mostly answered by that speaker's own turns (LoCoMo dev, questions
    # naming one speaker: 79 % of their evidence turns against 65 % of the units returned at 500 tokens).
    # 0.1 with question_weight 0.4, LoCoMo dev (bench/RESULTS.md, "Speaker and question weights"): text
    # 70.4 -> 72.2 / 83.6 -> 84.6 / 89.0 -> 90.3 and multi-hop text 23.8 -> 26.9 / 44.0 -> 48.6 / 63.1 ->
    # 69.0 at 250 / 500 / 1000 tokens; 0.05-0.15 within 0.5 at 500. Higher weights lift multi-hop more and
    # cost the questions that name the wrong speaker (adversarial: 94 -> 85 at 500 with 0.2).
    speaker_weight=0.1,
    # A turn that only asks shares the question's words and states nothing (LoCoMo dev: 27 % of the units
    # returned at 500 tokens ended with "?", 10 % of the evidence turns); alone, 0.4: text 83.6 -> 84.1 at
    # 500 tokens, 0.2 / 0.6: 83.9 / 84.1.
    question_weight=0.4,
    # LoCoMo dev (bench/RESULTS.md, "Sessions relevant as a whole"): text 72.2 -> 74.4 / 84.6 -> 85.2 /
    # 90.3 -> 90.6, multi-hop text 26.9 -> 30.6 / 48.6 -> 46.9 / 69.0 -> 70.1 and answer 70.1 -> 71.0 /
    # 78.3 -> 77.9 / 81.8 -> 82.4 at 250 / 500 / 1000 tokens. Weights 0.25-0.5 all gave text >= 85 at 500
    # (0.2: 84.9), 0.3-0.45 kept multi-hop and answer at 1000 (0.2, 0.25, 0.5 lower); depth 2 / 4 with
    # 0.4: 85.2 / 84.8 at 500, depth 2 with multi-hop 67.8 at 1000.
    session_weight=0.4,
    session_depth=3,
)

# The eval's flat hybrid baseline (memstream.apps.baselines): the user's raw turns scored with TiMem's 0.9,
# none of recall's smoothing or filtering. The baseline reads ``lam``; recall run with this preset is the
# same flat scoring over the store's candidates.
FLAT_HYBRID = replace(
    DEFAULT,
    lam=0.9,
    neighbour_weight=0.0,
    min_content_words=0,
    turn_weight=1.0,
    sentence_weight=0.0,
    context_weight=0.0,
    contained=2.0,  # never skipped
    speakerless_weight=0.0,
    stemmed=0.0,
    condense=False,
    covered=2.0,  # never dropped
    briefs=False,
    speaker_weight=0.0,
    question_weight=0.0,
    session_weight=0.0,
)
