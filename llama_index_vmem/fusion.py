"""Round scoring and reciprocal-rank fusion (V-Mem Eq. 5), as plain functions.

Under each signal a round takes the best score of its units; rounds are ranked per signal and
the rankings fused by RRF, so bounded cosine and unbounded BM25 never compete on scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Sequence, Set

from . import schema
from .store.base import Hit, ranked


@dataclass
class Fused:
    """A round (or, in the unit-level ablation, a unit) after fusion."""

    id: str
    seq: int
    score: float = 0.0
    #: 1-based rank of this round under each signal that found it.
    ranks: Dict[str, int] = field(default_factory=dict)
    #: The unit that earned the round its place under each signal.
    best_units: Dict[str, Hit] = field(default_factory=dict)

    @property
    def round_id(self) -> str:
        """The round this entry is or belongs to (the same at round level, the unit's at unit level)."""
        return round_of(next(iter(self.best_units.values())))


def round_of(hit: Hit) -> str:
    return hit.payload[schema.ROUND_ID]


def unit_of(hit: Hit) -> str:
    return hit.id


def rank_rounds(hits: Iterable[Hit], key: Callable[[Hit], str] = round_of) -> List[Hit]:
    """One hit per round (its best unit), best first; ``key=unit_of`` keeps every unit."""
    best: Dict[str, Hit] = {}
    for hit in ranked(list(hits)):
        best.setdefault(key(hit), hit)
    return list(best.values())


def rrf(rankings: Mapping[str, Sequence[Hit]], kappa: int, key: Callable[[Hit], str] = round_of) -> List[Fused]:
    """score(r) = sum over signals of 1 / (kappa + rank); ties go to the earlier round.

    The sum is exact-rounded (``fsum``), so rounds with the same ranks in another order tie exactly
    rather than by the order the floats were added in."""
    fused: Dict[str, Fused] = {}
    for signal, hits in rankings.items():
        for rank, hit in enumerate(hits, start=1):
            rid = key(hit)
            entry = fused.setdefault(rid, Fused(rid, int(hit.payload.get(schema.SEQ, 0))))
            entry.ranks[signal] = rank
            entry.best_units[signal] = hit
    for entry in fused.values():
        entry.score = math.fsum(1.0 / (kappa + rank) for rank in entry.ranks.values())
    return sorted(fused.values(), key=lambda r: (-r.score, r.seq))


def units_covering(units: Sequence[Fused], k: int) -> List[Fused]:
    """The unit-level ablation's return: units in fused order until they span ``k`` rounds.

    ``k`` counts rounds at either level, so an ablation rung is ranked over as many rounds as the
    full system; k bare units would often span fewer, as several units of one round rank together.
    """
    rounds: Set[str] = set()
    out: List[Fused] = []
    for unit in units:
        if len(rounds) == k:
            break
        out.append(unit)
        rounds.add(unit.round_id)
    return out
