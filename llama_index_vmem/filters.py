"""What a stock ``MetadataFilters`` keeps V-Mem's retrieval to: the one place that reads one.

The store narrows V-Mem's lanes by session, and by time through each point's stored reading of its
timestamp (``times.py``; the one ``list_rounds`` and ``forget`` use for ``since``/``until``), so these
filters are taken:

* ``session_id``: ``==`` one session, ``in`` a list, or several ``==`` joined by OR;
* ``session_id`` ``!=`` one session or ``not in`` a list (a round with no session is in none, as
  in LlamaIndex's own vector store), and
* ``timestamp``: ``>``, ``>=``, ``<``, ``<=`` a date or time written as text (``"2024-06-17"``,
  ``"1:56 pm on 8 May, 2023"``), any number of either joined by AND, with at most one of the first.

Any other filter is refused by name: ignoring it would return rounds the caller meant to keep out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, List, Optional, Tuple

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from . import schema
from .errors import VMemInputError
from .lifecycle import check_id
from .times import MicrosRange, as_time, micros_range, period_end

_LOWER = (FilterOperator.GT, FilterOperator.GTE)
_UPPER = (FilterOperator.LT, FilterOperator.LTE)
_EXCLUDE = (FilterOperator.NE, FilterOperator.NIN)
_USAGE = ("V-Mem filters retrieval by session and time: MetadataFilter(key='session_id', value=...) (or value=[...] "
          "with operator=FilterOperator.IN, or several joined by condition=FilterCondition.OR), operator NE or NIN, and "
          "MetadataFilter(key='timestamp', value='2024-06-17', operator=FilterOperator.GTE) (GT, GTE, LT, LTE), "
          "joined by AND")


@dataclass(frozen=True)
class RetrievalFilter:
    """The rounds retrieval may return: all of them unless narrowed."""

    #: Rounds of these sessions (None: of every session).
    session_ids: Optional[Tuple[str, ...]] = None
    #: Rounds of none of these sessions (a round with no session is of none).
    excluded_session_ids: Optional[Tuple[str, ...]] = None
    #: Rounds seen at or after this (naive, UTC where the text named a zone).
    since: Optional[datetime] = None
    #: Rounds seen before this.
    until: Optional[datetime] = None

    @property
    def timed(self) -> bool:
        return self.since is not None or self.until is not None

    @property
    def time_range(self) -> Optional[MicrosRange]:
        """The range as the store filters it (None: no time filter)."""
        return micros_range(self.since, self.until)

    def keeps_time(self, seen: datetime) -> bool:
        """Whether rounds seen at ``seen`` pass the time filters."""
        return (self.since is None or seen >= self.since) and (self.until is None or seen < self.until)

    def keeps_session(self, session_id: Optional[str]) -> bool:
        """Whether rounds stored in ``session_id`` (None: in no session) pass the session filters."""
        if self.session_ids is not None and session_id not in self.session_ids:
            return False
        return session_id is None or session_id not in (self.excluded_session_ids or ())


def read_filters(filters: Optional[MetadataFilters]) -> RetrievalFilter:
    """``filters`` as V-Mem applies them; an empty filter list is no filter, as in stock retrievers."""
    if filters is None or (isinstance(filters, MetadataFilters) and not filters.filters):
        return RetrievalFilter()
    leaves = filters.filters if isinstance(filters, MetadataFilters) else [None]
    if not all(isinstance(f, MetadataFilter) for f in leaves) or filters.condition == FilterCondition.NOT:
        raise VMemInputError("filters", f"{_USAGE}; got {filters!r:.300}")
    kinds = [_kind(f) for f in leaves]
    either = len(leaves) > 1 and filters.condition == FilterCondition.OR
    if None in kinds or (either and set(kinds) != {"in"}) or (not either and kinds.count("in") > 1):
        raise VMemInputError("filters", f"{_USAGE}; got {filters!r:.300}")
    sessions = {kind: tuple(dict.fromkeys(check_id("filters session_id", v) for f, k in zip(leaves, kinds) if k == kind
                                          for v in _session_values(f))) for kind in ("in", "out")}
    times = [f for f, k in zip(leaves, kinds) if k == "time"]
    bounds = [(f.operator, _bound(f)) for f in times]
    return RetrievalFilter(
        session_ids=sessions["in"] or None,
        excluded_session_ids=sessions["out"] or None,
        since=max((t for op, t in bounds if op in _LOWER), default=None),
        until=min((t for op, t in bounds if op in _UPPER), default=None),
    )


def _kind(leaf: MetadataFilter) -> Optional[str]:
    """What one filter narrows by: ``"in"`` sessions, ``"out"`` (sessions left out), ``"time"``; None: nothing V-Mem applies."""
    if leaf.key == schema.SESSION_ID and _session_values(leaf):
        return "out" if leaf.operator in _EXCLUDE else "in"
    if leaf.key == schema.TIMESTAMP and leaf.operator in _LOWER + _UPPER:
        return "time"
    return None


def _session_values(leaf: MetadataFilter) -> List[Any]:
    """The sessions one ``session_id`` filter names: its value (``==``, ``!=``) or its non-empty list (``in``,
    ``not in``); none otherwise."""
    if leaf.operator in (FilterOperator.EQ, FilterOperator.NE) and leaf.value is not None and not isinstance(leaf.value, list):
        return [leaf.value]
    if leaf.operator in (FilterOperator.IN, FilterOperator.NIN) and isinstance(leaf.value, list):
        return list(leaf.value)
    return []


def _bound(leaf: MetadataFilter) -> datetime:
    """Where a ``timestamp`` filter's range starts (``>=``, ``>``) or stops (``<``, ``<=``): its value names a
    period ("2024-06-30", "June 2024"), which ``>=`` and ``<`` start from and ``>`` and ``<=`` end after. A
    period ending past the calendar (in year 9999) ends at its last instant: ``<=`` keeps every dated round
    and ``>`` none. A number is refused, since no unit (seconds? a year?) is certain."""
    if not isinstance(leaf.value, str):
        raise VMemInputError("filters timestamp", f"must be a date or time written as text, got {leaf.value!r}")
    start = as_time("filters timestamp", leaf.value)
    if leaf.operator not in (FilterOperator.GT, FilterOperator.LTE):
        return start
    end = period_end(leaf.value)
    return end if end is not None else datetime.max
