"""Cost of one more round in a long session: the chat engine's and the memory block's path.

A chat (``as_chat_engine``, ``VMemMemoryBlock``) adds one round per turn to one session, with the
round keys left to V-Mem (``S:1``, ``S:2``, ...). This adds ``--rounds`` short rounds one call at a
time to one session of an embedded store, twice in the same process: with default keys, and with
the caller's own keys (the baseline: no key to work out). It prints the mean milliseconds per add
over the last ``--window`` adds before each checkpoint, and the ratio of default to own keys. If
finding the next default key read the session's rounds, the ratio would grow with the session.

Run from the repository root::

    OMP_WAIT_POLICY=PASSIVE python benchmarks/session_growth.py [--rounds 2000] [--window 100]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from llama_index_vmem import VMemIndex
from llama_index_vmem.encoders import default_text_embedding


def per_add_ms(index: VMemIndex, rounds: int, window: int, checkpoints: List[int], keyed: bool) -> Dict[int, float]:
    """Mean ms of the last ``window`` adds before each checkpoint."""
    times: List[float] = []
    for i in range(1, rounds + 1):
        key: Optional[str] = f"mine-{i}" if keyed else None
        start = time.perf_counter()
        index.add_round(user=f"Turn {i}: I watered the basil.", assistant="Noted.", session_id="S", round_key=key)
        times.append(time.perf_counter() - start)
    return {c: 1000 * sum(times[c - window:c]) / window for c in checkpoints}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--window", type=int, default=100)
    args = p.parse_args()
    checkpoints = sorted({args.window, args.rounds // 4, args.rounds})
    embed = default_text_embedding()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for keyed in (False, True):
            with VMemIndex.from_defaults(path=Path(tmp) / ("own" if keyed else "default"), embed_model=embed) as index:
                results[keyed] = per_add_ms(index, args.rounds, args.window, checkpoints, keyed)
    print("| rounds in session | default keys ms/add | own keys ms/add | ratio |")
    print("|---|---|---|---|")
    for c in checkpoints:
        print(f"| {c} | {results[False][c]:.1f} | {results[True][c]:.1f} | {results[False][c] / results[True][c]:.2f} |")


if __name__ == "__main__":
    main()
