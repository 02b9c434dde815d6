"""Query latency on a busy machine, and what importing the library costs, with no environment
variable set.

An app shares its machine. This script asks the demo's memory text and photo questions in a fresh
process on a quiet machine, then again while other processes keep every core busy, and prints each
p50 and their ratio, with the library's default of one torch thread per question and with torch's
own thread count (``encoders.threads.QUERY_THREADS = None``). It also times ``from llama_index_vmem import VMemIndex`` against ``import
llama_index.core`` in fresh processes. The child processes run without ``OMP_WAIT_POLICY`` or
``OMP_NUM_THREADS``, as a user's app does. Needs the ``demo`` extra (its photos).

    python benchmarks/busy_machine.py                 # load: one busy process per core
    python benchmarks/busy_machine.py --load 4 --queries 60
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

#: Variables a tuned shell may hold that change how torch's threads wait; the children run without them.
THREAD_VARIABLES = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
IMPORTS = {"llama_index.core": "import llama_index.core", "llama_index_vmem": "from llama_index_vmem import VMemIndex"}
TEXT_QUESTIONS = ["What is the name of the cafe I go to?", "What is my cat called?", "Where did I watch a launch?",
                  "How old is the horse?"]
PHOTO_QUESTIONS = ["What is this animal's name?", "Which picture in our chat is this?"]
SETTINGS = ("one thread (default)", "torch's own count")


def child_env() -> Dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}


def import_seconds(statement: str) -> float:
    """Seconds a fresh interpreter spends on ``statement`` (its own start-up left out)."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def spin() -> None:
    while True:
        pass


def ask(queries: int, unbounded: bool) -> None:
    """Child: build the demo memory, then time ``queries`` text and photo questions; print p50s as JSON."""
    from PIL import Image

    from llama_index_vmem.encoders import threads

    if unbounded:
        threads.QUERY_THREADS = None

    from llama_index_vmem import VMemIndex, VMemQueryBundle
    from llama_index_vmem.demo import conversation, photos_dir

    photos = photos_dir()
    with tempfile.TemporaryDirectory() as work, VMemIndex.from_defaults(path=Path(work) / "memory") as index:
        crop = Path(work) / "crop.png"
        with Image.open(photos / "chelsea.png") as im:
            im.crop((0, 0, im.width * 3 // 4, im.height)).save(crop)
        index.add_rounds(conversation(photos))
        retriever = index.as_retriever(k=4)
        asked = {"text": [VMemQueryBundle(q) for q in TEXT_QUESTIONS],
                 "photo": [VMemQueryBundle(q, image_path=str(crop)) for q in PHOTO_QUESTIONS]}
        p50: Dict[str, float] = {}
        for kind, bundles in asked.items():
            for bundle in bundles:  # warm-up: first calls load kernels
                retriever.retrieve(bundle)
            times: List[float] = []
            for i in range(queries):
                index.clear_query_cache()  # each question pays for its own encoding
                start = time.perf_counter()
                retriever.retrieve(bundles[i % len(bundles)])
                times.append((time.perf_counter() - start) * 1000)
            p50[kind] = statistics.median(times)
    print(json.dumps(p50))


def measure(queries: int) -> Dict[str, Dict[str, float]]:
    """p50s by thread setting, then by kind of question."""
    runs = {SETTINGS[0]: [], SETTINGS[1]: ["--unbounded"]}
    out = {}
    for setting, flags in runs.items():
        done = subprocess.run([sys.executable, __file__, "--child", "--queries", str(queries), *flags], env=child_env(),
                              capture_output=True, text=True, check=True)
        out[setting] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=40, help="questions of each kind per measurement (default: %(default)s)")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1,
                        help="busy processes competing for the CPU (default: one per core, %(default)s)")
    parser.add_argument("--imports", type=int, default=5, help="fresh processes per import timing (default: %(default)s)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--unbounded", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        ask(args.queries, args.unbounded)
        return
    seconds = {name: [] for name in IMPORTS}
    for _ in range(args.imports):  # interleaved, so a slow moment hits both
        for name, statement in IMPORTS.items():
            seconds[name].append(import_seconds(statement))
    core, vmem = (statistics.median(seconds[name]) for name in IMPORTS)
    print(f"import llama_index.core          {core:6.2f} s (median of {args.imports})")
    print(f"from llama_index_vmem import ... {vmem:6.2f} s  = {vmem / core:.2f}x")
    quiet = measure(args.queries)
    load = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.load)]
    for p in load:
        p.start()
    try:
        busy = measure(args.queries)
    finally:
        for p in load:
            p.terminate()
    print(f"\nquery p50, {args.queries} questions each, {os.cpu_count()} cores, {args.load} busy process{'es' if args.load != 1 else ''}:")
    print("| threads per question | question | quiet | busy | busy / quiet |\n|---|---|---|---|---|")
    for setting in SETTINGS:
        for kind, q in quiet[setting].items():
            b = busy[setting][kind]
            print(f"| {setting} | {kind} | {q:.1f} ms | {b:.1f} ms | {b / q:.2f}x |")


if __name__ == "__main__":
    main()
