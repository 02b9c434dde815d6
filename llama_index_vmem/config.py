"""V-Mem hyperparameters (the paper's Table 5), one object, overridable per index and per query."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Dict

from .errors import VMemInputError, keywords_listed
from .store.base import MAX_LIMIT

#: Smallest value of the number fields that must be positive (the others may be 0).
_LEAST: Dict[str, float] = {"candidate_pool": 1, "anchor_timeout": 0.1}


@dataclass(frozen=True)
class VMemConfig:
    """Every retrieval knob, with the paper's values as defaults.

    Pass one to ``from_defaults(config=...)`` or override single fields per query with
    ``index.as_retriever(k=5)``; unknown names raise instead of being ignored.
    """

    #: Reciprocal-rank-fusion constant kappa in score(r) = sum_j 1 / (kappa + rank_j(r)).
    rrf_kappa: int = 60
    #: Units fetched per active signal before rounds are scored (the candidate pool; at least k). With
    #: RRF kappa 60 a round deep in every list can outrank the top of one; a small pool keeps it out.
    candidate_pool: int = 12
    #: On a text->text query, a candidate round holding an image also scores this share of the
    #: fused score of the candidate just before it in its session, short of passing that round. A
    #: round that only shares a photo ("here it is") says little; the round before it names the
    #: topic. 0 ranks by Eq. 5 alone, as the paper does. Small, because a photo also comes with
    #: ordinary turns (swept in docs/configuration.md).
    follow_up_weight: float = 0.1
    #: On a question about text, a candidate round that follows a round ending in a question (the
    #: router's ``asks`` rule) also scores this share of that round's fused score, and may rank past
    #: it: "What did you name her?" is answered by the next round, whose words ("Mochi.") rarely say
    #: what it answers. 0 turns it off.
    answer_weight: float = 0.5
    #: With ``answer_weight``, on a question that asks for a kind of thing the router knows (a price,
    #: an outcome, a place: ``KeywordRules.answer_kinds``), a candidate round that carries on the
    #: thread of the round before it and holds that kind carries the best of this many rounds before
    #: it, and ranks in one more list of such rounds. "How much did our new sofa cost?" is answered by
    #: "Half price, so 450." two turns after "We're replacing the old sofa". 0 turns it off.
    answer_reach: int = 3
    #: Rounds returned for ordinary questions.
    k: int = 12
    #: Rounds returned for aggregation questions, which also drop neighbours.
    aggregation_k: int = 30
    #: Rounds added on each side of a returned round when the context is assembled.
    neighbor_window: int = 1
    #: Text->image cases keep a round only if it, or a round this close, holds an image.
    image_filter_window: int = 1
    #: Most keywords the enriched anchor may append to the query text.
    max_anchor_keywords: int = 8
    #: Skip the hypo-caption on counting questions ("how many pictures ..."): no single image to describe.
    hypo_caption_counting_gate: bool = True
    #: Turn the aggregation branch (no neighbours, aggregation_k rounds) on or off.
    aggregation_enabled: bool = True
    #: Ablation: route lanes by case. False fires every signal with the raw query, uniformly.
    routing: bool = True
    #: Ablation: rank and return whole rounds. False ranks and returns bare units (as many as span
    #: k rounds), no neighbours.
    round_level: bool = True
    #: Ablation: search cross-modal cases with LLM-written anchors. False keeps the raw query.
    anchors: bool = True
    #: Seconds a retrieval waits for the LLM writing an anchor. Past them it searches with the anchor
    #: written without an LLM, as when the LLM fails or answers nothing usable; the late answer is
    #: kept for the next time the same question is asked.
    anchor_timeout: float = 10.0
    #: Raise ``VMemAnchorError`` when the anchor LLM fails, times out or answers nothing usable,
    #: instead of searching without it.
    strict_anchors: bool = False
    #: Who the memory's user and assistant are, as questions name them ("Caroline", "Melanie"; a name
    #: of several words is also known by its first). A question for words that names one of them and
    #: not the other searches that speaker's own words (their spans, with the captions of the pictures
    #: they shared, and the user's voice notes) by BM25: "What has Melanie painted?" is answered by
    #: what Melanie said, not by her friend's painting. The search by meaning still reads every span,
    #: so an answer to the other's question is still found, and a picture asked for is still known by
    #: what either said of it. Names match whole words, with their case. "" names no one.
    user_name: str = ""
    assistant_name: str = ""

    def __post_init__(self) -> None:
        """Refuse, when the config is made, values retrieval would fail on or misread later (a
        negative k cuts from the end, a float k fails to slice, a kappa of -1 divides by zero)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise VMemInputError(f"config {f.name}", f"must be True or False, got {value!r}")
            if f.type == "int" and (type(value) is not int or not _LEAST.get(f.name, 0) <= value <= MAX_LIMIT):  # counts the store is asked for
                raise VMemInputError(f"config {f.name}", f"must be a whole number from {_LEAST.get(f.name, 0)} to {MAX_LIMIT}, got {value!r}")
            if f.type == "str" and not isinstance(value, str):
                raise VMemInputError(f"config {f.name}", f"must be text, got {value!r}")
            if f.type == "float" and (type(value) not in (int, float) or not math.isfinite(value) or value < _LEAST.get(f.name, 0)):
                raise VMemInputError(f"config {f.name}", f"must be a number of at least {_LEAST.get(f.name, 0)}, got {value!r}")

    def override(self, **changes: Any) -> "VMemConfig":
        """A copy with some fields changed; ``None`` values keep the current field."""
        known = [f.name for f in fields(self)]
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise TypeError(f"unknown VMemConfig fields: {', '.join(map(repr, unknown))}; it has {', '.join(known)}")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


VMemConfig.__init__ = keywords_listed(VMemConfig.__init__)  # type: ignore[method-assign]  # a misspelt field lists the real ones
