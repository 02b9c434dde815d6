"""What a round's timestamp means as a time: the one reading time ranges and the stored ``time`` share.

A timestamp is stored as text and shown so: text as given (``"1:56 pm on 8 May, 2023"``), a
``datetime`` or ``date`` in ISO 8601, epoch seconds as the UTC ``datetime`` they name. Beside it
every point holds its reading, in microseconds since 1970 (``schema.TIME``, indexed), so a time
range is a range filter in Qdrant rather than a parse of every round at each call. A time that
names its offset is read in UTC; one that names none, as written (``stored_timestamp``).
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
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
#: A numeric date that does not say which of its first two numbers is the day ("06/07/2024",
#: "6.7.24"): both could be a month. One led by its year ("2024-06-07") is ISO 8601, month second.
_DAY_OR_MONTH = re.compile(r"(?<![\d/.\-])(\d{1,2})([/.\-])(\d{1,2})\2(\d{4}|\d{2})(?![\d/.\-])")
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


@dataclass(frozen=True)
class TimestampReading:
    """How the rounds of one call read their timestamps (``stored_timestamp``): ``dayfirst`` for
    dates whose day and month could be swapped, ``lenient`` to store unreadable text as given."""

    dayfirst: Optional[bool] = None
    lenient: bool = False

    def __post_init__(self) -> None:
        if self.dayfirst not in (None, True, False):
            raise VMemInputError("dayfirst", f"must be True, False or None, got {self.dayfirst!r}")
        if self.lenient not in (True, False):
            raise VMemInputError("lenient", f"must be True or False, got {self.lenient!r}")

    def stored(self, item: str, value: object) -> Optional[str]:
        return stored_timestamp(item, value, self.dayfirst, self.lenient)


def stored_timestamp(item: str, value: object, dayfirst: Optional[bool] = None, lenient: bool = False) -> Optional[str]:
    """A round's timestamp as stored, or an error naming ``item`` (the round): never a guess.

    A ``datetime`` or ``date`` is stored in ISO 8601: an aware ``datetime`` keeps its offset and
    is read in UTC, a naive one is read as written. Epoch seconds (an ``int`` or ``float``) are an
    instant, stored as its UTC ``datetime`` ("2024-06-17T00:00:00+00:00"). Text is stored as given
    where it reads as one time. Text whose day and month could be swapped ("06/07/2024") is
    refused unless ``dayfirst`` says which comes first; then its date is stored in ISO 8601
    ("2024-07-06"), so neither the time filters nor the model ever read it the other way. Text that
    reads as no time ("yesterday", "8 May" without its year) is refused, unless ``lenient``: then
    it is stored as given, and a time range never selects its round. Blank text means no time."""
    if value is None:
        return None
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return _epoch_text(item, value)
    if not isinstance(value, str):
        raise VMemInputError(item, f"'timestamp' must be a datetime, a date, epoch seconds or text, got {type(value).__name__}")
    if not value.strip():
        return value
    text = _day_and_month_told(item, value, dayfirst)
    if read_time(text) is None and not lenient:
        raise VMemInputError(item, f"timestamp {_shown(value)} is not a date or time read here: {_unreadable_hint(value)}")
    return text


def _epoch_text(item: str, seconds: numbers.Real) -> str:
    try:
        return datetime.fromtimestamp(float(seconds), timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        raise VMemInputError(item, f"timestamp {seconds!r} is out of range as epoch seconds") from None


def _day_and_month_told(item: str, text: str, dayfirst: Optional[bool], adding: bool = True) -> str:
    """``text`` with each date whose day and month could be swapped written in ISO 8601 as
    ``dayfirst`` reads it; refused, naming both readings, when ``dayfirst`` is None (``adding``:
    a round's timestamp, where ``dayfirst=`` may be given)."""
    def told(match: "re.Match[str]") -> str:
        first, second = int(match.group(1)), int(match.group(3))
        if not (1 <= first <= 12 and 1 <= second <= 12) or first == second:  # one reading only: as written
            return match.group(0)
        if dayfirst is None:
            month_first, day_first = (_reading(match.group(0), d) for d in (False, True))
            raise VMemInputError(item, f"timestamp {_shown(text)} could be {_spelt(month_first)} or {_spelt(day_first)}: "
                                       f"write it as {month_first:%Y-%m-%d} or {day_first:%Y-%m-%d} (ISO 8601), with the "
                                       "month's name, or as a date" + (_CHOOSE_DAYFIRST if adding else ""))
        return _reading(match.group(0), dayfirst).date().isoformat()

    return _DAY_OR_MONTH.sub(told, text)


_CHOOSE_DAYFIRST = "; or pass dayfirst=True (day first) or dayfirst=False (month first) where the rounds are added"


def _spelt(day: datetime) -> str:
    return f"{day.day} {day:%B %Y}"


def _reading(numeric_date: str, dayfirst: bool) -> datetime:
    return dateparser.parse(numeric_date, dayfirst=dayfirst)


def _unreadable_hint(text: str) -> str:
    if text.strip().lstrip("-").replace(".", "", 1).isdigit():
        return "epoch seconds go as a number (an int or float), not as text"
    return ("write it with its year (ISO 8601 such as '2024-06-17T10:15', or '17 June 2024 10:15'), or give a datetime, "
            "a date or epoch seconds; lenient=True stores it as given, where a time range never selects it")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:80] + "...")


def as_time(name: str, value: TimeLike) -> datetime:
    """``value`` read as a time, or an error naming ``name``: a time range's end whose day and
    month could swap is refused as a round's timestamp is, not guessed."""
    if isinstance(value, str):
        _day_and_month_told(name, value, None, adding=False)
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
