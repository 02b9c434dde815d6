"""Crash safety: a child process appending rounds is killed (SIGKILL) at random points, again and
again, on the same store; after every kill the store opens, every round whose add call returned
is there, and no round is half-written. A child killed at a chosen point of an add leaves no
picture file behind; one killed part-way through an import leaves the conversation's first rounds."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llama_index_vmem import VMemIndex
from llama_index_vmem.store import Collection

pytestmark = pytest.mark.slow  # child processes killed mid-write: run in CI with -m slow

CHILD = Path(__file__).with_name("ingest_child.py")
KILLED_ADD_CHILD = Path(__file__).with_name("killed_add_child.py")
KILLS = 8


def _run_and_kill(store: Path, siglip_dir: str, photo_dir: Path, delay: float, after_ready: bool) -> list:
    """Start a child, kill it ``delay`` seconds after start (or after it is ready); the keys it confirmed."""
    child = subprocess.Popen([sys.executable, str(CHILD), str(store), siglip_dir, str(photo_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ))
    lines: list = []
    ready = threading.Event()

    def read() -> None:
        for line in child.stdout:
            lines.append(line.strip())
            if line.strip() == "ready":
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if after_ready:
        assert ready.wait(timeout=120), "child never got ready"
    time.sleep(delay)
    child.kill()
    child.wait()
    reader.join(timeout=10)
    return [key for key in lines if key != "ready"]


def test_killed_ingestion_keeps_every_returned_round_and_no_half_round(tmp_path, minilm, tiny_siglip, photos):
    store = tmp_path / "memory"
    photo_dir = tmp_path / "photos"
    photo_dir.mkdir()
    for name in ("chelsea", "coffee", "astronaut"):
        (photo_dir / f"{name}.png").write_bytes(photos[name].read_bytes())
    rng = random.Random(20261130)
    confirmed: set = set()
    stored_counts = []
    for attempt in range(KILLS):
        # The first kills land while the child imports or creates the store, the rest mid-ingestion.
        early = attempt < 2
        confirmed.update(_run_and_kill(store, tiny_siglip.model_name, photo_dir,
                                       rng.uniform(1.0, 6.0) if early else rng.uniform(0.05, 2.0), after_ready=not early))
        index = VMemIndex.from_defaults(path=store, memory_id="crash", embed_model=minilm, image_encoder=tiny_siglip)
        try:
            rounds = index.rounds(limit=10**6)
            keys = {r.round.metadata["round_key"] for r in rounds}
            assert confirmed <= keys, f"lost rounds whose add call returned: {sorted(confirmed - keys)}"
            for r in rounds:
                assert {u.node_id for u in r.units} == set(r.round.metadata["unit_ids"]), r.round.metadata["round_key"]
                assert [u.metadata["role"] for u in r.units] == ["user", "assistant", "image"]
                assert Path(r.units[2].image_path).exists()
            round_ids = {r.round.node_id for r in rounds}
            for lane in (Collection.TEXT, Collection.IMAGE):
                assert {h.payload["round_id"] for h in index.store.scroll(lane, index.scope())} <= round_ids
            if rounds:
                found = index.as_retriever().retrieve("the weather and the coffee")
                assert found and all(n.node.metadata["memory_id"] == "crash" for n in found)
            stored_counts.append(len(rounds))
        finally:
            index.close()
    assert confirmed, "no add call returned before a kill: the test did not exercise ingestion"
    assert stored_counts == sorted(stored_counts), "a later kill never takes back an earlier round"


@pytest.mark.parametrize("die", ["after_picture_saved", "before_round_record"])
def test_a_picture_saved_by_a_killed_add_is_removed_when_the_memory_next_opens(tmp_path, minilm, tiny_siglip, photos, die):
    """Killed after saving its picture, an add that never wrote its round leaves no file behind
    once the memory is opened again, and the stored round's picture stays."""
    store = tmp_path / "memory"
    child = subprocess.run([sys.executable, str(KILLED_ADD_CHILD), str(store), tiny_siglip.model_name,
                            str(photos["chelsea"]), str(photos["coffee"]), die], capture_output=True, text=True)
    assert child.returncode == 9, child.stderr[-2000:]
    index = VMemIndex.from_defaults(path=store, memory_id="crash", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        [stored] = index.rounds(limit=10)
        assert stored.round.metadata["round_key"] == "R1"
        recorded = {Path(h.payload["image_path"]).name for h in index.store.scroll(Collection.IMAGE, index.scope())}
        assert len(recorded) == 1
        assert {p.name for p in index.image_dir.iterdir() if p.is_file()} == recorded
    finally:
        index.close()


_IMPORT_THEN_DIE = """
import os, sys
from qdrant_client import QdrantClient
from llama_index_vmem import VMemIndex, archive
from llama_index_vmem.encoders import SiglipImageEncoder

index = VMemIndex.from_defaults(client=QdrantClient(path=sys.argv[1]), memory_id="m", image_dir=sys.argv[2],
                                image_encoder=SiglipImageEncoder(model_name=sys.argv[3], local_files_only=True))
index.store.batch_size = 2
upsert = index.store.client.upsert

def upsert_then_die(name, **kwargs):
    upsert(name, **kwargs)
    if name.endswith("_rounds"):
        os._exit(9)

index.store.client.upsert = upsert_then_die
archive.import_memory(index, archive.read_archive(sys.argv[4]))
"""


def test_an_import_killed_part_way_in_batches_leaves_whole_rounds_from_the_first(tmp_path, minilm, tiny_siglip):
    """A Qdrant client takes an import's round records in batches; killed after the first, the
    memory holds the conversation's first rounds, and opening it (local mode, which no other process
    reaches; on a server, its next add) sweeps the units of the rest. Before, rounds from anywhere
    were kept, and the units between them stayed for good."""
    from qdrant_client import QdrantClient

    source = VMemIndex.from_defaults(path=tmp_path / "source", memory_id="m", embed_model=minilm, image_encoder=tiny_siglip)
    source.add_rounds([{"user": f"note {i}", "assistant": "ok", "session_id": "D1"} for i in range(8)])
    source.export_archive(tmp_path / "m.zip")
    source.close()
    child = subprocess.run([sys.executable, "-c", _IMPORT_THEN_DIE, str(tmp_path / "local"), str(tmp_path / "images"),
                            tiny_siglip.model_name, str(tmp_path / "m.zip")], capture_output=True, text=True)
    assert child.returncode == 9, child.stderr[-2000:]
    index = VMemIndex.from_defaults(client=QdrantClient(path=str(tmp_path / "local")), memory_id="m",
                                    image_dir=tmp_path / "images", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        assert [r.round.metadata["round_key"] for r in index.rounds()] == ["D1:1", "D1:2"]
        kept = {p.id for p in index.store.points(Collection.ROUNDS, index.scope())}
        assert {p.payload["round_id"] for p in index.store.points(Collection.TEXT, index.scope())} == kept
    finally:
        index.close()
