"""A memory ranks the same way in every process that opens it.

Qdrant sums a sparse query's terms in an order that varies from process to process, so BM25
scores differ in their last bits between runs, and which of several tied points it returns at a
search's limit is its own choice. Left alone, the same benchmark run twice ranked 98 of 762
LoCoMo questions differently.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import List

import pytest

from llama_index_vmem import schema
from llama_index_vmem.encoders.bm25 import Sparse
from llama_index_vmem.store import Collection
from llama_index_vmem.store.base import Hit, LaneDims, PointData, Scope, Search
from llama_index_vmem.store.edge import EdgeLaneStore

from conftest import BENCH_DATA

pytestmark = pytest.mark.slow  # whole benchmark runs in child processes: run in CI with -m slow

SCOPE = Scope("m")


class OtherProcessStore(EdgeLaneStore):
    """Qdrant as another process may answer: noise in the last bits, and its own pick among ties."""

    def __init__(self, path: Path, seed: int) -> None:
        super().__init__(path)
        self.rng = random.Random(seed)

    def _query_batch(self, collection: Collection, requests) -> List[List[Hit]]:
        out = []
        for hits, (_, limit) in zip(super()._query_batch(collection, [(s, 10**6) for s, _ in requests]), requests):
            hits = [Hit(h.id, h.score * (1 + self.rng.uniform(-1e-7, 1e-7)), h.payload) for h in hits]
            self.rng.shuffle(hits)
            out.append(sorted(hits, key=lambda h: -h.score)[:limit])
        return out


def _point(seq: int, weight: float) -> PointData:
    return PointData(schema.unit_id("m", f"r{seq}", 0), {schema.MEMORY_ID: "m", schema.SEQ: seq, schema.UNIT_INDEX: 0},
                     {schema.TEXT_DENSE: [1.0, 0.0, 0.0, 0.0], schema.TEXT_SPARSE: Sparse((7,), (weight,))})


def test_a_tie_at_the_limit_is_filled_in_conversation_order_whatever_the_store_picks(tmp_path):
    """Alone, or in a batch of searches whose ties need fetching past their limits by different amounts."""
    weights = [2.0] * 3 + [1.0] * 30  # three clear winners, then thirty equal scores across the cut
    found = []
    for seed in range(5):
        store = OtherProcessStore(tmp_path / str(seed), seed)
        store.ensure_collections(LaneDims(text=4, visual=4), {})
        store.upsert(Collection.TEXT, [_point(seq, w) for seq, w in enumerate(weights)])
        tie = Search(Collection.TEXT, schema.TEXT_SPARSE, Sparse((7,), (1.0,)), SCOPE, 20)
        dense = Search(Collection.TEXT, schema.TEXT_DENSE, [1.0, 0.0, 0.0, 0.0], SCOPE, 4)  # every point ties
        together = store.search_many([tie, replace(tie, limit=5), dense])
        found.append([[h.payload[schema.SEQ] for h in hits] for hits in [store.search(**vars(tie)), *together]])
        store.close()
    assert found == [[list(range(20)), list(range(20)), list(range(5)), list(range(4))]] * 5


_BM25_RANKINGS = """
import json, sys
from pathlib import Path
from llama_index_vmem import schema
from llama_index_vmem.bench.data import load_locomo
from llama_index_vmem.encoders.bm25 import Bm25Encoder
from llama_index_vmem.store import Collection
from llama_index_vmem.store.base import LaneDims, PointData, Scope
from llama_index_vmem.store.edge import EdgeLaneStore

conv = load_locomo(Path(sys.argv[1]))[0]
bm25, store = Bm25Encoder(), EdgeLaneStore(Path(sys.argv[2]))
store.ensure_collections(LaneDims(text=1, visual=1), {})
units = [(seq, i, text) for seq, r in enumerate(conv.rounds) for i, text in enumerate((r.user, r.assistant)) if text]
vectors = bm25.documents([text for _, _, text in units])
store.upsert(Collection.TEXT, [PointData(schema.unit_id("m", str(seq), i), {schema.MEMORY_ID: "m", schema.SEQ: seq, schema.UNIT_INDEX: i},
                                         {schema.TEXT_DENSE: [1.0], schema.TEXT_SPARSE: v}) for (seq, i, _), v in zip(units, vectors)])
print(json.dumps([[h.id for h in store.search(Collection.TEXT, schema.TEXT_SPARSE, bm25.query(q.question), Scope("m"), 20)]
                  for q in conv.questions]))
"""


def test_two_processes_rank_the_same_conversation_alike(tmp_path):
    """The first conversation of the LoCoMo-format fixture: its questions against its turns, by BM25,
    in two processes."""
    from llama_index_vmem.bench.data import load_locomo

    path = BENCH_DATA / "locomo" / "locomo_dev.json"
    runs = [subprocess.run([sys.executable, "-c", _BM25_RANKINGS, str(path), str(tmp_path / str(i))],
                           check=True, capture_output=True, text=True).stdout for i in range(2)]
    first, second = (json.loads(r) for r in runs)
    assert len(first) == len(load_locomo(path)[0].questions) > 5 and all(first), "every question is ranked"
    assert first == second


def test_a_stock_baseline_breaks_ties_alike_in_every_build(minilm):
    """LlamaIndex's vector store breaks equal similarities by node id: stock units need stable ids."""
    from llama_index_vmem.bench.data import BenchConversation, BenchQuestion, BenchRound
    from llama_index_vmem.bench.systems import StockSystem

    rounds = [BenchRound(f"D1:{i}", "D1", "", "Thanks, see you tomorrow!", "Bye!", [], [f"D1:{i}"]) for i in range(1, 6)]
    conv = BenchConversation("c", "memgallery", rounds, [BenchQuestion("c#0", "Bye!", "FR", ["D1:1"], "")])
    rankings = []
    for _ in range(3):
        stock = StockSystem("stock-dense", minilm, None)
        stock.build(conv)
        rankings.append(stock.query(conv, conv.questions[0], None).ranking)
    assert sorted(rankings[0]) == [r.key for r in rounds]
    assert rankings[0] == rankings[1] == rankings[2]
