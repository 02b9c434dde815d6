"""What a round's timestamp means as a time: the one reading time ranges and the stored ``time`` share.

A timestamp is stored as given (``"1:56 pm on 8 May, 2023"``) and shown so. Beside it every point
holds its reading, in microseconds since 1970 (``schema.TIME``, indexed), so a time range is a range
filter in Qdrant rather than a parse of every round at each call.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone
from typing import Optional, Tuple, Union

from dateutil import parser as dateparser
from dateutil.relativedelta import relativedelta
from dateutil import tz

from .errors import VMemInputError

TimeLike = Union[str, date, datetime]
#: A range of ``schema.TIME`` values, ``since <= t < until``.
MicrosRange = Tuple[int, int]
#: The ends of every range: past any time ``read_time`` gives (years 1 to 9999), and exact as float64.
EARLIEST, LATEST = -(2**61), 2**61
#: The ``schema.TIME`` of a timestamp that reads as no time (or none given): past every range. Not
#: null, which neither backend's ``set_payload`` stores, so it marks a point read as one never read.
NO_TIME = 2**62
#: A year as written: four digits on their own, or leading a compact ISO date ("20240617",
#: "20240617T1015", "202406171015"); two-digit years ("240617") do not name one.
_YEAR = re.compile(r"(?<!\d)\d{4}(?:\d{4}(?:\d{4}(?:\d{2})?)?)?(?!\d)")
#: What a partial date is filled in with: the start of the period it names.
_PERIOD_START = datetime(2000, 1, 1)
#: A second default, differing from ``_PERIOD_START`` in every field, to tell which fields a text gives.
_OTHER_DEFAULT = datetime(2001, 2, 2, 1, 1, 1, 1)
_FIELDS = ("year", "month", "day", "hour", "minute", "second", "microsecond")
#: A fraction of a second as written ("10:15:30.25", "101530.25"): only then does a text name microseconds
#: (the dots of "17.06.2024 10:15:30" are not one).
_FRACTION = re.compile(r"(?:\d:\d\d|\d{6})[.,]\d")
_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


def read_time(value: object) -> Optional[datetime]:
    """A naive datetime (a date means its midnight), or None when ``value`` is not one.

    What a string leaves out is its period's start ("2024" is 1 January 2024, "June 2024" is
    1 June), not today's month or day, so ranges do not shift with the calendar."""
    if isinstance(value, datetime):
        try:
            return _without_zone(value)
        except OverflowError:  # a zone that moves it past the calendar's ends
            return None
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str) and _YEAR.search(value):  # fuzzy parsing reads "Round 12" as a date
        return _parse(value, _PERIOD_START)
    return None


def period_end(value: TimeLike) -> Optional[datetime]:
    """The first instant after the period ``value`` names, where ``read_time`` gives its start:
    "2024-06-30" ends at 1 July, "June 2024" too, "2024-06-30 15:00" at 15:01, "15:00:30" a second
    on; a ``date`` is its day, a ``datetime`` an instant. So ``<= "2024-06-30"`` keeps the afternoon
    of the 30th. None when ``value`` is no time, or its period ends past the calendar (year 9999)."""
    start = read_time(value)
    if start is None:
        return None
    if isinstance(value, datetime):
        step: Union[timedelta, relativedelta] = _MICROSECOND
    elif isinstance(value, date):
        step = timedelta(days=1)
    else:
        other = _parse(str(value), _OTHER_DEFAULT)  # a field the text gives reads the same whatever the default
        given = [f for f in _FIELDS if other is not None and getattr(other, f) == getattr(start, f)]
        finest = given[-1] if given else "year"
        if finest == "microsecond" and not _FRACTION.search(str(value)):  # dateutil sets it with the seconds
            finest = "second"
        step = _MICROSECOND if finest == "microsecond" else relativedelta(**{finest + "s": 1})
    try:
        return start + step
    except (OverflowError, ValueError):
        return None


def as_time(name: str, value: TimeLike) -> datetime:
    """``value`` read as a time, or an error naming ``name``."""
    seen = read_time(value)
    if seen is None:
        raise VMemInputError(name, f"is not a date or time: {value!r}")
    return seen


def micros(t: datetime) -> int:
    """``t`` (naive, as ``read_time`` gives it) in whole microseconds since 1970: exact, and compared
    exactly by Qdrant (as a float64) for any time from 1685 to 2255; outside those years a range's
    ends are exact to a few microseconds only."""
    return (t - _EPOCH) // _MICROSECOND


def stored_time(timestamp: object) -> int:
    """The ``schema.TIME`` a point with this stored timestamp holds (``NO_TIME``: no readable time)."""
    seen = read_time(timestamp)
    return micros(seen) if seen is not None else NO_TIME


def micros_range(since: Optional[datetime], until: Optional[datetime]) -> Optional[MicrosRange]:
    """``since <= t < until`` as a range of ``schema.TIME`` values (None: unbounded on that side); None
    when neither bound is given. Both ends are finite, so ``NO_TIME`` is in no range."""
    if since is None and until is None:
        return None
    return (micros(since) if since is not None else EARLIEST, micros(until) if until is not None else LATEST)


def _parse(text: str, default: datetime) -> Optional[datetime]:
    try:
        return _without_zone(dateparser.parse(text, fuzzy=True, default=default))
    except (ValueError, OverflowError):
        return None


def _without_zone(t: datetime) -> datetime:
    """A time that names its offset, as UTC; one that names none, as written. ``dateutil`` gives a
    zone name that happens to be this machine's as the local zone: that names no offset, or the
    same text would select differently on machines in other zones."""
    if t.tzinfo is None or isinstance(t.tzinfo, tz.tzlocal):
        return t.replace(tzinfo=None)
    return t.astimezone(timezone.utc).replace(tzinfo=None)
