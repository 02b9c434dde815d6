"""Sweep one V-Mem setting on a benchmark's tuning split: a ``VMemConfig`` field or a build option.

A ``VMemConfig`` field is swept on one memory per conversation, built once and queried with each
value; a build option (``encoders.BUILD_DEFAULTS``: how units are encoded) builds the memories anew
for each value. Prints recall@K / hit@K per value, and recall per question category, on the tuning
split alone: the held-out conversations are not even built, so no sweep can be tuned on them.
Pick the value there, then score that one value on the held-out split, once (``--split held-out``).
Ids are scored as ``vmem-bench`` scores V-Mem: LoCoMo turns (matched turns first), Mem-Gallery rounds.

    python benchmarks/config_sweep.py "$DATA"/locomo/locomo_dev.json --field follow_up_weight --values 0,0.05,0.1,0.2,0.3
    python benchmarks/config_sweep.py "$DATA"/locomo/locomo_dev.json --field bm25_b --values 0,0.25,0.5,0.75
    python benchmarks/config_sweep.py "$DATA"/memgallery/dialog --benchmark memgallery --field candidate_pool --values 8,12,20
    python benchmarks/config_sweep.py "$DATA"/memgallery/dialog --benchmark memgallery --field dated_units --values true,false
    python benchmarks/config_sweep.py "$DATA"/locomo/locomo_dev.json --field follow_up_weight --values 0.1 --split held-out
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Sequence

from tqdm.auto import tqdm

from llama_index_vmem.bench.cli import data_files
from llama_index_vmem.bench.data import BenchConversation, load_locomo, load_memgallery
from llama_index_vmem.bench.harness import BENCHMARK_CONFIGS
from llama_index_vmem.bench.metrics import retrieval_metrics
from llama_index_vmem.bench.systems import RUNGS, Rung, VMemBuild, VMemSystem
from llama_index_vmem.config import VMemConfig
from llama_index_vmem.encoders import BUILD_DEFAULTS, EfficientNetImageEncoder, default_text_embedding

#: Conversations held out from tuning, by benchmark. LoCoMo: two of the five dev conversations.
#: Mem-Gallery: the 3rd, 6th, 9th and 12th of its 12 dialogues in file-name order.
HELD_OUT = {
    "locomo": ("conv-42", "conv-43"),
    "memgallery": ("Baking_Dessert_Daily_Life_Skill", "Fashion_Personal_Care_Lifestyle_Shopping",
                   "Landscape_Travel_Architecture_Nature", "Technology_Ethics_Future_Society"),
}
SPLITS = ("tuning", "held-out")


def load_split(benchmark: str, paths: Sequence[Path], held_out: Sequence[str], split: str = "tuning") -> List[BenchConversation]:
    """The conversations of ``split`` among the data ``paths`` name (files, or folders of them): those
    not in ``held_out``, or those in it."""
    files = data_files(benchmark, list(paths))
    conversations = [c for p in files for c in load_locomo(p)] if benchmark == "locomo" else [load_memgallery(p) for p in files]
    chosen = [c for c in conversations if (c.name in held_out) == (split == "held-out")]
    if not chosen:
        raise SystemExit(f"no conversation of the {split} split in {', '.join(map(str, files))} "
                         f"(held out: {', '.join(held_out)})")
    return chosen


def sweep(benchmark: str, paths: Sequence[Path], field: str, values: Sequence[Any], held_out: Sequence[str],
          k: int = 10, split: str = "tuning", show_progress: bool = True) -> List[str]:
    """A Markdown table: a row per value of ``field``, recall@K / hit@K and recall per category on ``split``
    (the held-out split scores one value, the one chosen on the tuning split), after a line naming the split."""
    config_fields = {f.name for f in dataclasses.fields(VMemConfig)}
    if field not in config_fields and field not in BUILD_DEFAULTS:
        raise SystemExit(f"--field {field!r}: choose a VMemConfig field ({', '.join(sorted(config_fields))}) "
                         f"or a build option ({', '.join(BUILD_DEFAULTS)})")
    if split not in SPLITS:
        raise SystemExit(f"split {split!r}: choose one of {', '.join(SPLITS)}")
    if split == "held-out" and len(values) != 1:
        raise SystemExit("the held-out split scores the one value chosen on the tuning split; sweep on the tuning split")
    conversations = load_split(benchmark, paths, held_out, split)
    questions = [(c, q) for c in conversations for q in c.questions if q.gold]
    categories = sorted({q.category for _, q in questions})
    config = BENCHMARK_CONFIGS[benchmark].override(k=max(BENCHMARK_CONFIGS[benchmark].k, k))
    embed_model, image_encoder = default_text_embedding(), EfficientNetImageEncoder()
    full = RUNGS["anchors"]

    def score(system: VMemSystem, value: Any) -> str:
        rows: Dict[str, List[Dict[str, float]]] = {c: [] for c in categories}
        for conv, q in tqdm(questions, desc=f"{field}={value}", disable=not show_progress):
            outcome = system.query(conv, q, None)
            ids = outcome.ranking if benchmark == "memgallery" else outcome.ranked_ids or conv.turn_ids(outcome.ranking)
            rows[q.category].append(retrieval_metrics(ids, q.gold, k))
        every = [m for scores in rows.values() for m in scores]
        overall = " / ".join(f"{statistics.fmean(m[name] for m in every):.3f}" for name in ("recall", "hit"))
        return f"| {json.dumps(value)} | {overall} | " + " | ".join(
            f"{statistics.fmean(m['recall'] for m in rows[c]):.3f}" for c in categories) + " |"

    def built(options: Dict[str, Any]) -> VMemBuild:
        build = VMemBuild(embed_model, image_encoder, config=config, options=options)
        for conv in tqdm(conversations, desc=f"building {options or 'defaults'}", disable=not show_progress):
            build.build(conv)
        return build

    lines = [f"{split} split of {benchmark}: {', '.join(c.name for c in conversations)} ({len(questions)} questions with evidence)",
             f"| {field} | R@{k} / Hit@{k} | " + " | ".join(
                 f"{c} R ({sum(q.category == c for _, q in questions)})" for c in categories) + " |",
             "|---|---|" + "---|" * len(categories)]
    if field in BUILD_DEFAULTS:  # a memory per value, each encoded that way
        for value in values:
            build = built({field: value})
            try:
                lines.append(score(VMemSystem("vmem", build, Rung(full.config, ((field, value),))), value))
            finally:
                build.close()
        return lines
    build = built({})  # one memory, the field overridden per query
    try:
        system = VMemSystem("vmem", build, full)
        for value in values:
            system.overrides = {**full.config, field: value}
            lines.append(score(system, value))
    finally:
        build.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", type=Path, nargs="+",
                        help="the data: LoCoMo's file (locomo_dev.json), or Mem-Gallery dialogue files or their folder")
    parser.add_argument("--benchmark", choices=sorted(HELD_OUT), default="locomo", help="the data's benchmark (default: %(default)s)")
    parser.add_argument("--field", default="follow_up_weight",
                        help=f"the VMemConfig field or build option ({', '.join(BUILD_DEFAULTS)}) to sweep "
                             "(default: %(default)s)")
    parser.add_argument("--values", required=True, help="comma list of values, read as JSON (0.1, 20, true)")
    parser.add_argument("--held-out", help="held-out conversations, a comma list (default: LoCoMo conv-42,conv-43; Mem-Gallery "
                                           "the 3rd, 6th, 9th and 12th dialogues by file name, as HELD_OUT names them)")
    parser.add_argument("--split", choices=SPLITS, default="tuning",
                        help="where to score: the tuning split, or the held-out one for the single value chosen "
                             "there (default: %(default)s)")
    parser.add_argument("--k", type=int, default=10, help="rank cut-off (default: %(default)s)")
    args = parser.parse_args()
    values = [json.loads(v) for v in args.values.split(",")]
    held_out = args.held_out.split(",") if args.held_out else HELD_OUT[args.benchmark]
    print("\n".join(sweep(args.benchmark, args.paths, args.field, values, held_out, args.k, args.split)))


if __name__ == "__main__":
    main()
