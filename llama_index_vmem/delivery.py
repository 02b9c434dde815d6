"""How retrieved context reaches the answering model.

``text`` mode (V-Mem's own): each block is one time-ordered run of rounds headed by its session,
round and date; images appear as their id and caption, folded into the round text at ingestion.
"""

from __future__ import annotations

from typing import List

from llama_index.core.schema import ImageNode, NodeWithScore

BLOCK_SEPARATOR = "\n\n---\n\n"


def text_context(nodes: List[NodeWithScore]) -> str:
    """The ``{context}`` of the answer prompt: text blocks in the order given, images as text only."""
    return BLOCK_SEPARATOR.join(n.node.get_content() for n in nodes if not isinstance(n.node, ImageNode))
