"""Sweep one ``VMemConfig`` field on the project's hand-written answer cases (``tests/answer_cases.py``).

Each case is a conversation whose answer is told in a round other than the one naming its subject,
and a question a person would ask later. For each value, prints in how many cases of each list the
answering round is in the retriever's top 2, without an LLM: the cases written while the router's
answer rules were shaped, and each set written by someone who had not read them. One store holds a
memory per case, as ``tests/test_answers.py`` builds it (BM25's IDF counts every case's words).

    python benchmarks/answer_cases.py --field answer_reach --values 0,1,2,3,4
    python benchmarks/answer_cases.py --field answer_weight --values 0,0.25,0.5,1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Sequence

from llama_index.core.base.embeddings.base import BaseEmbedding
from tqdm.auto import tqdm

from llama_index_vmem import VMemIndex
from llama_index_vmem.config import VMemConfig
from llama_index_vmem.encoders import default_text_embedding

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from answer_cases import CASES, UNSEEN_SETS, AnswerCase, round_dicts, round_keys  # noqa: E402

#: The lists scored, by the column that names them.
LISTS: Dict[str, List[AnswerCase]] = {
    "written with the rules": CASES,
    **{f"without them, set {n}": cases for n, cases in enumerate(UNSEEN_SETS, start=1)},
}


def sweep(field: str, values: Sequence[Any], lists: Dict[str, List[AnswerCase]], embed_model: BaseEmbedding,
          show_progress: bool = False) -> List[str]:
    """A Markdown table: a row per value of ``field``, the cases of each list found in the top 2, and all."""
    if field not in {f.name for f in dataclasses.fields(VMemConfig)}:
        raise SystemExit(f"--field {field!r}: choose a VMemConfig field")
    cases = [case for listed in lists.values() for case in listed]
    lines = [f"| {field} | " + " | ".join(f"{name} ({len(listed)})" for name, listed in lists.items()) + f" | all ({len(cases)}) |",
             "|---|" + "---|" * (len(lists) + 1)]
    with tempfile.TemporaryDirectory(prefix="answer-cases-") as tmp:
        memories = {case.name: VMemIndex.from_defaults(path=Path(tmp) / "store", memory_id=case.name, embed_model=embed_model)
                    for case in cases}
        try:
            for case in tqdm(cases, desc="building", disable=not show_progress):
                memories[case.name].add_rounds(round_dicts(case))
            def found(case: AnswerCase, value: Any) -> bool:
                return case.answer in round_keys(memories[case.name].as_retriever(k=2, **{field: value}).retrieve(case.question))

            for value in values:
                counts = [sum(found(case, value) for case in listed) for listed in lists.values()]
                lines.append(f"| {json.dumps(value)} | " + " | ".join(map(str, counts)) + f" | {sum(counts)} |")
        finally:
            for index in memories.values():
                index.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--field", default="answer_reach", help="the VMemConfig field to sweep (default: %(default)s)")
    parser.add_argument("--values", required=True, help="comma list of values, read as JSON (0, 0.5, true)")
    parser.add_argument("--show-progress", action="store_true")
    args = parser.parse_args()
    values = [json.loads(v) for v in args.values.split(",")]
    print("\n".join(sweep(args.field, values, LISTS, default_text_embedding(), args.show_progress)))


if __name__ == "__main__":
    main()
