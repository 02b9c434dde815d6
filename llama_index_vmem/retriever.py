"""``VMemRetriever``: route -> anchors -> per-signal unit search -> round max -> RRF -> image rounds
carry from the round before -> top-k rounds.

This is Algorithm 1 of the paper minus context assembly (``NeighborRoundPostprocessor``). Every
returned node says why it was returned in ``metadata["vmem"]``: case, anchors, rank under each
signal and fused score.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent, RetrievalStartEvent
from llama_index.core.llms.utils import LLMType
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import ImageNode, NodeWithScore, QueryBundle, QueryType, TextNode
from llama_index.core.vector_stores.types import MetadataFilters

from . import neighbours, schema
from .anchors import EnrichedAnchorTransform, HypoCaptionTransform, caption_keywords
from .config import VMemConfig
from .errors import VMemAnchorError, VMemAnchorWarning, VMemInputError
from .fusion import (Fused, add_ranking, best_before, carry_forward, note_pool_units, rank_rounds, round_of, rrf, unit_of,
                     units_covering, walk_back)
from .filters import read_filters
from .models import as_llm
from .router import HOLDS_ANSWER, Anchor, ModalityRouter, RoutePlan, Signal
from .store.base import Collection, Hit, Scope, Search

if TYPE_CHECKING:
    from .round_memory import RoundMemory

logger = logging.getLogger(__name__)
dispatcher = instrument.get_dispatcher(__name__)

#: Metadata key under which each returned node explains itself.
EXPLAIN_KEY = "vmem"


class ExplainedNode(TextNode):
    """A returned round (or text unit) with its explanation: hashed as the stored node is, without
    it. LlamaIndex's fusion (``QueryFusionRetriever``) merges nodes by ``hash``, and the explanation
    differs per query, so a round found by two queries would count as two rounds. It serializes as
    a ``TextNode``."""

    @property
    def hash(self) -> str:
        return TextNode(text=self.text, metadata={k: v for k, v in self.metadata.items() if k != EXPLAIN_KEY}).hash


@dataclass(frozen=True)
class AnchorValue:
    text: str
    #: ``"llm"``, ``"raw query"``, or how it was written without an LLM and why (``"raw query (no LLM)"``,
    #: ``"raw query (the LLM failed: ...)"``).
    source: str
    #: How long the LLM took to write it (0 for an anchor made without one): its share of the latency.
    seconds: float = 0.0
    #: What dense text signals search with instead of ``text``'s embedding (see ``_query_embedding``).
    embedding: Optional[Tuple[float, ...]] = None
    #: Where words added to the question came from, when not from an LLM: ``{"round": key, "image_id": id}``
    #: of the stored picture the attached one looks most like.
    origin: Optional[Dict[str, str]] = None
    #: Why the LLM's anchor is not used, when the LLM failed, gave no answer in time, or answered
    #: nothing usable: this anchor is then the one written without an LLM.
    llm_fallback: Optional[str] = None


def llm_fallbacks(anchors: Mapping[Anchor, AnchorValue]) -> Dict[str, str]:
    """Why each anchor the LLM should have written was written without it, by anchor name."""
    return {a.value: v.llm_fallback for a, v in anchors.items() if v.llm_fallback}


@dataclass
class RetrievalResult:
    """What one retrieval decided and found, for engines that need more than the nodes."""

    plan: RoutePlan
    anchors: Dict[Anchor, AnchorValue]
    #: Fused rounds (units in the unit-level ablation), best first.
    rounds: List[Fused]
    nodes: List[NodeWithScore]
    #: Best stored image under the visual signal, if that signal ran and found one.
    visual_match: Optional[Hit] = None
    filter_fallback: bool = False

    @property
    def anchor_seconds(self) -> float:
        """Seconds spent waiting on the LLM for anchors; the rest of a retrieval is search and fusion."""
        return sum(a.seconds for a in self.anchors.values())

    @property
    def llm_fallback(self) -> Dict[str, str]:
        """Anchors written without the LLM because it failed, by name, with why (empty: none)."""
        return llm_fallbacks(self.anchors)


def embeds_text(signal: Signal, anchor: AnchorValue) -> bool:
    """Whether this signal searches with the text encoder's embedding of the anchor's words."""
    not_dense = (schema.VISUAL, schema.TEXT_SPARSE, schema.TEXT_CONTEXT_SPARSE)
    return signal.vector not in not_dense and anchor.embedding is None and schema.visible(anchor.text)


def picture_match(picture: ImageNode, returned_with: TextNode) -> str:
    """How a picture returned with a round says whose it is: "picture of D2:3", or, for a picture a
    round without one borrowed from a neighbour, "picture of D2:3, next to D2:2". It is always named
    by the round it was shared in, so no one reads the horse as the satellite round's."""
    owner, beside = picture.metadata[schema.ROUND_KEY], returned_with.metadata[schema.ROUND_KEY]
    return f"picture of {owner}" if owner == beside else f"picture of {owner}, next to {beside}"


def check_query(query: Any) -> QueryType:
    """``query`` if it is a string or a ``QueryBundle``: anything else is refused before LlamaIndex's
    events see it, which would fail on it with a validation or attribute error naming no query."""
    if not isinstance(query, (str, QueryBundle)):
        raise VMemInputError("query", f"must be text or a QueryBundle, got {type(query).__name__}")
    return query


class VMemRetriever(BaseRetriever):
    """Modality-routed retrieval over one memory (a ``VMemIndex``, or any ``RoundMemory``)."""

    def __init__(
        self,
        index: "RoundMemory",
        config: Optional[VMemConfig] = None,
        router: Optional[ModalityRouter] = None,
        llm: Optional[LLMType] = None,
        hypo_caption: Optional[HypoCaptionTransform] = None,
        enriched_anchor: Optional[EnrichedAnchorTransform] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        filters: Optional[MetadataFilters] = None,
    ) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self._index = index
        #: The sessions and time range retrieval is kept to, from ``filters`` (see ``filters.py``).
        self.filter = read_filters(filters)
        self.config = config or index.config
        self.router = router or ModalityRouter()
        llm = as_llm(llm)
        self.hypo_caption = hypo_caption or (HypoCaptionTransform(llm) if llm is not None else None)
        self.enriched_anchor = enriched_anchor or (
            EnrichedAnchorTransform(llm, max_keywords=self.config.max_anchor_keywords) if llm is not None else None
        )
        self._warned = False
        self._warn_lock = threading.Lock()

    def _get_prompt_modules(self) -> PromptMixinType:
        modules: PromptMixinType = {}
        if self.hypo_caption is not None:
            modules["hypo_caption"] = self.hypo_caption
        if self.enriched_anchor is not None:
            modules["enriched_anchor"] = self.enriched_anchor
        return modules

    # -- BaseRetriever ------------------------------------------------------------------------

    def retrieve(self, str_or_query_bundle: QueryType) -> List[NodeWithScore]:
        return super().retrieve(check_query(str_or_query_bundle))

    async def aretrieve(self, str_or_query_bundle: QueryType) -> List[NodeWithScore]:
        return await super().aretrieve(check_query(str_or_query_bundle))

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._plan_and_rank(query_bundle).nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return (await asyncio.to_thread(self._plan_and_rank, query_bundle)).nodes

    # -- the algorithm ------------------------------------------------------------------------

    def route(self, query_bundle: QueryBundle, **overrides: Any) -> RoutePlan:
        return self.router.route(query_bundle, self.config.override(**overrides))

    @dispatcher.span
    def retrieve_with_plan(self, query_bundle: QueryType, **overrides: Any) -> RetrievalResult:
        """Retrieve, returning the route plan and anchors too; ``VMemConfig`` fields override per query.
        Tracing sees it as it sees ``retrieve``: the same callback and instrumentation events."""
        self._check_callback_manager()
        check_query(query_bundle)
        dispatcher.event(RetrievalStartEvent(str_or_query_bundle=query_bundle))
        with self.callback_manager.as_trace("query"):
            with self.callback_manager.event(
                CBEventType.RETRIEVE, payload={EventPayload.QUERY_STR: schema.as_query(query_bundle).query_str}
            ) as retrieve_event:
                result = self._plan_and_rank(query_bundle, **overrides)
                retrieve_event.on_end(payload={EventPayload.NODES: result.nodes})
        dispatcher.event(RetrievalEndEvent(str_or_query_bundle=query_bundle, nodes=result.nodes))
        return result

    def _plan_and_rank(self, query_bundle: QueryType, **overrides: Any) -> RetrievalResult:
        query_bundle = schema.as_query(query_bundle)
        texts = [("query", query_bundle.query_str), ("query image caption", getattr(query_bundle, "image_caption", "")),
                 *((f"query custom_embedding_strs {i}", s) for i, s in enumerate(query_bundle.custom_embedding_strs or [], start=1))]
        for item, text in texts:
            if text is not None and (not isinstance(text, str) or not schema.is_utf8(text)):
                raise VMemInputError(item, f"must be UTF-8 text, got {text!r:.80}")
        if not schema.visible(query_bundle.query_str) and not query_bundle.image_path and not schema.query_image_caption(query_bundle):
            raise VMemInputError("query", "is empty: ask with text, an image, or both")  # it would rank rounds at random
        plan = self.route(query_bundle, **overrides)
        if self.filter.timed and not self._index.store.count(Collection.ROUNDS, self._filtered()):
            if query_bundle.image_path:  # refused as it is with rounds to rank
                self._index.load_query_image(query_bundle.image_path)
            return RetrievalResult(plan, {}, [], [])  # no round in the time range: nothing to rank, no LLM to ask
        anchors = {a: self._anchor(a, query_bundle, plan) for a in plan.anchors}
        eligible = self._eligible_rounds(plan)
        rankings, fused, payloads = self._rank(plan, anchors, query_bundle, eligible)
        if eligible is not None:
            fused = [r for r in fused if r.round_id in eligible]
        fallback = eligible is not None and not fused
        if fallback:  # the picture filter would remove every candidate: keep the ranking without it
            rankings, fused, payloads = self._rank(plan, anchors, query_bundle, None)
        top = fused[: plan.k] if plan.round_level else units_covering(fused, plan.k)
        nodes = self._nodes(plan, anchors, top, payloads, fallback)
        visual = next((h for s in plan.signals if s.is_visual for h in rankings[s.name][:1]), None)
        logger.debug("route %s, %d rounds, anchors %s", plan.case.value, len(top), anchors)
        return RetrievalResult(plan, anchors, top, nodes, visual_match=visual, filter_fallback=fallback)

    def _rank(
        self, plan: RoutePlan, anchors: Dict[Anchor, AnchorValue], query: QueryBundle, eligible: Optional[Set[str]]
    ) -> Tuple[Dict[str, List[Hit]], List[Fused], Dict[str, Mapping[str, Any]]]:
        """Per-signal rankings, the fused ranking, and the candidate rounds' payloads where the photo-round
        carry read them (so building the returned rounds does not read them again)."""
        pool = max(plan.config.candidate_pool, plan.k)  # a widened k (aggregation) gets enough candidates
        key = round_of if plan.round_level else unit_of
        found = self._search_all(plan, anchors, eligible, pool)
        rankings = {name: rank_rounds(hits, key) for name, hits in found.items()}
        fused = rrf(rankings, plan.config.rrf_kappa, key, plan.tie_break)
        note_pool_units(fused, found, key)
        payloads: Dict[str, Mapping[str, Any]] = {}
        if plan.follow_up_weight or plan.answer_weight:
            payloads = neighbours.round_payloads(self._index, [r.id for r in fused])
            links, shares, answers, holding = self._carries(plan, payloads, fused)
            fused = carry_forward(fused, links, shares, answers)
            if holding:
                fused = add_ranking(fused, HOLDS_ANSWER, holding, plan.config.rrf_kappa)
        return rankings, fused, payloads

    @staticmethod
    def _carries(plan: RoutePlan, payloads: Mapping[str, Mapping[str, Any]], fused: Sequence[Fused]
                 ) -> Tuple[Dict[str, str], Dict[str, float], Set[str], Set[str]]:
        """What ``carry_forward`` moves among the candidates: the round each one carries from (the
        one before it, or for a round holding what the question asks for, the best of the
        ``answer_reach`` before it), the share it carries (a photo round ``follow_up_weight``, an
        answer ``answer_weight``, the larger where it is both), the answers, which may pass the round
        they carry from, and of them the rounds holding what the question asks for.

        A round answering the round before it does not carry where a later round of its thread holds
        what the question asks for and it does not: "How much was the vet bill?" is not answered by
        "A sprain, nothing broken." (after "What did the vet say?"), which would otherwise pass "The
        bill was 95." two rounds on.

        A round opening its session carries on the session before it, where it holds what is asked:
        "Rang them. Earliest was Wednesday the 30th." brings back the news the last talk waited for.
        It carries from the best candidate of that session."""
        links = neighbours.rounds_after(payloads)
        openers = neighbours.sessions_before(payloads)
        text = {rid: payloads[rid].get(schema.TEXT, "") for rid in payloads}
        replies = {rid for rid, before in links.items() if plan.answer_weight and plan.asks.search(text[before])}
        holds = {rid for rid in links.keys() | openers.keys()
                 if any(rid in replies if kind.holds is None else kind.holds.search(text[rid]) for kind in plan.answer_kinds)}
        holding = {rid for rid in holds if rid in replies or plan.continues.search(text[rid])}
        passed = {r for rid in holding for r in walk_back(links, rid, plan.config.answer_reach)}
        own = {entry.id: entry.score for entry in fused}
        links.update({rid: max(openers[rid], key=own.__getitem__) for rid in holding & openers.keys()})
        links.update(best_before(fused, links, holding - openers.keys(), plan.config.answer_reach))
        answers = (replies - (passed - holds)) | holding
        shares = {rid: max(plan.follow_up_weight if payloads[rid].get(schema.IMAGE_IDS) else 0.0,
                           plan.answer_weight if rid in answers else 0.0) for rid in links}
        return links, shares, answers, holding

    def _anchor(self, anchor: Anchor, query: QueryBundle, plan: RoutePlan) -> AnchorValue:
        config = plan.config
        if anchor is Anchor.HYPO_CAPTION:
            return self._transform(self.hypo_caption, query, plan, lambda why: AnchorValue(query.query_str, f"raw query ({why})"))
        if anchor is Anchor.ENRICHED:
            without_llm = partial(self._enriched_without_llm, query, plan)
            if not query.image_path:
                return without_llm("attached image has no pixels")
            if self.enriched_anchor is not None:
                self._index.load_query_image(query.image_path)  # a bad image is refused before an LLM reads it
            return self._transform(self.enriched_anchor, query, plan, without_llm, {"max_keywords": config.max_anchor_keywords})
        if anchor is Anchor.QUERY_IMAGE:
            return AnchorValue(str(query.image_path), "attached image")
        if anchor is Anchor.QUERY_IMAGE_CAPTION:
            return AnchorValue(schema.query_image_caption(query) or query.query_str, "attached image caption")
        embedding = self._query_embedding(query)
        if embedding is None:
            return AnchorValue(query.query_str, "raw query")
        return AnchorValue(query.query_str, "raw query (dense search by the QueryBundle's custom_embedding_strs)", embedding=embedding)

    def _enriched_without_llm(self, query: QueryBundle, plan: RoutePlan, why: str) -> AnchorValue:
        """The enriched anchor with no vision LLM to read the attached image (``why`` says why): the
        question plus its caption's keywords, else the words of the stored picture it looks most like,
        else the question alone."""
        caption = schema.query_image_caption(query)
        if caption:
            keywords = caption_keywords(caption, plan.config.max_anchor_keywords)
            return AnchorValue(" ".join([query.query_str, *keywords]), f"raw query + attached image caption keywords ({why})")
        seen = self._picture_words(query, plan) if query.image_path and schema.visible(query.query_str) else None
        if seen is not None:
            words, origin = seen
            return AnchorValue(" ".join([query.query_str, *words]), f"raw query + words of round {origin['round']}, whose "
                               f"picture {origin['image_id']} looks most like the attached image ({why})", origin=origin)
        return AnchorValue(query.query_str, f"raw query ({why})")

    def _picture_words(self, query: QueryBundle, plan: RoutePlan) -> Optional[Tuple[List[str], Dict[str, str]]]:
        """Without a vision LLM, what the attached picture shows is read off the stored picture it looks
        most like: that picture's caption, then the words said in its round (``caption_keywords``), and
        where they came from. None where no stored picture is in reach or its round says nothing. A
        picture asked about in no words is not given any: it is searched by its pixels alone.

        "What is this animal's name?" with a photo of the cat names no cat: with these words the
        text searches find the rounds about the cat, and the reply context the round naming her."""
        visual = next((s for s in plan.signals if s.is_visual), None)
        search = self._search(visual, AnchorValue(str(query.image_path), "attached image"), None, 1) if visual else None
        best = self._index.store.search_many([search])[0] if search is not None else []
        if not best:
            return None
        picture = best[0].payload
        said = self._index.store.scroll(Collection.TEXT, self._index.scope(round_ids=(picture[schema.ROUND_ID],)))
        texts = [picture.get(schema.CAPTION) or ""] + [schema.without_pictures(h.payload[schema.TEXT])
                                                       for h in sorted(said, key=lambda h: h.payload[schema.UNIT_INDEX])]
        words = caption_keywords(" ".join(texts), plan.config.max_anchor_keywords)
        if not words:
            return None
        return words, {"round": picture[schema.ROUND_KEY], "image_id": picture[schema.IMAGE_ID]}

    def _query_embedding(self, query: QueryBundle) -> Optional[Tuple[float, ...]]:
        """The aggregate embedding of the bundle's ``custom_embedding_strs`` (HyDE's hypothetical
        answer), as LlamaIndex's ``VectorIndexRetriever`` searches with it; None (the question text is
        embedded, through the index's cache) without them. A precomputed ``embedding`` is not used:
        a stock retriever run first on the same bundle (``QueryFusionRetriever``) leaves its own
        model's vector there."""
        if not query.custom_embedding_strs or query.custom_embedding_strs == [query.query_str]:
            return None
        return tuple(self._index.embed_model.get_agg_embedding_from_queries(query.custom_embedding_strs))

    def _transform(self, transform: Any, query: QueryBundle, plan: RoutePlan, without_llm: Callable[[str], AnchorValue],
                   metadata: Optional[Dict[str, Any]] = None) -> AnchorValue:
        """The LLM's anchor, within the config's ``anchor_timeout``. With no LLM, ``without_llm("no LLM")``.
        When the LLM fails, times out or answers nothing usable, ``without_llm`` told why and marked as
        a fallback, after one warning per retriever; or, with ``strict_anchors``, the ``VMemAnchorError``."""
        if transform is None:
            return without_llm("no LLM")
        start = time.perf_counter()
        try:
            text = transform.run(query, {**(metadata or {}), "timeout": plan.config.anchor_timeout}).query_str
        except VMemAnchorError as e:
            if plan.config.strict_anchors:
                raise
            self._warn_once(e)
            return replace(without_llm(e.problem), seconds=time.perf_counter() - start, llm_fallback=e.problem)
        return AnchorValue(text, "llm", time.perf_counter() - start)

    def _warn_once(self, error: VMemAnchorError) -> None:
        """One ``VMemAnchorWarning`` per retriever: an LLM that is down fails every question, and each
        result says so in its metadata already."""
        with self._warn_lock:
            if self._warned:
                return
            self._warned = True
        warnings.warn(f"{error}. Retrieval goes on with the anchor written without an LLM; metadata['vmem']['llm_fallback'] "
                      "marks each such result. Warned once per retriever; strict_anchors=True raises instead.",
                      VMemAnchorWarning, stacklevel=2)

    def _eligible_rounds(self, plan: RoutePlan) -> Optional[Set[str]]:
        """Ids of the rounds the text->image filter keeps: those holding an image, and their linked
        neighbours within the window (None when the plan has no filter)."""
        if plan.image_filter_window is None:
            return None
        image_units = self._index.store.scroll(Collection.IMAGE, self._filtered(), keys=[schema.ROUND_ID])
        image_rounds = neighbours.round_payloads(self._index, {h.payload[schema.ROUND_ID] for h in image_units})
        return neighbours.within(self._index, image_rounds, plan.image_filter_window)

    def _filtered(self, round_ids: Optional[Tuple[str, ...]] = None, roles: Optional[Tuple[str, ...]] = None) -> Scope:
        """This memory's points that pass the filter: in its sessions and its time range (and, with
        ``roles``, spoken in one of them)."""
        f = self.filter
        return self._index.scope(round_ids=round_ids, session_ids=f.session_ids, excluded_session_ids=f.excluded_session_ids,
                                 time_range=f.time_range, roles=roles)

    def _search_all(self, plan: RoutePlan, anchors: Dict[Anchor, AnchorValue], eligible: Optional[Set[str]],
                    pool: int) -> Dict[str, List[Hit]]:
        """Every signal's candidates, by signal name: the question's words encoded in one pass, then
        its searches asked of the store together (one request per lane)."""
        texts = list(dict.fromkeys(anchors[s.anchor].text for s in plan.signals if embeds_text(s, anchors[s.anchor])))
        dense = dict(zip(texts, self._index.encode_query_texts(texts), strict=True))
        searches = {s.name: self._search(s, anchors[s.anchor], eligible, pool, dense.get(anchors[s.anchor].text))
                    for s in plan.signals}
        asked = {name: search for name, search in searches.items() if search is not None}
        found: Dict[str, List[Hit]] = {name: [] for name in searches}
        found.update(zip(asked, self._index.store.search_many(list(asked.values())), strict=True))
        return found

    def _search(self, signal: Signal, anchor: AnchorValue, eligible: Optional[Set[str]], pool: int,
                embedding: Optional[List[float]] = None) -> Optional[Search]:
        """What one signal asks the store (None: it has nothing to search with); ``embedding``: the
        anchor's words encoded, for a signal that ``embeds_text``."""
        index = self._index
        if signal.vector == schema.VISUAL:
            vector: Any = index.encode_query_image(anchor.text)
        elif not schema.visible(anchor.text):  # an image asked about in no words: its text would rank at random
            return None
        elif signal.vector == schema.TEXT_CONTEXT_SPARSE and not index.build_options["reply_context"]:
            return None  # a memory built without reply contexts has no such vectors
        elif signal.vector in (schema.TEXT_SPARSE, schema.TEXT_CONTEXT_SPARSE):
            vector = index.bm25.query(anchor.text)
        elif anchor.embedding is not None:
            vector = list(anchor.embedding)
        else:
            vector = embedding
        scope = self._filtered(tuple(sorted(eligible)) if eligible is not None and signal.collection is Collection.TEXT else None,
                               signal.roles)
        if signal.vector == schema.VISUAL and index.region_tiles:  # the query image against every stored region
            return Search(signal.collection, schema.VISUAL_REGIONS, [vector], scope, pool)
        return Search(signal.collection, signal.vector, vector, scope, pool)

    def _nodes(self, plan: RoutePlan, anchors: Dict[Anchor, AnchorValue], top: List[Fused],
               payloads: Mapping[str, Mapping[str, Any]], fallback: bool) -> List[NodeWithScore]:
        anchor_info = {a.value: {"text": v.text, "source": v.source, **({"from": v.origin} if v.origin else {})}
                       for a, v in anchors.items()}
        llm_fallback = llm_fallbacks(anchors) or None

        def explained(node: Any, fused: Fused, match: str = "retrieved") -> NodeWithScore:
            """``match``: "retrieved", or for a picture returned with a round, ``picture_match``."""
            if not isinstance(node, ImageNode):  # an image's hash leaves its metadata out already
                node = ExplainedNode(**node.__dict__)
            node.metadata[EXPLAIN_KEY] = {
                "case": plan.case.value,
                "anchors": anchor_info,
                "ranks": dict(fused.ranks),
                "fused_score": fused.score,
                "follows": payloads[fused.follows][schema.ROUND_KEY] if fused.follows in payloads else None,
                "matched_units": {s: h.id for s, h in fused.best_units.items()},
                "pool_units": [{"unit": u, **about} for u, about in fused.pool_units.items()],
                "reasons": list(plan.reasons),
                "neighbor_window": plan.neighbor_window,
                "filter_fallback": fallback,  # a plain ``retrieve()`` sees it here, as a response's metadata shows it
                "llm_fallback": llm_fallback,
                "match": match,
            }
            for excluded in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
                if EXPLAIN_KEY not in excluded:
                    excluded.append(EXPLAIN_KEY)  # for engines that print metadata, such as ContextChatEngine
            return NodeWithScore(node=node, score=fused.score)

        if not plan.round_level:  # ablation: bare units
            return [explained(self._index.unit(f.id, next(iter(f.best_units.values())).payload), f) for f in top]
        rounds = self._index.get_rounds([r.id for r in top if r.id not in payloads])
        rounds.update((r.id, schema.round_from_payload(r.id, payloads[r.id])) for r in top if r.id in payloads)
        images: Dict[str, List[Any]] = {}
        if plan.return_images:
            images = self._index.images_near([rounds[r.id] for r in top if r.id in rounds], plan.image_filter_window or 0,
                                             self.filter.time_range)
        out: List[NodeWithScore] = []
        listed: Set[str] = set()
        returned = {f.id for f in top if f.id in rounds}
        for fused in top:
            node = rounds.get(fused.id)
            if node is None:  # a round whose write never finished is not part of the memory
                continue
            out.append(explained(node, fused))
            for img in images.get(fused.id, []):
                owner = img.metadata[schema.ROUND_ID]
                if img.node_id in listed or (owner != fused.id and owner in returned):
                    continue  # a picture follows its own round where that round is returned, else the best that borrowed it
                listed.add(img.node_id)
                out.append(explained(img, fused, picture_match(img, node)))
        return out
