"""A Qdrant server or cluster through ``qdrant-client`` (``url=``), or its local mode in tests.

Each lane is one collection shared by all memories, with ``memory_id`` as the tenant key
(Qdrant's multitenancy pattern); collections and payload indexes are created once and reused.
"""

from __future__ import annotations

import itertools
import json
import os
import warnings
from typing import Any, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple, Union

from qdrant_client import QdrantClient, models
from qdrant_client.local.qdrant_local import QdrantLocal
from qdrant_client.qdrant_remote import QdrantRemote

from .. import schema
from ..encoders import encoder_differences, same_encoders
from ..encoders.bm25 import Sparse
from .base import (MAX_MEMORIES, SPARSE_VECTORS, Collection, Hit, LaneDims, LaneStore, PointData, Scope, Search, Vector, conditions,
                   present)

#: Points per upsert request. A server refuses requests over its size limit (32 MB by default);
#: an image point with region tiles is about 160 kB as JSON, so 64 of them stay well under it.
UPSERT_BATCH = 64
#: Bytes per upsert request, half a server's default limit: points of long text (a round may hold
#: a million characters a field, six bytes each where JSON escapes them) fill one before 64 points do.
REQUEST_BYTES = 16 * 1024 * 1024
#: The collection metadata key holding the encoder manifest the collection was built with.
MANIFEST_KEY = "vmem_manifest"
#: Qdrant's multitenancy layout: no graph over every memory (``m=0``), one per memory from the
#: ``memory_id`` tenant index (``payload_m``), built where a memory outgrows a full scan. A question
#: searches one memory, so a global graph would cost build time and RAM for no question asked.
TENANT_GRAPHS = models.HnswConfigDiff(m=0, payload_m=16)


class ServerLaneStore(LaneStore):
    """``client`` is any ``QdrantClient``: ``QdrantClient(url=...)`` for a server, ``location=":memory:"`` in tests."""

    def __init__(self, client: QdrantClient, prefix: str = "vmem", owns_client: bool = False,
                 batch_size: int = UPSERT_BATCH, in_ram: Optional[bool] = None) -> None:
        self.client = client
        self.prefix = prefix
        self.batch_size = batch_size
        #: Where collections made here keep vectors and indexes (None: on disk); made ones keep theirs.
        self.in_ram = bool(in_ram)
        #: A client the caller passed in serves their other memories too: closing one must not close it.
        self.owns_client = owns_client

    @property
    def identity(self) -> Hashable:
        """The server and collections written to, whichever client reaches them: two
        ``from_defaults(url=...)`` handles make two clients, yet must share one write lock."""
        return (_server_of(self.client), self.prefix)

    @property
    def exclusive(self) -> bool:
        """Local mode is this process's own; a server is shared by every process that reaches it."""
        return _server_of(self.client)[0] != "server"

    def name(self, collection: Collection) -> str:
        return f"{self.prefix}_{collection.value}"

    def ensure_collections(self, dims: LaneDims, manifest: Dict[str, Any]) -> None:
        with warnings.catch_warnings():  # local mode says its payload indexes do nothing; a server uses them
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            self._ensure_collections(dims, manifest)

    def _ensure_collections(self, dims: LaneDims, manifest: Dict[str, Any]) -> None:
        for c in Collection:
            name = self.name(c)
            have: Dict[str, Any] = {}
            if self.client.collection_exists(name):
                info = self.client.get_collection(name)
                _check_dims(name, info, c, dims)
                self._check_manifest(name, info, manifest)
                have = info.payload_schema
            else:
                self.client.create_collection(name, vectors_config=_dense_config(c, dims, self.in_ram),
                                              sparse_vectors_config=_sparse_config(c, self.in_ram), on_disk_payload=True,
                                              hnsw_config=TENANT_GRAPHS, metadata={MANIFEST_KEY: manifest})
            for key, field_schema in _payload_indexes(self.in_ram).items():  # a collection from an older version gains those added since
                if key not in have:
                    self.client.create_payload_index(name, key, field_schema=field_schema)

    def recorded_manifest(self) -> Optional[Dict[str, Any]]:
        name = self.name(Collection.ROUNDS)
        if not self.client.collection_exists(name):
            return None
        return dict((self.client.get_collection(name).config.metadata or {}).get(MANIFEST_KEY) or {})

    def _check_manifest(self, name: str, info: Any, manifest: Dict[str, Any]) -> None:
        """Refuse encoders other than those the collection was built with: vectors of another model
        of the same dimension would be accepted by Qdrant and silently rank as noise. A collection
        made before the manifest was recorded adopts this memory's."""
        stored = (info.config.metadata or {}).get(MANIFEST_KEY)
        if stored is None:
            self.client.update_collection(name, metadata={MANIFEST_KEY: manifest})
        elif not same_encoders(stored, manifest):
            raise ValueError(f"collection {name} was built with other encoders ({encoder_differences(stored, manifest)}): "
                             "open it with those it was built with")

    def upsert(self, collection: Collection, points: Sequence[PointData]) -> None:
        """In requests of at most ``batch_size`` points and ``REQUEST_BYTES``, each applied before the
        next is sent: a large ``add_rounds`` or archive import in one request would exceed the
        server's size limit. A failure part-way leaves earlier batches stored; the caller's rollback
        deletes them."""
        for batch in _batches(points, self.batch_size, REQUEST_BYTES):
            self.client.upsert(self.name(collection), points=[_point(p) for p in batch], wait=True)

    def _query_batch(self, collection: Collection, requests: Sequence[Tuple[Search, int]]) -> List[List[Hit]]:
        """A ``query_batch_points``: one round trip for a question's searches of the collection."""
        batch = [models.QueryRequest(query=_vector(s.vector), using=s.using, filter=_filter(s.scope), limit=limit, with_payload=True)
                 for s, limit in requests]
        found = self.client.query_batch_points(self.name(collection), requests=batch)
        return [[Hit.of(p) for p in result.points] for result in found]

    def _page(self, collection: Collection, scope: Scope, with_vectors: bool, payload: Union[bool, List[str]], offset: Any,
              limit: int) -> Tuple[List[Any], Any]:
        return self.client.scroll(self.name(collection), scroll_filter=_filter(scope), limit=limit, offset=offset,
                                  with_payload=payload, with_vectors=with_vectors)

    def _retrieve(self, collection: Collection, ids: Sequence[str], payload: Union[bool, List[str]]) -> List[Any]:
        return self.client.retrieve(self.name(collection), ids=list(ids), with_payload=payload, with_vectors=False)

    def count(self, collection: Collection, scope: Scope) -> int:
        if scope.is_empty:
            return 0
        return int(self.client.count(self.name(collection), count_filter=_filter(scope), exact=True).count)

    def last_round(self, scope: Scope) -> Optional[Hit]:
        records, _ = self.client.scroll(
            self.name(Collection.ROUNDS), scroll_filter=_filter(scope), limit=1, with_payload=True,
            order_by=models.OrderBy(key=schema.SEQ, direction=models.Direction.DESC),
        )
        return Hit.of(records[0]) if records else None

    def first_round_ids(self, scope: Scope, limit: int) -> List[str]:
        if scope.is_empty:
            return []
        records, _ = self.client.scroll(
            self.name(Collection.ROUNDS), scroll_filter=_filter(scope), limit=limit, with_payload=False,
            order_by=models.OrderBy(key=schema.SEQ, direction=models.Direction.ASC),
        )
        return [str(r.id) for r in records]

    def memories(self) -> Dict[str, int]:
        name = self.name(Collection.ROUNDS)
        if not self.client.collection_exists(name):
            return {}
        found = self.client.facet(name, key=schema.MEMORY_ID, limit=MAX_MEMORIES, exact=True)
        return {str(hit.value): int(hit.count) for hit in found.hits}

    def delete(self, collection: Collection, scope: Scope) -> None:
        if not scope.is_empty:
            self.client.delete(self.name(collection), points_selector=models.FilterSelector(filter=_filter(scope)), wait=True)

    def set_payloads(self, collection: Collection, updates: Sequence[Tuple[Sequence[str], Dict[str, Any]]]) -> None:
        """Batched, at most ``batch_size`` points a request: one request per point would be one round trip
        each. On a server the points are named by a filter, which skips one another process deleted
        meanwhile (by id, Qdrant refuses the request); local mode's filters scan every point, and no
        other process reaches it, so there they are named by id."""
        flat = [(n, point_id) for n, (ids, _) in enumerate(updates) for point_id in ids]
        for start in range(0, len(flat), self.batch_size):
            batch = []
            for n, group in itertools.groupby(flat[start:start + self.batch_size], key=lambda pair: pair[0]):
                ids = [i for _, i in group]
                named = dict(points=ids) if self.exclusive else dict(filter=models.Filter(must=[models.HasIdCondition(has_id=ids)]))
                batch.append(models.SetPayloadOperation(set_payload=models.SetPayload(payload=updates[n][1], **named)))
            self.client.batch_update_points(self.name(collection), batch, wait=True)

    def close(self) -> None:
        if self.owns_client:
            self.client.close()


def _server_of(client: QdrantClient) -> Hashable:
    """What names the server ``client`` talks to, known without a request. A server: its REST
    address, the same for ``url=`` and ``host=``/``port=``. Local mode on ``path=``: the folder.
    Local mode in memory (or a client of unknown kind): the engine object, which no other client reaches."""
    engine = getattr(client, "_client", client)
    if isinstance(engine, QdrantRemote):
        return ("server", engine.rest_uri.rstrip("/"))
    if isinstance(engine, QdrantLocal) and engine.location != ":memory:":
        return ("folder", os.path.realpath(engine.location))
    return ("object", id(engine))


def _dense_config(c: Collection, dims: LaneDims, in_ram: bool = False) -> Dict[str, models.VectorParams]:
    """Vectors ``on_disk`` unless ``in_ram``: the server reads those a search needs through its page
    cache (the ``on_disk`` flags, not ``memory=``, which servers before 1.19 refuse)."""
    def dense(size: int, **kwargs: Any) -> models.VectorParams:
        return models.VectorParams(size=size, distance=models.Distance.COSINE, on_disk=not in_ram, **kwargs)

    if c is Collection.TEXT:
        return {schema.TEXT_DENSE: dense(dims.text)}
    if c is Collection.IMAGE:
        vectors = {schema.TEXT_DENSE: dense(dims.text), schema.VISUAL: dense(dims.visual)}
        if dims.regions:
            vectors[schema.VISUAL_REGIONS] = dense(
                dims.visual, multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM))
        return vectors
    return {}


def _sparse_config(c: Collection, in_ram: bool = False) -> Optional[Dict[str, models.SparseVectorParams]]:
    return {name: models.SparseVectorParams(modifier=models.Modifier.IDF, index=models.SparseIndexParams(on_disk=not in_ram))
            for name in SPARSE_VECTORS[c]} or None


def _payload_indexes(in_ram: bool = False) -> Dict[str, Any]:
    """Every payload index a collection has: ``memory_id`` as the tenant key (the server keeps each
    memory's points together on disk), the other ids, ``seq`` and ``time``."""
    def keyword(is_tenant: bool) -> models.KeywordIndexParams:
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=is_tenant, on_disk=not in_ram)

    integer = models.IntegerIndexParams(type=models.IntegerIndexType.INTEGER, lookup=True, range=True, on_disk=not in_ram)
    return {key: keyword(key == schema.MEMORY_ID) for key in schema.INDEXED_KEYWORDS} | {key: integer for key in schema.INDEXED_INTEGERS}


def _check_dims(name: str, info: Any, c: Collection, dims: LaneDims) -> None:
    vectors = info.config.params.vectors or {}
    for vname, params in _dense_config(c, dims).items():
        have = vectors.get(vname) if isinstance(vectors, dict) else None
        if have is None or have.size != params.size:
            raise ValueError(f"collection {name} has {vname}={getattr(have, 'size', None)}, this memory needs {params.size}")


def _batches(points: Sequence[PointData], size: int, budget: int) -> Iterator[List[PointData]]:
    """``points`` in order, in runs of at most ``size`` points and ``budget`` bytes (a point larger
    than the budget goes alone)."""
    batch: List[PointData] = []
    used = 0
    for p in points:
        cost = _request_bytes(p)
        if batch and (len(batch) == size or used + cost > budget):
            yield batch
            batch, used = [], 0
        batch.append(p)
        used += cost
    if batch:
        yield batch


def _request_bytes(p: PointData) -> int:
    """At least the point's size in a request: its id, payload and vectors as ASCII JSON, which
    escapes every character a request could escape."""
    vectors = {n: [list(v.indices), list(v.values)] if isinstance(v, Sparse) else v for n, v in p.vectors.items()}
    return len(json.dumps([p.id, p.payload, vectors], default=_plain))


def _plain(value: Any) -> Any:
    """A numpy array or number (an embed model may return them) as the list or number it holds."""
    return value.tolist()


def _point(p: PointData) -> models.PointStruct:
    return models.PointStruct(id=p.id, vector={n: _vector(v) for n, v in present(p.vectors).items()}, payload=p.payload)


def _vector(v: Vector) -> Any:
    return models.SparseVector(indices=list(v.indices), values=list(v.values)) if isinstance(v, Sparse) else list(v)


def _filter(scope: Scope) -> models.Filter:
    def condition(key: str, kind: str, value: Any) -> Union[models.FieldCondition, models.IsEmptyCondition, models.Filter]:
        if kind == "empty":
            return models.IsEmptyCondition(is_empty=models.PayloadField(key=key))
        if kind == "none":
            return models.Filter(must_not=[models.FieldCondition(key=key, match=models.MatchAny(any=value))])
        if kind == "range":
            return models.FieldCondition(key=key, range=models.Range(gte=value[0], lte=value[1]))
        match = models.MatchAny(any=value) if kind == "any" else models.MatchValue(value=value)
        return models.FieldCondition(key=key, match=match)

    return models.Filter(must=[condition(*c) for c in conditions(scope)])
