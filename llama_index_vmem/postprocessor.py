"""Context assembly: each top round with its +-W neighbours, as merged, time-ordered blocks.

Neighbours never count against k (Table 13 of the paper: truncating to make room for them loses
recall). Aggregation questions skip this step; the router sets their window to 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, ImageNode, NodeWithScore, QueryBundle, TextNode
from pydantic import Field, PrivateAttr

from . import neighbours, schema
from .retriever import EXPLAIN_KEY

if TYPE_CHECKING:
    from .round_memory import RoundMemory

#: Block-node metadata: the round keys a block holds, and which of them were retrieved.
BLOCK_ROUNDS = "rounds"
BLOCK_MATCHED = "matched_rounds"
BLOCK_ROUND_IDS = "round_ids"


class NeighborRoundPostprocessor(BaseNodePostprocessor):
    """Turn retrieved round nodes into context blocks; image nodes follow their block.

    A block keeps the node id of the best round retrieved in it (the round whose score it takes),
    as ``MetadataReplacementPostProcessor``'s sentence window keeps its sentence's id: the same
    retrieval gives the same ids in any process, an answer's source can be cited across turns
    (``index.get_rounds([node_id])`` reads that round back), and the id is one the caller already
    holds. Its metadata lists every round it holds (``round_ids``, ``rounds``) and those retrieved
    (``matched_rounds``).

    To evaluate, give LlamaIndex's ``RetrieverEvaluator`` round node ids as ``expected_ids``: those
    ``add_rounds`` returned, or ``schema.round_id(memory_id, round_key)`` for a dataset's round keys.
    ``RetrieverEvaluator(retriever=index.as_retriever(), node_postprocessors=[NeighborRoundPostprocessor(index)])``
    scores a block as its best round: a hit where that round is expected. A retrieved round merged
    into a block behind a better one is context there, not a hit of its own, and neighbours never
    are; to score every retrieved round, evaluate the retriever without this postprocessor (it
    returns one node per round, and the blocks are built from exactly those rounds).
    """

    window: Optional[int] = Field(default=None, description="Override the window the router chose.")
    _index: Any = PrivateAttr()

    def __init__(self, index: "RoundMemory", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._index = index

    @classmethod
    def class_name(cls) -> str:
        return "NeighborRoundPostprocessor"

    def _postprocess_nodes(self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        """This memory's rounds become blocks, each round's images after its block; every other node
        (another retriever's, fused in) is kept as it is, in its place around them."""
        memory_id = self._index.memory_id
        rounds = [n for n in nodes if _is_round(n.node, memory_id)]
        if not rounds:
            return nodes
        images: Dict[str, List[NodeWithScore]] = {}
        current = rounds[0].node.node_id  # an image a reranker put first goes with the best round
        for n in nodes:
            if _is_round(n.node, memory_id):
                current = n.node.node_id
            elif _is_image_unit(n.node, memory_id):
                images.setdefault(current, []).append(n)
        window = self.window if self.window is not None else rounds[0].node.metadata.get(EXPLAIN_KEY, {}).get("neighbor_window", 1)
        matched = {r.node.node_id: r for r in rounds}
        place = {r.node.node_id: i for i, r in reversed(list(enumerate(rounds)))}  # where each round first came
        out: List[NodeWithScore] = []
        members = neighbours.within(self._index, {rid: r.node.metadata for rid, r in matched.items()}, window) - matched.keys()
        for chain in _chains({rid: r.node for rid, r in matched.items()} | self._index.get_rounds(members)):
            hits = [matched[n.node_id] for n in chain if n.node_id in matched]
            best = min(hits, key=lambda h: (-(h.score or 0.0), place[h.node.node_id]))
            out.append(NodeWithScore(node=_block_node(best.node.node_id, chain, [h.node for h in hits]), score=best.score or 0.0))
            for h in hits:
                out.extend(images.get(h.node.node_id, []))
        return splice(nodes, lambda n: _is_round(n, memory_id) or _is_image_unit(n, memory_id), out)


def splice(nodes: List[NodeWithScore], own: Callable[[BaseNode], bool], made: List[NodeWithScore]) -> List[NodeWithScore]:
    """``made`` (what the ``own`` nodes became) where the first of them was (after the rest, with none),
    and every other node as it was, in its order around it: another retriever's nodes fused in with
    V-Mem's are neither dropped nor moved past V-Mem's best."""
    first = next((i for i, n in enumerate(nodes) if own(n.node)), len(nodes))
    return nodes[:first] + made + [n for n in nodes[first:] if not own(n.node)]


def _is_round(node: BaseNode, memory_id: str) -> bool:
    return schema.UNIT_IDS in node.metadata and node.metadata.get(schema.MEMORY_ID) == memory_id


def _is_image_unit(node: BaseNode, memory_id: str) -> bool:
    return isinstance(node, ImageNode) and schema.ROUND_ID in node.metadata and node.metadata.get(schema.MEMORY_ID) == memory_id


def is_own(node: BaseNode, memory_id: str) -> bool:
    """A node of ``memory_id``'s context: a block this postprocessor made, or an image unit with one."""
    block = BLOCK_ROUND_IDS in node.metadata and node.metadata.get(schema.MEMORY_ID) == memory_id
    return block or _is_image_unit(node, memory_id)


def _chains(rounds: Dict[str, TextNode]) -> List[List[TextNode]]:
    """Runs of linked rounds of one session, in conversation order.

    A round joins the run of the round it links back to, not merely the run before it in ``seq``:
    two sessions written at once interleave by ``seq`` but each still chains its own rounds.
    """
    chains: List[List[TextNode]] = []
    chain_of: Dict[str, List[TextNode]] = {}
    for node in sorted(rounds.values(), key=lambda n: n.metadata[schema.SEQ]):
        prev = rounds.get(neighbours.prev_id(node.metadata) or "")
        if prev is not None and neighbours.same_session(node.metadata, prev.metadata):
            chain = chain_of[prev.node_id]
        else:
            chain = []
            chains.append(chain)
        chain.append(node)
        chain_of[node.node_id] = chain
    return chains


def _block_node(node_id: str, members: List[TextNode], matched: List[TextNode]) -> TextNode:
    """The block of ``members`` under ``node_id``: an id derived from its rounds, never a random one."""
    text = f"[{schema.block_header([n.metadata for n in members])}]\n" + "\n\n".join(schema.dated_texts(members))
    first = members[0].metadata
    metadata = {
        BLOCK_ROUNDS: [n.metadata[schema.ROUND_KEY] for n in members],
        BLOCK_MATCHED: [n.metadata[schema.ROUND_KEY] for n in matched],
        BLOCK_ROUND_IDS: [n.node_id for n in members],
        schema.MEMORY_ID: first[schema.MEMORY_ID],
        schema.SESSION_ID: first.get(schema.SESSION_ID),
        schema.TIMESTAMP: first.get(schema.TIMESTAMP),
        schema.SEQ: first[schema.SEQ],
        schema.IMAGE_IDS: [i for n in members for i in n.metadata.get(schema.IMAGE_IDS, [])],
        EXPLAIN_KEY: {n.metadata[schema.ROUND_KEY]: n.metadata.get(EXPLAIN_KEY, {}) for n in matched},
    }
    node = TextNode(id_=node_id, text=text, metadata=metadata)
    node.excluded_llm_metadata_keys = list(metadata)
    node.excluded_embed_metadata_keys = list(metadata)
    return node
