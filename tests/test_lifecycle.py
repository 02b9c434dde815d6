"""The life of a memory on both backends: list, forget (all or nothing), export and import."""

from __future__ import annotations

import json
import logging
import re
import zipfile
from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.schema import NodeWithScore

from llama_index_vmem import VMemIndex, VMemInputError, VMemQueryBundle, neighbours, schema, times
from llama_index_vmem.postprocessor import BLOCK_ROUNDS, NeighborRoundPostprocessor
from llama_index_vmem.node_parser import MAX_TEXT_CHARS, RoundInput
from llama_index_vmem.encoders.bm25 import Sparse
from llama_index_vmem.store import Collection
from llama_index_vmem.store.base import MAX_SEQ


def _conversation(photos):
    return [
        {"round_key": "D1:1", "session_id": "D1", "timestamp": "2024-06-17 09:00", "user": "Here is my new cat!",
         "assistant": "A tabby! What's her name?",
         "images": [{"image_id": "D1:IMG_1", "path": str(photos["chelsea"]), "caption": "a tabby cat"}]},
        {"round_key": "D1:2", "session_id": "D1", "timestamp": "2024-06-17 09:05", "user": "Her name is Mochi.",
         "assistant": "Lovely name."},
        {"round_key": "D1:3", "session_id": "D1", "timestamp": "2024-06-17 09:10", "user": "She sleeps all day.",
         "assistant": "Cats do."},
        {"round_key": "D2:1", "session_id": "D2", "timestamp": "2024-07-02 18:00", "user": "Dinner was coffee again.",
         "assistant": "Maybe cook tonight?",
         "images": [{"image_id": "D2:IMG_1", "path": str(photos["coffee"]), "caption": "a cup of coffee"}]},
        {"round_key": "D2:2", "session_id": "D2", "timestamp": "2024-07-02 18:30", "user": "The cat photo again",
         "assistant": "Still cute.",
         "images": [{"image_id": "D2:IMG_2", "path": str(photos["chelsea"]), "caption": "the tabby again"}]},
    ]


QUESTIONS = ["What is my cat called?", "What did I have for dinner?", "Does my cat sleep a lot?"]


def _snapshot(index):
    """Everything a memory holds: every point with payload and vectors, and its image files."""
    points = {c: sorted((p.id, json.dumps(p.payload, sort_keys=True), _vectors(p.vectors))
                        for p in index.store.points(c, index.scope())) for c in Collection}
    files = sorted(p.name for p in index.image_dir.rglob("*") if p.is_file())
    return points, files


def _vectors(vectors):
    """Vectors by name as flat float tuples (sparse: indices, then values)."""
    def flat(v):
        if isinstance(v, Sparse):
            return tuple(v.indices) + tuple(v.values)
        return tuple(x for item in v for x in (flat(item) if isinstance(item, list) else (item,)))

    return tuple(sorted((name, flat(v)) for name, v in vectors.items()))


def _assert_unchanged(index, before):
    """The memory holds what ``before`` recorded: ids, payloads and files exactly; vectors to 1e-6,
    since a server normalises a restored point's (already unit) vector again."""
    points, files = _snapshot(index)
    assert files == before[1]
    for c in Collection:
        assert [(i, p) for i, p, _ in points[c]] == [(i, p) for i, p, _ in before[0][c]], c
        for (_, _, got), (_, _, want) in zip(points[c], before[0][c]):
            assert [name for name, _ in got] == [name for name, _ in want]
            for (_, g), (_, w) in zip(got, want):
                assert len(g) == len(w) and max((abs(a - b) for a, b in zip(g, w)), default=0.0) < 1e-6


def _answers(index, photos):
    retriever = index.as_retriever()
    queries = [VMemQueryBundle(q) for q in QUESTIONS] + [VMemQueryBundle("Which photo is this?", image_path=str(photos["chelsea"]))]
    return [[(n.node.metadata.get("round_key"), n.node.metadata.get("image_id"), round(n.score, 6))
             for n in retriever.retrieve(q)] for q in queries]


def test_rounds_lists_in_order_with_units_and_pages(open_memory, photos):
    index = open_memory()
    index.add_rounds(_conversation(photos))
    listed = index.rounds()
    assert [r.round.metadata["round_key"] for r in listed] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    first = listed[0]
    assert [u.metadata["role"] for u in first.units] == ["user", "assistant", "image"]
    assert first.units[2].metadata["image_id"] == "D1:IMG_1" and Path(first.units[2].image_path).exists()
    pages = [index.rounds(offset=o, limit=2) for o in (0, 2, 4)]
    assert [r.round.metadata["round_key"] for p in pages for r in p] == [r.round.metadata["round_key"] for r in listed]
    assert [r.round.metadata["round_key"] for r in index.rounds(session_id="D2")] == ["D2:1", "D2:2"]
    assert [r.round.metadata["round_key"] for r in index.rounds(since="2024-06-17 09:05", until="2024-07-01")] == ["D1:2", "D1:3"]
    with pytest.raises(VMemInputError, match="offset"):
        index.rounds(offset=-1)


def test_a_page_reads_only_its_own_rounds_and_pages_join_into_the_full_listing(open_memory, monkeypatch):
    """A page far into a memory is found through the store's seq index: paging through a memory
    read and sorted every round per page before, so it took time quadratic in its size. The pages,
    filtered or not, still join into exactly the full listing, across the gaps forgets leave."""
    index = open_memory()
    index.add_rounds([{"round_key": f"{s}:{i}", "session_id": s, "user": f"note {s}{i}", "assistant": "ok",
                       "timestamp": f"2024-06-{i:02d}"} for i in range(1, 10) for s in "AB"])
    index.forget(["A:3", "B:7"])
    order = [f"{s}:{i}" for i in range(1, 10) for s in "AB" if f"{s}:{i}" not in ("A:3", "B:7")]
    keys = lambda listed: [r.round.metadata["round_key"] for r in listed]  # noqa: E731
    selections = {"all": ({}, order), "session": (dict(session_id="B"), [k for k in order if k.startswith("B")]),
                  "keys": (dict(round_keys=["B:9", "A:2", "A:3", "B:4", "A:7"]), ["A:2", "B:4", "A:7", "B:9"]),
                  "time": (dict(since="2024-06-02", until="2024-06-05", session_id="A"), ["A:2", "A:4"])}
    for name, (selection, expected) in selections.items():
        assert keys(index.rounds(**selection, limit=1000)) == expected, name
        for limit in (1, 3, 7):
            pages = [keys(index.rounds(**selection, offset=o, limit=limit)) for o in range(0, len(expected) + limit, limit)]
            assert [k for page in pages for k in page] == expected and pages[-1] == [], (name, limit)
    assert [len(r.units) for r in index.rounds(offset=14, limit=2)] == [2, 2]
    read = []

    def counting(reader):
        def counted(collection, *args, **kwargs):
            found = reader(collection, *args, **kwargs)
            read.extend([collection] * len(found))
            return found
        return counted

    for reader in ("records", "_retrieve"):  # through a filter, or by id
        monkeypatch.setattr(index.store, reader, counting(getattr(index.store, reader)))
    assert keys(index.rounds(offset=14, limit=2)) == order[14:16]
    assert read.count(Collection.ROUNDS) == 2, "the page's own round records, not the memory's 16"


def test_forget_a_round_removes_it_everywhere_and_joins_its_neighbours(open_memory, photos):
    index = open_memory()
    index.add_rounds(_conversation(photos))
    assert index.forget(["D1:2"]) == 1
    assert [r.round.metadata["round_key"] for r in index.rounds()] == ["D1:1", "D1:3", "D2:1", "D2:2"]
    for c in Collection:
        assert all(p.payload["round_key"] != "D1:2" for p in index.store.points(c, index.scope()))
    for answer in _answers(index, photos):
        assert all(key != "D1:2" for key, _, _ in answer)
    # D1:3's previous round is now D1:1, and a block around D1:3 joins D1:1 across the gap.
    d1_3 = index.rounds(["D1:3"])[0].round
    assert d1_3.metadata["prev_round_id"] == index.rounds(["D1:1"])[0].round.node_id
    retrieved = index.as_retriever().retrieve("Does my cat sleep a lot?")
    blocks = NeighborRoundPostprocessor(index).postprocess_nodes(retrieved)
    block = next(b for b in blocks if "D1:3" in b.node.metadata.get(BLOCK_ROUNDS, []))
    assert block.node.metadata[BLOCK_ROUNDS] == ["D1:1", "D1:3"]


def test_forget_keeps_an_image_file_another_round_still_uses(open_memory, photos):
    index = open_memory()
    index.add_rounds(_conversation(photos))
    cat = Path(index.rounds(["D1:1"])[0].units[2].image_path)
    coffee = Path(index.rounds(["D2:1"])[0].units[2].image_path)
    index.forget(["D1:1", "D2:1"])
    assert cat.exists(), "D2:2 shows the same cat photo"
    assert not coffee.exists()
    index.forget(["D2:2"])
    assert not cat.exists()


def test_forget_a_session_a_time_range_and_everything(open_memory, photos):
    index = open_memory()
    other = open_memory("bob")
    index.add_rounds(_conversation(photos))
    other.add_rounds(_conversation(photos))
    assert index.forget(session_id="D2") == 2
    assert [r.round.metadata["round_key"] for r in index.rounds()] == ["D1:1", "D1:2", "D1:3"]
    assert index.forget(since="2024-06-17 09:04", until="2024-06-17 09:06") == 1
    assert [r.round.metadata["round_key"] for r in index.rounds()] == ["D1:1", "D1:3"]
    index.as_query_engine(llm=MockLLM(), delivery="pixels").query(
        VMemQueryBundle("Which photo is this?", image_path=str(photos["chelsea"])))
    assert list(index.delivered_dir.iterdir()), "labelled copies were made"
    assert index.forget_all() == 2
    assert len(index) == 0 and all(index.store.count(c, index.scope()) == 0 for c in Collection)
    assert not [p for p in index.image_dir.rglob("*") if p.is_file()]
    assert len(other) == 5 and _answers(other, photos)[0], "another memory of the store is untouched"
    index.add_rounds(_conversation(photos)[:2])
    assert [r.round.metadata["round_key"] for r in index.rounds()] == ["D1:1", "D1:2"]


def test_a_default_key_after_a_forget_follows_the_highest_still_held_not_the_gap(open_memory):
    index = open_memory()
    index.add_rounds([{"user": f"note {i}", "assistant": "ok", "session_id": "D1"} for i in range(3)])
    assert index.forget(["D1:2"]) == 1
    assert index.add_round(user="later", session_id="D1").metadata["round_key"] == "D1:4"
    assert [r.round.metadata["round_key"] for r in index.rounds()] == ["D1:1", "D1:3", "D1:4"]
    assert index.forget(["D1:4"]) == 1
    assert index.add_round(user="again", session_id="D1").metadata["round_key"] == "D1:4", "as the README says"


def test_a_partial_date_means_the_start_of_its_period_whatever_the_day(open_memory):
    index = open_memory()
    index.add_rounds([{"user": "spring", "assistant": "ok", "session_id": "A", "timestamp": "2024-03-15"},
                      {"user": "summer", "assistant": "ok", "session_id": "B", "timestamp": "June 2024"},
                      {"user": "new year", "assistant": "ok", "session_id": "C", "timestamp": "2025-01-02"}])
    keys = lambda **r: [x.round.metadata["round_key"] for x in index.rounds(**r)]  # noqa: E731
    assert keys(since="2024", until="2025") == ["A:1", "B:1"]  # "2024" is 1 January, not today's month and day
    assert keys(since="June 2024") == ["B:1", "C:1"] and keys(until="June 2024") == ["A:1"]
    assert index.forget(since="2024", until="2025") == 2 and keys() == ["C:1"]


def test_a_compact_iso_date_names_its_year_and_is_selected_and_forgotten(open_memory):
    """README: any format dateutil reads that names the year. "20240617" names it as surely as
    "2024-06-17"; "240617" (a two-digit year) and "Round 12" name none and stay out of every range."""
    index = open_memory()
    stamps = ["2024-06-17", "20240617", "20240617T101500Z", "202406171015", "240617", "Round 12", "20240618"]
    index.add_rounds([{"round_key": s, "user": f"at {s}", "assistant": "ok", "timestamp": s} for s in stamps], lenient=True)
    keys = lambda **r: [x.round.metadata["round_key"] for x in index.rounds(**r)]  # noqa: E731
    day = ["2024-06-17", "20240617", "20240617T101500Z", "202406171015"]
    assert keys(since="2024-06-17", until="2024-06-18") == day
    assert keys(since="20240618") == ["20240618"] and keys(until="20240617T1015") == ["2024-06-17", "20240617"]
    assert index.forget(since="2024-06-17", until="2024-06-18") == 4
    assert keys() == ["240617", "Round 12", "20240618"]


def test_a_datetime_timestamp_is_stored_in_iso_form_and_an_unreadable_one_is_named_in_a_warning(open_memory, caplog):
    """The time filters take a datetime, so adding takes one too; a timestamp they cannot read is
    stored as given where the caller says ``lenient=True``, but no range will ever select its round,
    so the caller hears of it."""
    from llama_index.core.base.llms.types import ChatMessage

    index = open_memory()
    with caplog.at_level(logging.WARNING, logger="llama_index_vmem"):
        index.add_round(user="breakfast", assistant="ok", session_id="A", timestamp=datetime(2024, 6, 17, 9, 30))
        index.add_messages([ChatMessage(role="user", content="lunch"), ChatMessage(role="assistant", content="ok")],
                           session_id="A", timestamp=date(2024, 6, 18))
        index.add_round_inputs([RoundInput(user="tea", session_id="B", timestamp=datetime(2024, 6, 19, 16, 0))])
        assert caplog.text == ""
        index.add_round(user="dinner", assistant="ok", session_id="A", timestamp="last tuesday", lenient=True)
    assert "'last tuesday' are not dates the time filters read" in caplog.text
    assert [r.round.metadata["timestamp"] for r in index.rounds()] == ["2024-06-17T09:30:00", "2024-06-18", "2024-06-19T16:00:00",
                                                                      "last tuesday"]
    keys = lambda **r: [x.round.metadata["round_key"] for x in index.rounds(**r)]  # noqa: E731
    assert keys(since="2024-06-17T09:00", until="2024-06-18") == ["A:1"] and keys(since=date(2024, 6, 18)) == ["A:2", "B:1"]


def test_filters_take_ids_as_add_rounds_does_times_by_their_zone_and_name_what_they_cannot(open_memory):
    index = open_memory()
    index.add_rounds([{"user": "late in Denver", "assistant": "ok", "session_id": 5, "timestamp": "2024-06-17T23:30:00-07:00"},
                      {"user": "early in Karachi", "assistant": "ok", "session_id": 5, "timestamp": "2024-06-18T01:00:00+05:00"}])
    keys = lambda *a, **r: [x.round.metadata["round_key"] for x in index.rounds(*a, **r)]  # noqa: E731
    assert keys(since="2024-06-18T00:00:00Z") == ["5:1"], "06:30 UTC on the 18th, then 20:00 UTC on the 17th"
    assert keys(until=datetime(2024, 6, 18, tzinfo=timezone.utc)) == ["5:2"]
    assert keys(k for k in ["5:2"]) == ["5:2"] and keys(session_id=5) == ["5:1", "5:2"]
    for bad in (dict(session_id=["5"]), dict(session_id="\ud800"), dict(session_id=""), dict(round_keys=["\ud800"]),
                dict(round_keys=[None]), dict(round_keys=7)):
        with pytest.raises(VMemInputError, match=next(iter(bad))):
            index.forget(**bad)
    assert index.forget(k for k in ["5:1"]) == 1 and index.forget(session_id=5) == 1 and len(index) == 0


@pytest.fixture
def new_york_clock(monkeypatch):
    """This machine's clock set to New York time, and back afterwards."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_zone_name_that_is_this_machines_own_selects_as_a_time_without_a_zone(open_memory, new_york_clock):
    """dateutil reads "EST" as the local zone only where the clock is New York's; a selection must
    not change with the machine it runs on, so such a time counts as written."""
    index = open_memory()
    index.add_round(user="morning call", assistant="ok", session_id="A", timestamp="2024-06-17 10:00 EST")
    assert [r.round.metadata["round_key"] for r in index.rounds(since="2024-06-17 09:30", until="2024-06-17 12:00")] == ["A:1"]


def test_forget_needs_a_filter_and_names_bad_ones(open_memory, photos):
    index = open_memory()
    index.add_rounds(_conversation(photos))
    with pytest.raises(VMemInputError, match="forget_all"):
        index.forget()
    with pytest.raises(VMemInputError, match="round_keys"):
        index.forget("D1:1")
    with pytest.raises(VMemInputError, match="since"):
        index.forget(since="not a date at all")
    assert index.forget(["D9:9"]) == 0
    assert len(index) == 5


@pytest.mark.parametrize("failing", [Collection.ROUNDS, Collection.IMAGE, Collection.TEXT, "relink"])
def test_a_failed_forget_leaves_everything_as_it_was(open_memory, photos, monkeypatch, failing):
    index = open_memory()
    index.add_rounds(_conversation(photos))
    before, answers = _snapshot(index), _answers(index, photos)
    store = index.store
    real_delete, real_upsert = store.delete, store.upsert

    failed = []  # the fault strikes once; the rollback's own writes succeed

    def delete(collection, scope):
        real_delete(collection, scope)
        if collection == failing and not failed:
            failed.append(collection)
            raise RuntimeError("disk full")

    def upsert(collection, points):
        if failing == "relink" and collection is Collection.ROUNDS and not failed:
            failed.append(collection)
            raise RuntimeError("disk full")
        real_upsert(collection, points)

    monkeypatch.setattr(store, "delete", delete)
    monkeypatch.setattr(store, "upsert", upsert)
    with pytest.raises(RuntimeError, match="disk full"):
        index.forget(["D1:1", "D1:2"])
    monkeypatch.undo()
    _assert_unchanged(index, before)
    assert _answers(index, photos) == answers
    reopened = open_memory()  # an undone forget leaves nothing for the next open to finish
    _assert_unchanged(reopened, before)


def test_a_failed_forget_restores_the_points_though_a_reader_made_a_cache_anew(open_memory, photos, monkeypatch):
    """A pixel delivery during the forget recreates the cache folder it had moved aside; putting the
    old cache back then fails, and must neither hide the store's error nor skip its restore."""
    index = open_memory()
    index.add_rounds(_conversation(photos))
    index.as_query_engine(llm=MockLLM(), delivery="pixels").query(VMemQueryBundle("Which photo?", image_path=str(photos["coffee"])))
    before, answers = _snapshot(index), _answers(index, photos)
    pictures = sorted(p.name for p in index.image_dir.iterdir() if p.is_file())
    real_delete = index.store.delete

    def delete(collection, scope):
        index.delivered_dir.mkdir(parents=True, exist_ok=True)
        (index.delivered_dir / "made-meanwhile.png").write_bytes(b"a fresh copy")
        real_delete(collection, scope)
        raise RuntimeError("disk full")

    monkeypatch.setattr(index.store, "delete", delete)
    with pytest.raises(RuntimeError, match="disk full"):
        index.forget(["D1:1", "D2:1"])
    monkeypatch.undo()
    points, _ = _snapshot(index)
    assert [[(i, p) for i, p, _ in points[c]] for c in Collection] == [[(i, p) for i, p, _ in before[0][c]] for c in Collection]
    assert _answers(index, photos) == answers
    assert sorted(p.name for p in index.image_dir.iterdir() if p.is_file()) == pictures, "the pictures are back; a cache may not be"


def test_forget_keeps_a_picture_a_kept_round_records_by_another_spelling(open_memory, photos, monkeypatch):
    """An earlier version stored the path as given (relative); rounds added since store it absolute."""
    index = open_memory()
    index.add_rounds(_conversation(photos))  # D1:1 and D2:2 show the same cat
    [cat] = [p for p in index.store.points(Collection.IMAGE, index.scope()) if p.payload["round_key"] == "D1:1"]
    monkeypatch.chdir(index.image_dir)
    cat.payload["image_path"] = Path(cat.payload["image_path"]).name
    index.store.upsert(Collection.IMAGE, [cat])
    index.forget(["D1:1"])
    [kept] = [u for r in index.rounds(["D2:2"]) for u in r.units if u.metadata.get("image_id") == "D2:IMG_2"]
    assert Path(kept.image_path).is_file()


@pytest.mark.slow
def test_export_then_import_answers_identically_on_another_backend(open_memory, photos, tmp_path, minilm, tiny_siglip):
    from qdrant_client import QdrantClient

    index = open_memory("alice")
    index.add_rounds(_conversation(photos))
    index.forget(["D1:2"])
    answers = _answers(index, photos)
    archive = index.export_archive(tmp_path / "alice.zip")
    with zipfile.ZipFile(archive) as z:
        assert "memory.json" in z.namelist() and sum(n.startswith("images/") for n in z.namelist()) == 2
    targets = [dict(path=tmp_path / "edge-copy"), dict(path=tmp_path / "srv-copy", client=QdrantClient(location=":memory:"))]
    for target in targets:
        for memory_id in (None, "alice-copy"):
            copy = VMemIndex.from_archive(archive, memory_id=memory_id, embed_model=minilm, image_encoder=tiny_siglip, **target)
            try:
                assert copy.memory_id == (memory_id or "alice")
                assert _answers(copy, photos) == answers
                assert [r.round.metadata["round_key"] for r in copy.rounds()] == ["D1:1", "D1:3", "D2:1", "D2:2"]
                assert all(Path(u.image_path).is_relative_to(copy.image_dir) for r in copy.rounds() for u in r.units if getattr(u, "image_path", None))
                with pytest.raises(VMemInputError, match="empty memory"):
                    VMemIndex.from_archive(archive, memory_id=copy.memory_id, embed_model=minilm, image_encoder=tiny_siglip, **target)
                copy.forget_all()
            finally:
                copy.close()
    assert _answers(index, photos) == answers, "the original is untouched"


def test_import_refuses_other_encoders_and_broken_archives(open_memory, photos, tmp_path, minilm, tiny_siglip):
    index = open_memory()
    index.add_rounds(_conversation(photos)[:2])
    archive = index.export_archive(tmp_path / "m.zip")
    with pytest.raises(VMemInputError, match="encoded with"):
        VMemIndex.from_archive(archive, embed_model=minilm, path=tmp_path / "other-encoder")
    with pytest.raises(VMemInputError, match="memory_id"):  # a blank id is refused, not read as "the archived one"
        VMemIndex.from_archive(archive, memory_id="", embed_model=minilm, image_encoder=tiny_siglip, path=tmp_path / "blank")
    broken = tmp_path / "broken.zip"
    broken.write_bytes(archive.read_bytes()[:200])
    with pytest.raises(VMemInputError, match="broken.zip"):
        VMemIndex.from_archive(broken, embed_model=minilm, image_encoder=tiny_siglip, path=tmp_path / "b")


def test_an_import_refused_for_its_encoders_leaves_no_store_and_region_tiles_follow_the_archive(open_memory, photos, tmp_path,
                                                                                                 minilm, tiny_siglip):
    """The encoders are checked before a store is opened: a store (or server collections) created
    for the refused import kept its settings and refused the corrected retry too. Without
    region_tiles=, an import takes the archive's."""
    from qdrant_client import QdrantClient

    index = open_memory(region_tiles=True)
    index.add_rounds(_conversation(photos)[:1])
    archive = index.export_archive(tmp_path / "tiles.zip")
    client = QdrantClient(location=":memory:")
    targets = [dict(path=tmp_path / "edge-copy"), dict(client=client, image_dir=tmp_path / "srv-images")]
    for target in targets:
        for wrong, differs in ((dict(region_tiles=False, image_encoder=tiny_siglip), "region_tiles: built with True, asked for False"),
                               (dict(region_tiles=True), "image_encoder: built with 'SiglipImageEncoder:")):
            with pytest.raises(VMemInputError, match=f"encoded with other encoders \\({re.escape(differs)}"):
                VMemIndex.from_archive(archive, embed_model=minilm, **wrong, **target)
        assert not (tmp_path / "edge-copy").exists() and not client.get_collections().collections
    for target in targets:
        copy = VMemIndex.from_archive(archive, embed_model=minilm, image_encoder=tiny_siglip, **target)
        try:
            assert copy.region_tiles and _answers(copy, photos) == _answers(index, photos)
        finally:
            copy.close()


@pytest.mark.parametrize("document, lacks", [
    ([1, 2], "holds no object"),
    ({"format": 1, "memory_id": "m", "collections": {}}, "lacks encoders"),
    ({"format": 1, "encoders": {}, "collections": {}}, "lacks memory_id"),
    ({"format": 1, "memory_id": ["m"], "encoders": {}}, "lacks memory_id, collections"),
])
def test_an_archive_whose_document_is_malformed_is_refused_by_name_before_a_store_is_made(tmp_path, minilm, document, lacks):
    path = tmp_path / "crafted.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("memory.json", json.dumps(document))
    with pytest.raises(VMemInputError, match=f"^archive .*crafted.zip: is not a memory archive \\(memory.json {lacks}\\)"):
        VMemIndex.from_archive(path, embed_model=minilm, path=tmp_path / "store")
    assert not (tmp_path / "store").exists()


def test_a_memory_opened_by_a_relative_path_finds_its_pictures_from_any_directory(open_memory, photos, tmp_path, monkeypatch):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "a")
    open_memory("rel", path=Path("memory")).add_rounds(_conversation(photos)[:1])
    monkeypatch.chdir(tmp_path / "b")
    again = open_memory("rel", path=tmp_path / "a" / "memory")
    picture = again.rounds()[0].units[-1].image_path
    assert Path(picture).is_absolute() and Path(picture).is_file()
    again.export_archive(tmp_path / "rel.zip")  # refused when a stored path was relative to where it was made


def test_a_copied_or_moved_store_reads_and_forgets_only_its_own_pictures(photos, tmp_path, minilm, tiny_siglip):
    """Payloads record where a picture was saved; a copy of the store (a backup) must not read, or
    delete, the original's files through them, and a moved store must still find its own."""
    import shutil

    def open_(path):
        return VMemIndex.from_defaults(path=path, memory_id="alice", embed_model=minilm, image_encoder=tiny_siglip)

    original = open_(tmp_path / "original")
    original.add_rounds(_conversation(photos)[:1])
    original.close()
    shutil.copytree(tmp_path / "original", tmp_path / "backup")
    backup, original = open_(tmp_path / "backup"), open_(tmp_path / "original")
    try:
        [picture] = [u.image_path for u in backup.rounds()[0].units if getattr(u, "image_path", None)]
        assert Path(picture).parent == backup.image_dir
        assert backup.forget(["D1:1"]) == 1 and not list(backup.image_dir.glob("*.png"))
        [kept] = [u.image_path for u in original.rounds()[0].units if getattr(u, "image_path", None)]
        assert Path(kept).is_file(), "forgetting in the backup deleted the original's picture"
        original.export_archive(tmp_path / "original.zip")
    finally:
        backup.close()
        original.close()
    shutil.move(tmp_path / "original", tmp_path / "moved")
    moved = open_(tmp_path / "moved")
    try:
        [picture] = [u.image_path for u in moved.rounds()[0].units if getattr(u, "image_path", None)]
        assert Path(picture).is_file() and Path(picture).parent == moved.image_dir
        moved.export_archive(tmp_path / "moved.zip")
    finally:
        moved.close()


def test_export_of_a_memory_missing_an_image_file_is_refused_up_front(open_memory, photos, tmp_path):
    """An import requires every image a point names, so such an archive could never be read back."""
    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    missing = next(u.image_path for u in index.rounds()[0].units if getattr(u, "image_path", None))
    Path(missing).unlink()
    with pytest.raises(VMemInputError, match="D1:IMG_1") as refused:
        index.export_archive(tmp_path / "m.zip")
    assert missing in str(refused.value)
    assert not list(tmp_path.glob("m.zip*")), "no partial archive is left"


@pytest.mark.parametrize("damage", [lambda data: data[:100], lambda data: bytes(255 - b for b in data[:64]) + data[64:]],
                         ids=["cut_short", "same_size"])
def test_a_damaged_picture_is_named_at_export_and_mended_by_adding_it_again(open_memory, photos, tmp_path, minilm, tiny_siglip,
                                                                          damage):
    """A picture file changed since it was stored would make import refuse the whole archive, so
    export says so when the backup is made, not when it is restored; storing the same pixels
    again writes the file anew."""
    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    picture = Path(next(u.image_path for u in index.rounds()[0].units if getattr(u, "image_path", None)))
    picture.write_bytes(damage(picture.read_bytes()))
    with pytest.raises(VMemInputError, match="D1:IMG_1") as refused:
        index.export_archive(tmp_path / "m.zip")
    assert str(picture) in str(refused.value) and "add the picture again" in str(refused.value)
    assert not list(tmp_path.glob("m.zip*")), "no partial archive is left"
    index.add_round(user="The cat again.", session_id="D1", images=[{"image_id": "D1:IMG_1", "path": str(photos["chelsea"])}])
    assert picture.read_bytes() == photos["chelsea"].read_bytes()
    index.export_archive(tmp_path / "m.zip")
    with VMemIndex.from_archive(tmp_path / "m.zip", path=tmp_path / "restored", embed_model=minilm,
                                image_encoder=tiny_siglip) as restored:
        assert len(restored) == 2


def test_an_archive_is_never_written_into_a_memorys_image_folder(open_memory, photos, tmp_path):
    """A caller-given path there could replace a picture (an archive named as one) and would go with a forget."""
    alice, bob = open_memory("alice"), open_memory("bob")
    alice.add_rounds(_conversation(photos)[:1])
    bob.add_rounds(_conversation(photos)[1:2])
    alices_picture = Path(next(u.image_path for u in alice.rounds()[0].units if getattr(u, "image_path", None)))
    before = _snapshot(alice), alices_picture.read_bytes()
    for memory, target in ((bob, alices_picture), (bob, alice.image_dir / "backup.zip"), (alice, alice.image_dir / "backup.zip")):
        with pytest.raises(VMemInputError, match=f"^archive {re.escape(str(target))}: .* is in a memory's image folder"):
            memory.export_archive(target)
    assert (_snapshot(alice), alices_picture.read_bytes()) == before
    assert not (alice.image_dir / "backup.zip").exists()
    assert bob.export_archive(tmp_path / "bob.zip").is_file()


@pytest.mark.parametrize("own_folders", [False, True], ids=["shared_image_dir", "image_dir_each"])
def test_an_image_path_into_another_memory_is_refused(open_memory, photos, tmp_path, own_folders):
    folders = {name: {"image_dir": tmp_path / f"{name}-images"} if own_folders else {} for name in ("alice", "bob")}
    alice, bob = open_memory("alice", **folders["alice"]), open_memory("bob", **folders["bob"])
    bob.add_rounds(_conversation(photos)[:1])
    bobs_picture = bob.rounds()[0].units[2].image_path
    before = _snapshot(alice)
    with pytest.raises(VMemInputError, match="another memory"):
        alice.add_round(user="look", images=[{"image_id": "x", "path": bobs_picture}], session_id="S")
    with pytest.raises(VMemInputError, match="another memory"):
        alice.add_round(user="look", images=[{"image_id": "x", "url": Path(bobs_picture).as_uri()}], session_id="S")
    with pytest.raises(VMemInputError, match="another memory"):
        alice.as_retriever().retrieve(VMemQueryBundle("Which photo?", image_path=bobs_picture))
    _assert_unchanged(alice, before)
    alice.add_round(user="mine", images=[{"image_id": "y", "path": str(photos["coffee"])}], session_id="S")
    assert len(alice) == 1, "a picture outside every memory's folder is fine"


def test_a_failed_file_move_puts_back_points_and_files(open_memory, photos, monkeypatch):
    index = open_memory()
    index.add_rounds(_conversation(photos))
    index.as_query_engine(llm=MockLLM(), delivery="pixels").query(VMemQueryBundle("Which photo?", image_path=str(photos["coffee"])))
    before, answers = _snapshot(index), _answers(index, photos)
    real_rename, calls = Path.rename, []

    def rename(self, target):
        calls.append(self)
        if len(calls) == 2:  # the first file is already moved aside when the second fails
            raise PermissionError("read-only folder")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(PermissionError):
        index.forget(["D1:1", "D2:1"])
    monkeypatch.undo()
    _assert_unchanged(index, before)
    assert _answers(index, photos) == answers


class _Killed(BaseException):
    """The process dies: nothing after it runs, not even a rollback."""


def _layout(index):
    """What a memory holds, by round key: each listed round with the round it links back to and
    its units, the units whose round is gone, and its image files."""
    listed = index.rounds()
    key_of = {r.round.node_id: r.round.metadata["round_key"] for r in listed}
    rounds = [(key_of[r.round.node_id], key_of.get(neighbours.prev_id(r.round.metadata)),
               [u.metadata.get("image_id") or u.metadata["role"] for u in r.units]) for r in listed]
    roundless = [h.id for c in (Collection.TEXT, Collection.IMAGE) for h in index.store.scroll(c, index.scope())
                 if h.payload["round_id"] not in key_of]
    return rounds, roundless, sorted(p.name for p in index.image_dir.rglob("*") if p.is_file())


def test_cached_copies_unused_for_a_day_are_swept_on_open_and_used_ones_kept(open_memory, photos):
    """Labelled copies made for pixels delivery and attachments kept from bytes grew with every new
    picture asked about, until a forget. One unused for a day now goes when the memory opens; each
    use refreshes a copy's time, so one in use stays, and the memory's own pictures are never aged out."""
    import os
    import time

    from llama_index_vmem.delivery import label_image
    from llama_index_vmem.messages import keep_attachment

    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    copies = {name: label_image(photos[name], "ATTACHED", index.delivered_dir, 256) for name in ("coffee", "rocket")}
    kept = {name: Path(keep_attachment(index, "attached image", data=photos[name].read_bytes())) for name in ("horse", "camera")}
    own = [p for p in index.image_dir.iterdir() if p.is_file()]
    assert own and len({*copies.values(), *kept.values()}) == 4
    two_days_ago = time.time() - 2 * 24 * 3600
    for path in (*copies.values(), *kept.values(), *own):
        os.utime(path, (two_days_ago,) * 2)
    assert label_image(photos["rocket"], "ATTACHED", index.delivered_dir, 256) == copies["rocket"]  # used again
    keep_attachment(index, "attached image", data=photos["camera"].read_bytes())
    nested = open_memory("nested", image_dir=index.delivered_dir)  # a folder in a cache is none of its files
    nested.add_rounds(_conversation(photos)[:1])
    nested_own = [p for p in nested.image_dir.iterdir() if p.is_file()]
    for path in nested_own:
        os.utime(path, (two_days_ago,) * 2)
    open_memory()
    assert not copies["coffee"].exists() and not kept["horse"].exists()
    assert copies["rocket"].exists() and kept["camera"].exists() and all(p.exists() for p in own + nested_own)


def test_cached_copies_another_user_owns_are_used_and_left_not_refused(open_memory, photos, monkeypatch):
    """A second service reading a memory's folder as another user may not touch or remove its
    cached copies: the sweep and the touch made that reader's open and delivery fail."""
    import os
    import time

    from llama_index_vmem.delivery import label_image

    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    copy = label_image(photos["coffee"], "ATTACHED", index.delivered_dir, 256)
    os.utime(copy, (time.time() - 2 * 24 * 3600,) * 2)

    def not_permitted(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "utime", not_permitted)
    monkeypatch.setattr(Path, "unlink", not_permitted)
    assert label_image(photos["coffee"], "ATTACHED", index.delivered_dir, 256) == copy
    assert len(open_memory()) == 1 and copy.exists()


@pytest.mark.parametrize("writes_before_death", [0, 1, 2, 3, 4])
def test_a_forget_killed_part_way_is_finished_when_the_memory_next_opens(open_memory, photos, monkeypatch, writes_before_death):
    """Before, the rounds it had not finished stayed listed (some without their pictures, so export
    refused the memory, and their words still reached the model) until the same forget was run
    again; now the forget's journal lets the next open finish it."""
    twin = open_memory("twin")  # the same memory, forgotten without a hitch
    twin.add_rounds(_conversation(photos))
    twin.forget(["D1:2", "D2:1"])
    index = open_memory("killed")
    index.add_rounds(_conversation(photos))
    store, dead, writes = index.store, [], {"n": 0}

    def counted(real):
        def write(*args):
            writes["n"] += 1
            if writes["n"] > writes_before_death or dead:
                dead.append(True)
                raise _Killed()
            real(*args)
        return write

    def die(*args, **kwargs):
        dead.append(True)
        raise _Killed()

    real_rename = Path.rename
    monkeypatch.setattr(store, "delete", counted(store.delete))
    monkeypatch.setattr(store, "upsert", counted(store.upsert))
    monkeypatch.setattr(Path, "rename", lambda self, target: die() if dead else real_rename(self, target))
    monkeypatch.setattr("llama_index_vmem.lifecycle.shutil.rmtree", die)  # after its 4 writes, it dies sweeping up
    with pytest.raises(_Killed):
        index.forget(["D1:2", "D2:1"])
    monkeypatch.undo()
    reopened = open_memory("killed")
    assert _layout(reopened) == _layout(twin)
    assert _answers(reopened, photos) == _answers(twin, photos)
    assert not list(reopened.image_dir.glob(".forgetting-*"))
    reopened.export_archive(reopened.image_dir.parent.parent / "after.zip")
    assert reopened.forget(["D1:2", "D2:1"]) == 0


def test_files_a_killed_forget_moved_aside_are_swept_on_open(open_memory, photos, tmp_path):
    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    aside = index.image_dir / ".forgetting-killed"
    aside.mkdir()
    (aside / "0-picture.png").write_bytes(b"forgotten pixels")
    again = open_memory()
    assert not aside.exists() and len(again) == 1


def test_temporary_files_of_killed_writes_are_swept_on_open_and_live_ones_kept(open_memory, photos):
    """A write killed before its rename left ``<name>.<uuid>.tmp`` for good; a stale one now goes
    when the memory opens (on a server too), while one young enough to be a write in flight stays."""
    import os
    import time

    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    before = _layout(index)
    (index.image_dir / "delivered").mkdir(exist_ok=True)
    stale = [index.image_dir / "ab12.png.0f.tmp", index.image_dir / "delivered" / "cd34.png.1e.tmp"]
    live = index.image_dir / "ef56.png.2d.tmp"
    for path in (*stale, live):
        path.write_bytes(b"half a picture")
    for path in stale:
        os.utime(path, (time.time() - 2 * 3600,) * 2)
    reopened = open_memory()
    assert not any(path.exists() for path in stale) and live.exists()
    live.unlink()
    assert _layout(reopened) == before


def test_pictures_of_an_add_killed_before_its_round_record_are_swept_on_open(open_memory, photos):
    """An add killed after its pictures and units were written, before its round records: the open
    that drops the roundless units drops the pictures only they recorded, which nothing could list,
    forget or reach after. A picture a whole round shows stays."""
    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    cat = index.image_dir / Path(index.rounds(["D1:1"])[0].units[2].image_path).name
    index.add_rounds(_conversation(photos)[3:5])  # the coffee, and the cat again
    killed = index.scope(round_ids=tuple(r.round.node_id for r in index.rounds(["D2:1", "D2:2"])))
    index.store.delete(Collection.ROUNDS, killed)  # what the killed add never wrote
    assert len([p for p in index.image_dir.iterdir() if p.is_file()]) == 2, "the coffee picture was saved"
    reopened = open_memory()
    rounds, roundless, files = _layout(reopened)
    assert [key for key, _, _ in rounds] == ["D1:1"] and roundless == []
    assert files == [cat.name]


def test_on_a_server_opening_a_memory_leaves_another_processs_write_alone(tmp_path, minilm, tiny_siglip, photos, monkeypatch):
    """On a server another process may be between an add's units and its round record, or mid-forget
    with files set aside: a handle opened meanwhile clears neither. The memory's next add clears the
    units (and pictures) of an add that never finished, its next forget the files set aside."""
    from qdrant_client import QdrantClient

    from llama_index_vmem import VMemIndex
    from llama_index_vmem.store.server import ServerLaneStore

    monkeypatch.setattr(ServerLaneStore, "exclusive", property(lambda self: False), raising=False)  # as on a server
    client = QdrantClient(location=":memory:")

    def open_():
        return VMemIndex.from_defaults(path=tmp_path / "m", client=client, embed_model=minilm, image_encoder=tiny_siglip)

    writer = open_()
    writer.add_rounds(_conversation(photos)[:1])
    cat = Path(writer.rounds(["D1:1"])[0].units[2].image_path).name
    writer.add_rounds(_conversation(photos)[3:5])  # the coffee, and the cat again
    in_flight = writer.scope(round_ids=tuple(r.round.node_id for r in writer.rounds(["D2:1", "D2:2"])))
    writer.store.delete(Collection.ROUNDS, in_flight)  # their round records are not written yet
    aside = writer.image_dir / ".forgetting-elsewhere"
    aside.mkdir()
    (aside / "0-picture.png").write_bytes(b"pixels a forget set aside")
    saved = sorted(p.name for p in writer.image_dir.iterdir() if p.is_file())
    _, writing, _ = _layout(writer)
    reader = open_()
    rounds, roundless, _ = _layout(reader)
    assert [key for key, _, _ in rounds] == ["D1:1"], "nothing half-written is listed"
    assert writing and roundless == writing
    assert sorted(p.name for p in reader.image_dir.iterdir() if p.is_file()) == saved and len(saved) == 2
    assert aside.exists()
    reader.export_archive(tmp_path / "meanwhile.zip")  # leaves the unfinished add out, so the archive imports
    copy = VMemIndex.from_archive(tmp_path / "meanwhile.zip", path=tmp_path / "copy", embed_model=minilm, image_encoder=tiny_siglip)
    assert _layout(copy)[:2] == (rounds, [])
    copy.close()
    reader.add_round(user="A note for later.", round_key="D3:1", session_id="D3")
    rounds, roundless, _ = _layout(reader)
    assert [key for key, _, _ in rounds] == ["D1:1", "D3:1"] and roundless == []
    assert [p.name for p in reader.image_dir.iterdir() if p.is_file()] == [cat]
    reader.forget(["D3:1"])
    assert not aside.exists()
    for index in (writer, reader):
        index.close()


def test_forget_all_removes_every_file_of_the_memorys_own_image_folder(open_memory, photos):
    """forget_all forgets every saved image, also one no unit records (left by an add killed before
    its units were written, or a write that died before its rename); another memory's stay."""
    index = open_memory()
    other = open_memory("bob")
    index.add_rounds(_conversation(photos)[:1])
    other.add_rounds(_conversation(photos)[:1])
    (index.image_dir / photos["coffee"].name).write_bytes(photos["coffee"].read_bytes())
    (index.image_dir / "0123abcd.png.5f1e.tmp").write_bytes(b"half a picture")
    theirs = sorted(p for p in other.image_dir.rglob("*") if p.is_file())
    assert index.forget_all() == 1
    assert not [p for p in index.image_dir.rglob("*") if p.is_file()]
    assert theirs and sorted(p for p in other.image_dir.rglob("*") if p.is_file()) == theirs and len(other) == 1


def test_neighbour_blocks_of_interleaved_sessions(open_memory, photos):
    """Two devices writing at once interleave by seq; each session still chains its own rounds."""
    index = open_memory()
    for i in range(1, 4):
        index.add_round(user=f"Kitchen note {i}: the oven timer rings at {i} pm.", assistant="Ok.", session_id="A")
        index.add_round(user=f"Garden note {i}: water the roses at {i} am.", assistant="Ok.", session_id="B")
    def blocks(keys):
        matched = [NodeWithScore(node=r.round, score=1.0) for r in index.rounds(keys)]
        return [b.node.metadata[BLOCK_ROUNDS] for b in NeighborRoundPostprocessor(index, window=1).postprocess_nodes(matched)]

    assert blocks(["A:2", "B:2"]) == [["A:1", "A:2", "A:3"], ["B:1", "B:2", "B:3"]]
    index.forget(["A:2"])
    assert blocks(["A:3"]) == [["A:1", "A:3"]]
    assert blocks(["A:1", "B:3"]) == [["A:1", "A:3"], ["B:2", "B:3"]]


def test_a_round_borrows_the_images_of_its_own_session_within_the_window(open_memory, photos):
    """Nearest first, the earlier side first; a round right after in seq but of the next session
    lends nothing, and the walk stops at the session's edge."""
    def picture(key):
        return [{"image_id": f"{key}:IMG", "path": str(photos["coffee"]), "caption": f"photo {key}"}]

    def near(key, window):
        return [img.metadata["image_id"] for img in index.images_near([rounds[key]], window)[rounds[key].node_id]]

    index = open_memory()
    index.add_rounds([{"round_key": f"A:{i}", "session_id": "A", "user": f"Note {i}.", "assistant": "Ok.",
                       "images": picture(f"A:{i}") if i in (1, 4) else []} for i in range(1, 6)]
                     + [{"round_key": "B:1", "session_id": "B", "user": "Next day.", "assistant": "Ok.", "images": picture("B:1")}])
    rounds = {r.round.metadata["round_key"]: r.round for r in index.rounds()}
    assert near("A:4", 2) == ["A:4:IMG"]  # its own
    assert near("A:3", 2) == ["A:4:IMG", "A:1:IMG"]
    assert near("A:3", 1) == ["A:4:IMG"]
    assert near("A:5", 2) == ["A:4:IMG"]  # not B:1's, one seq later
    keys = {r.node_id: k for k, r in rounds.items()}
    a5 = {rounds["A:5"].node_id: rounds["A:5"].metadata}
    assert {keys[i] for i in neighbours.within(index, a5, 2)} == {"A:3", "A:4", "A:5"}
    assert neighbours.within(index, a5, 0) == {rounds["A:5"].node_id}


@pytest.mark.slow
def test_crafted_archives_are_refused_with_the_item_named(open_memory, photos, tmp_path, minilm, tiny_siglip):
    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    archive = index.export_archive(tmp_path / "m.zip")
    with zipfile.ZipFile(archive) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    image_name = next(n for n in entries if n.startswith("images/"))

    def crafted(name, change):
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as z:
            for n, data in change(dict(entries)).items():
                z.writestr(n, data)
        return path

    def swapped(e):  # another picture under the cat's name
        e[image_name] = photos["coffee"].read_bytes()
        return e

    def missing_image(e):
        del e[image_name]
        return e

    def edited(edit):
        """``edit`` applied to every point of memory.json."""
        def change(e):
            doc = json.loads(e["memory.json"])
            for points in doc["collections"].values():
                for point in points:
                    edit(point)
            e["memory.json"] = json.dumps(doc)
            return e
        return change

    def loop(point):  # a round linking back to itself: walking its neighbours would never end
        if "unit_ids" in point["payload"]:
            point["payload"]["prev_round_id"] = point["id"]

    def duplicate_key(e):  # a second round under the first's key, linking back to it
        doc = json.loads(e["memory.json"])
        [first] = doc["collections"]["rounds"]
        doc["collections"]["rounds"].append(dict(first, id=first["id"][:-4] + "ffff",
                                                 payload=dict(first["payload"], prev_round_id=first["id"])))
        e["memory.json"] = json.dumps(doc)
        return e

    def short_vector(point):
        if "text_dense" in point["vectors"]:
            point["vectors"]["text_dense"] = point["vectors"]["text_dense"][:3]

    def units(**changes):  # ``changes`` to every unit's payload (a value that is a function: of the point)
        def edit(point):
            if "unit_index" in point["payload"]:
                point["payload"].update({k: v(point) if callable(v) else v for k, v in changes.items()})
        return edit

    def image_units(**changes):
        def edit(point):
            if point["payload"].get("modality") == "image":
                point["payload"].update(changes)
        return edit

    def element(name, key, position, value):  # one element of every vector ``name`` (``key``: of a sparse one)
        def edit(point):
            if name in point["vectors"]:
                (point["vectors"][name][key] if key else point["vectors"][name])[position] = value
        return edit

    opened = dict(embed_model=minilm, image_encoder=tiny_siglip)
    for name, change, message in (("swapped.zip", swapped, "^archive .*swapped.zip image images/.*: .*not named by its content"),
                                  ("no-ids.zip", edited(lambda p: p["payload"].pop("round_key")), "malformed point"),
                                  ("missing.zip", missing_image, "not in the archive"),
                                  ("loop.zip", edited(loop), "links back loop"),
                                  ("twice.zip", duplicate_key, "two points are round 'D1:1'"),
                                  ("seq.zip", edited(lambda p: p["payload"].update(seq="first")), "whole numbers"),
                                  ("session.zip", edited(lambda p: p["payload"].update(session_id=5)), "session_id must be text"),
                                  ("text.zip", edited(lambda p: p["payload"].update(text=123)), "text must be text, not int"),
                                  ("key.zip", edited(lambda p: p["payload"].update(round_key=["D1:1"])), "round_key must be text"),
                                  ("caption.zip", edited(lambda p: p["payload"].update(caption={"a": 1})), "caption must be text"),
                                  ("ids.zip", edited(lambda p: p["payload"].update(image_ids=[7])), "image_ids must be a list of text"),
                                  ("surrogate.zip", edited(lambda p: p["payload"].update(timestamp="\ud800")), "cannot be stored as UTF-8"),
                                  ("vector.zip", edited(short_vector), "does not fit this store"),
                                  ("sparse.zip", edited(lambda p: [v["values"].pop() for v in p["vectors"].values() if isinstance(v, dict)]),
                                   r"sparse vector 'text_(context_)?sparse' must pair"),
                                  ("sparse-ids.zip", edited(lambda p: [v.update(indices=[str(i) for i in v["indices"]])
                                                                      for v in p["vectors"].values() if isinstance(v, dict)]),
                                   r"sparse vector 'text_(context_)?sparse' must pair"),
                                  # a seq the next add's sweep of a killed write's leftovers would take in
                                  ("unit-seq.zip", edited(units(seq=99)), "its seq must be its round's"),
                                  ("big-seq.zip", edited(lambda p: p["payload"].update(seq=p["payload"]["seq"] + 2**60)),
                                   f"seq must be from 1 to {MAX_SEQ}, not {2**60 + 1}"),
                                  ("past-max-seq.zip", edited(lambda p: p["payload"].update(seq=MAX_SEQ + 1)), f"seq must be from 1 to {MAX_SEQ}"),
                                  ("orphan.zip", edited(units(round_id=lambda p: p["id"])), "its round .* is not in the archive"),
                                  ("unit-session.zip", edited(units(session_id="D9")), "its session_id must be its round's"),
                                  ("nan.zip", edited(element("text_dense", None, 0, float("nan"))), "'text_dense' must hold finite numbers"),
                                  ("inf.zip", edited(element("visual", None, 0, float("inf"))), "'visual' must hold finite numbers"),
                                  ("bool.zip", edited(element("text_dense", None, 0, True)), "'text_dense' must hold finite numbers"),
                                  ("word.zip", edited(element("text_dense", None, 0, "x")), "'text_dense' must hold finite numbers"),
                                  ("sparse-nan.zip", edited(element("text_sparse", "values", 0, float("nan"))), "must pair distinct"),
                                  ("sparse-big.zip", edited(element("text_sparse", "indices", 0, 2**40)), "must pair distinct"),
                                  ("sparse-twice.zip", edited(lambda p: "text_sparse" in p["vectors"] and element(
                                      "text_sparse", "indices", 1, p["vectors"]["text_sparse"]["indices"][0])(p)), "must pair distinct"),
                                  # what add_rounds refuses: a key no call could name again, text over its limit
                                  ("nul-key.zip", edited(lambda p: p["payload"].update(round_key="D1:1\x00x")), "'round_key' must not contain NUL"),
                                  ("blank-key.zip", edited(lambda p: p["payload"].update(round_key="")), "round_key: must not be empty"),
                                  ("nul-image-id.zip", edited(lambda p: p["payload"].update(image_id="I\x00") if "image_id" in p["payload"] else None),
                                   "'image_id' must not contain NUL"),
                                  # a picture that names no file: a later add sharing its id read the file and failed bare
                                  ("no-file.zip", edited(image_units(image_path=None)), "has_pixels must be true exactly when"),
                                  ("pixels-word.zip", edited(image_units(has_pixels="yes")), "has_pixels must be true exactly when"),
                                  ("lane.zip", edited(units(modality="image")), "modality must be 'text' in the text collection"),
                                  ("unit-index.zip", edited(units(unit_index=2**70)), f"unit_index must be from 0 to {MAX_SEQ}"),
                                  ("no-vectors.zip", edited(lambda p: "unit_index" in p["payload"] and p.update(vectors={})), "a unit must have vectors"),
                                  ("vector-list.zip", edited(lambda p: p.update(vectors=[])), "a vectors object")):
        with pytest.raises(VMemInputError, match=message):
            VMemIndex.from_archive(crafted(name, change), path=tmp_path / name.replace(".zip", ""), **opened)
        target = VMemIndex.from_defaults(path=tmp_path / name.replace(".zip", ""), **opened)
        try:
            assert len(target) == 0 and not [p for p in target.image_dir.rglob("*") if p.is_file()]
        finally:
            target.close()


def test_an_archive_that_unpacks_to_far_more_than_an_export_is_refused_before_it_is_read(open_memory, photos, tmp_path, minilm,
                                                                                          tiny_siglip, monkeypatch):
    """A zip bomb: a small zip whose memory.json (or pictures) unpack to hundreds of times its size
    would be read whole into memory. An export of the same memory stays well inside the limit."""
    from llama_index_vmem import archive as archive_module

    monkeypatch.setattr(archive_module, "MIN_UNPACKED_LIMIT", 1024 * 1024)
    index = open_memory()
    index.add_rounds(_conversation(photos)[:2])
    export = index.export_archive(tmp_path / "m.zip")
    with zipfile.ZipFile(export) as z:
        unpacked = sum(i.file_size for i in z.infolist())
    assert unpacked < archive_module.MAX_INFLATION * export.stat().st_size / 5, "an export inflates far less than the limit"
    with zipfile.ZipFile(export) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data + b" " * (100 * export.stat().st_size) if name == "memory.json" else data)
    with pytest.raises(VMemInputError, match=f"^archive {re.escape(str(bomb))}: unpacks to .* bytes, over the .*max_unpacked_bytes=\\d+ or more$"):
        VMemIndex.from_archive(bomb, path=tmp_path / "bombed", embed_model=minilm, image_encoder=tiny_siglip)
    copy = VMemIndex.from_archive(export, path=tmp_path / "copy", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        assert len(copy) == len(index)
    finally:
        copy.close()
    # its owner can read an export that repetitive (its memory.json only padded with spaces), up to a limit of their own
    with zipfile.ZipFile(bomb) as z:
        bomb_unpacked = sum(i.file_size for i in z.infolist())
    with pytest.raises(VMemInputError, match=f"unpacks to {bomb_unpacked} bytes, over max_unpacked_bytes={bomb_unpacked - 1}$"):
        VMemIndex.from_archive(bomb, path=tmp_path / "bombed", max_unpacked_bytes=bomb_unpacked - 1, embed_model=minilm,
                               image_encoder=tiny_siglip)
    for bad in (0, "1GB", True):
        with pytest.raises(VMemInputError, match=f"^max_unpacked_bytes: must be a positive int, got {re.escape(repr(bad))}$"):
            VMemIndex.from_archive(bomb, path=tmp_path / "bombed", max_unpacked_bytes=bad, embed_model=minilm,
                                   image_encoder=tiny_siglip)
    padded = VMemIndex.from_archive(bomb, path=tmp_path / "bombed", max_unpacked_bytes=bomb_unpacked, embed_model=minilm,
                                    image_encoder=tiny_siglip)
    try:
        assert [r.round.text for r in padded.rounds()] == [r.round.text for r in index.rounds()]
    finally:
        padded.close()


def test_an_export_of_a_round_at_the_text_limit_imports_again(open_memory, photos, tmp_path, minilm, tiny_siglip):
    """A unit's text is its field with the captions shared with it folded in, so it may pass the
    limit an add holds each field to: the archive check must not refuse what an add stored."""
    index = open_memory()
    index.add_rounds([{"round_key": "L:1", "user": "x" * MAX_TEXT_CHARS, "assistant": "ok",
                       "images": [{"image_id": "L:IMG", "path": str(photos["chelsea"]), "caption": "a tabby cat"}]}])
    assert max(len(u.text) for r in index.rounds() for u in r.units) > MAX_TEXT_CHARS
    copy = VMemIndex.from_archive(index.export_archive(tmp_path / "long.zip"), path=tmp_path / "copy",
                                  embed_model=minilm, image_encoder=tiny_siglip)
    try:
        assert [r.round.metadata["round_key"] for r in copy.rounds()] == ["L:1"]
    finally:
        copy.close()


def test_an_archive_with_damaged_compressed_data_is_refused_by_name(open_memory, photos, tmp_path, minilm, tiny_siglip):
    """zipfile raises zlib.error, not BadZipFile, for deflate data that is damaged inside an intact zip."""
    index = open_memory()
    index.add_rounds(_conversation(photos)[:1])
    archive = index.export_archive(tmp_path / "m.zip")
    raw = bytearray(archive.read_bytes())
    info = zipfile.ZipFile(archive).getinfo("memory.json")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 5
    raw[start:start + 8] = bytes(b ^ 0xFF for b in raw[start:start + 8])
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(bytes(raw))
    with pytest.raises(VMemInputError, match=f"archive {re.escape(str(damaged))}: is not a memory archive"):
        VMemIndex.from_archive(damaged, path=tmp_path / "copy", embed_model=minilm, image_encoder=tiny_siglip)
    assert len(index) == 1


def test_nul_in_ids_and_non_dates_are_refused_or_ignored(open_memory, photos):
    with pytest.raises(VMemInputError, match="memory_id"):
        open_memory("a\x00b")
    index = open_memory()
    with pytest.raises(VMemInputError, match="NUL"):
        index.add_rounds([{"round_key": "b\x00c", "user": "hi"}])
    index.add_rounds([{"round_key": "R1", "user": "hi", "timestamp": "Round 12"},
                      {"round_key": "R2", "user": "hello", "timestamp": "2024-06-12"}], lenient=True)
    assert index.forget(since="2024-06-01", until="2024-07-01") == 1
    assert [r.round.metadata["round_key"] for r in index.rounds()] == ["R1"]


def test_a_closed_handle_refuses_by_name_while_another_keeps_the_memory(open_memory):
    first, second = open_memory("u1"), open_memory("u1")
    first.add_round(user="kiwi smoothie", assistant="ok")
    first.close()
    first.close()  # twice is fine
    for call in (lambda: first.as_retriever().retrieve("kiwi"), lambda: len(first),
                 lambda: first.add_round(user="more", assistant="ok")):
        with pytest.raises(VMemInputError, match="memory 'u1'.*closed"):
            call()
    assert len(second) == 1 and second.as_retriever().retrieve("kiwi")[0].node.text.startswith("User: kiwi smoothie")
    second.close()
    with pytest.raises(VMemInputError, match="memory 'u1'.*closed"):
        second.as_retriever().retrieve("kiwi")


def _strip_payload_key(store, key):
    """Remove ``key`` from every point, as a version that never wrote it left them."""
    from qdrant_client import models

    for c in Collection:
        if hasattr(store, "client"):
            store.client.delete_payload(store.name(c), keys=[key], points=models.FilterSelector(filter=models.Filter()), wait=True)
        else:
            import qdrant_edge as qe

            store._shards[c].update(qe.UpdateOperation.delete_payload_by_filter(qe.Filter(), [key]))


def test_a_memory_stored_before_times_were_indexed_gains_them_when_it_opens(open_memory, photos):
    """Time ranges (``rounds(since=)``, ``forget(until=)``, retrieval's ``timestamp`` filters) filter on
    each point's stored reading of its timestamp. Points an older version wrote have none; opening the
    memory reads their timestamps once, so no range misses them. One with no readable time gets NO_TIME."""
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    index = open_memory("alice")
    index.add_rounds(_conversation(photos) + [{"round_key": "X:1", "timestamp": "the day after", "user": "Hi.", "assistant": "Hi."}],
                     lenient=True)
    _strip_payload_key(index.store, schema.TIME)
    assert index.rounds(since="2024-07-01") == [], "without the stored reading, no range selects a round"
    index.close()
    index = open_memory("alice")
    assert [r.round.metadata["round_key"] for r in index.rounds(since="2024-07-01")] == ["D2:1", "D2:2"]
    july = MetadataFilters(filters=[MetadataFilter(key="timestamp", value="2024-07-01", operator=FilterOperator.GTE)])
    assert {n.node.metadata["round_key"] for n in index.as_retriever(filters=july).retrieve("What did I have for dinner?")} == {"D2:1", "D2:2"}
    for c in Collection:
        assert index.store.scroll(c, index.scope(lacking=schema.TIME)) == [], c
    assert [r.round.metadata[schema.TIME] for r in index.rounds(["X:1"])] == [times.NO_TIME]
    assert index.forget(until="2024-07-01") == 3 and [r.round.metadata["round_key"] for r in index.rounds()] == ["D2:1", "D2:2", "X:1"]


def test_an_import_reads_each_time_from_its_timestamp_not_from_the_archive(open_memory, photos, tmp_path, minilm, tiny_siglip):
    """An archive from an older version has no stored times, and a crafted one could carry times that
    contradict its timestamps: either way a time range would select the wrong rounds."""
    index = open_memory("alice")
    index.add_rounds(_conversation(photos))
    archive = index.export_archive(tmp_path / "alice.zip")
    with zipfile.ZipFile(archive) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    doc = json.loads(entries["memory.json"])
    for points in doc["collections"].values():
        for i, point in enumerate(points):
            if i % 2:
                point["payload"].pop(schema.TIME)
            else:
                point["payload"][schema.TIME] = 0
    entries["memory.json"] = json.dumps(doc)
    with zipfile.ZipFile(tmp_path / "edited.zip", "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
    with VMemIndex.from_archive(tmp_path / "edited.zip", path=tmp_path / "copy", embed_model=minilm, image_encoder=tiny_siglip) as copy:
        assert [r.round.metadata["round_key"] for r in copy.rounds(since="2024-07-01")] == ["D2:1", "D2:2"]
        assert [r.round.metadata["round_key"] for r in copy.rounds(until="1970-01-02")] == []


@pytest.mark.parametrize("make_index", ["server"], indirect=True)
def test_a_server_open_neither_waits_for_this_process_nor_fails_on_a_point_deleted_meanwhile(make_index, photos, monkeypatch):
    """On a server, which other processes reach, the open's backfill of stored times took the memory's
    write lock, so it waited for any write of this process (an add holds it while encoding), and it named
    points by id, so a round another process forgot between its read and its write failed the open."""
    import threading

    from llama_index_vmem import round_memory as index_module
    from llama_index_vmem.store.server import ServerLaneStore

    monkeypatch.setattr(ServerLaneStore, "exclusive", property(lambda self: False))  # local mode, read as a server
    first = make_index(memory_id="m")
    first.add_rounds(_conversation(photos))
    _strip_payload_key(first.store, schema.TIME)
    read = ServerLaneStore.scroll
    forgotten = []

    def forget_between(self, collection, scope, *args, **kwargs):  # another process forgets a round just read
        hits = read(self, collection, scope, *args, **kwargs)
        if scope.lacking == schema.TIME and collection is Collection.ROUNDS and hits and not forgotten:
            forgotten.append(hits[0].payload.get("seq"))
            self.client.delete(self.name(collection), points_selector=[hits[0].id], wait=True)
        return hits

    monkeypatch.setattr(ServerLaneStore, "scroll", forget_between)
    opened, failed = [], []
    with index_module._write_lock(first.store, "m"):  # held as by a long add of another handle
        opener = threading.Thread(target=lambda: _catching(lambda: opened.append(make_index(memory_id="m")), failed), daemon=True)
        opener.start()
        opener.join(60)
        assert opened and not failed, failed or "the open waited for this process's write lock"
    [second] = opened
    assert forgotten == [1] and second.store.scroll(Collection.ROUNDS, second.scope(lacking=schema.TIME)) == []
    assert [r.round.metadata["round_key"] for r in second.rounds(since="2024-07-01")] == ["D2:1", "D2:2"]


def _catching(fn, errors):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - reported by the test that runs it
        errors.append(e)


def test_an_archive_carries_its_build_options_and_one_from_before_them_keeps_the_old_encoding(open_memory, photos, tmp_path,
                                                                                             minilm, tiny_siglip):
    """An import follows the archive's build options (``bm25_b``, ``dated_units``, ``reply_context``: its vectors were made so); an
    archive from before they were recorded was made with b=0.75 from undated text, and so is
    imported; asking for another value is refused before any store is made."""
    import json
    import zipfile

    from llama_index_vmem.archive import MEMORY_JSON
    from llama_index_vmem.encoders import BUILD_DEFAULTS, BUILD_LEGACY

    index = open_memory()
    index.add_rounds(_conversation(photos)[:2])
    archive = index.export_archive(tmp_path / "new.zip")
    with zipfile.ZipFile(archive) as z:
        assert {k: json.loads(z.read(MEMORY_JSON))["encoders"][k] for k in BUILD_DEFAULTS} == BUILD_DEFAULTS
    old = tmp_path / "old.zip"  # as an earlier version wrote it
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(old, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == MEMORY_JSON:
                document = json.loads(data)
                document["encoders"] = {k: v for k, v in document["encoders"].items() if k not in BUILD_DEFAULTS}
                data = json.dumps(document).encode()
            dst.writestr(info, data)
    kwargs = dict(embed_model=minilm, image_encoder=tiny_siglip)
    with VMemIndex.from_archive(archive, path=tmp_path / "a", **kwargs) as copy:
        assert copy.build_options == BUILD_DEFAULTS and _answers(copy, photos) == _answers(index, photos)
    with pytest.raises(VMemInputError, match=r"encoded with other encoders \(bm25_b: built with 0.75, asked for 0.0\)"):
        VMemIndex.from_archive(old, path=tmp_path / "b", bm25_b=0.0, **kwargs)
    assert not (tmp_path / "b").exists()
    with VMemIndex.from_archive(old, path=tmp_path / "b", **kwargs) as copy:
        assert copy.build_options == BUILD_LEGACY
        copy.add_round(user="My dog is called Rex.", assistant="Good boy.", session_id="D3", round_key="D3:1")
        assert copy.as_retriever(k=1).retrieve("dog Rex")[0].node.metadata["round_key"] == "D3:1"
    with VMemIndex.from_defaults(path=tmp_path / "b", **kwargs) as reopened:
        assert reopened.build_options == BUILD_LEGACY, "the imported store recorded the archive's encoding"
