"""Many memories in one store, property-based: whatever the interleaving of writes, reads, crafted
ids and forgets across memories, no call ever returns or changes another memory's data."""

from __future__ import annotations

import itertools
import shutil
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_vmem import VMemInputError, neighbours
from llama_index_vmem import images as image_io
from llama_index_vmem.index import MAX_MEMORY_ID_CHARS
from llama_index_vmem.schema import round_id
from llama_index_vmem.store import Collection

MEMORIES = 4
#: One secret word per memory: any text of memory m contains only its own secret.
SECRETS = ["saffron", "obsidian", "marmalade", "tundra"]

ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, MEMORIES - 1), st.integers(1, 5)),
    st.tuples(st.just("retrieve"), st.integers(0, MEMORIES - 1), st.integers(0, MEMORIES - 1)),
    st.tuples(st.just("crafted_ids"), st.integers(0, MEMORIES - 1), st.integers(0, MEMORIES - 1)),
    st.tuples(st.just("forget_other"), st.integers(0, MEMORIES - 1), st.integers(0, MEMORIES - 1)),
), min_size=4, max_size=14)

_example = itertools.count()


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops)
def test_no_call_ever_crosses_memories(open_memory, photos, program):
    run = next(_example)
    names = [f"run{run}-user{m}" for m in range(MEMORIES)]
    memories = [open_memory(name) for name in names]
    added = [0] * MEMORIES
    for op, m, arg in program:
        own = memories[m]
        if op == "add":
            own.add_rounds([{"round_key": f"D1:{added[m] + i + 1}", "session_id": "D1",
                             "user": f"My secret word is {SECRETS[m]} ({added[m] + i}).", "assistant": f"Noted, {SECRETS[m]}.",
                             "images": [{"image_id": f"I{added[m] + i}", "path": str(photos["coffee"]), "caption": f"{SECRETS[m]} mug"}]}
                            for i in range(arg)])
            added[m] += arg
        elif op == "retrieve":  # ask with another memory's secret in the question
            for n in own.as_retriever().retrieve(f"What is the secret word {SECRETS[arg]}?"):
                assert n.node.metadata["memory_id"] == names[m]
                assert all(s not in n.node.get_content() for s in SECRETS if s != SECRETS[m])
        elif op == "crafted_ids":  # ids and keys that exist in another memory
            keys = [f"D1:{i + 1}" for i in range(added[arg])]
            stolen = [round_id(names[arg], k) for k in keys]
            assert own.get_rounds(stolen) == {} or arg == m
            listed = own.rounds(keys) if keys else []
            assert all(r.round.metadata["memory_id"] == names[m] for r in listed)
            assert list(neighbours.steps(own, neighbours.round_payloads(own, stolen), 1)) == [] or arg == m  # no walk into another memory
        elif op == "forget_other":  # forgetting another memory's keys touches only this one
            if arg != m:
                before = [len(x) for x in memories]
                forgotten = own.forget([f"D1:{i + 1}" for i in range(added[arg])] or ["D1:1"])
                after = [len(x) for x in memories]
                assert after[arg] == before[arg] and all(after[i] == before[i] for i in range(MEMORIES) if i != m)
                assert after[m] == before[m] - forgotten
    for m, own in enumerate(memories):
        for c in Collection:
            assert all(h.payload["memory_id"] == names[m] and SECRETS[m] in h.payload.get("text", SECRETS[m])
                       for h in own.store.scroll(c, own.scope()))


@pytest.mark.parametrize("memory_id", [" ", "\t\n", "\u200b", "\u200e"], ids=["space", "line_break", "zero_width_space", "direction_mark"])
def test_a_memory_id_that_shows_nothing_opens_no_memory(open_memory, memory_id):
    """An id that shows nothing reads as no id: a tenant opened under it could not be told from another
    (or from none) in any listing, log or error message."""
    alice = open_memory("alice")
    alice.add_round(user="hello there", round_key="K")
    with pytest.raises(VMemInputError) as caught:
        open_memory(memory_id)
    assert caught.value.item == "memory_id" and caught.value.problem == "must have a visible character"
    assert len(alice) == 1


def test_a_memory_id_longer_than_a_tenant_key_opens_no_memory(open_memory):
    """Every point carries its memory id: one of megabytes would fill a server request with copies."""
    alice = open_memory("alice")
    alice.add_round(user="hello there", round_key="K")
    assert len(open_memory("u" * MAX_MEMORY_ID_CHARS)) == 0
    with pytest.raises(VMemInputError) as caught:
        open_memory("u" * (MAX_MEMORY_ID_CHARS + 1))
    assert caught.value.item == "memory_id" and caught.value.problem == f"is 1025 characters, over the {MAX_MEMORY_ID_CHARS} limit"
    assert len(alice) == 1


def test_photos_kept_in_the_image_folder_are_read_and_a_memory_folder_no_process_here_opened_is_not(open_memory, photos, tmp_path):
    """The store's image folder may hold the user's own photos beside the memories' folders; a folder
    named as a memory's is fenced off even when only another process opened that memory."""
    alice = open_memory("alice", image_dir=tmp_path / "images")
    mine = tmp_path / "images" / "uploads" / "coffee.jpg"
    mine.parent.mkdir(parents=True)
    shutil.copy(photos["coffee"], mine)
    alice.add_round(user="my coffee", images=[{"image_id": "C", "path": str(mine)}], session_id="S")
    for folder in ("0123456789abcdef", "0123456789ABCDEF"):  # another process's memory's, as a case-blind file system opens it
        unopened = tmp_path / "images" / folder / "theirs.jpg"
        unopened.parent.mkdir()
        shutil.copy(photos["coffee"], unopened)
        with pytest.raises(VMemInputError, match="another memory's image folder"):
            alice.add_round(user="theirs", images=[{"image_id": "T", "path": str(unopened)}], session_id="S")
    assert [r.round.text for r in alice.rounds()] == ["User: my coffee\n[Image C]"]


def test_an_export_never_writes_through_a_link_planted_at_a_temporary_name(open_memory, photos, tmp_path):
    """An attacker who shares the folder plants ``<archive>.tmp`` (the old fixed temporary name)
    as a link to another memory's picture: the export writes a fresh file of its own instead."""
    shared = tmp_path / "images"
    alice = open_memory("alice", image_dir=shared)
    bob = open_memory("bob", image_dir=shared)
    alice.add_round(user="my cat", images=[{"image_id": "A", "path": str(photos["chelsea"])}], session_id="S")
    bob.add_round(user="my coffee", images=[{"image_id": "B", "path": str(photos["coffee"])}], session_id="S")
    [alices_picture] = [p for p in alice.image_dir.iterdir() if p.is_file()]
    before = alices_picture.read_bytes()
    target = tmp_path / "bob.zip"
    (tmp_path / "bob.zip.tmp").symlink_to(alices_picture)
    bob.export_archive(target)
    assert alices_picture.read_bytes() == before
    alice.export_archive(tmp_path / "alice.zip")  # alice's own export still finds her picture intact
    assert zipfile.is_zipfile(target) and not [p for p in tmp_path.glob("bob.zip.*") if not p.is_symlink()]


def test_a_link_swapped_in_after_the_fence_check_cannot_change_what_is_read(open_memory, photos, tmp_path, monkeypatch):
    """The file is checked and read through one descriptor: swapping the checked path for a link to
    another memory's picture right after the check still reads the file that was checked."""
    shared = tmp_path / "images"
    alice = open_memory("alice", image_dir=shared)
    bob = open_memory("bob", image_dir=shared)
    alice.add_round(user="my cat", images=[{"image_id": "A", "path": str(photos["chelsea"])}], session_id="S")
    [alices_picture] = [p for p in alice.image_dir.iterdir() if p.is_file()]
    upload = tmp_path / "upload.png"
    shutil.copy(photos["coffee"], upload)
    check = image_io.Fence.check

    def check_then_swap(fence, item, path):
        check(fence, item, path)
        if upload.exists() and not upload.is_symlink():
            upload.unlink()
            upload.symlink_to(alices_picture)

    monkeypatch.setattr(image_io.Fence, "check", check_then_swap)
    bob.add_round(user="my coffee", images=[{"image_id": "B", "path": str(upload)}], session_id="S")
    assert upload.is_symlink()  # the swap happened
    [bobs_picture] = [p for p in bob.image_dir.iterdir() if p.is_file()]
    assert bobs_picture.read_bytes() == photos["coffee"].read_bytes() != alices_picture.read_bytes()
    with pytest.raises(VMemInputError, match="another memory's image folder"):  # the link itself is refused
        bob.add_round(user="again", images=[{"image_id": "C", "path": str(upload)}], session_id="S")
