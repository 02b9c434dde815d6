"""Benchmark metrics as plain functions, each matching the benchmark that defines it.

* ``retrieval_metrics``: Mem-Gallery's ``calculate_retrieval_metrics`` (its ``run_bench.py``): ids
  deduplicated in order, cut at K, precision over what was returned (at least 1), recall over the
  gold set, hit if any gold id is returned. Questions with an empty gold set are skipped by
  ``summarize`` (they have nothing to recall).
* ``evidence_recall``: the share of the gold evidence present in the delivered context, an id
  delivered in part counting for its part.
* Lexical QA metrics (F1, BLEU-1, exact match) and LoCoMo's official per-category F1.
* Paired bootstrap CI and sign-flip permutation test (the paper's Appendix I).
"""

from __future__ import annotations

import math
import random
import re
import statistics
import string
from collections import Counter
from typing import Callable, Dict, Iterable, List, Mapping, Sequence, Tuple

from llama_index.core.utils import get_tokenizer


#: The per-question QA scores end-to-end QA adds (``locomo_f1`` on LoCoMo only).
QA_METRICS = ("judge", "f1", "bleu1", "em", "locomo_f1")
#: Context evidence recall, three ways: as delivered (an evidence id delivered in part counts for
#: its part); an id counted whole when any part of it is delivered; stock contexts of whole rounds.
CONTEXT_METRICS = ("context_evidence_recall", "context_evidence_recall_any_part", "context_evidence_recall_rounds")
#: Written into results.json (a file without it is version 1). Version 2 counts an evidence id
#: delivered in part for its part (version 1 counted it whole); ``compare`` pairs the metrics it
#: changed only between files of one version.
METRICS_VERSION = 2
VERSIONED_METRICS = ("context_evidence_recall", "context_evidence_recall_any_part")


def count_tokens(text: str) -> int:
    """Tokens as LlamaIndex counts them for an LLM (its default tokenizer): the unit of context sizes."""
    return len(get_tokenizer()(text))


def dedupe(ids: Iterable[str]) -> List[str]:
    seen: set = set()
    return [x for x in map(str, ids) if not (x in seen or seen.add(x))]


def retrieval_metrics(retrieved: Sequence[str], gold: Sequence[str], k: int) -> Dict[str, float]:
    """Precision/Recall/HitRate@K of one question, as the Mem-Gallery harness computes them."""
    top = dedupe(retrieved)[:k]
    gold_set = {str(g) for g in gold}
    if not top and not gold_set:
        return {"precision": 0.0, "recall": 0.0, "hit": 0.0}
    hits = sum(1 for x in top if x in gold_set)
    return {
        "precision": hits / max(1, len(top)),
        "recall": hits / len(gold_set) if gold_set else 0.0,
        "hit": 1.0 if hits else 0.0,
    }


def evidence_recall(delivered: Mapping[str, float], gold: Sequence[str]) -> float:
    """Mean over the distinct gold ids of the share of each one's text that was delivered (0 to 1)."""
    gold_set = set(map(str, gold))
    return math.fsum(min(1.0, delivered.get(g, 0.0)) for g in gold_set) / len(gold_set) if gold_set else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(rows: Sequence[Mapping], k: int) -> Dict[str, Dict[str, float]]:
    """Mean metrics overall and per category over rows ``{category, retrieved, gold}``.

    Rows with an empty gold set are skipped; ``n`` counts the rows that were scored.
    """
    groups: Dict[str, List[Dict[str, float]]] = {}
    for row in rows:
        if not row["gold"]:
            continue
        m = retrieval_metrics(row["retrieved"], row["gold"], k)
        for key in ("__overall__", row["category"]):
            groups.setdefault(key, []).append(m)
    out = {}
    for key, ms in groups.items():
        out[key] = {
            f"precision@{k}": statistics.fmean(m["precision"] for m in ms),
            f"recall@{k}": statistics.fmean(m["recall"] for m in ms),
            f"hit@{k}": statistics.fmean(m["hit"] for m in ms),
            "n": len(ms),
        }
    return out


# -- lexical QA metrics -------------------------------------------------------------------------


def normalize_locomo(text: str) -> str:
    """LoCoMo's normalisation: lower case, no commas or punctuation, no articles, single spaces."""
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the|and)\b", " ", text).split())


def normalize_memgallery(text: str) -> str:
    """Mem-Gallery's ``normalize_answer_universal``: keeps decimals (3.14) and ids (IMG_001)."""
    text = re.sub(r"(?<=\d)\.(?=\d)", "DOTPLACEHOLDER", str(text).lower()).replace("_", "UNDERSCOREPLACEHOLDER")
    text = re.sub(r"\b(a|an|the|and)\b", " ", text)
    text = "".join(" " if ch in set(string.punctuation) else ch for ch in text)
    return " ".join(text.replace("DOTPLACEHOLDER", ".").replace("UNDERSCOREPLACEHOLDER", "_").split())


def _stems(text: str, normalize: Callable[[str], str]) -> List[str]:
    from nltk.stem import PorterStemmer

    stem = PorterStemmer().stem
    return [stem(w) for w in normalize(text).split()]


def f1(prediction: str, reference: str, normalize: Callable[[str], str] = normalize_memgallery) -> float:
    """Token F1 over Porter stems (both benchmarks' definition, each with its own normaliser)."""
    pred, ref = _stems(prediction, normalize), _stems(reference, normalize)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_memgallery(prediction) == normalize_memgallery(reference))


def bleu1(prediction: str, reference: str) -> float:
    """Mem-Gallery's BLEU-1: NLTK sentence BLEU, unigram weights, smoothing method 1."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    pred, ref = normalize_memgallery(prediction).split(), normalize_memgallery(reference).split()
    if not pred or not ref:
        return 0.0
    return float(sentence_bleu([ref], pred, weights=(1, 0, 0, 0), smoothing_function=SmoothingFunction().method1))


def locomo_f1(prediction: str, reference: str, category: str) -> float:
    """LoCoMo's official per-category F1: multi-hop references are comma-separated sub-answers, each
    scored against its best-matching predicted part and averaged; open-domain keeps the part before ';'."""
    reference = str(reference)
    if category == "open-domain":
        reference = reference.split(";")[0].strip()
    if category == "multi-hop":
        preds = [p.strip() for p in str(prediction).split(",")]
        refs = [r.strip() for r in reference.split(",")]
        return statistics.fmean(max(f1(p, r, normalize_locomo) for p in preds) for r in refs)
    return f1(prediction, reference, normalize_locomo)


# -- significance (Appendix I) ------------------------------------------------------------------


def paired_bootstrap(a: Sequence[float], b: Sequence[float], resamples: int = 10_000,
                     seed: int = 0) -> Tuple[float, float, float]:
    """Mean of a - b and its 95% percentile-bootstrap CI, resampling questions."""
    if len(a) != len(b) or not a:
        raise ValueError("paired scores must be non-empty and of equal length")
    diffs = [x - y for x, y in zip(a, b)]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return statistics.fmean(diffs), percentile(means, 2.5), percentile(means, 97.5)


def sign_flip_p(a: Sequence[float], b: Sequence[float], resamples: int = 10_000, seed: int = 0) -> float:
    """Two-sided sign-flip permutation p-value of the mean paired difference (+1 smoothing)."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    observed = abs(sum(diffs))
    rng = random.Random(seed)
    extreme = sum(1 for _ in range(resamples) if abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed - 1e-12)
    return (extreme + 1) / (resamples + 1)


def collapse_judge_score(score: float) -> float:
    """Mem-Gallery's scorer keeps three levels: below 0.25 -> 0, below 0.75 -> 0.5, else 1."""
    return 0.0 if score < 0.25 else 0.5 if score < 0.75 else 1.0
