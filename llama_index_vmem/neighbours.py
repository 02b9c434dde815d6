"""Which rounds neighbour which: the stored previous-round links, within one session.

Every "within W rounds" of V-Mem walks these links: context assembly (a match and its neighbours),
the text->image filter (rounds next to an image), the images a round without one borrows, and the
score a photo round or an answer carries from the round before it. The links, not ``seq``, decide: ``forget``
keeps them joined across the gap it leaves, and a round of another session is another day's
conversation, not a continuation of the topic. The one exception is an answer that opens its session
(``sessions_before``): news brought back to an earlier talk.

The walk reads round payloads (a round's metadata is its payload) and builds no nodes: the filter
walks out from every image round of a memory on each text->image question.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

from . import schema
from .store.base import Collection

if TYPE_CHECKING:
    from .round_memory import RoundMemory

_Record = Tuple[str, Mapping[str, Any]]  # a round's id and payload


def steps(index: "RoundMemory", rounds: Mapping[str, Mapping[str, Any]], window: int) -> Iterator[Dict[str, List[str]]]:
    """For d = 1 .. ``window``: the ids of each round's linked rounds d steps before and after it
    (the one before first), keyed by the id of the round walked from. ``rounds`` maps ids to the
    metadata (or payload) the caller already holds. A walk ends at its session's edge."""
    back: Dict[str, _Record] = {rid: (rid, metadata) for rid, metadata in rounds.items()}
    ahead = dict(back)
    for _ in range(max(window, 0)):
        back = _step_back(index, back)
        ahead = _step_ahead(index, ahead)
        if not back and not ahead:
            return
        yield {o: [rec[0] for rec in (back.get(o), ahead.get(o)) if rec is not None] for o in back.keys() | ahead.keys()}


def within(index: "RoundMemory", rounds: Mapping[str, Mapping[str, Any]], window: int) -> Set[str]:
    """The ids of these rounds and of every round up to ``window`` links either side of one of them."""
    found = set(rounds)
    for layer in steps(index, rounds, window):
        found.update(rid for near in layer.values() for rid in near)
    return found


def round_payloads(index: "RoundMemory", round_ids: Iterable[str]) -> Dict[str, Mapping[str, Any]]:
    """The stored payloads of these rounds of the memory, by id: where a walk starts when the
    caller holds only ids."""
    return _payloads(index, round_ids=tuple(round_ids))


def rounds_after(found: Mapping[str, Mapping[str, Any]]) -> Dict[str, str]:
    """Each of these rounds (payloads by id) whose linked previous round is among them too, in the same
    session, mapped to that round: the links ``fusion.carry_forward`` moves scores along."""
    return {rid: prev_id(p) for rid, p in found.items() if prev_id(p) in found and same_session(found[prev_id(p)], p)}


def sessions_before(found: Mapping[str, Mapping[str, Any]]) -> Dict[str, List[str]]:
    """Each of these rounds (payloads by id) that opens its session, mapped to those among them of the
    session held last before it: where news brought back another day ("Rang them. Wednesday the
    30th.") picks up an earlier talk. A round with no earlier session among them is left out."""
    seq = {rid: p.get(schema.SEQ, 0) for rid, p in found.items()}
    out: Dict[str, List[str]] = {}
    for rid, p in found.items():
        earlier = [other for other in found if seq[other] < seq[rid] and not same_session(found[other], p)]
        if prev_id(p) is None and earlier:
            last = found[max(earlier, key=seq.__getitem__)]
            out[rid] = [other for other in earlier if same_session(found[other], last)]
    return out


def prev_id(round_metadata: Mapping[str, Any]) -> Optional[str]:
    return round_metadata.get(schema.PREV_ROUND_ID)


def same_session(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get(schema.SESSION_ID) == b.get(schema.SESSION_ID)


def _step_back(index: "RoundMemory", frontier: Dict[str, _Record]) -> Dict[str, _Record]:
    """Each walk's round one link earlier, where that round is in the same session."""
    earlier = {o: prev_id(p) for o, (_, p) in frontier.items() if prev_id(p)}
    found = _payloads(index, round_ids=tuple(set(earlier.values())))
    return {o: (rid, found[rid]) for o, rid in earlier.items() if rid in found and same_session(found[rid], frontier[o][1])}


def _step_ahead(index: "RoundMemory", frontier: Dict[str, _Record]) -> Dict[str, _Record]:
    """Each walk's round one link later (the round linking back to it), where that is in the same session."""
    later = {prev_id(p): (rid, p) for rid, p in _payloads(index, prev_round_ids=tuple(rid for rid, _ in frontier.values())).items()}
    return {o: later[rid] for o, (rid, p) in frontier.items() if rid in later and same_session(later[rid][1], p)}


def _payloads(index: "RoundMemory", **narrowing: Any) -> Dict[str, Mapping[str, Any]]:
    return {h.id: h.payload for h in index.store.scroll(Collection.ROUNDS, index.scope(**narrowing))}
