"""Context assembly: each top round with its +-W neighbours, as merged, time-ordered blocks.

Neighbours never count against k (Table 13 of the paper: truncating to make room for them loses
recall). Aggregation questions skip this step; the router sets their window to 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field, PrivateAttr

from . import schema
from .retriever import EXPLAIN_KEY

if TYPE_CHECKING:
    from .index import VMemIndex

#: Block-node metadata: the round keys a block holds, and which of them were retrieved.
BLOCK_ROUNDS = "rounds"
BLOCK_MATCHED = "matched_rounds"
BLOCK_ROUND_IDS = "round_ids"


class NeighborRoundPostprocessor(BaseNodePostprocessor):
    """Turn retrieved round nodes into context blocks; image nodes follow their block."""

    window: Optional[int] = Field(default=None, description="Override the window the router chose.")
    _index: Any = PrivateAttr()

    def __init__(self, index: "VMemIndex", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._index = index

    @classmethod
    def class_name(cls) -> str:
        return "NeighborRoundPostprocessor"

    def _postprocess_nodes(self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        rounds = [n for n in nodes if schema.UNIT_IDS in n.node.metadata]
        if not rounds:
            return nodes
        images: Dict[str, List[NodeWithScore]] = {}
        current = None
        for n in nodes:
            if schema.UNIT_IDS in n.node.metadata:
                current = n.node.node_id
            elif current is not None:
                images.setdefault(current, []).append(n)
        window = self.window if self.window is not None else rounds[0].node.metadata.get(EXPLAIN_KEY, {}).get("neighbor_window", 1)
        matched = {r.node.node_id: r for r in rounds}
        out: List[NodeWithScore] = []
        for chain in _chains(_with_neighbours(self._index, [r.node for r in rounds], window)):
            hits = [matched[n.node_id] for n in chain if n.node_id in matched]
            out.append(NodeWithScore(node=_block_node(chain, [h.node for h in hits]), score=max(h.score or 0.0 for h in hits)))
            for h in hits:
                out.extend(images.get(h.node.node_id, []))
        return out


def _with_neighbours(index: "VMemIndex", matched: List[TextNode], window: int) -> Dict[str, TextNode]:
    """The matched rounds and up to ``window`` rounds either side of each, within its session.

    Neighbours follow the stored previous-round links (which ``forget`` keeps joined), so a gap
    left by a forgotten round is closed rather than ending the block. A neighbour from another
    session is another day's conversation, not a continuation of the topic.
    """
    known = {n.node_id: n for n in matched}
    back, ahead = list(matched), list(matched)
    for _ in range(window):
        before = index.get_rounds({_prev_id(n) for n in back if _prev_id(n)})
        after = {_prev_id(n): n for n in index.rounds_after([n.node_id for n in ahead])}
        back = [before[_prev_id(n)] for n in back if _prev_id(n) in before and _same_session(before[_prev_id(n)], n)]
        ahead = [after[n.node_id] for n in ahead if n.node_id in after and _same_session(after[n.node_id], n)]
        known.update((n.node_id, n) for n in back + ahead)
    return known


def _chains(rounds: Dict[str, TextNode]) -> List[List[TextNode]]:
    """Runs of linked rounds of one session, in conversation order.

    A round joins the run of the round it links back to, not merely the run before it in ``seq``:
    two sessions written at once interleave by ``seq`` but each still chains its own rounds.
    """
    chains: List[List[TextNode]] = []
    chain_of: Dict[str, List[TextNode]] = {}
    for node in sorted(rounds.values(), key=lambda n: n.metadata[schema.SEQ]):
        prev = rounds.get(_prev_id(node) or "")
        if prev is not None and _same_session(node, prev):
            chain = chain_of[prev.node_id]
        else:
            chain = []
            chains.append(chain)
        chain.append(node)
        chain_of[node.node_id] = chain
    return chains


def _prev_id(node: TextNode) -> Optional[str]:
    return node.metadata.get(schema.PREV_ROUND_ID)


def _same_session(a: TextNode, b: TextNode) -> bool:
    return a.metadata.get(schema.SESSION_ID) == b.metadata.get(schema.SESSION_ID)


def _block_node(members: List[TextNode], matched: List[TextNode]) -> TextNode:
    text = f"[{schema.block_header([n.metadata for n in members])}]\n" + "\n\n".join(n.text for n in members)
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
    node = TextNode(text=text, metadata=metadata)
    node.excluded_llm_metadata_keys = list(metadata)
    node.excluded_embed_metadata_keys = list(metadata)
    return node
