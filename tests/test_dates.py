"""Round timestamps: what is accepted, stored and read as a time, and what is refused (naming the
round, the memory left as it was) rather than guessed."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_index_vmem import VMemIndex, VMemInputError, schema



def rejected(index: VMemIndex, call: Any, item: str) -> VMemInputError:
    """``call`` raises VMemInputError for ``item`` and the memory holds what it held before."""
    before = [(s.round.node_id, s.round.metadata[schema.TIMESTAMP]) for s in index.rounds()]
    with pytest.raises(VMemInputError) as caught:
        call()
    assert caught.value.item == item, f"error names {caught.value.item!r}, expected {item!r}: {caught.value}"
    assert str(caught.value).startswith(f"{item}: ")
    assert [(s.round.node_id, s.round.metadata[schema.TIMESTAMP]) for s in index.rounds()] == before
    return caught.value


@pytest.fixture
def index(make_index) -> VMemIndex:
    memory = make_index()
    memory.add_round(user="I brewed an espresso", assistant="Nice crema.", session_id="D1", timestamp="2024-06-01")
    return memory


def stored_timestamp(index: VMemIndex, key: str) -> Any:
    [stored] = index.rounds([key])
    return stored.round.metadata[schema.TIMESTAMP]


def keys_between(index: VMemIndex, since: str, until: str) -> list[str]:
    return [s.round.metadata[schema.ROUND_KEY] for s in index.rounds(since=since, until=until)]


@pytest.mark.parametrize("given, stored", [
    (datetime(2024, 6, 17, 10, 15), "2024-06-17T10:15:00"),
    (datetime(2024, 6, 17, 10, 15, tzinfo=timezone(timedelta(hours=2))), "2024-06-17T10:15:00+02:00"),
    (date(2024, 6, 17), "2024-06-17"),
    (1718582400, "2024-06-17T00:00:00+00:00"),
    (1718582400.5, "2024-06-17T00:00:00.500000+00:00"),
])
def test_datetime_date_and_epoch_seconds_are_times(index, given, stored):
    index.add_round(user="a new round", round_key="K", timestamp=given)
    assert stored_timestamp(index, "K") == stored
    assert keys_between(index, "2024-06-17", "2024-06-18") == ["K"]


def test_an_aware_time_is_read_in_utc_a_naive_one_as_written(index):
    index.add_rounds([{"user": "late in Tokyo", "round_key": "T", "timestamp": datetime(2024, 6, 18, 1, 0, tzinfo=timezone(timedelta(hours=9)))},
                      {"user": "early, no zone", "round_key": "N", "timestamp": "2024-06-18T01:00"}])
    assert keys_between(index, "2024-06-17", "2024-06-18") == ["T"]  # 16:00 UTC on the 17th
    assert keys_between(index, "2024-06-18", "2024-06-19") == ["N"]


@pytest.mark.parametrize("call, item", [
    (lambda m: m.add_round(user="x", timestamp="06/07/2024"), "round 1"),
    (lambda m: m.add_rounds([{"user": "fine", "timestamp": "2024-06-07"}, {"user": "x", "timestamp": "6.7.24 10:15"}]), "round 2"),
    (lambda m: m.add_rounds([{"user": "x", "round_key": "D9:3", "timestamp": "06-07-2024"}]), "round D9:3"),
    (lambda m: m.add_messages([ChatMessage(role=MessageRole.USER, content="x")], timestamp="06/07/2024"), "messages"),
])
def test_a_day_and_month_that_could_swap_are_refused_naming_the_round(index, call, item):
    err = rejected(index, lambda: call(index), item=item)
    assert "could be" in str(err) and "dayfirst=True" in str(err) and "ISO 8601" in str(err)


def test_june_or_july_is_named_both_ways(index):
    err = rejected(index, lambda: index.add_round(user="x", timestamp="06/07/2024"), item="round 1")
    assert "7 June 2024 or 6 July 2024" in str(err) and "2024-06-07 or 2024-07-06" in str(err)


@pytest.mark.parametrize("dayfirst, iso, day", [(True, "2024-07-06", "2024-07-06"), (False, "2024-06-07", "2024-06-07")])
def test_dayfirst_reads_it_and_stores_the_date_unambiguously(index, dayfirst, iso, day):
    index.add_round(user="x", round_key="K", timestamp="06/07/2024 10:15", dayfirst=dayfirst)
    assert stored_timestamp(index, "K") == f"{iso} 10:15"
    next_day = (date.fromisoformat(day) + timedelta(days=1)).isoformat()
    assert keys_between(index, day, next_day) == ["K"]


def test_dayfirst_applies_to_messages_too(index):
    messages = [ChatMessage(role=MessageRole.USER, content="x"), ChatMessage(role=MessageRole.ASSISTANT, content="y")]
    [node] = index.add_messages(messages, session_id="S", timestamp="06/07/2024", dayfirst=True)
    assert node.metadata[schema.TIMESTAMP] == "2024-07-06"


@pytest.mark.parametrize("text", ["13/07/2024", "12/12/2024", "2024-06-07", "2024/06/07", "1:56 pm on 8 May, 2023"])
def test_a_date_with_one_reading_is_stored_as_given(index, text):
    index.add_round(user="x", round_key="K", timestamp=text)
    assert stored_timestamp(index, "K") == text


@pytest.mark.parametrize("call, item, said", [
    (lambda m: m.add_round(user="x", timestamp="yesterday"), "round 1", "'yesterday' is not a date or time"),
    (lambda m: m.add_rounds([{"user": "ok"}, {"user": "x", "timestamp": "soon"}]), "round 2", "lenient=True"),
    (lambda m: m.add_round(user="x", timestamp="8 May"), "round 1", "with its year"),
    (lambda m: m.add_round(user="x", timestamp="1718582400"), "round 1", "epoch seconds go as a number"),
    (lambda m: m.add_round(user="x", timestamp=1e30), "round 1", "out of range as epoch seconds"),
    (lambda m: m.add_round(user="x", timestamp=True), "round 1", "got bool"),
    (lambda m: m.add_round(user="x", timestamp="2024-06-07", dayfirst="yes"), "dayfirst", "must be True, False or None"),
])
def test_an_unreadable_timestamp_is_refused_naming_the_round(index, call, item, said):
    err = rejected(index, lambda: call(index), item=item)
    assert said in str(err)


def test_lenient_stores_an_unreadable_timestamp_as_given(index, caplog):
    index.add_round(user="x", round_key="K", timestamp="yesterday", lenient=True)
    assert stored_timestamp(index, "K") == "yesterday"
    assert keys_between(index, "1900-01-01", "2900-01-01") == ["D1:1"]  # no time range selects it
    assert "not dates the time filters read" in caplog.text


def test_a_chat_turn_carries_its_time_of_day(index, scripted_llm):
    chat = index.as_chat_engine(llm=scripted_llm(default="Noted."), session_id="chat")
    before = datetime.now().replace(microsecond=0)
    chat.chat("first")
    chat.chat("second")
    after = datetime.now()
    stamps = [s.round.metadata[schema.TIMESTAMP] for s in index.rounds(session_id="chat")]
    assert len(stamps) == 2
    for stamp in stamps:
        seen = datetime.fromisoformat(stamp)
        assert seen.tzinfo is None and before <= seen <= after
    assert stamps[0] <= stamps[1]
    today = before.date()
    assert keys_between(index, today.isoformat(), (today + timedelta(days=1)).isoformat()) == ["chat:1", "chat:2"]


def test_errors_name_rounds_from_one(index):
    rejected(index, lambda: index.add_round(), item="round 1")
    rejected(index, lambda: index.add_rounds([{"user": "a"}, {"user": "b"}, {"user": 3}]), item="round 3")
    with pytest.raises(VMemInputError, match=r"^round 1 image 2: "):
        index.add_round(user="x", images=[{"caption": "fine"}, {"caption": ""}])


@pytest.mark.parametrize("bounds, item", [(dict(since="06/07/2024"), "since"), (dict(until="6.7.24"), "until")])
def test_a_time_range_end_that_could_swap_day_and_month_is_refused(index, bounds, item):
    with pytest.raises(VMemInputError, match=rf"^{item}: timestamp '.*' could be .* \(ISO 8601\), with the month's name, or as a date$"):
        index.rounds(**bounds)
    with pytest.raises(VMemInputError, match=rf"^{item}: "):
        index.forget(**bounds)
    assert len(index) == 1
    assert [s.round.metadata[schema.ROUND_KEY] for s in index.rounds(since="13/05/2024")] == ["D1:1"]  # one reading only
