"""Wiring for one vmem-bench invocation: encoders, systems, the run, QA scoring, results.json."""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from llama_index.core.llms import LLM

from ..config import VMemConfig
from ..delivery import DeliveryMode
from ..encoders import EfficientNetImageEncoder, default_text_embedding
from ..encoders.quiet import quiet_loading
from .data import PIXELS, BenchConversation
from .metrics import QA_METRICS
from .run import results_json, run
from .systems import REUSES_DENSE, RUNGS, STOCK_SYSTEMS, BenchSystem, StockSystem, VMemBuild, VMemSystem, dense_source
from .worker import WorkerSystem

logger = logging.getLogger(__name__)

#: The paper's protocol per benchmark: its aggregation branch (no neighbours, k widened to 30) is
#: a LoCoMo rule and "is not used on Mem-Gallery" (V-Mem, Appendix B).
BENCHMARK_CONFIGS = {"memgallery": VMemConfig(aggregation_enabled=False), "locomo": VMemConfig()}


def names(spec: Union[str, Sequence[str]]) -> List[str]:
    """Names from a comma list or a sequence, trimmed, each once, in order."""
    items = spec.split(",") if isinstance(spec, str) else spec
    return list(dict.fromkeys(name.strip() for name in items if name.strip()))


def rung_names(rungs: Union[str, Sequence[str]]) -> List[str]:
    """The rungs to run: names from ``RUNGS``, or ``"ladder"`` for all of them."""
    chosen = names(rungs)
    if chosen == ["ladder"]:
        return list(RUNGS)
    if not chosen or set(chosen) - set(RUNGS):
        raise SystemExit(f"--config {','.join(chosen)!r}: choose rungs from {list(RUNGS)} (comma list) or 'ladder'")
    return chosen


def system_name(rung: str) -> str:
    return "vmem" if rung == "anchors" else f"vmem-{rung}"


def stock_system(name: str, model_name: str) -> StockSystem:
    """A stock system with the encoders it uses, LlamaIndex's defaults for the same MiniLM weights
    (BM25 needs none): what a worker process builds, so its memory is that system's alone."""
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    with quiet_loading():  # a worker's load is no progress of the run's: no weights bar
        embed = None if name.startswith("stock-bm25") else HuggingFaceEmbedding(model_name=model_name, device="cpu")
    return StockSystem(name, embed, EfficientNetImageEncoder() if name.startswith("stock-multimodal") else None)


def make_systems(conversations: Sequence[BenchConversation], systems: Sequence[str], rungs: Sequence[str],
                 llm: Optional[LLM], delivery: str = "text", config: Optional[VMemConfig] = None) -> tuple:
    """The requested systems; returns (systems, skipped-with-reason, the vmem builds to close).

    The vmem rungs share a build per set of build options in this process (with the LLM, which need not pickle); each
    stock system runs in a worker process of its own, and ``stock-fusion`` fuses a vector index
    built on ``stock-dense``'s vectors when both run.
    """
    unknown = [name for name in systems if name != "vmem" and name not in STOCK_SYSTEMS]
    if unknown:  # before any worker is started or model loaded
        raise SystemExit(f"unknown system(s) {unknown}; choose from vmem, {', '.join(STOCK_SYSTEMS)}")
    vmem_embed = default_text_embedding()
    pixels = any(c.image_modes[PIXELS] for c in conversations)
    image_encoder = EfficientNetImageEncoder()
    builds = {options: VMemBuild(vmem_embed, image_encoder, llm=llm, config=config, delivery=DeliveryMode(delivery),
                                 options=dict(options))
              for options in dict.fromkeys(RUNGS[r].build for r in rungs)} if "vmem" in systems else {}
    out: List[BenchSystem] = [VMemSystem(system_name(r), builds[RUNGS[r].build], r) for r in rungs if builds]
    skipped: Dict[str, str] = {}
    workers: Dict[str, WorkerSystem] = {}
    for name in sorted(set(systems) - {"vmem"}, key=STOCK_SYSTEMS.index):  # stock-dense first: others take its vectors
        if name == "stock-multimodal" and not pixels:
            skipped[name] = "no image has pixels in this data (caption mode)"
            continue
        source = workers.get(dense_source(name)) if name in REUSES_DENSE else None
        workers[name] = WorkerSystem(name, functools.partial(stock_system, name, vmem_embed.model_name), vectors_from=source)
    out += workers.values()
    if not out:
        raise SystemExit(f"nothing to run: {'; '.join(f'{n} skipped, {why}' for n, why in skipped.items()) or 'no systems given'}")
    return out, skipped, list(builds.values())


def run_benchmark(benchmark: str, conversations: Sequence[BenchConversation], k: int, systems: Union[str, Sequence[str]],
                  rungs: Union[str, Sequence[str]] = "anchors", llm: Optional[LLM] = None, qa: bool = False,
                  judge_prompt: Optional[Path] = None, show_progress: bool = True, delivery: str = "text") -> Dict[str, Any]:
    """Every system over every conversation, as ``results.json`` holds it.

    Stock systems run in spawned worker processes, so a script that calls this must guard its
    entry point with ``if __name__ == "__main__":`` (spawn re-imports the script).
    """
    rungs, systems = rung_names(rungs), names(systems)
    repeated = sorted({c.name for c in conversations if sum(other.name == c.name for other in conversations) > 1})
    if repeated:  # each conversation is its own memory, keyed by name: two of one name would share one
        raise SystemExit(f"conversations given twice under one name: {', '.join(repeated)}; each must be its own memory")
    config = BENCHMARK_CONFIGS.get(benchmark, VMemConfig())
    config = config.override(k=max(config.k, k))  # rankings are cut at K: vmem returns at least K rounds, as stock does
    if "vmem" not in systems and rungs != ["anchors"]:
        logger.warning("--config %s applies to vmem, which is not among the systems", ",".join(rungs))
    made, skipped, builds = make_systems(conversations, systems, rungs, llm, delivery, config)
    vmem_names = [s.name for s in made if isinstance(s, VMemSystem)]
    budget = "vmem" if "vmem" in vmem_names else next(iter(vmem_names), None)
    try:
        runs = run(conversations, made, budget_system=budget, show_progress=show_progress)
        if qa:  # before the memories close: pixels delivery hands the answering model their image files
            from .qa import score_rows

            questions = {q.qid: q for c in conversations for q in c.questions}
            for r in runs.values():
                score_rows(r.rows, questions, benchmark, llm, judge_prompt)
    finally:
        for system in made:
            system.close()
        for build in builds:
            build.close()
    extra = {"skipped_systems": skipped, "context_budget_from": budget, "delivery": delivery,
             "vmem_config": dataclasses.asdict(config),
             "anchors": "llm" if llm is not None else "raw query (no LLM given)"}
    results = results_json(benchmark, k, conversations, runs, extra)
    if qa:
        _add_qa(results, runs)
    return results


def _add_qa(results: Dict[str, Any], runs: Dict[str, Any]) -> None:
    import statistics

    results["questions"]["answered"] = results["questions"]["asked"]  # every question asked is answered and judged
    for name, r in runs.items():
        metrics = [m for m in QA_METRICS if r.rows and m in r.rows[0]]
        results[name]["overall"].update({m: statistics.fmean(row[m] for row in r.rows) for m in metrics})
        for category, block in results[name]["per_category"].items():
            rows = [row for row in r.rows if row["category"] == category]
            block.update({m: statistics.fmean(row[m] for row in rows) for m in metrics})
