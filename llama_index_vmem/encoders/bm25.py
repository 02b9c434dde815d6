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
    """Stemmed English BM25 term weights (k1=1.2 and avg_len=256 as Qdrant's defaults). ``b`` is the
    length normalisation of document weights (Qdrant's default 0.75; a memory fixes it when it is
    built, see ``encoders.resolve_build_options``); query weights do not depend on it."""

    def __init__(self, k1: float = 1.2, b: float = 0.75, avg_len: float = 256.0) -> None:
        self._bm25 = qdrant_edge.Bm25(qdrant_edge.Bm25Config(language="english", k=k1, b=b, avg_len=avg_len))

    def documents(self, texts: List[str]) -> List[Sparse]:
        return [_sparse(self._bm25.embed_document(t)) for t in texts]

    def query(self, text: str) -> Sparse:
        return _sparse(self._bm25.embed_query(text))


def _sparse(vec: qdrant_edge.SparseVector) -> Sparse:
    return Sparse(indices=tuple(vec.indices), values=tuple(vec.values))
