"""Ingest throughput and retrieval latency of ``VMemIndex`` against a stock ``VectorStoreIndex``.

One conversation of ``--rounds`` (default 700) Mem-Gallery rounds, built by concatenating the
dialogue files in sorted order, is ingested by three systems in the same process, all sharing one
MiniLM encoder (loaded once, not timed):

* ``vmem-edge``: ``VMemIndex`` on the embedded Qdrant Edge store (the default backend);
* ``vmem-qdrant-local``: the Qdrant-server code path through ``QdrantClient(":memory:")``,
  qdrant-client's pure-Python local mode. It stands in for a real server and is much slower than one;
* ``stock-VectorStoreIndex``: LlamaIndex's in-memory ``SimpleVectorStore`` over the same units
  (user text, assistant text, image captions) as ``TextNode``s, ``similarity_top_k=12``.

Ingest is timed twice per system: incrementally, ``--chunk`` rounds per call (``add_rounds`` /
``insert_nodes``; the headline "units/s"), and in one call ("units/s 1 call"). Units are what
V-Mem stores: one per non-empty user span, non-empty assistant span and image. Retrieval is timed
per question (the QA questions of the files used, no LLM, so V-Mem anchors fall back to the raw
query) after 3 warm-up queries; p50/p95 in milliseconds. A second pass times the same questions with
the query embedding already computed (search only). Images carry captions only (no pixels).

Run from the repository root::

    python benchmarks/core_throughput.py [--rounds 700] [--queries 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from llama_index.core import VectorStoreIndex  # noqa: E402
from llama_index.core.schema import QueryBundle, TextNode  # noqa: E402
from qdrant_client import QdrantClient  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from llama_index_vmem import VMemIndex  # noqa: E402
from llama_index_vmem.encoders import default_text_embedding  # noqa: E402
from llama_index_vmem.store import Collection  # noqa: E402

logger = logging.getLogger("core_throughput")
REPO = Path(__file__).resolve().parents[1]
WARMUP = ["What did we talk about first?", "Which picture showed a building?", "How many photos did I share?"]


def load_conversation(dialog_dir: Path, n_rounds: int, n_queries: int) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Rounds from the dialogue files in sorted order until ``n_rounds``; the questions of the files used."""
    rounds: List[Dict[str, Any]] = []
    questions: List[str] = []
    for path in sorted(dialog_dir.glob("*.json")):
        if len(rounds) >= n_rounds:
            break
        data = json.loads(path.read_text())
        for session in data["multi_session_dialogues"]:
            for r in session["dialogues"]:
                if len(rounds) < n_rounds:
                    captions = r.get("image_caption") or []
                    rounds.append({
                        "user": r.get("user") or "",
                        "assistant": r.get("assistant") or "",
                        "images": [{"image_id": f"{path.stem}:{i}", "caption": c}
                                   for i, c in zip(r.get("image_id") or [], captions, strict=False)],
                        "session_id": f"{path.stem}:{session['session_id']}",
                        "timestamp": session.get("date"),
                        "round_key": f"{path.stem}:{r['round']}",
                    })
        questions += [qa["question"] for qa in data.get("human-annotated QAs", []) if qa.get("question")]
    if not rounds:
        raise SystemExit(f"no dialogue files under {dialog_dir}")
    questions = list(dict.fromkeys(q for q in questions if q not in WARMUP))  # unique: no query-cache hits
    n = min(n_queries, len(questions))  # evenly spread over all files used, not just the first
    return rounds, [questions[i * len(questions) // n] for i in range(n)]


def count_units(rounds: Sequence[Dict[str, Any]]) -> int:
    return sum(bool(r["user"].strip() or r["images"]) + bool(r["assistant"].strip()) + len(r["images"]) for r in rounds)


def stock_nodes(rounds: Sequence[Dict[str, Any]]) -> List[List[TextNode]]:
    """Per round: user text, assistant text and each caption as its own ``TextNode``."""
    out = []
    for r in rounds:
        texts = [r["user"], r["assistant"]] + [img["caption"] for img in r["images"]]
        out.append([TextNode(text=t, metadata={"round_key": r["round_key"]}) for t in texts if t.strip()])
    return out


def chunks(items: Sequence[Any], size: int) -> List[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def timed(fn: Callable[[], Any]) -> Tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def time_queries(name: str, retrieve: Callable[[Any], Any], questions: Sequence[Any], warmup: bool = True) -> List[float]:
    for q in WARMUP if warmup else []:
        retrieve(q)
    latencies = []
    for q in tqdm(questions, desc=f"retrieve {name}", unit="q"):
        t0 = time.perf_counter()
        retrieve(q)
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


def bench_vmem(name: str, open_index: Callable[[str], VMemIndex], rounds, questions, chunk: int) -> Dict[str, Any]:
    one = open_index("bench-one-call")
    _, one_s = timed(lambda: one.add_rounds(rounds))
    one.close()
    index = open_index("bench")
    _, build_s = timed(lambda: [index.add_rounds(list(c)) for c in chunks(rounds, chunk)])
    scope = index.scope()
    units = index.store.count(Collection.TEXT, scope) + index.store.count(Collection.IMAGE, scope)
    retriever = index.as_retriever()
    cases: Dict[str, int] = {}
    for q in questions:
        case = retriever.route(QueryBundle(q)).case.value
        cases[case] = cases.get(case, 0) + 1
    latencies = time_queries(name, retriever.retrieve, questions)
    # Second pass: the index's query-embedding cache now holds every question, so only search runs.
    search_only = time_queries(f"{name} (pre-encoded)", retriever.retrieve, questions, warmup=False)
    index.close()
    return {"system": name, "rounds": len(rounds), "units": units, "build_s": build_s, "one_call_s": one_s,
            "latencies_ms": latencies, "search_only_ms": search_only, "route_cases": cases}


def bench_stock(embed, rounds, questions, chunk: int) -> Dict[str, Any]:
    per_round = stock_nodes(rounds)
    flat = [n for ns in per_round for n in ns]
    _, one_s = timed(lambda: VectorStoreIndex([n.model_copy() for n in flat], embed_model=embed))

    def incremental() -> VectorStoreIndex:
        index = VectorStoreIndex([], embed_model=embed)
        for c in chunks(per_round, chunk):
            index.insert_nodes([n for ns in c for n in ns])
        return index

    index, build_s = timed(incremental)
    retriever = index.as_retriever(similarity_top_k=12)
    latencies = time_queries("stock", retriever.retrieve, questions)
    encoded = [QueryBundle(q, embedding=embed.get_query_embedding(q)) for q in questions]  # not timed
    search_only = time_queries("stock (pre-encoded)", retriever.retrieve, encoded, warmup=False)
    return {"system": "stock-VectorStoreIndex", "rounds": len(rounds), "units": len(flat), "build_s": build_s,
            "one_call_s": one_s, "latencies_ms": latencies, "search_only_ms": search_only}


def summarize(results: List[Dict[str, Any]]) -> None:
    for r in results:
        lat = r["latencies_ms"]
        r["units_per_s"] = r["units"] / r["build_s"]
        r["units_per_s_one_call"] = r["units"] / r["one_call_s"]
        r["p50_ms"] = statistics.median(lat)
        r["p95_ms"] = statistics.quantiles(lat, n=20)[18] if len(lat) > 1 else lat[0]
        r["search_only_p50_ms"] = statistics.median(r["search_only_ms"])
    stock = results[-1]
    for r in results:
        r["units_per_s_vs_stock"] = r["units_per_s"] / stock["units_per_s"]
        r["p50_vs_stock"] = r["p50_ms"] / stock["p50_ms"]


def table(results: List[Dict[str, Any]], chunk: int) -> str:
    head = ["system", "rounds", "units", "build s", "units/s", "units/s (1 call)", "retrieval p50 ms", "p95 ms",
            "p50 pre-encoded ms", "units/s vs stock", "p50 vs stock"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r["system"], r["rounds"], r["units"], f"{r['build_s']:.1f}", f"{r['units_per_s']:.0f}",
                 f"{r['units_per_s_one_call']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}",
                 f"{r['search_only_p50_ms']:.2f}", f"{r['units_per_s_vs_stock']:.2f}x", f"{r['p50_vs_stock']:.1f}x"]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows) + (f"\n\nbuild s / units/s: ingest in calls of {chunk} rounds; units/s (1 call): one call. "
                               "p50 pre-encoded: the same questions again with the query embedding already computed.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/memgallery/dialog",
                        help="Mem-Gallery dialog directory (default: ../shared/data/memgallery/dialog)")
    parser.add_argument("--rounds", type=int, default=700)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=50, help="rounds per add_rounds call (incremental ingest)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logger.setLevel(logging.INFO)

    t_start = time.perf_counter()
    rounds, questions = load_conversation(args.data, args.rounds, args.queries)
    logger.info("%d rounds (%d units expected), %d questions", len(rounds), count_units(rounds), len(questions))
    embed, load_s = timed(default_text_embedding)
    embed.get_text_embedding_batch([r["assistant"] for r in rounds[:64]])  # warm the encoder's kernels
    logger.info("MiniLM loaded in %.1fs (not counted)", load_s)

    with tempfile.TemporaryDirectory(prefix="vmem-bench-") as tmp:
        results = [
            bench_vmem("vmem-edge", lambda mid: VMemIndex.from_defaults(path=Path(tmp) / mid, memory_id=mid, embed_model=embed),
                       rounds, questions, args.chunk),
            bench_vmem("vmem-qdrant-local",
                       lambda mid: VMemIndex.from_defaults(client=QdrantClient(location=":memory:"), memory_id=mid, embed_model=embed),
                       rounds, questions, args.chunk),
            bench_stock(embed, rounds, questions, args.chunk),
        ]
    for r in results:
        if r["units"] != count_units(rounds):
            logger.warning("%s stored %d units, expected %d", r["system"], r["units"], count_units(rounds))
    summarize(results)
    wall = time.perf_counter() - t_start
    print(table(results, args.chunk))
    load = os.getloadavg()
    print(f"\n{len(questions)} queries, 3 warm-up each; V-Mem route cases: {results[0]['route_cases']}; "
          f"wall {wall:.0f}s on {os.cpu_count()} CPUs, load average at end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")
    if args.json:
        meta = {"rounds": len(rounds), "queries": len(questions), "chunk": args.chunk, "wall_s": wall,
                "cpus": os.cpu_count(), "loadavg_end": load}
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2))


if __name__ == "__main__":
    main()
