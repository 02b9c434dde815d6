"""Cost of a time filter in retrieval, as a memory grows.

A ``timestamp`` filter is a range on each point's stored, indexed reading of its timestamp
(``schema.TIME``), applied in every lane search, plus one count of the rounds in range. This adds
``--rounds`` short rounds, one a day, to one memory of an embedded store and, at each checkpoint,
times ``--queries`` retrievals four ways in the same process: unfiltered (the baseline), kept to one
session (a store filter), to the last 30 days, and to a range holding every round. It prints each
one's median ms and the ratio of each time-filtered median to the unfiltered one. Query embeddings
are cached by the index after the first pass, so the times are search, fusion and filtering, not MiniLM.

Run from the repository root::

    OMP_WAIT_POLICY=PASSIVE python benchmarks/time_filter.py [--rounds 4000] [--checkpoints 500,1000,2000,4000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Dict, List, Optional

from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_vmem import VMemIndex

PETS = ("Mochi", "Biscuit", "Pepper", "Luna", "Tofu")
DEEDS = ("chased a moth", "slept on the laptop", "visited the vet", "ate tuna", "hid in a box", "met the neighbour's dog")
START = datetime(2020, 1, 1, 9, 0)


def add_days(index: VMemIndex, first: int, last: int) -> None:
    """Rounds ``first`` to ``last`` - 1: one a day, in monthly sessions."""
    index.add_rounds([{
        "round_key": f"R:{i}",
        "session_id": (START + timedelta(days=i)).strftime("%Y-%m"),
        "timestamp": (START + timedelta(days=i)).isoformat(),
        "user": f"Day {i}: {PETS[i % len(PETS)]} {DEEDS[i % len(DEEDS)]}.",
        "assistant": "Noted.",
    } for i in range(first, last)])


def median_ms(index: VMemIndex, filters: Optional[MetadataFilters], queries: List[str]) -> float:
    retriever = index.as_retriever(filters=filters)
    for q in queries[:3]:
        retriever.retrieve(q)
    times = []
    for q in queries:
        start = time.perf_counter()
        retriever.retrieve(q)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4000)
    p.add_argument("--checkpoints", default="500,1000,2000,4000")
    p.add_argument("--queries", type=int, default=30)
    args = p.parse_args()
    checkpoints = sorted(int(c) for c in args.checkpoints.split(",") if int(c) <= args.rounds)
    queries = [f"What did {pet} do when it {deed}?" for pet in PETS for deed in DEEDS][: args.queries]
    rows: Dict[int, Dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        index = VMemIndex.from_defaults(path=Path(tmp) / "store", memory_id="user")
        done = 0
        for c in checkpoints:
            add_days(index, done, c)
            done = c
            last = START + timedelta(days=c - 1)
            session = MetadataFilters(filters=[MetadataFilter(key="session_id", value=last.strftime("%Y-%m"))])
            month = MetadataFilters(filters=[MetadataFilter(key="timestamp", value=(last - timedelta(days=30)).isoformat(),
                                                            operator=FilterOperator.GT)])
            every = MetadataFilters(filters=[MetadataFilter(key="timestamp", value="2000", operator=FilterOperator.GTE)])
            median_ms(index, None, queries)  # every query embedded once, before any pass is timed
            rows[c] = {name: median_ms(index, f, queries)
                       for name, f in (("none", None), ("session", session), ("month", month), ("every", every))}
        index.close()
    print(f"{'rounds':>7} {'unfiltered ms':>14} {'session ms':>11} {'last 30 days ms':>16} {'all days ms':>12} "
          f"{'30 days / unfiltered':>21} {'all days / unfiltered':>22}")
    for c, r in rows.items():
        print(f"{c:>7} {r['none']:>14.1f} {r['session']:>11.1f} {r['month']:>16.1f} {r['every']:>12.1f} "
              f"{r['month'] / r['none']:>21.2f} {r['every'] / r['none']:>22.2f}")


if __name__ == "__main__":
    main()
