"""LoCoMo recall@K and hit@K per split of the dev conversations, from a ``vmem-bench locomo`` results file.

V-Mem's settings were tuned on three dev conversations; the other two are held out. This reads the
per-question rows of every system in the results file and prints a Markdown table: recall / hit
overall and recall per category, on the tuning split, the held-out split and all of them. Each
system's ids are scored as the run scored them (V-Mem: matched turns first), and again with its
rounds expanded whole where the file has that view.

    python benchmarks/locomo_splits.py locomo.json [--held-out conv-42,conv-43]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Dict, List, Sequence

from llama_index_vmem.bench.metrics import retrieval_metrics

CATEGORIES = ("multi-hop", "temporal", "open-domain", "single-hop")
VIEWS = {"retrieved": "", "retrieved_whole_rounds": " (rounds whole)"}


def conversation(qid: str) -> str:
    """``conv-26#0`` -> ``conv-26``: vmem-bench names a question by its conversation and number."""
    return qid.rpartition("#")[0]


def mean(rows: Sequence[Dict], view: str, metric: str, k: int) -> float:
    scores = [retrieval_metrics(r[view], r["gold"], k)[metric] for r in rows]
    return statistics.fmean(scores) if scores else float("nan")


def table(results: Dict, held_out: Sequence[str]) -> List[str]:
    k = results["k"]
    lines = ["| system | split (questions) | R@K / Hit@K | " + " | ".join(f"{c} R" for c in CATEGORIES) + " |",
             "|---|---|---|" + "---|" * len(CATEGORIES)]
    for name, block in results.items():
        if not (isinstance(block, dict) and "per_question" in block):
            continue
        rows = [r for r in block["per_question"] if r["gold"]]
        for view, label in VIEWS.items():
            if not all(view in r for r in rows):
                continue
            splits: Dict[str, List[Dict]] = {
                "tuned": [r for r in rows if conversation(r["qid"]) not in held_out],
                "held out": [r for r in rows if conversation(r["qid"]) in held_out],
                "all": rows,
            }
            for split, selected in splits.items():
                per_category = " | ".join(f"{mean([r for r in selected if r['category'] == c], view, 'recall', k):.3f}"
                                          for c in CATEGORIES)
                lines.append(f"| {name}{label} | {split} ({len(selected)}) | {mean(selected, view, 'recall', k):.3f} / "
                             f"{mean(selected, view, 'hit', k):.3f} | {per_category} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a vmem-bench locomo results file (--out)")
    parser.add_argument("--held-out", default="conv-42,conv-43", help="held-out conversations, a comma list (default: %(default)s)")
    args = parser.parse_args()
    print("\n".join(table(json.loads(args.results.read_text()), args.held_out.split(","))))


if __name__ == "__main__":
    main()
