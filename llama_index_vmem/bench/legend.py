"""What vmem-bench's names mean, in words: systems, ablation rungs, question categories, metrics,
and why a question is not asked or not scored.

One place for the words the ``--help`` pages, the report and the results file use. Only the
standard library is imported, so ``vmem-bench --help`` can read it without loading LlamaIndex.
"""

from __future__ import annotations

from typing import Dict

#: The ablation rungs of V-Mem, each as the system it runs. The first four are the V-Mem paper's
#: ablation (``anchors`` is the full system); each of the next seven changes one setting the full
#: system uses beyond the paper, and ``less-all`` changes all seven.
RUNGS: Dict[str, str] = {
    "vanilla": "every lane searched with the bare question, units returned, no routing",
    "routing": "lanes chosen by the question's case (text, picture, or both), units returned",
    "rounds": "routing, with units ranked and returned as whole rounds, no anchors",
    "anchors": "the full system: routing, whole rounds, and anchors, the search text an LLM writes for a question "
               "about pictures (with --llm; without one, the bare question)",
    "undated": "the full system with units searched by their text alone, not prefixed with their round's date",
    "bm25-b0.75": "the full system with BM25's usual length normalisation (b=0.75) instead of none (b=0)",
    "pool20": "the full system with a candidate pool of 20 units per signal instead of 12",
    "no-reply-context": "the full system without the reply-context search (each text unit also searched by keyword "
                        "together with the exchange before it)",
    "no-answer-carry": "the full system without the answer carry (a round after one that ends in a question "
                       "gets a share of that round's score)",
    "no-answer-kinds": "the full system without answer kinds (on a question asking for a price, an outcome "
                       "or a place, a round carrying on a thread that holds one carries from further back and ranks higher)",
    "no-speakers": "the full system not told the user's and the assistant's names (a question naming one of them "
                   "searches that speaker's own words)",
    "less-all": "the full system with all seven of those changes at once",
    "in-ram": "the full system on a store that keeps its vectors and indexes in RAM instead of on disk",
}

#: The stock LlamaIndex systems vmem-bench can compare V-Mem with.
STOCK_SYSTEMS: Dict[str, str] = {
    "stock-dense": "LlamaIndex's VectorStoreIndex, dense search with the same MiniLM text encoder",
    "stock-bm25": "LlamaIndex's BM25Retriever, keyword search",
    "stock-fusion": "LlamaIndex's QueryFusionRetriever over dense and BM25 search, fused by reciprocal rank: the stock hybrid",
    "stock-multimodal": "LlamaIndex's MultiModalVectorStoreIndex, text and picture search (only where pictures have pixels)",
    "stock-dense-units": "stock-dense over V-Mem's units (user line, reply, caption), searched by their text alone",
    "stock-bm25-units": "stock-bm25 over V-Mem's units, searched by their text alone",
    "stock-fusion-units": "stock-fusion over V-Mem's units, searched by their text alone",
}

#: Mem-Gallery's question categories (its ``point`` field), code: (name, what the question asks).
MEMGALLERY_CATEGORIES: Dict[str, tuple] = {
    "FR": ("factual retrieval", "a fact stated in the conversation"),
    "TR": ("temporal reasoning", "when something happened, or in what order"),
    "MR": ("multi-entity reasoning", "facts about several things, combined"),
    "KR": ("knowledge resolution", "the final state of something that changed during the conversation"),
    "CD": ("conflict detection", "whether a statement contradicts the conversation"),
    "AR": ("answer refusal", "something the conversation never mentions; the right answer is to say so"),
    "VS": ("visual-centric search", "which stored picture matches a description"),
    "VR": ("visual-centric reasoning", "what stored pictures show, reasoned over"),
    "TTL": ("test-time learning", "a new picture given with the question, recognised from the conversation"),
}

#: LoCoMo's question categories, by the name vmem-bench gives them: what the question asks.
LOCOMO_CATEGORIES: Dict[str, str] = {
    "single-hop": "one fact from one turn",
    "multi-hop": "facts from several turns or sessions, combined",
    "temporal": "when something happened",
    "open-domain": "the conversation combined with general knowledge",
    "adversarial": "something the conversation never says; not asked, as is common practice",
}

#: What each metric in the report means.
METRICS: Dict[str, str] = {
    "hit@k": "share of scored questions with at least one evidence id among the system's top K",
    "recall@k": "share of each question's evidence ids among the top K, averaged over scored questions",
    "precision@k": "share of the top K ids that are evidence, averaged over scored questions",
    "hit@k_whole_rounds": "hit@k with each returned round's ids expanded whole, in turn order",
    "recall@k_whole_rounds": "recall@k with each returned round's ids expanded whole, in turn order",
    "context_evidence_recall": "share of the evidence text that is in the context the system would give the answering "
                               "model, at V-Mem's context size",
    "context_evidence_recall_any_part": "context_evidence_recall with an evidence id counted whole when any part of it is there",
    "context_evidence_recall_rounds": "context_evidence_recall with stock contexts made of whole rounds",
    "context_tokens_mean": "mean size of that context, in tokens, over every question asked",
    "delivered_images_mean": "mean number of pictures delivered as pixels, over every question asked",
    "judge": "the benchmark's LLM judge, 0 to 1, over every question asked",
    "f1": "token F1 of the answer against the reference answer",
    "bleu1": "BLEU-1 of the answer against the reference answer",
    "em": "exact match of the answer with the reference answer",
    "locomo_f1": "LoCoMo's own per-category F1",
}

#: Why a question was not asked.
NOT_ASKED_LIMIT = "only the first {limit} questions of each conversation are asked, by --limit {limit}"
NOT_ASKED_ADVERSARIAL = ("adversarial: the answer is in no turn, so there is nothing to retrieve; left out, "
                         "as is common practice for LoCoMo")
#: Why an asked question is not scored for ranking and context.
NOT_SCORED_NO_EVIDENCE = "no evidence in the data, so nothing to retrieve"


def category_name(benchmark: str, code: str) -> str:
    """``"AR (answer refusal)"`` for a Mem-Gallery code; a LoCoMo name, or an unknown code, as it is."""
    if benchmark == "memgallery" and code in MEMGALLERY_CATEGORIES:
        return f"{code} ({MEMGALLERY_CATEGORIES[code][0]})"
    return code


def system_description(name: str) -> str:
    """What a system name in a results file runs: ``vmem``, ``vmem-RUNG`` or a stock system."""
    if name == "vmem":
        return "V-Mem, " + RUNGS["anchors"]
    if name.startswith("vmem-") and name[len("vmem-"):] in RUNGS:
        return "V-Mem, " + RUNGS[name[len("vmem-"):]]
    return STOCK_SYSTEMS.get(name, name)
