"""RecMem's recurrence trigger (§3.2) as a pure function.

A new unit looks at its top-k earlier units of the same user. The topic *recurs* when at least
``theta_count`` of them are similar (cosine >= ``theta_sim``) and still unconsolidated. The
cluster (the trigger plus those neighbours) is sent to consolidation and its members are marked
consolidated, so the same cluster does not fire again: the next request for that topic needs
``theta_count`` *new* similar members.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from memstream.schemas.events import name_id


class Neighbour(NamedTuple):
    # A tuple, not a frozen dataclass: ingest makes one per neighbour of every turn, at half the cost.
    unit_id: str
    score: float
    consolidated: bool


@dataclass(frozen=True)
class Cluster:
    trigger_id: str
    members: tuple[Neighbour, ...]  # similar, unconsolidated neighbours, best first

    @property
    def unit_ids(self) -> list[str]:
        return [self.trigger_id, *(n.unit_id for n in self.members)]

    @property
    def similarities(self) -> list[float]:
        return [1.0, *(n.score for n in self.members)]

    @property
    def request_id(self) -> str:
        # Same members -> same id, so a redelivered trigger is recognisably the same request.
        return name_id("consolidation/" + ",".join(sorted(self.unit_ids)))


def _rank(n: Neighbour) -> tuple[float, str]:
    # Best first, ties by unit id: the store returns equal scores in no fixed order, and the same
    # turns must make the same requests (the same members, in the same order).
    return (-n.score, n.unit_id)


def top_k(candidates: Iterable[Neighbour], k: int) -> list[Neighbour]:
    """The ``k`` most similar candidates, best first (one entry per unit id)."""
    best: dict[str, Neighbour] = {}
    for n in candidates:
        if n.unit_id not in best or n.score > best[n.unit_id].score:
            best[n.unit_id] = n
    return sorted(best.values(), key=_rank)[:k]


def recurrence(
    trigger_id: str, neighbours: Iterable[Neighbour], theta_sim: float, theta_count: int
) -> Cluster | None:
    """The cluster to consolidate, or None when the topic has not recurred enough yet."""
    fresh = sorted(
        (n for n in neighbours if n.unit_id != trigger_id and n.score >= theta_sim and not n.consolidated),
        key=_rank,
    )
    if len(fresh) < theta_count:
        return None
    return Cluster(trigger_id, tuple(fresh))
