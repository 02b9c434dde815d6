"""BM25 sparse vectors for the text lane, made client-side for both backends.

Qdrant Edge's tokenizer (stemming, stopwords) runs in-process; the collection applies IDF, so a
document vector holds only term frequencies and never needs re-encoding as the memory grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import qdrant_edge


@dataclass(frozen=True)
class Sparse:
    indices: Tuple[int, ...]
    values: Tuple[float, ...]

    def __bool__(self) -> bool:
        return bool(self.indices)


class Bm25Encoder:
    """Stemmed English BM25 term weights with Qdrant's defaults (k1=1.2, b=0.75, avg_len=256)."""

    def __init__(self) -> None:
        self._bm25 = qdrant_edge.Bm25(qdrant_edge.Bm25Config(language="english"))

    def documents(self, texts: List[str]) -> List[Sparse]:
        return [_sparse(self._bm25.embed_document(t)) for t in texts]

    def query(self, text: str) -> Sparse:
        return _sparse(self._bm25.embed_query(text))


def _sparse(vec: qdrant_edge.SparseVector) -> Sparse:
    return Sparse(indices=tuple(vec.indices), values=tuple(vec.values))
