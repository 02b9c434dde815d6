"""End-to-end QA: answer from each system's delivered context, then judge (needs an LLM).

Every system answers with V-Mem's answer prompt over its own context, so only retrieval differs.
Mem-Gallery is judged with its official prompt (``llm_judge.txt``, ``{{question}}`` placeholders,
scores collapsed to 0 / 0.5 / 1 as its scorer does); LoCoMo with its CORRECT/WRONG grader.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from llama_index.core.base.llms.types import TextBlock
from llama_index.core.llms import LLM

from ..delivery import ContentBlock, prompt_messages
from ..prompts import ANSWER_PROMPT, CONFLICT_PROMPT, IMAGE_NOTE_PROMPT, LOCOMO_GRADER_PROMPT
from ..router import ModalityRouter
from .data import BenchQuestion
from .metrics import bleu1, collapse_judge_score, exact_match, f1, locomo_f1


def answer(llm: LLM, question: BenchQuestion, context: str, router: ModalityRouter,
           content: Optional[Sequence[ContentBlock]] = None) -> str:
    """The answer from ``context``, or from ``content`` where delivery gave pixels (one message of
    text and images, as ``VMemQueryEngine`` sends it); a question asked with an image gets the
    attached-image note after the context, as the engine adds it."""
    conflict = router.rules.conflict.search(question.question)
    prompt = CONFLICT_PROMPT if conflict else ANSWER_PROMPT
    note = ""
    if question.image_path or question.image_caption:
        note = "\n\n" + IMAGE_NOTE_PROMPT.format(query_caption=question.image_caption or "an image (no description was given)")
    if content is None:
        return llm.predict(prompt, context=context + note, question=question.question).strip()
    messages = prompt_messages(prompt, [*content, TextBlock(text=note)], llm, question=question.question)
    return (llm.chat(messages).message.content or "").strip()


def parse_memgallery_judge(reply: str) -> float:
    """The ``score`` of the judge's JSON (or a ``score: x`` fallback), collapsed; 0 if unreadable."""
    match = re.search(r'\{[^{}]*"score"[^{}]*\}', reply, re.DOTALL)
    try:
        if match:
            return collapse_judge_score(float(json.loads(match.group(0))["score"]))
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        pass
    found = re.search(r'score"?\s*:\s*(\d*\.?\d+)', reply, re.IGNORECASE)
    return collapse_judge_score(float(found.group(1))) if found else 0.0


def parse_locomo_label(reply: str) -> float:
    match = re.search(r'"label"\s*:\s*"(CORRECT|WRONG)"', reply)
    label = match.group(1) if match else ("CORRECT" if "CORRECT" in reply and "WRONG" not in reply else "WRONG")
    return 1.0 if label == "CORRECT" else 0.0


def judge(llm: LLM, benchmark: str, question: str, gold: str, prediction: str, judge_template: Optional[str]) -> float:
    if benchmark == "memgallery":
        if judge_template is None:
            raise ValueError("Mem-Gallery QA needs its judge prompt (--judge-prompt .../prompts/llm_judge.txt)")
        prompt = (judge_template.replace("{{question}}", question).replace("{{ground_truth}}", gold)
                  .replace("{{model_output}}", prediction))
        return parse_memgallery_judge(llm.complete(prompt).text)
    reply = llm.predict(LOCOMO_GRADER_PROMPT, question=question, gold_answer=gold, generated_answer=prediction)
    return parse_locomo_label(reply)


def score_rows(rows: List[Dict[str, Any]], questions: Dict[str, Any], benchmark: str, llm: LLM,
               judge_prompt: Optional[Path]) -> None:
    """Add ``answer``, ``judge``, ``f1``, ``bleu1``, ``em`` (and LoCoMo's ``locomo_f1``) to each row."""
    template = judge_prompt.read_text() if judge_prompt else None
    router = ModalityRouter()
    for row in rows:
        q = questions[row["qid"]]
        row["answer"] = answer(llm, q, row["context"], router, row.get("content"))
        row["judge"] = judge(llm, benchmark, q.question, q.answer, row["answer"], template)
        row["f1"] = f1(row["answer"], q.answer)
        row["bleu1"] = bleu1(row["answer"], q.answer)
        row["em"] = exact_match(row["answer"], q.answer)
        if benchmark == "locomo":
            row["locomo_f1"] = locomo_f1(row["answer"], q.answer, q.category)
