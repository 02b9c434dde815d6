"""Recall@K and hit@K per split of the conversations, from a ``vmem-bench`` results file.

V-Mem's settings were tuned on part of each benchmark's dev data; the rest is held out (LoCoMo
conv-42 and conv-43; 4 of the 12 Mem-Gallery dialogues). This reads the per-question rows of every
system in the results file and prints a Markdown table: recall / hit overall and recall per
category with its question count, on the tuning split, the held-out split and all of them. Each
system's ids are scored as the run scored them (V-Mem on LoCoMo: matched turns first), and again
with its rounds expanded whole where the file has that view.

    python benchmarks/splits.py locomo.json
    python benchmarks/splits.py memgallery.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Dict, List, Sequence

from llama_index_vmem.bench.metrics import retrieval_metrics

#: Each benchmark's held-out conversations (the names vmem-bench gives them).
HELD_OUT = {"locomo": ("conv-42", "conv-43"),
            "memgallery": ("Baking_Dessert_Daily_Life_Skill", "Fashion_Personal_Care_Lifestyle_Shopping",
                           "Landscape_Travel_Architecture_Nature", "Technology_Ethics_Future_Society")}
VIEWS = {"retrieved": "", "retrieved_whole_rounds": " (rounds whole)"}


def conversation(qid: str) -> str:
    """``conv-26#0`` -> ``conv-26``: vmem-bench names a question by its conversation and number."""
    return qid.rpartition("#")[0]


def mean(rows: Sequence[Dict], view: str, metric: str, k: int) -> float:
    scores = [retrieval_metrics(r[view], r["gold"], k)[metric] for r in rows]
    return statistics.fmean(scores) if scores else float("nan")


def table(results: Dict, held_out: Sequence[str]) -> List[str]:
    k = results["k"]
    blocks = {name: block for name, block in results.items() if isinstance(block, dict) and "per_question" in block}
    categories = sorted({r["category"] for block in blocks.values() for r in block["per_question"]})
    lines = ["| system | split (questions) | R@K / Hit@K | " + " | ".join(f"{c} R (n)" for c in categories) + " |",
             "|---|---|---|" + "---|" * len(categories)]
    for name, block in blocks.items():
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
                per_category = " | ".join(_cell([r for r in selected if r["category"] == c], view, k) for c in categories)
                lines.append(f"| {name}{label} | {split} ({len(selected)}) | {mean(selected, view, 'recall', k):.3f} / "
                             f"{mean(selected, view, 'hit', k):.3f} | {per_category} |")
    return lines


def _cell(rows: Sequence[Dict], view: str, k: int) -> str:
    return f"{mean(rows, view, 'recall', k):.3f} ({len(rows)})" if rows else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a vmem-bench results file (--out)")
    parser.add_argument("--held-out", help="held-out conversations, a comma list (default: the benchmark's, "
                                           + "; ".join(f"{b}: {','.join(names)}" for b, names in HELD_OUT.items()) + ")")
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    held_out = args.held_out.split(",") if args.held_out else HELD_OUT[results["benchmark"]]
    print("\n".join(table(results, held_out)))


if __name__ == "__main__":
    main()
