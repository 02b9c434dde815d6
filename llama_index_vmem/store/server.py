"""A Qdrant server or cluster through ``qdrant-client`` (``url=``), or its local mode in tests.

Each lane is one collection shared by all memories, with ``memory_id`` as the tenant key
(Qdrant's multitenancy pattern); collections and payload indexes are created once and reused.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Hashable, List, Optional, Sequence

from qdrant_client import QdrantClient, models

from .. import schema
from ..encoders.bm25 import Sparse
from .base import Collection, Hit, LaneDims, LaneStore, PointData, Scope, Vector, conditions, present

_SCROLL_PAGE = 1024


class ServerLaneStore(LaneStore):
    """``client`` is any ``QdrantClient``: ``QdrantClient(url=...)`` for a server, ``location=":memory:"`` in tests."""

    def __init__(self, client: QdrantClient, prefix: str = "vmem", owns_client: bool = False) -> None:
        self.client = client
        self.prefix = prefix
        #: A client the caller passed in serves their other memories too: closing one must not close it.
        self.owns_client = owns_client

    @property
    def identity(self) -> Hashable:
        """Every handle made with one client writes the same collections."""
        return (id(self.client), self.prefix)

    def name(self, collection: Collection) -> str:
        return f"{self.prefix}_{collection.value}"

    def ensure_collections(self, dims: LaneDims, manifest: Dict[str, Any]) -> None:
        with warnings.catch_warnings():  # local mode says its payload indexes do nothing; a server uses them
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            self._ensure_collections(dims)

    def _ensure_collections(self, dims: LaneDims) -> None:
        for c in Collection:
            name = self.name(c)
            have: Dict[str, Any] = {}
            if self.client.collection_exists(name):
                info = self.client.get_collection(name)
                _check_dims(name, info, c, dims)
                have = info.payload_schema
            else:
                self.client.create_collection(name, vectors_config=_dense_config(c, dims), sparse_vectors_config=_sparse_config(c))
            for key, field_schema in _payload_indexes().items():  # a collection from an older version gains those added since
                if key not in have:
                    self.client.create_payload_index(name, key, field_schema=field_schema)

    def upsert(self, collection: Collection, points: Sequence[PointData]) -> None:
        if points:
            self.client.upsert(
                self.name(collection),
                points=[models.PointStruct(id=p.id, vector={n: _vector(v) for n, v in present(p.vectors).items()}, payload=p.payload) for p in points],
                wait=True,
            )

    def _query(self, collection: Collection, using: str, vector: Vector, scope: Scope, limit: int) -> List[Hit]:
        result = self.client.query_points(
            self.name(collection), query=_vector(vector), using=using, query_filter=_filter(scope),
            limit=limit, with_payload=True,
        )
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in result.points]

    def records(self, collection: Collection, scope: Scope, with_vectors: bool) -> List[models.Record]:
        if scope.is_empty:
            return []
        out: List[models.Record] = []
        offset = None
        while True:
            records, offset = self.client.scroll(
                self.name(collection), scroll_filter=_filter(scope), limit=_SCROLL_PAGE, offset=offset,
                with_payload=True, with_vectors=with_vectors,
            )
            out.extend(records)
            if offset is None:
                return out

    def count(self, collection: Collection, scope: Scope) -> int:
        if scope.is_empty:
            return 0
        return int(self.client.count(self.name(collection), count_filter=_filter(scope), exact=True).count)

    def last_round(self, scope: Scope) -> Optional[Hit]:
        records, _ = self.client.scroll(
            self.name(Collection.ROUNDS), scroll_filter=_filter(scope), limit=1, with_payload=True,
            order_by=models.OrderBy(key=schema.SEQ, direction=models.Direction.DESC),
        )
        return Hit(str(records[0].id), 0.0, dict(records[0].payload or {})) if records else None

    def delete(self, collection: Collection, scope: Scope) -> None:
        if not scope.is_empty:
            self.client.delete(self.name(collection), points_selector=models.FilterSelector(filter=_filter(scope)), wait=True)

    def close(self) -> None:
        if self.owns_client:
            self.client.close()


def _dense_config(c: Collection, dims: LaneDims) -> Dict[str, models.VectorParams]:
    text = models.VectorParams(size=dims.text, distance=models.Distance.COSINE)
    if c is Collection.TEXT:
        return {schema.TEXT_DENSE: text}
    if c is Collection.IMAGE:
        vectors = {schema.TEXT_DENSE: text, schema.VISUAL: models.VectorParams(size=dims.visual, distance=models.Distance.COSINE)}
        if dims.regions:
            vectors[schema.VISUAL_REGIONS] = models.VectorParams(
                size=dims.visual, distance=models.Distance.COSINE,
                multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM))
        return vectors
    return {}


def _sparse_config(c: Collection) -> Optional[Dict[str, models.SparseVectorParams]]:
    if c is Collection.ROUNDS:
        return None
    return {schema.TEXT_SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)}


def _payload_indexes() -> Dict[str, Any]:
    """Every payload index a collection has: ``memory_id`` as the tenant key, the other ids, ``seq``."""
    tenant = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
    integer = models.IntegerIndexParams(type=models.IntegerIndexType.INTEGER, lookup=True, range=True)
    return ({key: tenant if key == schema.MEMORY_ID else models.PayloadSchemaType.KEYWORD for key in schema.INDEXED_KEYWORDS}
            | {key: integer for key in schema.INDEXED_INTEGERS})


def _check_dims(name: str, info: Any, c: Collection, dims: LaneDims) -> None:
    vectors = info.config.params.vectors or {}
    for vname, params in _dense_config(c, dims).items():
        have = vectors.get(vname) if isinstance(vectors, dict) else None
        if have is None or have.size != params.size:
            raise ValueError(f"collection {name} has {vname}={getattr(have, 'size', None)}, this memory needs {params.size}")


def _vector(v: Vector) -> Any:
    return models.SparseVector(indices=list(v.indices), values=list(v.values)) if isinstance(v, Sparse) else list(v)


def _filter(scope: Scope) -> models.Filter:
    def condition(key: str, kind: str, value: Any) -> models.FieldCondition:
        if kind == "range":
            return models.FieldCondition(key=key, range=models.Range(gte=value[0], lte=value[1]))
        match = models.MatchAny(any=value) if kind == "any" else models.MatchValue(value=value)
        return models.FieldCondition(key=key, match=match)

    return models.Filter(must=[condition(*c) for c in conditions(scope)])
