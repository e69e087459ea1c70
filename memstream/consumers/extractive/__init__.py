"""The extractive writer: deterministic, offline, zero tokens (the default consolidator).

Every output is built from the sources' own sentences, picked by TF-IDF centrality and put back
in time order; the only words added are dates, speaker labels and short headers, so no bare
"yesterday" survives:

    On 8 May 2023, Caroline: I went to a LGBTQ support group yesterday (7 May 2023).

Provenance is exact: every sentence knows the turns it quotes, and every output names the turns
of the sentences it quotes, whole and per sentence, never the rest of its sources.

A functional core -- plain data in, plain data out -- in modules that build on each other:
``sentences`` (parse and date-anchor) -> ``claims`` (what a sentence says of its speaker) ->
``centrality`` (what to keep) and ``rendering`` (write it back) -> ``statements`` (claims as dated
lines) -> ``episodes``, ``facts``, ``summaries`` (what a consolidator asks for) -> ``writer``, a
thin async shell implementing ``memstream.consumers.writer.Writer``. Dates are ``memstream.core.dates``,
shared with recall's rendering.
"""

from __future__ import annotations

from memstream.consumers.extractive.centrality import centrality, is_phatic, rank, substantive
from memstream.consumers.extractive.claims import Claim, classify
from memstream.consumers.extractive.episodes import (
    EPISODE_SENTENCES,
    EPISODE_WORDS,
    MAX_EPISODES,
    MERGED_MAX_CHARS,
    episodes,
)
from memstream.consumers.extractive.facts import MAX_FACTS, facts
from memstream.consumers.extractive.rendering import narrate, render
from memstream.consumers.extractive.sentences import (
    Sentence,
    anchor,
    is_question,
    is_trivial,
    sentences,
    split_sentences,
)
from memstream.consumers.extractive.statements import Statement, render_statement
from memstream.consumers.extractive.summaries import (
    PERSONA_STATEMENTS,
    PROFILE_STATEMENTS,
    SUMMARY_SENTENCES,
    TOPIC_STATEMENTS,
    durative,
    profile,
    summary,
)
from memstream.consumers.extractive.writer import WRITER_NAME, ExtractiveWriter

__all__ = [
    "EPISODE_SENTENCES",
    "EPISODE_WORDS",
    "MAX_EPISODES",
    "MAX_FACTS",
    "MERGED_MAX_CHARS",
    "PERSONA_STATEMENTS",
    "PROFILE_STATEMENTS",
    "SUMMARY_SENTENCES",
    "TOPIC_STATEMENTS",
    "WRITER_NAME",
    "Claim",
    "ExtractiveWriter",
    "Sentence",
    "Statement",
    "anchor",
    "centrality",
    "classify",
    "durative",
    "episodes",
    "facts",
    "is_phatic",
    "is_question",
    "is_trivial",
    "narrate",
    "profile",
    "rank",
    "render",
    "render_statement",
    "sentences",
    "split_sentences",
    "substantive",
    "summary",
]
