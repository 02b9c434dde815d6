"""One benchmark run: build every system on every conversation, ask every question, score it.

Builds are interleaved by conversation (each system builds conversation 1, then each builds
conversation 2, ...), so ingest throughputs are compared under the same machine conditions. A system
in a worker process of its own reports that process's peak RSS; systems run in this process share
its peak while they were built and queried.
``vmem`` runs first on each question so its context size sets the token budget the stock systems'
contexts are filled to (equal-token context comparison).
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from tqdm.auto import tqdm

from .data import CAPTION, MIXED, BenchConversation
from .legend import NOT_SCORED_NO_EVIDENCE
from .metrics import CONTEXT_METRICS, METRICS_VERSION, QA_METRICS, evidence_recall, percentile, summarize
from .systems import BenchSystem, QueryOutcome

logger = logging.getLogger(__name__)


class PeakRSS:
    """Samples this process's resident set size in a thread; ``peak_mb`` is the maximum seen."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def current_mb() -> float:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, self.current_mb())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "PeakRSS":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, self.current_mb())


@dataclass
class SystemRun:
    """Everything measured for one system."""

    name: str
    build_seconds: float = 0.0
    units: int = 0
    build_llm_tokens: int = 0
    #: Peak RSS of the process that built and queried the system (see the module's docstring).
    peak_rss_mb: float = 0.0
    rows: List[Dict[str, Any]] = field(default_factory=list)


def gold_ids(conv: BenchConversation, keys: Sequence[str]) -> List[str]:
    """Round keys -> the benchmark's ids (LoCoMo: turns, in order; Mem-Gallery: rounds)."""
    return conv.turn_ids(list(keys))


def run(conversations: Sequence[BenchConversation], systems: Sequence[BenchSystem], budget_system: Optional[str],
        show_progress: bool = True) -> Dict[str, SystemRun]:
    """Build and query every system; rows keep per-question outcomes for scoring and ``compare``.

    Stock contexts are filled to ``budget_system``'s token count per question; with none (no
    vmem system ran) there is no equal-token comparison, so no context is scored."""
    runs = {s.name: SystemRun(s.name) for s in systems}
    ordered = sorted(systems, key=lambda s: s.name != budget_system)
    with PeakRSS() as build_rss:
        _build(conversations, ordered, runs, show_progress)
    total = sum(len(c.questions) for c in conversations)
    for system in ordered:
        budgets = {r["qid"]: r["context_tokens"] for r in runs[budget_system].rows} if budget_system not in (None, system.name) else {}
        with PeakRSS() as rss, tqdm(total=total, desc=f"Asking {system.name}", unit="q", disable=not show_progress) as bar:
            for conv in conversations:
                for q in conv.questions:
                    outcome = system.query(conv, q, budgets.get(q.qid))
                    runs[system.name].rows.append(_row(conv, q, outcome, scored_context=budget_system is not None))
                    bar.update()
        runs[system.name].peak_rss_mb = system.peak_rss_mb() or max(build_rss.peak_mb, rss.peak_mb)
    return runs


def _build(conversations: Sequence[BenchConversation], systems: Sequence[BenchSystem], runs: Dict[str, SystemRun],
           show_progress: bool) -> None:
    """Every system builds each conversation in turn, so a machine whose speed drifts over minutes
    slows every system alike and the ingest ratios stay comparable; encoders are warmed first, so
    the first system timed does not pay for the process's first forward pass."""
    for system in systems:
        system.warm_up()
    for conv in tqdm(conversations, desc="Building memories", unit="conv", disable=not show_progress):
        for system in systems:
            start = time.perf_counter()
            runs[system.name].units += system.build(conv)
            runs[system.name].build_seconds += time.perf_counter() - start
    for system in systems:
        run_ = runs[system.name]
        run_.build_seconds = system.build_seconds(run_.build_seconds)
        run_.build_llm_tokens = system.build_llm_tokens
        logger.info("%s: built %d units in %.1fs", system.name, run_.units, run_.build_seconds)


def _row(conv: BenchConversation, q: Any, outcome: QueryOutcome, scored_context: bool = True) -> Dict[str, Any]:
    scored = bool(q.gold) and scored_context
    return {
        "qid": q.qid,
        "category": q.category,
        "gold": q.gold,
        "retrieved": outcome.ranked_ids if outcome.ranked_ids is not None else gold_ids(conv, outcome.ranking),
        # the same rounds, each expanded whole (its ids in turn order): the figure without the finer order
        "retrieved_whole_rounds": gold_ids(conv, outcome.ranking) if outcome.ranked_ids is not None else None,
        "context_evidence_recall": evidence_recall(outcome.delivered, q.gold) if scored else None,
        "context_evidence_recall_any_part": evidence_recall(dict.fromkeys(outcome.delivered, 1.0), q.gold) if scored else None,
        "context_evidence_recall_rounds": evidence_recall(conv.delivered((k, None) for k in outcome.delivered_as_rounds), q.gold)
        if scored and outcome.delivered_as_rounds is not None else None,
        "context_tokens": outcome.tokens,
        "delivered_images": outcome.images,
        "retrieval_ms": outcome.retrieval_ms,
        "anchor_ms": outcome.anchor_ms,
        "context": outcome.context,
        "content": outcome.content,
    }


def score(run_: SystemRun, k: int) -> Dict[str, Any]:
    """``overall`` and ``per_category`` objects of results.json for one system."""
    table = summarize(run_.rows, k)
    rename = {f"precision@{k}": "precision@k", f"recall@{k}": "recall@k", f"hit@{k}": "hit@k", "n": "scored"}

    def block(rows: List[Dict[str, Any]], key: str) -> Dict[str, Any]:
        # a category whose questions all have an empty gold set has nothing to score (null, 0 scored)
        unscored = {"asked": len(rows), "scored": 0, "precision@k": None, "recall@k": None, "hit@k": None}
        out = unscored | {rename.get(m, m): v for m, v in table.get(key, {}).items()}
        for metric in CONTEXT_METRICS:
            scored = [r[metric] for r in rows if r[metric] is not None]
            out[metric] = statistics.fmean(scored) if scored else None
        out["context_tokens_mean"] = statistics.fmean(r["context_tokens"] for r in rows) if rows else 0.0
        out["delivered_images_mean"] = statistics.fmean(r["delivered_images"] for r in rows) if rows else 0.0
        return out

    if any(r.get("retrieved_whole_rounds") is not None for r in run_.rows):  # vmem scored both ways
        whole = summarize([r | {"retrieved": r["retrieved_whole_rounds"]} for r in run_.rows], k)
        for key, values in whole.items():
            table.setdefault(key, {}).update({"recall@k_whole_rounds": values[f"recall@{k}"],
                                              "hit@k_whole_rounds": values[f"hit@{k}"]})
    latencies = [r["retrieval_ms"] for r in run_.rows]
    overall = block(run_.rows, "__overall__")
    overall.update(
        build_seconds=run_.build_seconds,
        units=run_.units,
        units_per_second=run_.units / run_.build_seconds if run_.build_seconds else 0.0,
        build_llm_tokens=run_.build_llm_tokens,
        query_ms_p50=percentile(latencies, 50),
        query_ms_p95=percentile(latencies, 95),
        peak_rss_mb=run_.peak_rss_mb,
    )
    if any(r["anchor_ms"] for r in run_.rows):  # an LLM wrote anchors: the latency a user waits for, too
        with_anchors = [r["retrieval_ms"] + r["anchor_ms"] for r in run_.rows]
        overall.update(query_ms_with_anchors_p50=percentile(with_anchors, 50),
                       query_ms_with_anchors_p95=percentile(with_anchors, 95))
    categories = sorted({r["category"] for r in run_.rows})
    per_category = {c: block([r for r in run_.rows if r["category"] == c], c) for c in categories}
    return {"overall": overall, "per_category": per_category}


def question_counts(conversations: Sequence[BenchConversation], scored_context: bool) -> Dict[str, Any]:
    """The questions every system was asked and scored, overall and per category, and why the
    others were not: each reason with its count per category (results.json's ``questions``).

    A question is scored for ranking, and for context where vmem ran, when the data names its
    evidence; every question asked is answered and judged with ``--qa``."""
    asked = Counter(q.category for c in conversations for q in c.questions)
    scored = Counter(q.category for c in conversations for q in c.questions if q.gold)
    not_asked: Dict[str, Counter] = {}
    for c in conversations:
        for (reason, category), n in c.not_asked.items():
            not_asked.setdefault(reason, Counter())[category] += n
    unscored = asked - scored
    categories = sorted(set(asked) | {category for counts in not_asked.values() for category in counts})
    return {
        "asked": sum(asked.values()),
        "scored": sum(scored.values()),
        "context_scored": sum(scored.values()) if scored_context else 0,
        "not_asked": {reason: dict(sorted(counts.items())) for reason, counts in not_asked.items()},
        "not_scored": {NOT_SCORED_NO_EVIDENCE: dict(sorted(unscored.items()))} if unscored else {},
        "per_category": {c: {"asked": asked[c], "scored": scored[c],
                             "not_asked": sum(counts[c] for counts in not_asked.values())} for c in categories},
    }


def results_json(benchmark: str, k: int, conversations: Sequence[BenchConversation], runs: Dict[str, SystemRun],
                 extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """results.json: top-level ``benchmark``, ``k``, ``image_mode`` (``pixels``, ``caption`` or
    ``mixed``, with ``caption_only_images`` naming each image that ran without pixels in a mixed
    run); one object per system name."""
    modes = {c.image_mode for c in conversations}
    mode = modes.pop() if len(modes) == 1 else MIXED
    out: Dict[str, Any] = {
        "benchmark": benchmark,
        "k": k,
        "metrics_version": METRICS_VERSION,
        "image_mode": mode,
        **({"caption_only_images": {c.name: c.image_modes[CAPTION] for c in conversations if c.image_modes[CAPTION]}}
           if mode == MIXED else {}),
        "conversations": [c.name for c in conversations],
        "malformed_evidence_ids": sum(c.malformed_evidence for c in conversations),
        "questions": question_counts(conversations, scored_context=any(
            row["context_evidence_recall"] is not None for run_ in runs.values() for row in run_.rows)),
        **(extra or {}),
    }
    for name, run_ in runs.items():
        out[name] = score(run_, k)
        out[name]["per_question"] = [
            {key: r[key] for key in ("qid", "category", "retrieved", "gold", "context_tokens", "delivered_images")}
            | ({"retrieved_whole_rounds": r["retrieved_whole_rounds"]} if r.get("retrieved_whole_rounds") is not None else {})
            | {key: r[key] for key in (*CONTEXT_METRICS, *QA_METRICS, "answer") if key in r}
            for r in run_.rows
        ]
    return out
