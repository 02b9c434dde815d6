"""What a stock ``MetadataFilters`` keeps V-Mem's retrieval to: the one place that reads one.

The store narrows V-Mem's lanes by session, and a time range by each round's own timestamp (read
as ``list_rounds`` and ``forget`` read ``since``/``until``), so these filters are taken:

* ``session_id``: ``==`` one session, ``in`` a list, or several ``==`` joined by OR;
* ``timestamp``: ``>``, ``>=``, ``<``, ``<=`` a date or time written as text (``"2024-06-17"``,
  ``"1:56 pm on 8 May, 2023"``), any number joined by AND, with at most one ``session_id`` filter.

Any other filter is refused by name: ignoring it would return rounds the caller meant to keep out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, List, Optional, Tuple

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from . import schema
from .errors import VMemInputError
from .lifecycle import as_time, check_id

#: One tick of ``datetime``: ``> t`` is ``>= t + TICK`` and ``<= t`` is ``< t + TICK``.
TICK = timedelta(microseconds=1)
_LOWER = (FilterOperator.GT, FilterOperator.GTE)
_UPPER = (FilterOperator.LT, FilterOperator.LTE)
_USAGE = ("V-Mem filters retrieval by session and time: MetadataFilter(key='session_id', value=...) (or value=[...] "
          "with operator=FilterOperator.IN, or several joined by condition=FilterCondition.OR), and "
          "MetadataFilter(key='timestamp', value='2024-06-17', operator=FilterOperator.GTE) (GT, GTE, LT, LTE), "
          "joined by AND")


@dataclass(frozen=True)
class RetrievalFilter:
    """The rounds retrieval may return: all of them unless narrowed."""

    #: Rounds of these sessions (None: of every session).
    session_ids: Optional[Tuple[str, ...]] = None
    #: Rounds seen at or after this (naive, UTC where the text named a zone).
    since: Optional[datetime] = None
    #: Rounds seen before this.
    until: Optional[datetime] = None

    @property
    def timed(self) -> bool:
        return self.since is not None or self.until is not None


def read_filters(filters: Optional[MetadataFilters]) -> RetrievalFilter:
    """``filters`` as V-Mem applies them; an empty filter list is no filter, as in stock retrievers."""
    if filters is None or (isinstance(filters, MetadataFilters) and not filters.filters):
        return RetrievalFilter()
    leaves = filters.filters if isinstance(filters, MetadataFilters) else [None]
    if not all(isinstance(f, MetadataFilter) for f in leaves) or filters.condition == FilterCondition.NOT:
        raise VMemInputError("filters", f"{_USAGE}; got {filters!r:.300}")
    sessions = [f for f in leaves if f.key == schema.SESSION_ID and _session_values(f)]
    times = [f for f in leaves if f.key == schema.TIMESTAMP and f.operator in _LOWER + _UPPER]
    either = len(leaves) > 1 and filters.condition == FilterCondition.OR
    if len(sessions) + len(times) < len(leaves) or (either and times) or (not either and len(sessions) > 1):
        raise VMemInputError("filters", f"{_USAGE}; got {filters!r:.300}")
    session_ids = tuple(dict.fromkeys(check_id("filters session_id", v) for f in sessions for v in _session_values(f)))
    bounds = [(f.operator, _bound(f)) for f in times]
    return RetrievalFilter(
        session_ids=session_ids or None,
        since=max((t + TICK if op == FilterOperator.GT else t for op, t in bounds if op in _LOWER), default=None),
        until=min((t + TICK if op == FilterOperator.LTE else t for op, t in bounds if op in _UPPER), default=None),
    )


def _session_values(leaf: MetadataFilter) -> List[Any]:
    """The sessions one ``session_id`` filter names: its value (``==``) or its non-empty list (``in``); none otherwise."""
    if leaf.operator == FilterOperator.EQ and leaf.value is not None and not isinstance(leaf.value, list):
        return [leaf.value]
    if leaf.operator == FilterOperator.IN and isinstance(leaf.value, list):
        return list(leaf.value)
    return []


def _bound(leaf: MetadataFilter) -> datetime:
    """A ``timestamp`` filter's time; a number is refused, since no unit (seconds? a year?) is certain."""
    if not isinstance(leaf.value, str):
        raise VMemInputError("filters timestamp", f"must be a date or time written as text, got {leaf.value!r}")
    return as_time("filters timestamp", leaf.value)
