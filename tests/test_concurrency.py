"""Several threads, and several asyncio tasks, adding and retrieving on one index at once end with
the same store as adding the same rounds one call after another, and raise nothing."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from llama_index_vmem import VMemQueryBundle

pytestmark = pytest.mark.slow  # many threads and tasks at once: run in CI with -m slow

WRITERS, CALLS, READS = 4, 3, 6
QUESTIONS = ["What did I cook on Sunday?", "Where did we hike?", "Which photo is this?"]


def _calls(photos):
    """Each writer is one session (one device of the user) adding rounds in calls of two."""
    names = ["chelsea", "coffee", "astronaut", "rocket"]
    return [[[{"round_key": f"W{w}:{c}-{i}", "session_id": f"W{w}",
               "user": f"Writer {w} call {c}: we hiked to lake {c} and cooked soup number {i}.",
               "assistant": f"Noted {w}.{c}.{i}.",
               "images": [{"image_id": f"W{w}:IMG_{c}-{i}", "path": str(photos[names[(w + c + i) % 4]]),
                           "caption": f"{names[(w + c + i) % 4]} seen by writer {w}"}] if i == 0 else []}
              for i in range(2)] for c in range(CALLS)] for w in range(WRITERS)]


def _store_state(index):
    """The memory as content: every round with its units, and each round's previous round, by key."""
    rounds = index.rounds(limit=10**6)
    key_of = {r.round.node_id: r.round.metadata["round_key"] for r in rounds}
    state = {}
    for r in rounds:
        units = [(u.metadata["role"], u.text, u.metadata.get("image_id"), bool(getattr(u, "image_path", None)))
                 for u in r.units]
        state[r.round.metadata["round_key"]] = (r.round.text, json.dumps(units), key_of.get(r.round.metadata["prev_round_id"]))
    return state


def _retrieve(index, photos, i):
    q = QUESTIONS[i % len(QUESTIONS)]
    bundle = VMemQueryBundle(q, image_path=str(photos["coffee"])) if "photo" in q else VMemQueryBundle(q)
    nodes = index.as_retriever().retrieve(bundle)
    assert all(n.node.metadata["memory_id"] == index.memory_id for n in nodes)
    return nodes


def _serial(open_memory, photos):
    serial = open_memory("serial")
    for writer in _calls(photos):
        for call in writer:
            serial.add_rounds(call)
    return _store_state(serial)


def test_threads_adding_and_retrieving_at_once_end_like_serial(open_memory, photos):
    expected = _serial(open_memory, photos)
    index = open_memory("threads")

    def write(w):
        for call in _calls(photos)[w]:
            index.add_rounds(call)

    with ThreadPoolExecutor(max_workers=WRITERS + 2) as pool:
        futures = [pool.submit(write, w) for w in range(WRITERS)]
        futures += [pool.submit(_retrieve, index, photos, i) for i in range(READS)]
        for f in futures:
            f.result()
    assert _store_state(index) == expected


def test_asyncio_tasks_adding_and_retrieving_at_once_end_like_serial(open_memory, photos):
    expected = _serial(open_memory, photos)
    index = open_memory("tasks")

    async def write(w):
        for call in _calls(photos)[w]:
            await index.aadd_rounds(call)

    async def main():
        retriever = index.as_retriever()
        reads = [retriever.aretrieve(QUESTIONS[i % 2]) for i in range(READS)]
        await asyncio.gather(*(write(w) for w in range(WRITERS)), *reads)

    asyncio.run(main())
    assert _store_state(index) == expected


def test_two_handles_of_one_memory_share_its_writes(open_memory, photos):
    """An app that opens a handle per request: handles of one memory lock together."""
    expected = _serial(open_memory, photos)
    handles = [open_memory("shared") for _ in range(WRITERS)]

    def write(w):
        for call in _calls(photos)[w]:
            handles[w].add_rounds(call)

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        for f in [pool.submit(write, w) for w in range(WRITERS)]:
            f.result()
    assert _store_state(open_memory("shared")) == expected


def test_threads_writing_the_same_picture_at_once_all_succeed(tmp_path, photos):
    """Two chats attaching one picture write one file by content hash; each writer has its own
    temporary file, so none finds another's renamed away, and none is left behind."""
    from threading import Barrier

    from llama_index_vmem import images

    image = images.validate("photo", photos["coffee"].read_bytes())
    for trial in range(25):
        directory = tmp_path / str(trial)
        start = Barrier(WRITERS)

        def write():
            start.wait()
            return images.save(image, directory)

        with ThreadPoolExecutor(WRITERS) as pool:
            paths = list(pool.map(lambda _: write(), range(WRITERS)))
        assert len(set(paths)) == 1 and paths[0].read_bytes() == image.data
        assert [p.name for p in directory.iterdir()] == [paths[0].name]


def test_memories_opened_at_once_with_an_encoder_that_does_not_state_its_size(tmp_path, minilm, tiny_siglip):
    """The store learns such an encoder's size by embedding a blank image: in memory, not through a
    file that memories opening at the same moment would share and delete under each other."""
    from llama_index_vmem import VMemIndex
    from llama_index_vmem.encoders import SiglipImageEncoder

    class Undeclared(SiglipImageEncoder):
        @property
        def dimension(self):
            return None

    encoder = Undeclared(model_name=tiny_siglip.model_name, local_files_only=True)

    def open_(memory_id):
        return VMemIndex.from_defaults(path=tmp_path / "m", memory_id=memory_id, embed_model=minilm, image_encoder=encoder)

    with ThreadPoolExecutor(WRITERS) as pool:
        memories = list(pool.map(open_, [f"user{i}" for i in range(WRITERS)]))
    try:
        assert [m.memory_id for m in memories] == [f"user{i}" for i in range(WRITERS)]  # every open succeeded
        assert not list((tmp_path / "m").rglob("*.png")), "no probe file is written"
    finally:
        for m in memories:
            m.close()


def test_a_path_reopened_while_its_last_handle_closes_opens(tmp_path, minilm, tiny_siglip):
    """Closing flushes and unlocks the shards; an open of the same path meanwhile waits for it."""
    import threading
    import time

    from llama_index_vmem import VMemIndex

    index = VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)
    index.add_round(user="kept across the reopen", session_id="S")
    flushing = threading.Event()

    class SlowToFlush:
        def __init__(self, shard):
            self.shard = shard

        def flush(self):
            flushing.set()
            time.sleep(0.5)
            self.shard.flush()

        def __getattr__(self, name):
            return getattr(self.shard, name)

    index.store._shards = {c: SlowToFlush(shard) for c, shard in index.store._shards.items()}
    closing = threading.Thread(target=index.close)
    closing.start()
    assert flushing.wait(10)
    again = VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm, image_encoder=tiny_siglip)
    closing.join()
    try:
        assert [r.round.text for r in again.rounds()] == ["User: kept across the reopen"]
    finally:
        again.close()


def test_a_slow_url_image_holds_up_no_other_writer_of_the_memory(open_memory, photos):
    """A picture is fetched before the memory's write lock is taken: while one add waits on a URL,
    another add to the same memory completes, and the first then stores its picture."""
    import threading

    from conftest import image_server

    asked, release = threading.Event(), threading.Event()
    index = open_memory()
    with image_server(photos["rocket"].read_bytes(), lambda: (asked.set(), release.wait(60))) as (address, _):
        try:
            with ThreadPoolExecutor(2) as pool:
                slow = pool.submit(index.add_round, user="Look at this launch.", session_id="A",
                                   images=[{"url": f"{address}/rocket.jpg"}])
                assert asked.wait(60), "the URL was never fetched"
                fast = pool.submit(index.add_round, user="I had soup for lunch.", session_id="B")
                fast.result(timeout=60)  # before the URL answers
                assert not slow.done()
                release.set()
                slow.result(timeout=60)
        finally:
            release.set()
    assert [r.round.metadata["session_id"] for r in index.rounds()] == ["B", "A"]
    assert any(getattr(u, "image_path", None) for u in index.rounds(session_id="A")[0].units)


def test_adding_to_a_long_session_reads_none_of_its_rounds_and_handles_agree_on_keys(open_memory):
    """A chat adds one round at a time to one session, thousands of times: finding the next default
    key must not read the whole session each time (the add would grow with it). Two handles of the
    memory share what they know, so they still number one after the other, and a forget still
    makes the next key follow the highest number left."""
    first, second = open_memory("chat"), open_memory("chat")
    first.add_round(user="Hello.", assistant="Hi.", session_id="S")
    session_reads = []
    scroll = first.store.scroll

    def counted(collection, scope, *args, **kwargs):
        if scope.session_id == "S":
            session_reads.append(collection)
        return scroll(collection, scope, *args, **kwargs)

    first.store.scroll = counted
    try:
        for i in range(4):
            (first if i % 2 else second).add_round(user=f"Fact {i}.", assistant="Noted.", session_id="S")
    finally:
        first.store.scroll = scroll
    assert session_reads == []
    assert [r.round.metadata["round_key"] for r in first.rounds(limit=10)] == ["S:1", "S:2", "S:3", "S:4", "S:5"]
    second.forget(["S:5", "S:4"])
    assert first.add_round(user="After.", assistant="Ok.", session_id="S").metadata["round_key"] == "S:4"
