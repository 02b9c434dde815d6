"""Round scoring and reciprocal-rank fusion (V-Mem Eq. 5), as plain functions.

Under each signal a round takes the best score of its units; rounds are ranked per signal and
the rankings fused by RRF, so bounded cosine and unbounded BM25 never compete on scale. A round
holding an image, or answering the question the round before it asks, then carries part of the
score of that round (``carry_forward``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import takewhile
from typing import AbstractSet, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set

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
    #: The candidate round just before this one whose score this one carries (``carry_forward``).
    follows: Optional[str] = None
    #: Every unit of this round that some signal's candidate pool held (unit id -> its role, image id and
    #: the signals that held it), best first: which parts of the round matched, for callers that score
    #: or show finer than rounds.
    pool_units: Dict[str, Dict[str, Any]] = field(default_factory=dict)

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


def rrf(rankings: Mapping[str, Sequence[Hit]], kappa: int, key: Callable[[Hit], str] = round_of,
        tie_break: Optional[str] = None) -> List[Fused]:
    """score(r) = sum over signals of 1 / (kappa + rank); ties go to the round ranked higher by the
    ``tie_break`` signal, if any, then to the earlier round.

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
    return sorted(fused.values(), key=lambda r: (-r.score, r.ranks.get(tie_break or "", math.inf), r.seq))


def note_pool_units(fused: Sequence[Fused], found: Mapping[str, Sequence[Hit]], key: Callable[[Hit], str] = round_of) -> None:
    """Fill each entry's ``pool_units`` from every signal's candidates (``found``, by signal name),
    best rank first, a tie in rank in signal order; each unit names the signals that held it."""
    entries = {entry.id: entry for entry in fused}
    pooled = [(rank, name, hit) for name, hits in found.items() for rank, hit in enumerate(ranked(list(hits)))]
    for _, name, hit in sorted(pooled, key=lambda p: p[0]):
        entry = entries.get(key(hit))
        if entry is not None:
            about = entry.pool_units.setdefault(hit.id, {"role": hit.payload.get(schema.ROLE), "image_id": hit.payload.get(schema.IMAGE_ID),
                                                         "signals": []})
            about["signals"].append(name)


def carry_forward(fused: Sequence[Fused], links: Mapping[str, str], shares: Mapping[str, float],
                  passes: AbstractSet[str] = frozenset()) -> List[Fused]:
    """Each round in ``shares`` also scores that share of the fused score of the round ``links`` maps
    it to (the round before it in its conversation), where that round is a candidate too; best first
    again. Only the rounds' own fused scores are carried, never what one carried itself, so a run of
    rounds does not snowball.

    The round before names what the evidence is about. A photo is often shared a round later ("I
    saw a strange flower" -> "here it is!"): it carries a small share and never ranks past the
    round it carries from, which names the topic. An answer to the question the round before ends
    with ("What did you name her?" -> "Mochi.") is in ``passes``: it holds what was asked for, so
    it may rank past the question."""
    if not any(shares.values()):
        return list(fused)
    own = {entry.id: entry.score for entry in fused}
    for entry in fused:
        before, share = links.get(entry.id), shares.get(entry.id, 0.0)
        if before in own and share:
            entry.follows = before
            carried = math.fsum((own[entry.id], share * own[before]))
            capped = entry.id not in passes and own[entry.id] <= own[before]
            entry.score = min(carried, own[before]) if capped else carried  # a tie ranks it after
    return best_first(fused)


def walk_back(links: Mapping[str, str], rid: str, reach: int) -> List[str]:
    """The up to ``reach`` rounds ``links`` lead back to from ``rid``, nearest first: the thread
    behind it among the candidates. A walk ends at a round with no link."""
    walked: List[str] = []
    step = links.get(rid)
    while step is not None and len(walked) < reach:
        walked.append(step)
        step = links.get(step)
    return walked


def best_before(fused: Sequence[Fused], links: Mapping[str, str], rounds: Iterable[str], reach: int) -> Dict[str, str]:
    """For each of ``rounds``, the candidate with the best fused score among the ``reach`` rounds
    ``links`` leads back to from it (the nearest, on a tie): the round of its thread that names the
    subject. "Half price, so 450." follows "We went with the green one. / Was it a good deal?", which
    follows "We're replacing the old sofa". A walk ends at a round that is no candidate."""
    own = {entry.id: entry.score for entry in fused}
    return {rid: max(takewhile(own.__contains__, walk_back(links, rid, reach)), key=own.__getitem__) for rid in rounds}


def add_ranking(fused: Sequence[Fused], name: str, ids: AbstractSet[str], kappa: int) -> List[Fused]:
    """One more ranking fused in by RRF: the entries in ``ids``, in their present order, each scoring
    1 / (kappa + rank) more, with that rank noted under ``name``; best first again."""
    for rank, entry in enumerate((e for e in fused if e.id in ids), start=1):
        entry.ranks[name] = rank
        entry.score = math.fsum((entry.score, 1.0 / (kappa + rank)))
    return best_first(fused)


def best_first(fused: Iterable[Fused]) -> List[Fused]:
    """Entries by score, a tie to the earlier round: the order after a score is changed in place."""
    return sorted(fused, key=lambda r: (-r.score, r.seq))


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
