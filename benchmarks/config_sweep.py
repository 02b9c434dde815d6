"""Sweep one ``VMemConfig`` field on LoCoMo, tuning on some conversations and reporting the rest.

Builds V-Mem's memory of each conversation once, then asks every question with each value of the
field and prints recall@K / hit@K per value on the tuning split, the held-out split and all. Pick
the value by the tuning split alone; the held-out columns are the honest estimate. Ids are scored
as ``vmem-bench locomo`` scores V-Mem (matched turns first).

    python benchmarks/config_sweep.py LOCOMO/locomo_dev.json --field follow_up_weight --values 0,0.05,0.1,0.2,0.3
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Dict, List, Sequence

from tqdm.auto import tqdm

from llama_index_vmem.bench.data import load_locomo
from llama_index_vmem.bench.harness import BENCHMARK_CONFIGS
from llama_index_vmem.bench.metrics import retrieval_metrics
from llama_index_vmem.bench.systems import VMemBuild, VMemSystem
from llama_index_vmem.encoders import EfficientNetImageEncoder, default_text_embedding


def sweep(path: Path, field: str, values: Sequence[float], held_out: Sequence[str], k: int) -> List[str]:
    conversations = load_locomo(path)
    config = BENCHMARK_CONFIGS["locomo"].override(k=max(BENCHMARK_CONFIGS["locomo"].k, k))
    build = VMemBuild(default_text_embedding(), EfficientNetImageEncoder(), config=config)
    system = VMemSystem("vmem", build, "anchors")
    lines = [f"| {field} | tuned R / Hit | held out R / Hit | all R / Hit |", "|---|---|---|---|"]
    try:
        for conv in conversations:
            build.build(conv)
        for value in values:
            system.overrides = {**system.overrides, field: value}
            scores: Dict[str, List[Dict[str, float]]] = {"tuned": [], "held out": []}
            for conv in tqdm(conversations, desc=f"{field}={value}"):
                split = "held out" if conv.name in held_out else "tuned"
                for q in conv.questions:
                    if q.gold:
                        outcome = system.query(conv, q, None)
                        scores[split].append(retrieval_metrics(outcome.ranked_ids or conv.turn_ids(outcome.ranking), q.gold, k))
            scores["all"] = scores["tuned"] + scores["held out"]
            cells = [" / ".join(f"{statistics.fmean(s[m] for s in rows):.3f}" for m in ("recall", "hit")) for rows in scores.values()]
            lines.append(f"| {value} | " + " | ".join(cells) + " |")
    finally:
        build.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="a LoCoMo file (such as locomo_dev.json)")
    parser.add_argument("--field", default="follow_up_weight", help="the VMemConfig field to sweep (default: %(default)s)")
    parser.add_argument("--values", required=True, help="comma list of values, read as JSON (0.1, 20, true)")
    parser.add_argument("--held-out", default="conv-42,conv-43", help="held-out conversations (default: %(default)s)")
    parser.add_argument("--k", type=int, default=10, help="rank cut-off (default: %(default)s)")
    args = parser.parse_args()
    values = [json.loads(v) for v in args.values.split(",")]
    print("\n".join(sweep(args.path, args.field, values, args.held_out.split(","), args.k)))


if __name__ == "__main__":
    main()
