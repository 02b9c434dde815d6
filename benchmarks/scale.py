"""Scale of the embedded store: ``--rounds`` (100,000) rounds across ``--memories`` (1,000) memories.

Every memory is one user: a contiguous run of ``rounds / memories`` rounds (100) cut from a real
conversation of the benchmark data, cycling through the 12 Mem-Gallery dialogues and the 5 LoCoMo
conversations (images as captions only). All memories share one Qdrant Edge store on disk, as
every memory of an app does. Memories are ingested one after another, one ``add_rounds`` call per
memory (an app importing a user's history).

At each checkpoint (``--checkpoints``, rounds stored) it measures, for one memory (the first,
``m00000``, so every checkpoint asks the same memory of a bigger store):

* retrieval p50/p95 over ``--queries`` questions of that memory's conversation (Mem-Gallery
  questions with an image carry its caption), the query embedding computed every time (the
  index's query cache cleared before each query), then again with it already computed (search
  only), after 3 warm-up queries;
* raw filtered dense search in the text lane (``memory_id`` filter, tenant keyword index) and the
  same search unfiltered (the whole lane), in ms, to show what the tenant index buys;
* store size on disk (allocated blocks, like ``du``), points, segments and indexed vectors;
* ingest throughput of the stage (rounds/s since the last checkpoint) and where its time went
  (text encoder, store writes, store reads, the rest: parsing, BM25, payloads);
* peak RSS of the process so far (``PeakRSS``);
* then every handle is closed and a fresh subprocess opens the store with the stock MiniLM encoder
  (no cache) and measures the same retrieval again, plus its open time and its own peak RSS while
  it opens the store and asks its questions (the raw unfiltered search after them reads the whole
  lane, so its peak is reported apart).

After the last checkpoint, ``VMemIndex.optimize()`` (segments merged, HNSW) is timed and the retrieval measured
again, in this process and in a fresh one.

Text embeddings are memoised by text (``CachingEmbedding`` wraps the default MiniLM): the data
repeats across memories, and encoding 100k rounds (~220k texts at ~150 texts/s on 2 cores) would
take half an hour of pure MiniLM. The vectors are MiniLM's own, so the store's manifest names
MiniLM and the stock encoder reopens it. What the encoder costs is reported separately, on the
first slice of memories (one per conversation, every text new): "encoder-bound" rounds/s. Query
embeddings are never memoised by the wrapper.

On a shared 2-core machine torch's OpenMP threads spin-wait whenever other processes hold the
cores, and a MiniLM query encoding then takes ~500 ms (and ~500 ms of CPU) instead of 15-25 ms.
``OMP_WAIT_POLICY=PASSIVE`` (or one torch thread) avoids that, so the numbers measure the store, not
the scheduler; the footer says which policy ran.

Run from the repository root (about 5-10 min on 2 cores for the default size; a million rounds
across 10,000 memories took 24 min)::

    OMP_WAIT_POLICY=PASSIVE nice -n 10 python benchmarks/scale.py [--rounds 100000] [--memories 1000] \
        [--checkpoints 10000,50000,100000] [--queries 200] [--path DIR] [--out scale.json] [--show-progress] [--in-ram]
    python benchmarks/scale.py --rounds 1000000 --memories 10000 --checkpoints 100000,1000000 --skip-optimize

Quick check: ``python benchmarks/scale.py --rounds 2000 --memories 20 --checkpoints 1000,2000``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from llama_index_vmem import VMemIndex, VMemQueryBundle  # noqa: E402
from llama_index_vmem.bench.data import BenchConversation, load_locomo, load_memgallery  # noqa: E402
from llama_index_vmem.bench.run import PeakRSS  # noqa: E402
from llama_index_vmem.encoders import EfficientNetImageEncoder, default_text_embedding  # noqa: E402
from llama_index_vmem.encoders.threads import query_threads  # noqa: E402
from llama_index_vmem.node_parser import RoundNodeParser, round_input_from_dict  # noqa: E402
from llama_index_vmem.store import Collection  # noqa: E402

logger = logging.getLogger("scale")
WARMUP = ["What did we talk about first?", "Which picture showed a building?", "How many photos did I share?"]
PROBE = "m00000"


# -- the caching encoder ---------------------------------------------------------------------


class CachingEmbedding(BaseEmbedding):
    """MiniLM with document embeddings memoised by text; query embeddings always computed.

    ``class_name`` and ``model_name`` are MiniLM's (``HuggingFaceEmbedding`` and its path), so a
    store built through this wrapper has the stock encoder's manifest: the vectors are the same.
    """

    inner: BaseEmbedding
    _cache: Dict[str, array] = PrivateAttr(default_factory=dict)  # doubles: exact, 1/4 the size of a list
    _hits: int = PrivateAttr(default=0)
    _misses: int = PrivateAttr(default=0)
    _encode_s: float = PrivateAttr(default=0.0)

    def __init__(self, inner: BaseEmbedding, **kwargs: Any) -> None:
        # One batch per add_rounds call: the misses go to MiniLM together, in its own batches.
        super().__init__(inner=inner, model_name=inner.model_name, embed_batch_size=2048, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "HuggingFaceEmbedding"

    def stats(self) -> Tuple[int, int, float]:
        return self._hits, self._misses, self._encode_s

    def cache_mb(self) -> float:
        return sum(a.itemsize * len(a) + sys.getsizeof(t) for t, a in self._cache.items()) / 2**20

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        self._hits += len(texts) - len(missing)
        self._misses += len(missing)
        if missing:
            t0 = time.perf_counter()
            for t, e in zip(missing, self.inner.get_text_embedding_batch(missing), strict=True):
                self._cache[t] = array("d", e)
            self._encode_s += time.perf_counter() - t0
        return [self._cache[t].tolist() for t in texts]

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> List[float]:
        return self.inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_query_embedding(query)

    async def _aget_text_embedding(self, text: str) -> List[float]:
        return self._get_text_embedding(text)


# -- data ------------------------------------------------------------------------------------


def load_conversations(data_dir: Path) -> List[BenchConversation]:
    convs = [load_memgallery(p) for p in sorted((data_dir / "memgallery/dialog").glob("*.json"))]
    locomo = data_dir / "locomo/locomo_dev.json"
    if locomo.is_file():
        convs += load_locomo(locomo)
    if not convs:
        raise SystemExit(f"no Mem-Gallery dialogues or LoCoMo conversations under {data_dir}")
    return convs


def plan_memories(convs: Sequence[BenchConversation], n_rounds: int, n_memories: int) -> List[Tuple[str, int, List[Dict[str, Any]]]]:
    """``(memory_id, conversation index, round dicts)`` per memory: memory ``i`` takes a contiguous
    window of conversation ``i % C``; successive passes over a conversation start at other rounds."""
    base, extra = divmod(n_rounds, n_memories)
    out = []
    for i in range(n_memories):
        c = i % len(convs)
        rounds = convs[c].rounds
        n = min(base + (i < extra), len(rounds))
        start = (i // len(convs)) * n % (len(rounds) - n + 1)
        out.append((f"m{i:05d}", c, [r.as_round_dict() for r in rounds[start:start + n]]))
    return out


def count_units(rounds: Sequence[Dict[str, Any]]) -> int:
    """Units the parser makes of these rounds (the check on what the store holds)."""
    parser = RoundNodeParser(memory_id="count", image_dir=tempfile.gettempdir())
    parsed = parser.parse_rounds([round_input_from_dict(f"round {i}", r) for i, r in enumerate(rounds)], first_seq=1)
    return sum(len(p.units) for p in parsed)


def probe_queries(conv: BenchConversation, n: int) -> List[VMemQueryBundle]:
    """``n`` questions of the conversation (cycled if it has fewer); an image question carries its caption."""
    qs = [q for q in conv.questions if q.question.strip() and q.question not in WARMUP]
    if not qs:  # no questions: round texts stand in
        return [VMemQueryBundle(r.user or r.assistant) for r in conv.rounds[:n]]
    return [VMemQueryBundle(q.question, image_caption=q.image_caption) for q in (qs[i % len(qs)] for i in range(n))]


# -- measuring -------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo = int(k)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)


def disk_mb(path: Path) -> Tuple[float, float]:
    """(allocated MB like ``du``, apparent MB) of everything under ``path``."""
    blocks = apparent = 0
    for root, _, files in os.walk(path):
        for f in files:
            st = os.lstat(os.path.join(root, f))
            blocks += st.st_blocks * 512
            apparent += st.st_size
    return blocks / 2**20, apparent / 2**20


def shard_info(index: VMemIndex) -> Dict[str, Dict[str, int]]:
    out = {}
    for c, shard in index.store._shards.items():
        info = shard.info()
        segments = [d for d in (index.store.path / c.value / "segments").iterdir() if d.is_dir()]
        graphs = sum(any("graph" in f.name or "hnsw" in f.name for v in d.glob("vector_index-*") for f in v.rglob("*"))
                     for d in segments)
        out[c.value] = {"points": info.points_count, "segments": info.segments_count, "indexed_vectors": info.indexed_vectors_count,
                        "hnsw_segments": graphs}
    return out


def measure_retrieval(index: VMemIndex, queries: Sequence[VMemQueryBundle], rss: Optional[PeakRSS] = None) -> Dict[str, Any]:
    """Per question, interleaved so that load on the machine hits all three alike (ms): the MiniLM
    query embedding alone, on the torch threads a question is encoded with (``query_threads``);
    retrieval with the query cache cleared (embedding included); the same retrieval again, every
    query text now cached (search only). With ``rss``, the peak RSS so far is taken before the raw
    searches: the unfiltered one reads every vector of the lane, which no question does, and its
    pages would count."""
    retriever = index.as_retriever()
    for q in WARMUP:
        retriever.retrieve(q)
    encode, uncached, cached, cpu, cases = [], [], [], [], {}
    load_before = os.getloadavg()[0]
    for q in queries:
        with query_threads():  # as a question is encoded when asked
            t0 = time.perf_counter()
            index.embed_model.get_query_embedding(q.query_str)
            encode.append((time.perf_counter() - t0) * 1000)
        index.clear_query_cache()
        c0, t0 = time.process_time(), time.perf_counter()
        retriever.retrieve(q)
        uncached.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        misses = index.query_texts_encoded
        t0 = time.perf_counter()
        retriever.retrieve(q)
        cached.append((time.perf_counter() - t0) * 1000)
        assert index.query_texts_encoded == misses, "the search-only pass encoded a query"
        case = retriever.route(q).case.value
        cases[case] = cases.get(case, 0) + 1
    questions_peak = max(rss.peak_mb, PeakRSS.current_mb()) if rss is not None else None
    raw = raw_search(index, queries)
    return {"p50_ms": percentile(uncached, 50), "p95_ms": percentile(uncached, 95),
            "pre_encoded_p50_ms": percentile(cached, 50), "pre_encoded_p95_ms": percentile(cached, 95),
            "encode_p50_ms": percentile(encode, 50), "encode_p95_ms": percentile(encode, 95),
            "cpu_p50_ms": percentile(cpu, 50), "loadavg_1m": [load_before, os.getloadavg()[0]],
            "route_cases": cases, **raw, "latencies_ms": uncached, "pre_encoded_ms": cached, "encode_ms": encode,
            "peak_rss_questions_mb": questions_peak}


def raw_search(index: VMemIndex, queries: Sequence[VMemQueryBundle], n: int = 50) -> Dict[str, float]:
    """One dense search in the text lane: filtered to the memory (tenant index) vs the whole lane."""
    import qdrant_edge as qe

    from llama_index_vmem import schema
    from llama_index_vmem.store.edge import _filter

    vectors = index.encode_query_texts([q.query_str for q in queries[:n]])
    shard = index.store._shards[Collection.TEXT]
    flt = _filter(index.scope())

    def run(filtered: bool) -> float:
        times = []
        for v in vectors:
            req = qe.QueryRequest(limit=20, query=qe.Query.Nearest(v, using=schema.TEXT_DENSE),
                                  filter=flt if filtered else None, with_payload=True)
            t0 = time.perf_counter()
            shard.query(req)
            times.append((time.perf_counter() - t0) * 1000)
        return percentile(times, 50)

    run(True)
    return {"raw_filtered_p50_ms": run(True), "raw_unfiltered_p50_ms": run(False)}


class StoreTimer:
    """Wraps the shared store's methods (on the instance) to sum the time spent in each."""

    WRAPPED = ("upsert", "scroll", "last_round", "count", "search", "delete")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.WRAPPED, 0.0)
        self._store: Any = None

    def attach(self, store: Any) -> None:
        if store is self._store:
            return
        self._store = store
        for name in self.WRAPPED:
            setattr(store, name, self._wrap(name, getattr(type(store), name).__get__(store)))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds[name] += time.perf_counter() - t0
        return timed


# -- the reopened store, in a fresh process ----------------------------------------------------


def reopen_child(args: argparse.Namespace) -> None:
    """Child mode: open the store with the stock encoders, measure, print one JSON line."""
    with PeakRSS() as rss:
        embed = default_text_embedding()
        embed.get_text_embedding_batch(["warm the encoder kernels"] * 8)
        model_rss = PeakRSS.current_mb()
        t0 = time.perf_counter()
        index = VMemIndex.from_defaults(path=args.path, memory_id=PROBE, embed_model=embed)
        open_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        n = len(index)
        first_read_s = time.perf_counter() - t0
        conv = load_conversations(args.data_dir)[int(args.child_conv)]
        result = measure_retrieval(index, probe_queries(conv, args.queries), rss)
        index.close()
    result.update(open_s=open_s, first_count_s=first_read_s, probe_rounds=n, peak_rss_mb=result["peak_rss_questions_mb"],
                  peak_rss_with_raw_search_mb=rss.peak_mb, rss_after_model_mb=model_rss)
    print("RESULT " + json.dumps(result))


def measure_reopened(args: argparse.Namespace, conv_index: int) -> Dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(conv_index), "--path", str(args.path),
           "--data-dir", str(args.data_dir), "--queries", str(args.queries)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"reopen subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(line[len("RESULT "):])
    out["process_wall_s"] = wall
    return out


def ask_again(args: argparse.Namespace) -> None:
    """Fresh processes asking a kept store again: the probe memory holds the first conversation."""
    if args.path is None or not args.path.is_dir():
        raise SystemExit("--ask-again needs --path of a store an earlier run kept")
    runs = [measure_reopened(args, 0) for _ in range(args.ask_again)]
    print("| process | open s | p50 ms | p95 ms | search-only p50 ms | encode p50 ms | p50 / encode | p95 / p50 | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(runs, 1):
        print(f"| {i} | {r['open_s']:.2f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['pre_encoded_p50_ms']:.1f} | "
              f"{r['encode_p50_ms']:.1f} | {r['p50_ms'] / r['encode_p50_ms']:.2f}x | {r['p95_ms'] / r['p50_ms']:.2f}x | "
              f"{r['peak_rss_mb']:.0f} |")
    if args.out:
        args.out.write_text(json.dumps(runs, indent=2))


# -- the run ---------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, embed: CachingEmbedding, image_encoder: Any) -> None:
        self.args = args
        self.embed = embed
        self.image_encoder = image_encoder
        self.timer = StoreTimer()
        self.anchor: Optional[VMemIndex] = None

    def open(self, memory_id: str) -> VMemIndex:
        index = VMemIndex.from_defaults(path=self.args.path, memory_id=memory_id, embed_model=self.embed,
                                        image_encoder=self.image_encoder, in_ram=self.args.in_ram or None)
        self.timer.attach(index.store)
        return index

    def hold(self) -> VMemIndex:
        """The probe memory's index, kept open so the shared store stays open between memories."""
        if self.anchor is None:
            self.anchor = self.open(PROBE)
        return self.anchor

    def release(self) -> None:
        if self.anchor is not None:
            self.anchor.close()
            self.anchor = None


def store_split(timer: StoreTimer, before: Dict[str, float]) -> Dict[str, float]:
    d = {k: timer.seconds[k] - before[k] for k in timer.seconds}
    return {"store_write_s": d["upsert"] + d["delete"], "store_read_s": d["scroll"] + d["last_round"] + d["count"] + d["search"]}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    t_start = time.perf_counter()
    convs = load_conversations(args.data_dir)
    plan = plan_memories(convs, args.rounds, args.memories)
    checkpoints = sorted({min(c, sum(len(r) for _, _, r in plan)) for c in args.checkpoints})
    probe_conv = plan[0][1]
    queries = probe_queries(convs[probe_conv], args.queries)
    logger.info("%d conversations (%d rounds), %d memories, %d rounds planned, checkpoints %s", len(convs),
                sum(len(c.rounds) for c in convs), len(plan), sum(len(r) for _, _, r in plan), checkpoints)

    with PeakRSS() as rss:
        inner, load_s = timed(default_text_embedding)
        inner.get_text_embedding_batch(["warm the encoder kernels"] * 64)  # not counted
        embed = CachingEmbedding(inner)
        stock = f"{inner.class_name()}:{inner.model_name}"
        assert f"{embed.class_name()}:{embed.model_name}" == stock, "the wrapper must carry MiniLM's manifest name"
        bench = Bench(args, embed, EfficientNetImageEncoder())
        baseline_rss = PeakRSS.current_mb()
        logger.info("MiniLM loaded in %.1fs; RSS %.0f MB", load_s, baseline_rss)

        rows: List[Dict[str, Any]] = []
        stored = units = 0
        stage_start_stored = 0
        stage_ingest_s = total_ingest_s = 0.0
        stage_stats = embed.stats()
        stage_store = dict(bench.timer.seconds)
        slice_memories = min(len(convs), len(plan))
        encoder_slice: Dict[str, Any] = {}
        next_cp = iter(checkpoints)
        cp = next(next_cp, None)
        bar = tqdm(total=sum(len(r) for _, _, r in plan), desc="ingest", unit="round", disable=not args.show_progress)
        for i, (memory_id, _, rounds) in enumerate(plan):
            bench.hold()
            t0 = time.perf_counter()
            if memory_id == PROBE:
                bench.anchor.add_rounds(rounds)
            else:
                index = bench.open(memory_id)
                index.add_rounds(rounds)
                index.close()
            stage_ingest_s += time.perf_counter() - t0
            total_ingest_s += time.perf_counter() - t0
            stored += len(rounds)
            units += count_units(rounds)
            bar.update(len(rounds))
            if i + 1 == slice_memories:  # every memory so far came from a conversation not seen before
                hits, misses, enc_s = embed.stats()
                encoder_slice = {"memories": slice_memories, "rounds": stored, "units": units, "ingest_s": total_ingest_s,
                                 "rounds_per_s": stored / total_ingest_s, "texts_encoded": misses, "cache_hits": hits,
                                 "encode_s": enc_s, "texts_per_s": misses / enc_s if enc_s else 0.0}
                logger.info("encoder-bound slice: %s", encoder_slice)
            if cp is None or stored < cp:
                continue
            hits, misses, enc_s = embed.stats()
            row: Dict[str, Any] = {
                "checkpoint": cp, "rounds": stored, "memories": i + 1, "units_expected": units,
                "stage_rounds": stored - stage_start_stored, "stage_ingest_s": stage_ingest_s,
                "stage_rounds_per_s": (stored - stage_start_stored) / stage_ingest_s,
                "stage_encode_s": enc_s - stage_stats[2],
                "stage_cache_hit_rate": (hits - stage_stats[0]) / max(1, hits - stage_stats[0] + misses - stage_stats[1]),
                **{f"stage_{k}": v for k, v in store_split(bench.timer, stage_store).items()},
            }
            bar.clear()
            index = bench.hold()
            row["shards"] = shard_info(index)
            row["units"] = row["shards"]["text"]["points"] + row["shards"]["image"]["points"]
            row["probe_rounds"] = len(index)
            if row["units"] != units:
                logger.warning("the store holds %d units; the parser made %d", row["units"], units)
            logger.info("checkpoint %d: %d rounds in %.0fs of ingest (%.0f rounds/s)", cp, stored, stage_ingest_s,
                        row["stage_rounds_per_s"])
            row["retrieval"] = measure_retrieval(index, queries)
            row["peak_rss_mb"] = rss.peak_mb
            row["rss_mb"] = PeakRSS.current_mb()
            bench.release()  # every handle closed: the store is flushed and closed
            row["disk_mb"], row["disk_apparent_mb"] = disk_mb(Path(args.path) / "qdrant")
            row["reopened"] = measure_reopened(args, probe_conv)
            logger.info("checkpoint %d: p50 %.1f ms, reopened %.1f ms, disk %.0f MB", cp, row["retrieval"]["p50_ms"],
                        row["reopened"]["p50_ms"], row["disk_mb"])
            rows.append(row)
            if cp == checkpoints[-1] and not args.skip_optimize:
                row["optimized"] = optimize_and_measure(bench, args, queries, probe_conv)
                row["optimized"]["peak_rss_mb"] = rss.peak_mb
            cp = next(next_cp, None)
            stage_start_stored, stage_ingest_s = stored, 0.0
            stage_stats, stage_store = embed.stats(), dict(bench.timer.seconds)
        bar.close()
        bench.release()
    hits, misses, enc_s = embed.stats()
    return {
        "meta": {"rounds": stored, "memories": len(plan), "rounds_per_memory": args.rounds / args.memories,
                 "conversations": [c.name for c in convs], "probe_memory": PROBE, "probe_conversation": convs[probe_conv].name,
                 "queries": len(queries), "checkpoints": checkpoints, "cpus": os.cpu_count(), "loadavg_end": os.getloadavg(),
                 "wall_s": time.perf_counter() - t_start, "minilm_load_s": load_s, "baseline_rss_mb": baseline_rss,
                 "peak_rss_mb": rss.peak_mb, "embedding_cache_mb": embed.cache_mb(), "texts_encoded": misses, "cache_hits": hits, "encode_s": enc_s,
                 "path": str(args.path), "torch_threads": torch_threads(), "in_ram": bool(args.in_ram),
                 "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)")},
        "encoder_bound": encoder_slice,
        "checkpoints": rows,
    }


def optimize_and_measure(bench: Bench, args: argparse.Namespace, queries: Sequence[VMemQueryBundle], probe_conv: int) -> Dict[str, Any]:
    index = bench.hold()
    t0 = time.perf_counter()
    index.optimize()
    optimize_s = time.perf_counter() - t0
    logger.info("optimize() took %.1fs", optimize_s)
    out: Dict[str, Any] = {"optimize_s": optimize_s, "shards": shard_info(index)}
    out["retrieval"] = measure_retrieval(index, queries)
    bench.release()
    out["disk_mb"], out["disk_apparent_mb"] = disk_mb(Path(args.path) / "qdrant")
    out["reopened"] = measure_reopened(args, probe_conv)
    return out


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def timed(fn: Callable[[], Any]) -> Tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# -- report ----------------------------------------------------------------------------------


def store_rate(r: Dict[str, Any]) -> float:
    """Stage rounds per second of ingest time not spent in MiniLM (what the store side sustains)."""
    return r["stage_rounds"] / max(1e-9, r["stage_ingest_s"] - r["stage_encode_s"])


def report(res: Dict[str, Any]) -> str:
    head = ["checkpoint", "rounds", "units", "ingest rounds/s (stage)", "excl. MiniLM", "cache hits", "p50 ms", "p95 ms", "p50 pre-encoded ms",
            "p50 query encode ms",
            "p50 reopened ms", "p95 reopened ms", "raw search filtered / unfiltered ms", "disk MB", "peak RSS MB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def row(name: str, r: Dict[str, Any], ret: Dict[str, Any], reo: Dict[str, Any], ingest: str, store: str, hit: str,
            disk: float, peak: float) -> None:
        cells = [name, f"{r['rounds']:,}", f"{r['units']:,}", ingest, store, hit, f"{ret['p50_ms']:.1f}", f"{ret['p95_ms']:.1f}",
                 f"{ret['pre_encoded_p50_ms']:.1f}", f"{ret['encode_p50_ms']:.1f}", f"{reo['p50_ms']:.1f}", f"{reo['p95_ms']:.1f}",
                 f"{ret['raw_filtered_p50_ms']:.2f} / {ret['raw_unfiltered_p50_ms']:.1f}", f"{disk:.0f}", f"{peak:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")

    for r in res["checkpoints"]:
        row(f"{r['checkpoint']:,}", r, r["retrieval"], r["reopened"], f"{r['stage_rounds_per_s']:.0f}",
            f"{store_rate(r):.0f}", f"{r['stage_cache_hit_rate']:.0%}", r["disk_mb"], r["peak_rss_mb"])
        if "optimized" in r:
            o = r["optimized"]
            row(f"{r['checkpoint']:,} + optimize()", r, o["retrieval"], o["reopened"], "-", "-", "-", o["disk_mb"], o["peak_rss_mb"])
    out = ["\n".join(lines), ""]
    m, e = res["meta"], res["encoder_bound"]
    out.append(f"{m['memories']:,} memories of ~{m['rounds_per_memory']:.0f} rounds (cycling {len(m['conversations'])} "
               f"Mem-Gallery/LoCoMo conversations, caption-only images), one add_rounds call per memory, one Qdrant Edge store. "
               f"Retrieval: memory {m['probe_memory']} ({m['probe_conversation']}), {m['queries']} questions, 3 warm-up; "
               f"p50/p95 include the MiniLM query encoding (query cache cleared per query); pre-encoded = the same retrieval "
               f"again with every query text cached (search only); query encode = MiniLM on the question alone; the three "
               f"interleaved per question; "
               f"reopened = a fresh process opening the store with the stock encoder. Raw search = one text-lane dense query, "
               f"limit 20, filtered to the memory (tenant index) / whole lane. Peak RSS: this process so far "
               f"(MiniLM + EfficientNet loaded: {m['baseline_rss_mb']:.0f} MB).")
    if e:
        out.append(f"\nEncoder-bound ingest (first {e['memories']} memories, one per conversation, {e['rounds']:,} rounds, "
                   f"{e['texts_encoded']:,} texts encoded, {e['cache_hits']:,} repeats): {e['rounds_per_s']:.1f} rounds/s, "
                   f"MiniLM {e['texts_per_s']:.0f} texts/s ({e['encode_s']:.0f}s of {e['ingest_s']:.0f}s).")
    out.append("\nWhere stage ingest time went (s): " + "; ".join(
        f"{r['checkpoint']:,}: total {r['stage_ingest_s']:.0f}, MiniLM {r['stage_encode_s']:.0f}, "
        f"store writes {r['stage_store_write_s']:.0f}, store reads {r['stage_store_read_s']:.0f}, other "
        f"{r['stage_ingest_s'] - r['stage_encode_s'] - r['stage_store_write_s'] - r['stage_store_read_s']:.0f}"
        for r in res["checkpoints"]))
    out.append("\nReopen: " + "; ".join(
        f"{r['checkpoint']:,}: open {r['reopened']['open_s']:.2f}s, first count {r['reopened']['first_count_s'] * 1000:.0f} ms, "
        f"peak RSS {r['reopened']['peak_rss_mb']:.0f} MB (MiniLM alone {r['reopened']['rss_after_model_mb']:.0f} MB; "
        f"{r['reopened'].get('peak_rss_with_raw_search_mb', float('nan')):.0f} MB after the raw unfiltered search)"
        for r in res["checkpoints"]))
    out.append("\nSegments (text lane, before optimize): " + "; ".join(
        f"{r['checkpoint']:,}: {r['shards']['text']['segments']} segments ({r['shards']['text']['hnsw_segments']} with HNSW), "
        f"{r['shards']['text']['indexed_vectors']:,} indexed vectors" for r in res["checkpoints"]))
    out.append("\nLoad (1-min average before/after each measurement) and p50 CPU time per query (this process, ms): " + "; ".join(
        f"{r['checkpoint']:,}: load {r['retrieval']['loadavg_1m'][0]:.1f}/{r['retrieval']['loadavg_1m'][1]:.1f}, "
        f"CPU {r['retrieval']['cpu_p50_ms']:.1f}; reopened load {r['reopened']['loadavg_1m'][0]:.1f}/"
        f"{r['reopened']['loadavg_1m'][1]:.1f}, CPU {r['reopened']['cpu_p50_ms']:.1f}" for r in res["checkpoints"]))
    out.append("\nSearch only (pre-encoded) p50/p95 ms, in process / reopened; query encode p50/p95 ms in process / reopened: " + "; ".join(
        f"{r['checkpoint']:,}: {r['retrieval']['pre_encoded_p50_ms']:.1f}/{r['retrieval']['pre_encoded_p95_ms']:.1f} / "
        f"{r['reopened']['pre_encoded_p50_ms']:.1f}/{r['reopened']['pre_encoded_p95_ms']:.1f}; encode "
        f"{r['retrieval']['encode_p50_ms']:.1f}/{r['retrieval']['encode_p95_ms']:.1f} / "
        f"{r['reopened']['encode_p50_ms']:.1f}/{r['reopened']['encode_p95_ms']:.1f}" for r in res["checkpoints"]))
    last = res["checkpoints"][-1] if res["checkpoints"] else {}
    if "optimized" in last:
        o = last["optimized"]
        out.append(f"\noptimize() at {last['rounds']:,} rounds: {o['optimize_s']:.1f}s; text lane then "
                   f"{o['shards']['text']['segments']} segments ({o['shards']['text']['hnsw_segments']} with HNSW), "
                   f"{o['shards']['text']['indexed_vectors']:,} indexed vectors; "
                   f"p50 {last['retrieval']['p50_ms']:.1f} -> {o['retrieval']['p50_ms']:.1f} ms, pre-encoded "
                   f"{last['retrieval']['pre_encoded_p50_ms']:.1f} -> {o['retrieval']['pre_encoded_p50_ms']:.1f} ms, reopened "
                   f"{last['reopened']['p50_ms']:.1f} -> {o['reopened']['p50_ms']:.1f} ms; raw filtered search "
                   f"{last['retrieval']['raw_filtered_p50_ms']:.2f} -> {o['retrieval']['raw_filtered_p50_ms']:.2f} ms, unfiltered "
                   f"{last['retrieval']['raw_unfiltered_p50_ms']:.1f} -> {o['retrieval']['raw_unfiltered_p50_ms']:.1f} ms; "
                   f"disk {last['disk_mb']:.0f} -> {o['disk_mb']:.0f} MB; reopened-process peak RSS "
                   f"{last['reopened']['peak_rss_mb']:.0f} -> {o['reopened']['peak_rss_mb']:.0f} MB, open "
                   f"{last['reopened']['open_s']:.1f} -> {o['reopened']['open_s']:.1f}s; this process peaked at "
                   f"{o['peak_rss_mb']:.0f} MB during optimize().")
    if len(res["checkpoints"]) > 1:
        a, b = res["checkpoints"][0], res["checkpoints"][-1]
        x = b["rounds"] / a["rounds"]
        out.append(f"\nGrowth {a['rounds']:,} -> {b['rounds']:,} rounds ({x:.0f}x): p50 {b['retrieval']['p50_ms'] / a['retrieval']['p50_ms']:.2f}x, "
                   f"pre-encoded p50 {b['retrieval']['pre_encoded_p50_ms'] / a['retrieval']['pre_encoded_p50_ms']:.2f}x, "
                   f"reopened p50 {b['reopened']['p50_ms'] / a['reopened']['p50_ms']:.2f}x, "
                   f"ingest rounds/s excl. MiniLM {store_rate(b) / store_rate(a):.2f}x, disk {b['disk_mb'] / a['disk_mb']:.1f}x, "
                   f"peak RSS {b['peak_rss_mb'] / a['peak_rss_mb']:.2f}x, reopened-process peak RSS "
                   f"{b['reopened']['peak_rss_mb'] / a['reopened']['peak_rss_mb']:.2f}x.")
    load = m["loadavg_end"]
    out.append(f"\nRoute cases of the questions: {last.get('retrieval', {}).get('route_cases')}. Wall {m['wall_s'] / 60:.1f} min "
               f"on {m['cpus']} CPUs, load average at end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}; torch threads "
               f"{m['torch_threads']}, OMP_WAIT_POLICY {m['omp_wait_policy']}.")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100_000)
    parser.add_argument("--memories", type=int, default=1_000)
    parser.add_argument("--checkpoints", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 50_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--path", type=Path, help="store directory (must be empty or absent; default: a temporary one, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data")
    parser.add_argument("--out", type=Path, help="also write the results JSON here")
    parser.add_argument("--skip-optimize", action="store_true")
    parser.add_argument("--in-ram", action="store_true", help="make the store with in_ram=True (vectors and indexes in RAM)")
    parser.add_argument("--show-progress", action="store_true")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--report-from", type=Path, help="print the report of a results JSON written by --out, run nothing")
    parser.add_argument("--ask-again", type=int, metavar="N",
                        help="with --path of a store an earlier run kept, only ask: N fresh processes each open it and "
                             "ask the probe memory --queries questions (timings vary between processes)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logger.setLevel(logging.INFO)
    if args.report_from is not None:
        print(report(json.loads(args.report_from.read_text())))
        return
    if args.child is not None:
        args.child_conv = args.child
        reopen_child(args)
        return

    if args.ask_again is not None:
        ask_again(args)
        return
    tmp = None
    if args.path is None:
        tmp = tempfile.mkdtemp(prefix="vmem-scale-")
        args.path = Path(tmp)
    elif args.path.exists() and any(args.path.iterdir()):
        raise SystemExit(f"{args.path} is not empty; give a new directory")
    try:
        res = run(args)
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(report(res))
    if args.out:
        args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
