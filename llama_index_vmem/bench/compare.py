"""``vmem-bench compare``: is one system better than another on the same questions? (Appendix I)"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List

from .legend import NOT_SCORED_NO_EVIDENCE
from .metrics import VERSIONED_METRICS, paired_bootstrap, retrieval_metrics, sign_flip_p

NOT_MEASURED = "the metric was not measured for this question in one of the files"


def per_question(results: Dict[str, Any], system: str, metric: str) -> Dict[str, float]:
    """qid -> score, for the questions that have one; ``hit``/``recall``/``precision`` are
    recomputed at the file's K."""
    names = sorted(n for n, v in results.items() if isinstance(v, dict) and "per_question" in v)
    if system not in names:
        raise SystemExit(f"no system {system!r} in the results file; it has {', '.join(names)}")
    rows = results[system]["per_question"]
    scores = sorted({key for row in rows for key, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if metric not in ("hit", "recall", "precision", *scores):
        raise SystemExit(f"unknown metric {metric!r}; {system} has hit, recall, precision, {', '.join(scores)}")
    k = results["k"]
    out = {}
    for row in rows:
        if metric in ("hit", "recall", "precision"):
            if row["gold"]:
                out[row["qid"]] = retrieval_metrics(row["retrieved"], row["gold"], k)[metric]
        elif row.get(metric) is not None:
            out[row["qid"]] = float(row[metric])
    return out


def compare(a: Dict[str, Any], b: Dict[str, Any], system_a: str, system_b: str, metric: str,
            resamples: int = 10_000) -> Dict[str, Any]:
    """Mean paired difference (a - b) over shared questions, its 95% bootstrap CI and sign-flip p."""
    versions = {"metrics_version": 1} if metric in VERSIONED_METRICS else {}  # a file without one is version 1
    for key, default in {"benchmark": None, "k": None, **versions}.items():
        if a.get(key, default) != b.get(key, default):
            raise SystemExit(f"the two results files differ in {key} ({a.get(key, default)!r} vs {b.get(key, default)!r}): "
                             f"not comparable on {metric}")
    sa, sb = per_question(a, system_a, metric), per_question(b, system_b, metric)
    shared = sorted(set(sa) & set(sb))
    if not shared:
        raise SystemExit("the two results files share no scored question")
    xs, ys = [sa[q] for q in shared], [sb[q] for q in shared]
    mean, lo, hi = paired_bootstrap(xs, ys, resamples)
    return {
        "metric": metric, "a": f"{system_a}", "b": f"{system_b}", "n": len(shared),
        "questions": _questions(a[system_a]["per_question"], b[system_b]["per_question"], shared),
        "mean_a": sum(xs) / len(xs), "mean_b": sum(ys) / len(ys),
        "difference": mean, "ci95": [lo, hi], "p_value": sign_flip_p(xs, ys, resamples),
    }


def _questions(rows_a: List[Dict[str, Any]], rows_b: List[Dict[str, Any]], scored: List[str]) -> Dict[str, Any]:
    """What ``n`` counts: the questions both files asked, those paired and scored, and why the rest were not."""
    gold = {row["qid"]: row["gold"] for row in rows_a}
    in_b = {row["qid"] for row in rows_b}
    both = [qid for qid in gold if qid in in_b]
    not_scored = Counter(NOT_MEASURED if gold[qid] else NOT_SCORED_NO_EVIDENCE for qid in set(both) - set(scored))
    return {"asked_in_both": len(both), "scored": len(scored), "not_scored": dict(not_scored),
            "only_in_a": len(gold) - len(both), "only_in_b": len(in_b) - len(both)}
