"""The lane store interface both backends implement, and the scope every call is limited to.

Three collections: the text lane (text units), the image lane (image units) and the round store
(one payload-only point per round, written last, so a round is visible only once whole). Every
read and write takes a ``Scope`` whose ``memory_id`` is mandatory: no call can reach another
memory's points, whatever ids or filters it is given.
"""

from __future__ import annotations

import abc
import uuid
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple, Union

from .. import schema
from ..encoders.bm25 import Sparse

Vector = Union[List[float], List[List[float]], Sparse]


class Collection(str, Enum):
    TEXT = "text"
    IMAGE = "image"
    ROUNDS = "rounds"


@dataclass(frozen=True)
class Scope:
    """Which points a call may touch: always one memory, optionally narrowed further."""

    memory_id: str
    round_ids: Optional[Tuple[str, ...]] = None
    seq_range: Optional[Tuple[int, int]] = None
    session_id: Optional[str] = None
    #: Points of any of these sessions (a retrieval kept to several).
    session_ids: Optional[Tuple[str, ...]] = None
    #: Points of none of these sessions (a point with no session is of none).
    excluded_session_ids: Optional[Tuple[str, ...]] = None
    #: Only points outside any session: the conversation a sessionless round belongs to.
    sessionless: bool = False
    #: Rounds whose previous round is one of these (the rounds that follow them).
    prev_round_ids: Optional[Tuple[str, ...]] = None
    #: Image units with one of these ids.
    image_ids: Optional[Tuple[str, ...]] = None
    #: Rounds with one of these content hashes (``schema.CONTENT_HASH``): an exchange added again.
    content_hashes: Optional[Tuple[str, ...]] = None
    #: Points whose stored time (``schema.TIME``, microseconds; ``times.micros_range``) is in ``since <= t < until``.
    time_range: Optional[Tuple[int, int]] = None
    #: Only points without this key (or with it null): what a version before the key wrote.
    lacking: Optional[str] = None
    #: Units spoken in one of these roles (``schema.Role`` values).
    roles: Optional[Tuple[str, ...]] = None

    def __post_init__(self) -> None:
        if not isinstance(self.memory_id, str) or not self.memory_id:
            raise ValueError("a store call needs a non-empty memory_id")

    @property
    def is_empty(self) -> bool:
        """An explicit empty id list matches nothing (and must not mean 'no filter')."""
        lists = (self.round_ids, self.session_ids, self.prev_round_ids, self.image_ids, self.content_hashes)
        return any(ids is not None and not ids for ids in lists)


#: The most points one store call may ask for: Qdrant's gRPC API takes a limit as an unsigned 32-bit number.
MAX_LIMIT = 2**32 - 1
#: The most memories ``LaneStore.memories`` reports: far more than one store serves in practice.
MAX_MEMORIES = 1_000_000
#: The largest ``seq`` an archive may bring. Both backends compare a range as a float64 (Edge's
#: ``RangeFloat``, the server's ``Range``), exact for whole numbers up to 2**53 only; past it, the
#: sweep of units past the last round (``seq`` from ``last + 1``) would read ``last + 1`` as ``last``
#: and delete that round's units. This leaves room for four billion rounds more.
MAX_SEQ = 2**53 - 2**32


def conditions(scope: Scope) -> List[Tuple[str, str, Any]]:
    """The scope as backend-neutral ``(key, "eq" | "any" | "none" | "range" | "empty", value)`` conditions, all required
    (``"none"``: the key holds none of the values, or is absent; ``"range"``: ``(gte, lte)``).

    The memory condition is always first: this is the one place tenant scoping is decided.
    """
    out: List[Tuple[str, str, Any]] = [(schema.MEMORY_ID, "eq", scope.memory_id)]
    if scope.round_ids is not None:
        out.append((schema.ROUND_ID, "any", list(scope.round_ids)))
    if scope.session_id is not None:
        out.append((schema.SESSION_ID, "eq", scope.session_id))
    if scope.session_ids is not None:
        out.append((schema.SESSION_ID, "any", list(scope.session_ids)))
    if scope.excluded_session_ids:
        out.append((schema.SESSION_ID, "none", list(scope.excluded_session_ids)))
    if scope.sessionless:
        out.append((schema.SESSION_ID, "empty", None))
    if scope.seq_range is not None:
        out.append((schema.SEQ, "range", scope.seq_range))
    if scope.prev_round_ids is not None:
        out.append((schema.PREV_ROUND_ID, "any", list(scope.prev_round_ids)))
    if scope.image_ids is not None:
        out.append((schema.IMAGE_ID, "any", list(scope.image_ids)))
    if scope.content_hashes is not None:
        out.append((schema.CONTENT_HASH, "any", list(scope.content_hashes)))
    if scope.time_range is not None:
        since, until = scope.time_range
        out.append((schema.TIME, "range", (since, until - 1)))
    if scope.lacking is not None:
        out.append((scope.lacking, "empty", None))
    if scope.roles is not None:
        out.append((schema.ROLE, "any", list(scope.roles)))
    return out


def _only_round_ids(scope: Scope) -> bool:
    """Whether the scope narrows its memory by round ids and nothing else."""
    return scope.round_ids is not None and replace(scope, round_ids=None) == Scope(scope.memory_id)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def present(vectors: Dict[str, Vector]) -> Dict[str, Vector]:
    """Drop empty sparse vectors (a text with only stopwords): Qdrant rejects them."""
    return {name: v for name, v in vectors.items() if not (isinstance(v, Sparse) and not v)}


def _from_vector(v: Any) -> Vector:
    """Either backend's sparse vector (``indices``/``values``) as ours; dense vectors as they are."""
    return Sparse(tuple(v.indices), tuple(v.values)) if hasattr(v, "indices") else v


#: Scores this close (relative) are equal. Qdrant sums a sparse query's terms in an order that
#: varies from process to process, so one BM25 score differs in its last bits between runs; a
#: restored vector, normalised again, moves a cosine in its 16th place.
SCORE_RTOL = 1e-5
#: Points fetched past a search's limit, so the tie at the cut is ordered by us, not by Qdrant.
TIE_MARGIN = 8
#: Records fetched per request when reading every point in a scope.
SCROLL_PAGE = 1024


def _conversation_order(hit: "Hit") -> Tuple[int, int]:
    return hit.payload.get(schema.SEQ, 0), hit.payload.get(schema.UNIT_INDEX, 0)


def _tie_groups(hits: Sequence["Hit"]) -> List[List["Hit"]]:
    """Hits best first, in groups of equal score: each group holds the hits within ``SCORE_RTOL``
    of its best, so run-to-run noise in the last bits never splits or reorders a tie."""
    groups: List[List[Hit]] = []
    for hit in sorted(hits, key=lambda h: -h.score):
        if groups and groups[-1][0].score - hit.score <= SCORE_RTOL * abs(groups[-1][0].score):
            groups[-1].append(hit)
        else:
            groups.append([hit])
    return groups


def _in_order(groups: List[List["Hit"]]) -> List["Hit"]:
    return [h for group in groups for h in sorted(group, key=_conversation_order)]


def ranked(hits: Sequence["Hit"]) -> List["Hit"]:
    """Best first; equal scores (the same picture in two rounds, BM25 ties) in conversation order,
    so every process ranks a memory the same way."""
    return _in_order(_tie_groups(hits))


@dataclass
class PointData:
    id: str
    payload: Dict[str, Any]
    vectors: Dict[str, Vector] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    payload: Dict[str, Any]

    @staticmethod
    def of(point: Any) -> "Hit":
        """Either backend's scored point, or its record (read, not scored: score 0)."""
        return Hit(str(point.id), float(getattr(point, "score", 0.0)), dict(point.payload or {}))


#: The sparse (BM25) vectors each collection's points may carry: every lane its units' words, the
#: text lane also each unit read after the exchange before it.
SPARSE_VECTORS: Dict[Collection, Tuple[str, ...]] = {
    Collection.TEXT: (schema.TEXT_SPARSE, schema.TEXT_CONTEXT_SPARSE),
    Collection.IMAGE: (schema.TEXT_SPARSE,),
    Collection.ROUNDS: (),
}


@dataclass(frozen=True)
class Search:
    """One nearest-points search: ``vector`` against the collection's ``using`` vectors, in ``scope``."""

    collection: Collection
    using: str
    vector: Vector
    scope: Scope
    limit: int


@dataclass(frozen=True)
class LaneDims:
    """Vector layout fixed when the collections are created."""

    text: int
    visual: int
    #: Also store a region multivector (whole image + tiles) per image.
    regions: bool = False


class LaneStore(abc.ABC):
    """What V-Mem needs from Qdrant; one instance serves every memory of a process."""

    @abc.abstractmethod
    def ensure_collections(self, dims: LaneDims, manifest: Dict[str, Any]) -> None:
        """Create the collections once, or check an existing store matches ``dims``/``manifest``."""

    @abc.abstractmethod
    def recorded_manifest(self) -> Optional[Dict[str, Any]]:
        """The manifest this store was built with (``{}``: built before manifests were recorded), or
        None for a store not created yet: what a memory opened without build options follows."""

    @abc.abstractmethod
    def upsert(self, collection: Collection, points: Sequence[PointData]) -> None: ...

    def search(self, collection: Collection, using: str, vector: Vector, scope: Scope, limit: int) -> List[Hit]:
        """The ``limit`` best points in scope, ``ranked``: the same points in the same order in any
        process."""
        return self.search_many([Search(collection, using, vector, scope, limit)])[0]

    def search_many(self, searches: Sequence[Search]) -> List[List[Hit]]:
        """Each search's hits, as ``search`` gives them, asked of the backend together: a question's
        searches of one collection are one request (on Qdrant Edge, one planned batch). Which of several
        tied points fills the last places is Qdrant's choice, so a search reaches past its limit until
        the tie at the cut is whole."""
        found: List[List[Hit]] = [[] for _ in searches]
        fetch = {i: s.limit + TIE_MARGIN for i, s in enumerate(searches)
                 if not (s.scope.is_empty or (isinstance(s.vector, Sparse) and not s.vector))}
        while fetch:
            more: Dict[int, int] = {}
            for (i, asked), hits in zip(fetch.items(), self._query_many([(searches[i], n) for i, n in fetch.items()]), strict=True):
                groups = _tie_groups(hits)
                last_tie = groups[-1] if groups else []
                if len(hits) < asked or len(hits) - len(last_tie) >= searches[i].limit:  # all in scope, or the last tie lies past the cut
                    found[i] = _in_order(groups)[:searches[i].limit]
                else:
                    more[i] = asked * 2
            fetch = more
        return found

    def _query_many(self, requests: Sequence[Tuple[Search, int]]) -> List[List[Hit]]:
        """Each request's points, in the order asked: one ``_query_batch`` per collection."""
        found: List[List[Hit]] = [[] for _ in requests]
        for collection in dict.fromkeys(s.collection for s, _ in requests):
            at = [i for i, (s, _) in enumerate(requests) if s.collection is collection]
            for i, hits in zip(at, self._query_batch(collection, [requests[i] for i in at]), strict=True):
                found[i] = hits
        return found

    @abc.abstractmethod
    def _query_batch(self, collection: Collection, requests: Sequence[Tuple[Search, int]]) -> List[List[Hit]]:
        """For each ``(search, limit)`` of ``collection``, at most ``limit`` of its best points in scope,
        in any order, asked in one request (no scope is empty, no sparse vector empty)."""

    def scroll(self, collection: Collection, scope: Scope, limit: Optional[int] = None,
               keys: Optional[Sequence[str]] = None) -> List[Hit]:
        """Points in scope ordered by ``seq`` (then unit index), up to ``limit``. With ``keys``, each
        payload holds only those (and the order's): reading whole payloads is most of a scroll's cost."""
        payload = True if keys is None else list(dict.fromkeys([*keys, schema.SEQ, schema.UNIT_INDEX]))
        if collection is Collection.ROUNDS and _only_round_ids(scope):
            records = self._rounds_by_id(scope, payload)
        else:
            records = self.records(collection, scope, False, payload)
        hits = [Hit.of(r) for r in records]
        hits.sort(key=_conversation_order)
        return hits[:limit] if limit is not None else hits

    def _rounds_by_id(self, scope: Scope, payload: Union[bool, List[str]]) -> List[Any]:
        """The round records of ``scope.round_ids`` read by id, not through the payload index: a third
        of the time on Qdrant Edge, and what a question does most (its candidates' rounds). The
        memory is checked on each record read, so another memory's ids are not found, as by a filter.
        An id that is no point id (not a UUID) names no stored round."""
        ids = [i for i in dict.fromkeys(scope.round_ids or ()) if _is_uuid(i)]
        keys = payload if isinstance(payload, bool) else [*payload, schema.MEMORY_ID]
        found = self._retrieve(Collection.ROUNDS, ids, keys) if ids else []
        return [r for r in found if (r.payload or {}).get(schema.MEMORY_ID) == scope.memory_id]

    @abc.abstractmethod
    def _retrieve(self, collection: Collection, ids: Sequence[str], payload: Union[bool, List[str]]) -> List[Any]:
        """The records with these point ids that exist, of any memory; each has ``id`` and ``payload``."""

    def points(self, collection: Collection, scope: Scope) -> List[PointData]:
        """Points in scope with their vectors, to snapshot (before a forget) or export a memory."""
        return [PointData(str(r.id), dict(r.payload or {}), {n: _from_vector(v) for n, v in (r.vector or {}).items()})
                for r in self.records(collection, scope, with_vectors=True)]

    def records(self, collection: Collection, scope: Scope, with_vectors: bool, payload: Union[bool, List[str]] = True) -> List[Any]:
        """The backend's own records in scope, every page: each has ``id``, ``payload`` (all keys, or the
        ones listed) and ``vector``."""
        if scope.is_empty:
            return []
        out: List[Any] = []
        offset = None
        while True:
            page, offset = self._page(collection, scope, with_vectors, payload, offset, SCROLL_PAGE)
            out.extend(page)
            if offset is None:
                return out

    @abc.abstractmethod
    def _page(self, collection: Collection, scope: Scope, with_vectors: bool, payload: Union[bool, List[str]], offset: Any,
              limit: int) -> Tuple[List[Any], Any]:
        """One page of records in scope from ``offset`` (``None``: the first), and the next page's offset
        (``None`` after the last); ``scope`` is not empty. ``payload``: every key, or these only."""

    @abc.abstractmethod
    def count(self, collection: Collection, scope: Scope) -> int: ...

    @abc.abstractmethod
    def last_round(self, scope: Scope) -> Optional[Hit]:
        """The round record with the highest ``seq`` in scope, if any."""

    @abc.abstractmethod
    def first_round_ids(self, scope: Scope, limit: int) -> List[str]:
        """Ids of the ``limit`` round records with the lowest ``seq`` in scope, in order, read
        through the ``seq`` index without payloads: a page far into a memory skips the rounds
        before it cheaply, instead of reading and sorting every round."""

    @abc.abstractmethod
    def memories(self) -> Dict[str, int]:
        """Each memory the store holds, by ``memory_id``, with how many rounds it holds (a memory
        with no whole round is none); empty for a store not created yet. Read through the memory
        id's index, which counts, so no round's payload is read."""

    @abc.abstractmethod
    def delete(self, collection: Collection, scope: Scope) -> None: ...

    @abc.abstractmethod
    def set_payloads(self, collection: Collection, updates: Sequence[Tuple[Sequence[str], Dict[str, Any]]]) -> None:
        """For each ``(point ids, payload)``, set those keys in those points' payloads, keeping the rest.
        An id another process deleted meanwhile is skipped where another process can reach the store."""

    @property
    def identity(self) -> Hashable:
        """What two handles of the same stored data share: writers of one memory lock on it."""
        return id(self)

    @property
    def exclusive(self) -> bool:
        """Whether no other process can reach the stored data (an embedded store locks its folder).
        Only then may opening a memory clear what a killed writer left: elsewhere, another process
        may be in the middle of that very write."""
        return True

    def optimize(self) -> None:
        """Compact the store after a bulk load; a server optimizes itself, so by default nothing."""

    @abc.abstractmethod
    def close(self) -> None: ...
