"""Context assembly: each top round with its +-W neighbours, as merged, time-ordered blocks.

Neighbours never count against k (Table 13 of the paper: truncating to make room for them loses
recall). Aggregation questions skip this step; the router sets their window to 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

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
                current = n.node.metadata[schema.SEQ]
            elif current is not None:
                images.setdefault(current, []).append(n)
        window = self.window if self.window is not None else rounds[0].node.metadata.get(EXPLAIN_KEY, {}).get("neighbor_window", 1)
        by_seq = {r.node.metadata[schema.SEQ]: r for r in rounds}
        known = {s: r.node for s, r in by_seq.items()}
        if window > 0:
            wanted = {s + d for s in by_seq for d in range(-window, window + 1) if s + d >= 1} - set(by_seq)
            known.update((n.metadata[schema.SEQ], n) for n in self._index.rounds_by_seqs(sorted(wanted)))
        out: List[NodeWithScore] = []
        for lo, hi in _session_spans(by_seq, known, window):
            members = [known[s] for s in range(lo, hi + 1) if s in known]
            matched = [s for s in range(lo, hi + 1) if s in by_seq]
            block = _block_node(members, [by_seq[s].node for s in matched])
            out.append(NodeWithScore(node=block, score=max(by_seq[s].score or 0.0 for s in matched)))
            for s in matched:
                out.extend(images.get(s, []))
        return out


def _session_spans(matched: Dict[int, Any], known: Dict[int, TextNode], window: int) -> List[Tuple[int, int]]:
    """Each matched round widened by up to ``window`` rounds of its own session, merged, in order.

    A neighbour from another session is another day's conversation, not a continuation of the topic.
    """
    by_session: Dict[Any, List[Tuple[int, int]]] = {}
    for s in matched:
        session = known[s].metadata.get(schema.SESSION_ID)
        same = lambda n: n in known and known[n].metadata.get(schema.SESSION_ID) == session  # noqa: E731
        lo = hi = s
        while lo > s - window and same(lo - 1):
            lo -= 1
        while hi < s + window and same(hi + 1):
            hi += 1
        by_session.setdefault(session, []).append((lo, hi))
    return sorted(span for spans in by_session.values() for span in merge_spans(spans))


def merge_spans(spans: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Merge overlapping or touching [lo, hi] spans, in conversation order."""
    merged: List[Tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


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
