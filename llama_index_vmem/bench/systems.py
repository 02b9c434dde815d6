"""The systems vmem-bench compares, behind one small interface.

``vmem`` and its ablation rungs query one shared memory per conversation (the rungs differ only at
query time). The stock systems are what LlamaIndex gives out of the box, over the very same units
(user span, assistant span, image caption) and the same MiniLM weights: ``VectorStoreIndex``,
``BM25Retriever``, ``QueryFusionRetriever`` (reciprocal rank of those two) and, where images have
pixels, ``MultiModalVectorStoreIndex`` with our image encoder. Stock nodes carry their round's timestamp
in their text, ``[2024-06-17] text``, as V-Mem's units are searched, so the same words meet the question
(the ``-units`` extras carry it as LLM metadata alone); both contexts tell the model when each item was said.
"""

from __future__ import annotations

import abc
import functools
import logging
from itertools import zip_longest
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Type, TypeVar, Union

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ImageBlock, TextBlock
from llama_index.core.embeddings.multi_modal_base import MultiModalEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import ImageNode, MetadataMode, NodeWithScore, QueryBundle, TextNode

from .. import VMemIndex, VMemQueryBundle, delivery, schema
from ..config import VMemConfig
from ..delivery import ContentBlock, Deliverer, DeliveryMode
from ..errors import VMemInputError
from ..postprocessor import BLOCK_ROUNDS, NeighborRoundPostprocessor
from ..store import Collection
from .data import BenchConversation, BenchQuestion, BenchRound
from .metrics import count_tokens, dedupe

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Units each stock retriever returns: enough to fill K distinct rounds and vmem's token budget.
STOCK_POOL = 300


@dataclass(frozen=True)
class Rung:
    """One vmem system of the ablation ladder: ``VMemConfig`` overrides at query time, and the build
    options (``encoders.BUILD_DEFAULTS``) of the memory it queries; rungs of equal build share one."""

    config: Dict[str, Any]
    build: Tuple[Tuple[str, Any], ...] = ()


_FULL = dict(routing=True, round_level=True, anchors=True)
#: The ablation ladder. The first four are the paper's Table 3 (``anchors`` is the full system); the
#: rest take one idea beyond the paper out of the full system each, so each idea's effect is measured
#: alone, and ``less-all`` takes all of them out. ``in-ram`` is the full system on a store that keeps
#: its vectors and indexes in RAM: its answers should be the full system's.
RUNGS = {
    "vanilla": Rung(dict(routing=False, round_level=False, anchors=False)),
    "routing": Rung(dict(routing=True, round_level=False, anchors=False)),
    "rounds": Rung(dict(routing=True, round_level=True, anchors=False)),
    "anchors": Rung(_FULL),
    "undated": Rung(_FULL, (("dated_units", False),)),
    "bm25-b0.75": Rung(_FULL, (("bm25_b", 0.75),)),
    "pool20": Rung(dict(_FULL, candidate_pool=20)),
    "no-reply-context": Rung(_FULL, (("reply_context", False),)),
    "no-answer-carry": Rung(dict(_FULL, answer_weight=0.0)),
    "no-answer-kinds": Rung(dict(_FULL, answer_reach=0)),
    "no-speakers": Rung(dict(_FULL, user_name="", assistant_name="")),
    "less-all": Rung(dict(_FULL, candidate_pool=20, answer_weight=0.0, answer_reach=0, user_name="", assistant_name=""),
                     (("bm25_b", 0.75), ("dated_units", False), ("reply_context", False))),
    "in-ram": Rung(_FULL, (("in_ram", True),)),
}
#: ``-units`` variants index V-Mem's units (user span, assistant span, caption), searched by their text alone
#: and scored by their rounds: a labelled extra. The plain names index what
#: a user would: on LoCoMo one node per turn, ``[session date] Speaker: text [shares a photo: caption]``, scored
#: on the turn ids returned; on Mem-Gallery V-Mem's units, each after its round's date as V-Mem searches them.
STOCK_SYSTEMS = ("stock-dense", "stock-bm25", "stock-fusion", "stock-multimodal",
                 "stock-dense-units", "stock-bm25-units", "stock-fusion-units")
#: Stock systems whose dense text index can take the matching dense system's vectors (``dense_source``).
REUSES_DENSE = ("stock-fusion", "stock-fusion-units")
#: Stock node metadata: the benchmark id (LoCoMo turn) a turn node holds.
TURN = "turn_id"
#: Stock unit metadata: which span of its round a unit is (``user``, ``assistant`` or an image id).
SPAN = "span"
WARM_UP_TEXTS = ["a short warm-up text", "and a second, slightly longer one, to warm a padded batch"]


def dense_source(name: str) -> str:
    """The dense system whose vectors ``name`` (in ``REUSES_DENSE``) takes: the same nodes and weights."""
    return name.replace("fusion", "dense")


@dataclass
class QueryOutcome:
    """What one system did for one question."""

    #: Round keys, best first, deduplicated (the unit-ranking metric cuts this at K).
    ranking: List[str]
    #: The benchmark's evidence ids whose text is in the context delivered to the answering model,
    #: each with the share of its text there (a stock unit holds one span of a round).
    delivered: Dict[str, float]
    context: str
    #: Ranking (for vmem: search, fusion and neighbour blocks), without the time spent waiting on an LLM for anchors.
    retrieval_ms: float
    #: Images delivered as pixels (``--delivery pixels``).
    images: int = 0
    #: Round keys of the same-size context filled with whole rounds in ranking order (equal granularity).
    delivered_as_rounds: Optional[List[str]] = None
    #: Time the LLM took to write this query's anchors (0 without an LLM).
    anchor_ms: float = 0.0
    #: The delivered content, pixels and all, where it holds images (``--delivery pixels``): what QA answers from.
    content: Optional[List[ContentBlock]] = None
    #: The benchmark's ids best first where the system ranks finer than rounds (V-Mem: each returned round's
    #: matched units' ids first, then the rest of those rounds'); None: ``ranking``'s rounds expanded.
    ranked_ids: Optional[List[str]] = None

    @property
    def tokens(self) -> int:
        return count_tokens(self.context)


class BenchSystem(abc.ABC):
    """Builds one memory per conversation, then answers retrieval queries against it."""

    name: str
    #: LLM tokens spent building memories (V-Mem: always 0).
    build_llm_tokens: int = 0

    @abc.abstractmethod
    def build(self, conv: BenchConversation) -> int:
        """Ingest ``conv``; return the number of units stored."""

    @abc.abstractmethod
    def query(self, conv: BenchConversation, q: BenchQuestion, token_budget: Optional[int]) -> QueryOutcome: ...

    def build_seconds(self, measured: float) -> float:
        """Seconds to report for the builds (systems sharing one build report the shared time)."""
        return measured

    def warm_up(self) -> None:
        """Run the encoder once before builds are timed, so the first system measured does not pay
        for the process's first forward pass (default: nothing to warm)."""

    def peak_rss_mb(self) -> Optional[float]:
        """Peak RSS of the process the system runs in, where that is not the caller's (default: None)."""
        return None

    def close(self) -> None:
        """Release resources (default: nothing)."""


class VMemSystem(BenchSystem):
    """V-Mem at one ablation rung; rungs share one ``VMemBuild``."""

    def __init__(self, name: str, build: "VMemBuild", rung: Union[str, Rung]) -> None:
        """``rung``: a name in ``RUNGS``, or a ``Rung`` of its own (a sweep's value of a build option)."""
        rung = RUNGS[rung] if isinstance(rung, str) else rung
        if build.options != dict(rung.build):
            raise ValueError(f"{name} queries a memory built with {dict(rung.build)}, not {build.options}")
        self.name = name
        self.shared = build
        self.overrides = rung.config

    def build(self, conv: BenchConversation) -> int:
        return self.shared.build(conv)

    def build_seconds(self, measured: float) -> float:
        return self.shared.seconds

    def warm_up(self) -> None:
        self.shared.embed_model.get_text_embedding_batch(WARM_UP_TEXTS)

    def query(self, conv: BenchConversation, q: BenchQuestion, token_budget: Optional[int]) -> QueryOutcome:
        index = self.shared.indexes[conv.name]
        bundle = VMemQueryBundle(q.question, image_path=str(q.image_path) if q.image_path else None,
                                 image_caption=q.image_caption)
        retriever = self.shared.retrievers[conv.name]
        index.clear_query_cache()  # rungs share one index: each must pay for its own query embedding
        start = time.perf_counter()
        result = retriever.retrieve_with_plan(bundle, **self.overrides)
        blocks = NeighborRoundPostprocessor(index).postprocess_nodes(result.nodes, bundle) if result.plan.round_level else []
        anchor_ms = result.anchor_seconds * 1000
        elapsed = (time.perf_counter() - start) * 1000 - anchor_ms  # Algorithm 1 returns the neighbour blocks, so they count
        if not result.plan.round_level:  # units returned bare, a caption-only image as its caption
            keys = dedupe(n.node.metadata[schema.ROUND_KEY] for n in result.nodes)
            delivered = conv.delivered(span for n in result.nodes for span in _unit_spans(conv, n.node))
            context = delivery.BLOCK_SEPARATOR.join(n.node.get_content() for n in result.nodes)
            return QueryOutcome(keys, delivered, context, elapsed, delivered_as_rounds=keys, anchor_ms=anchor_ms)
        keys = dedupe(n.node.metadata[schema.ROUND_KEY] for n in result.nodes if not isinstance(n.node, ImageNode))
        ranked_ids = _matched_first(conv, [n.node for n in result.nodes if not isinstance(n.node, ImageNode)])
        rounds = dedupe(k for b in blocks if not isinstance(b.node, ImageNode) for k in b.node.metadata[BLOCK_ROUNDS])
        # the rounds' text, and the pictures retrieved with them: one from a round the context leaves
        # out reaches it as its caption (or labelled pixels); the rest are in their rounds already
        delivered = conv.delivered([(k, None) for k in rounds] + [(b.node.metadata[schema.ROUND_KEY], b.node.metadata[schema.IMAGE_ID])
                                                                  for b in blocks if isinstance(b.node, ImageNode)])
        if self.shared.delivery is DeliveryMode.PIXELS:
            content = Deliverer(index, DeliveryMode.PIXELS).deliver(blocks, bundle)
            text = "".join(b.text for b in content if isinstance(b, TextBlock))
            images = sum(isinstance(b, ImageBlock) for b in content)
            return QueryOutcome(keys, delivered, text, elapsed, images, rounds, anchor_ms,
                                content if images else None, ranked_ids=ranked_ids)
        return QueryOutcome(keys, delivered, delivery.text_context(blocks), elapsed, delivered_as_rounds=rounds,
                            anchor_ms=anchor_ms, ranked_ids=ranked_ids)


def _matched_first(conv: BenchConversation, rounds: List[TextNode]) -> List[str]:
    """The benchmark ids of returned rounds, best round first, each round's matched units' ids (those a
    signal's candidate pool held) before any round's unmatched ids: on LoCoMo a round is two turns and
    the evidence is one of them. On Mem-Gallery (evidence = the round) this is the rounds' order."""
    first: List[str] = []
    for node in rounds:
        r = conv.by_key.get(node.metadata[schema.ROUND_KEY])
        if r is None:
            continue
        spans = set()
        for unit in node.metadata.get("vmem", {}).get("pool_units", []):
            role = unit["role"]
            if role == schema.Role.IMAGE.value:
                spans.add(unit["image_id"])
            elif role in (schema.Role.USER.value, schema.Role.ASSISTANT.value):
                spans.add(role)
                spans.update(i.image_id for i in r.images if i.role == role)  # its captions are folded into it
        shares = r.evidence_shares(spans & set(r.spans))
        first += [t for t in r.turn_ids if t in shares]
    keys = dedupe(n.metadata[schema.ROUND_KEY] for n in rounds)
    return dedupe(first + conv.turn_ids(keys))


class VMemBuild:
    """One embedded store holding a memory per conversation (shared by the ablation rungs)."""

    def __init__(self, embed_model: BaseEmbedding, image_encoder: Optional[MultiModalEmbedding],
                 llm: Optional[LLM] = None, config: Optional[VMemConfig] = None,
                 delivery: DeliveryMode = DeliveryMode.TEXT, options: Optional[Dict[str, Any]] = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="vmem-bench-")
        #: Build options that differ from the defaults (``from_defaults(bm25_b=, dated_units=)``).
        self.options = dict(options or {})
        self.embed_model = embed_model
        self.image_encoder = image_encoder
        self.llm = llm
        self.delivery = DeliveryMode(delivery)
        self.config = config or VMemConfig()
        self.indexes: Dict[str, VMemIndex] = {}
        self.retrievers: Dict[str, Any] = {}
        self.seconds = 0.0

    def build(self, conv: BenchConversation) -> int:
        if conv.name not in self.indexes:
            start = time.perf_counter()
            index = VMemIndex.from_defaults(path=Path(self._tmp.name), memory_id=conv.name, embed_model=self.embed_model,
                                            image_encoder=self.image_encoder, llm=self.llm, config=self.config,
                                            **self.options)
            try:
                index.add_rounds([r.as_round_dict() for r in conv.rounds])
            except VMemInputError as e:  # a file that is there but is no image: the data must be fixed
                index.close()
                raise SystemExit(f"conversation {conv.name}: {e}") from None
            self.indexes[conv.name] = index
            self.retrievers[conv.name] = index.as_retriever(user_name=conv.speakers[0], assistant_name=conv.speakers[1])
            self.seconds += time.perf_counter() - start
        index = self.indexes[conv.name]
        return sum(index.store.count(c, index.scope()) for c in (Collection.TEXT, Collection.IMAGE))

    def close(self) -> None:
        for index in self.indexes.values():
            index.close()
        self._tmp.cleanup()


def _unit_spans(conv: BenchConversation, unit: TextNode) -> List[Tuple[str, str]]:
    """The ``(round key, span)`` pairs whose text a V-Mem unit holds, in the loaders' terms: an image
    unit its picture; a text unit its side's line with the pictures that side shared, whose captions
    V-Mem folds into it (``round_spans``)."""
    key, role = unit.metadata[schema.ROUND_KEY], unit.metadata.get(schema.ROLE)
    if role == schema.Role.IMAGE.value:
        return [(key, unit.metadata[schema.IMAGE_ID])]
    if role not in (schema.Role.USER.value, schema.Role.ASSISTANT.value):  # the loaders give no audio
        raise ValueError(f"round {key}: a V-Mem unit of role {role!r} has no span in the benchmark's data")
    r = conv.by_key[key]
    line = [(key, role)] if role in r.spans else []  # a blank line makes no span; its side's pictures still fold in
    return line + [(key, i.image_id) for i in r.images if i.role == role]


def unit_nodes(conv: BenchConversation, dated: bool = False) -> List[TextNode]:
    """The units V-Mem stores (user span, assistant span, image caption), as stock ``TextNode``s; ids
    name the round and span, so stock ties break the same way in every run (random ids did not).

    ``dated``: each unit's text starts with its round's date as V-Mem's searched text does,
    ``[2024-06-17] text`` (``schema.encoding_text``), so dense and BM25 (which reads the embed text) see
    the date V-Mem's units are searched with; else the date is LLM metadata alone and the units are
    searched by their text (the ``-units`` variants)."""
    nodes: List[TextNode] = []
    for r in conv.rounds:
        pixels = {i.image_id: i.path for i in r.images if i.path}
        nodes += [_stock_node(TextNode, r, span, dated, id_=f"{r.key}/{span}", text=text)
                  for span, text in r.spans.items() if span not in pixels and text.strip()]
        nodes += [_stock_node(ImageNode, r, span, dated, id_=f"{r.key}/{span}", text=r.spans[span], image_path=str(path))
                  for span, path in pixels.items()]
    return nodes


def _stock_node(node_class: Type[TextNode], r: BenchRound, span: Optional[str], dated: bool = False,
                **fields: Any) -> TextNode:
    """A node of round ``r`` dated as a LlamaIndex app would date it, so the date reaches the answering
    model with the node (as V-Mem's block header states when a round was seen, DeliverMem's D3):
    ``dated``, in its text, searched and delivered; else as LLM metadata, kept out of embeddings and
    BM25, so rankings are the text's own."""
    metadata = {schema.ROUND_KEY: r.key, SPAN: span} | ({schema.TIMESTAMP: r.timestamp} if r.timestamp else {})
    node = node_class(metadata=metadata, excluded_embed_metadata_keys=list(metadata),
                      excluded_llm_metadata_keys=[schema.ROUND_KEY, SPAN], **fields)
    if dated:  # the date once, in the text: not again as metadata
        node.text = schema.encoding_text(node, dated=True)
        node.excluded_llm_metadata_keys = list(metadata)
    return node


def turn_nodes(conv: BenchConversation) -> List[TextNode]:
    """A LoCoMo chat as a LlamaIndex user indexes it: one node per turn, its session date and speaker in the
    text and the caption of the photo it shared folded in, ``[8 May, 2023] Ann: text [shares a photo: caption]``."""
    nodes: List[TextNode] = []
    for r in conv.rounds:
        lines: Dict[str, List[str]] = {}
        captions: Dict[str, List[str]] = {}
        for p in r.turn_pieces:
            (lines if p.span in ("user", "assistant") else captions).setdefault(p.evidence_id, []).append(p.text)
        for n, turn in enumerate(dict.fromkeys(r.turn_ids)):
            text = " ".join(lines.get(turn, [])) + "".join(f" [shares a photo: {c}]" for c in captions.get(turn, []))
            text = f"[{r.timestamp}] {text}" if r.timestamp else text
            metadata = {schema.ROUND_KEY: r.key, SPAN: None, TURN: turn}
            nodes.append(TextNode(id_=f"{r.key}/{turn}/{n}", text=text, metadata=metadata,
                                  excluded_embed_metadata_keys=list(metadata), excluded_llm_metadata_keys=list(metadata)))
    return nodes


class StockSystem(BenchSystem):
    """A stock LlamaIndex retriever over the nodes a user would make (``turn_nodes`` on LoCoMo, V-Mem's units
    dated as V-Mem searches them elsewhere; the ``-units`` variants: V-Mem's units searched by their text
    alone); context filled to vmem's token count."""

    def __init__(self, name: str, embed_model: Optional[BaseEmbedding], image_encoder: Optional[MultiModalEmbedding]) -> None:
        self.name = name
        #: The retriever this system is (``stock-fusion`` for ``stock-fusion-units``).
        self.kind = name.removesuffix("-units")
        self.embed_model = embed_model
        self.image_encoder = image_encoder
        self.retrievers: Dict[str, BaseRetriever] = {}
        #: Each conversation's dense text index, where the system has one.
        self.vector_indexes: Dict[str, VectorStoreIndex] = {}
        #: Rounds as the equal-granularity view delivers them, by (conversation, round key): rendered once each.
        self._round_texts: Dict[Tuple[str, str], str] = {}

    def warm_up(self) -> None:
        if self.embed_model is not None:
            self.embed_model.get_text_embedding_batch(WARM_UP_TEXTS)

    def build(self, conv: BenchConversation, vectors: Optional[Dict[str, List[float]]] = None) -> int:
        """Index ``conv``'s units; ``vectors`` (by node id) are taken as they are instead of encoding
        again, as ``VectorStoreIndex`` takes a node's ``embedding``."""
        if self.kind != self.name:
            nodes = unit_nodes(conv)
        else:
            nodes = turn_nodes(conv) if conv.benchmark == "locomo" else unit_nodes(conv, dated=True)
        for node in nodes:
            node.embedding = (vectors or {}).get(node.node_id)
        self.retrievers[conv.name] = self._retriever(conv.name, nodes)
        return len(nodes)

    def vectors(self, conv_name: str) -> Dict[str, List[float]]:
        """The dense vectors of a built conversation's units, by node id."""
        index = self.vector_indexes[conv_name]
        return {node_id: index.vector_store.get(node_id) for node_id in index.index_struct.nodes_dict.values()}

    def _dense(self, conv_name: str, nodes: List[TextNode]) -> BaseRetriever:
        index = self.vector_indexes[conv_name] = VectorStoreIndex(nodes, embed_model=self.embed_model)
        return index.as_retriever(similarity_top_k=STOCK_POOL)

    def _retriever(self, conv_name: str, nodes: List[TextNode]) -> BaseRetriever:
        from llama_index.core.llms import MockLLM
        from llama_index.core.retrievers import QueryFusionRetriever
        from llama_index.core.retrievers.fusion_retriever import FUSION_MODES

        if self.kind == "stock-dense":
            return self._dense(conv_name, nodes)
        if self.kind == "stock-bm25":
            return _bm25(nodes)
        if self.kind == "stock-fusion":
            return QueryFusionRetriever([self._dense(conv_name, nodes), _bm25(nodes)], llm=MockLLM(),
                                        mode=FUSION_MODES.RECIPROCAL_RANK, similarity_top_k=STOCK_POOL, num_queries=1,
                                        use_async=False)
        if self.kind == "stock-multimodal":
            from llama_index.core.indices import MultiModalVectorStoreIndex

            index = MultiModalVectorStoreIndex(nodes, embed_model=self.embed_model, image_embed_model=self.image_encoder)
            return index.as_retriever(similarity_top_k=STOCK_POOL, image_similarity_top_k=STOCK_POOL)

        raise ValueError(f"unknown stock system {self.name!r}")

    def query(self, conv: BenchConversation, q: BenchQuestion, token_budget: Optional[int]) -> QueryOutcome:
        text = q.question
        if q.image_caption:  # as the Mem-Gallery harness does for text memories, pixels or not
            text += "\nquestion's image:\nimage_caption: " + q.image_caption
        bundle = QueryBundle(text, image_path=str(q.image_path) if q.image_path else None)
        start = time.perf_counter()
        hits = self._hits(self.retrievers[conv.name], bundle)
        elapsed = (time.perf_counter() - start) * 1000
        ranking = dedupe(h.node.metadata[schema.ROUND_KEY] for h in hits)
        if hits and TURN in hits[0].node.metadata:  # turn nodes: scored and delivered by the turns themselves
            turns = [(h.node.metadata[TURN], h.node.get_content(MetadataMode.LLM)) for h in hits]
            context, delivered_turns = fill_to_budget(turns, token_budget)
            return QueryOutcome(ranking, dict.fromkeys(delivered_turns, 1.0), context, elapsed,
                                delivered_as_rounds=self.fill_rounds(conv, ranking, token_budget),
                                ranked_ids=dedupe(t for t, _ in turns))
        units = [((h.node.metadata[schema.ROUND_KEY], h.node.metadata[SPAN]), h.node.get_content(MetadataMode.LLM))
                 for h in hits]
        context, spans = fill_to_budget(units, token_budget)
        return QueryOutcome(ranking, conv.delivered(spans), context, elapsed,
                            delivered_as_rounds=self.fill_rounds(conv, ranking, token_budget))

    def fill_rounds(self, conv: BenchConversation, ranking: List[str], budget: Optional[int]) -> List[str]:
        """Whole rounds in rank order to ``budget`` tokens, each rendered as V-Mem renders a round and
        dated by its timestamp as LLM metadata: the stock ranking at V-Mem's granularity, so only which rounds are chosen differs."""
        return fill_to_budget([(key, self._round_text(conv, key)) for key in ranking], budget)[1]  # ranking is deduplicated

    def _round_text(self, conv: BenchConversation, key: str) -> str:
        if (conv.name, key) not in self._round_texts:
            r = conv.by_key[key]
            self._round_texts[conv.name, key] = _stock_node(TextNode, r, None, text=r.text).get_content(MetadataMode.LLM)
        return self._round_texts[conv.name, key]

    def _hits(self, retriever: BaseRetriever, bundle: QueryBundle) -> List[NodeWithScore]:
        """Stock multimodal: text retrieval, plus image-to-image when the query has an image (our
        image encoders embed images, not text), merged by alternating ranks."""
        if self.kind != "stock-multimodal":
            return retriever.retrieve(bundle)
        text = retriever.text_retrieve(bundle)
        images = retriever.image_to_image_retrieve(bundle.image_path) if bundle.image_path else []
        first: Dict[str, NodeWithScore] = {}
        for pair in zip_longest(text, images):
            for h in pair:
                if h is not None:
                    first.setdefault(h.node.node_id, h)
        return list(first.values())


def _bm25(nodes: List[TextNode]) -> BaseRetriever:
    import Stemmer
    from llama_index.retrievers.bm25 import BM25Retriever

    return BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=min(STOCK_POOL, len(nodes)),
                                       stemmer=Stemmer.Stemmer("english"), language="english")


def fill_to_budget(items: List[Tuple[T, str]], budget: Optional[int]) -> Tuple[str, List[T]]:
    """The first ``(label, text)`` items, joined, whose context is nearest ``budget`` tokens.

    Tokens are counted on the joined context, separators and all, and the item that crosses the
    budget is kept when that lands nearer it than stopping short, so stock contexts match V-Mem's
    size on average. Returns the context and the labels of the items in it (everything with no budget).
    """
    texts = [text for _, text in items]
    size = functools.cache(lambda n: count_tokens(delivery.BLOCK_SEPARATOR.join(texts[:n])))  # each prefix counted once
    n = len(items)
    if budget is not None:
        low, high = 0, n  # the longest prefix within the budget, by bisection: contexts only grow
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if size(mid) <= budget else (low, mid - 1)
        n = low + 1 if low < n and size(low + 1) - budget < budget - size(low) else low
    return delivery.BLOCK_SEPARATOR.join(texts[:n]), [label for label, _ in items[:n]]
