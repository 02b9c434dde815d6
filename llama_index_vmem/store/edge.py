"""Qdrant Edge (``qdrant-edge-py``): the embedded default, one on-disk shard per collection.

A shard directory is locked by the process that opens it, so ``open_edge_store`` hands every
memory and handle of a process the same open store and closes it with the last one.

A store keeps its vectors and indexes on disk, read through the OS page cache, unless made with
``in_ram=True``: a question reads one memory's few pages, so a million rounds open in about 2 s
in about 1 GB besides the encoder (``benchmarks/scale.py``). Edge optimizes only when asked, so each
write asks: merging new points into on-disk segments is then a small step each time, and nothing
piles up in RAM.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import qdrant_edge as qe

from .. import schema
from ..encoders import encoder_differences, same_encoders
from ..encoders.bm25 import Sparse
from ..images import write_atomically
from .base import (MAX_MEMORIES, SPARSE_VECTORS, Collection, Hit, LaneDims, LaneStore, PointData, Scope, Search, Vector, conditions,
                   present)

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
#: The manifest's record of vector sizes, which a shard cannot report (stores made before it have none).
SIZES_KEY = "vector_sizes"
#: Threads in each shard's search pool. A question searches one memory's points, a few segments: a
#: pool of one per core costs more in hand-offs than it saves, and on a busy machine each thread it
#: wakes waits for a time slice (search took 5x as long beside two busy processes on 2 cores, and 1.7x
#: on one thread; ``benchmarks/busy_machine.py``).
SEARCH_THREADS = 1
#: The manifest's record of where vectors and indexes live. Stores made before it kept them in RAM.
IN_RAM_KEY = "in_ram"
#: Segments a shard's optimizer merges towards, and the size (KB of vectors) none grows past: each
#: optimization then rewrites a bounded amount, however large the store, instead of every point.
SEGMENTS = 8
MAX_SEGMENT_KB = 200_000
#: KB of vectors the newest segment gathers before it is written to disk (about 50,000 MiniLM
#: vectors): Edge's default, a seventh of it, spent 5.6x as long optimizing a million points.
INDEXING_KB = 75_000
#: Edge optimizes only segments that hold vectors, and a round point needs none: each carries a
#: one-entry vector in a lane nothing searches (``MARKER``), and the round shard writes its newest
#: segment to disk at this size (about 45,000 rounds). Without it a million rounds sat in RAM: 2 GB
#: and 5.6 s to open.
MARKER = "unused"
ROUNDS_INDEXING_KB = 500
_registry: Dict[str, "EdgeLaneStore"] = {}
_registry_lock = threading.Lock()


def open_edge_store(path: os.PathLike | str, in_ram: Optional[bool] = None) -> "EdgeLaneStore":
    """The process-wide open store for ``path`` (shared, reference counted). ``in_ram``: vectors and
    indexes in RAM, or on disk; None keeps the store's own (on disk for a new one)."""
    key = str(Path(path).resolve())
    with _registry_lock:
        store = _registry.get(key)
        if store is None:
            store = _registry[key] = EdgeLaneStore(Path(key))
        store._ask_in_ram(in_ram)
        store._refs += 1
        return store


class EdgeLaneStore(LaneStore):
    def __init__(self, path: Path) -> None:
        self.path = path
        self._shards: Dict[Collection, qe.EdgeShard] = {}
        #: The manifest the open shards passed and the folders they are in (``_folders``), so that a
        #: manifest removed under them, and only under them, can be written again.
        self._manifest_text = ""
        self._folders: Dict[Collection, Tuple[int, int]] = {}
        self._refs = 0
        self._lock = threading.Lock()
        #: Where vectors and indexes are asked to live (None: where they are), and where they are.
        self._asked_in_ram: Optional[bool] = None
        self.in_ram: Optional[bool] = None

    def _ask_in_ram(self, in_ram: Optional[bool]) -> None:
        if in_ram is None:
            return
        if self._shards and in_ram != self.in_ram:
            raise ValueError(f"store at {self.path} is open in this process with its vectors {_where(self.in_ram)}: "
                             f"close its memories before opening it with in_ram={in_ram}")
        self._asked_in_ram = in_ram

    def ensure_collections(self, dims: LaneDims, manifest: Dict[str, Any]) -> None:
        with self._lock:
            manifest_path = self.path / MANIFEST
            self._restore_manifest()  # else this process's own lock would read as another process's
            if manifest_path.exists():  # checked for every memory opened, not only the first
                try:
                    text = manifest_path.read_text()
                    stored = json.loads(text)
                except ValueError as e:
                    raise ValueError(f"store at {self.path}: {MANIFEST} cannot be read ({e}); restore it from a backup") from None
                sizes = stored.pop(SIZES_KEY, None)
                was_in_ram = stored.pop(IN_RAM_KEY, True)
                if not same_encoders(stored, manifest):
                    raise ValueError(f"store at {self.path} was built with other encoders ({encoder_differences(stored, manifest)}): "
                                     "open it with those it was built with")
                if sizes is not None and sizes != _sizes(dims):  # one model name, another size (dimensions=, truncate_dim)
                    raise ValueError(f"store at {self.path} holds vectors of sizes {sizes}; this memory's encoders make {_sizes(dims)}")
                if self._asked_in_ram not in (None, was_in_ram):  # Edge places only new segments by a new configuration
                    raise ValueError(f"store at {self.path} keeps its vectors {_where(was_in_ram)}, as it was made, and cannot "
                                     f"move them: open it without in_ram=, or copy its memories into a new store made with "
                                     f"in_ram={self._asked_in_ram} (export_archive, then VMemIndex.from_archive(..., path=..., "
                                     f"in_ram={self._asked_in_ram}))")
                if not self._shards:
                    self._hold(self._load(dims=dims, in_ram=was_in_ram), text, was_in_ram)
                return
            self.path.mkdir(parents=True, exist_ok=True)
            self._refuse_points_without_manifest()
            in_ram = bool(self._asked_in_ram)
            for c in Collection:
                # No manifest yet: any shard here is from a creation that was interrupted (the
                # manifest is written last and nothing is stored before it), so start it afresh.
                shutil.rmtree(self.path / c.value, ignore_errors=True)
                self._shards[c] = _with_indexes(qe.EdgeShard.create(str(self.path / c.value), _config(c, dims, in_ram)), in_ram)
            text = json.dumps({**manifest, SIZES_KEY: _sizes(dims), IN_RAM_KEY: in_ram}, indent=2, sort_keys=True)
            write_atomically(manifest_path, lambda tmp: tmp.write_text(text), durable=True)
            self._hold({}, text, in_ram)

    def recorded_manifest(self) -> Optional[Dict[str, Any]]:
        with self._lock:
            self._restore_manifest()
            try:
                stored = json.loads((self.path / MANIFEST).read_text())
            except (FileNotFoundError, ValueError):  # none yet; or unreadable, which ``ensure_collections`` names
                return None
            stored.pop(SIZES_KEY, None)
            stored.pop(IN_RAM_KEY, None)
            return stored

    def _hold(self, shards: Dict[Collection, qe.EdgeShard], manifest_text: str, in_ram: bool) -> None:
        self._shards.update(shards)
        self._manifest_text = manifest_text
        self.in_ram = in_ram
        self._folders = self._folder_identities()

    def _folder_identities(self) -> Dict[Collection, Tuple[int, int]]:
        """Which folders the shards' names lead to now: a folder moved or replaced is another one."""
        found: Dict[Collection, Tuple[int, int]] = {}
        for c in Collection:
            try:
                st = (self.path / c.value).stat()
            except OSError:
                continue
            found[c] = (st.st_dev, st.st_ino)
        return found

    def _restore_manifest(self) -> None:
        """Write the manifest again where it was removed while this process holds the shards. It is
        refused where the shard folders are no longer the ones opened (moved or replaced): there the
        manifest would vouch for vectors it never checked."""
        if not self._shards or (self.path / MANIFEST).exists():
            return
        if self._folder_identities() != self._folders:
            raise RuntimeError(f"store at {self.path} was moved, replaced or removed while open in this process: "
                               "close its memories and open the store where it is now")
        logger.warning("store at %s: %s was removed while the store was open: written again", self.path, MANIFEST)
        write_atomically(self.path / MANIFEST, lambda tmp: tmp.write_text(self._manifest_text), durable=True)

    def _refuse_points_without_manifest(self) -> None:
        """Shards with points but no manifest lost their manifest (a copy that left it out, a
        cleanup): starting afresh would delete a memory, so the open is refused. Shards another
        process holds are refused as held; ones that cannot be read are a creation cut short."""
        found = [c for c in Collection if (self.path / c.value).exists()]
        try:
            shards = self._load(found)
        except RuntimeError:  # held by another process (``_load`` says so)
            raise
        except Exception:  # unreadable: cut short while it was made
            return
        try:
            held = sum(int(shard.count(qe.CountRequest(exact=True))) for shard in shards.values())
        finally:
            for shard in shards.values():
                shard.close()
        if held:
            raise RuntimeError(f"store at {self.path} holds {held} points but no {MANIFEST}, which records the encoders "
                               "that made them: restore it from a backup (to start afresh, remove the folder)")

    def _load(self, collections: Sequence[Collection] = tuple(Collection), dims: Optional[LaneDims] = None,
              in_ram: bool = True) -> Dict[Collection, qe.EdgeShard]:
        """These shards of the store, or none: a shard left open would keep this process holding it.
        With ``dims``, each shard's configuration is checked against and replaced by ``_config``'s
        (how it searches, optimizes, and where ``in_ram`` puts its vectors)."""
        shards: Dict[Collection, qe.EdgeShard] = {}
        try:
            for c in collections:
                config = _config(c, dims, in_ram) if dims is not None else None
                shards[c] = _with_indexes(qe.EdgeShard.load(str(self.path / c.value), config), in_ram)
        except Exception as e:
            for shard in shards.values():
                shard.close()
            if "WouldBlock" in str(e):  # Qdrant Edge's file lock, held by the process that opened the store
                raise RuntimeError(f"store at {self.path} is open in another process: an embedded store is one "
                                   "process's at a time (close it there, or use a Qdrant server for several)") from e
            raise
        return shards

    def upsert(self, collection: Collection, points: Sequence[PointData]) -> None:
        if points:
            shard = self._shards[collection]
            marker = {MARKER: qe.SparseVector([0], [1.0])} if collection is Collection.ROUNDS else {}
            shard.update(qe.UpdateOperation.upsert_points(
                [qe.Point(p.id, {**marker, **{n: _vector(v) for n, v in present(p.vectors).items()}}, p.payload) for p in points]))
            shard.optimize()  # free until the newest segment outgrows Edge's indexing threshold

    def _query_batch(self, collection: Collection, requests: Sequence[Tuple[Search, int]]) -> List[List[Hit]]:
        """A ``query_batch``: its searches share one pass over the segments."""
        found = self._shards[collection].query_batch(qe.QueryBatchRequest([_request(*r) for r in requests]))
        return [[Hit.of(p) for p in points] for points in found]

    def _page(self, collection: Collection, scope: Scope, with_vectors: bool, payload: Union[bool, List[str]], offset: Any,
              limit: int) -> Tuple[List[Any], Any]:
        return self._shards[collection].scroll(qe.ScrollRequest(  # a round's one vector is the marker, not data
            offset=offset, limit=limit, filter=_filter(scope), with_payload=payload,
            with_vector=with_vectors and collection is not Collection.ROUNDS))

    def _retrieve(self, collection: Collection, ids: Sequence[str], payload: Union[bool, List[str]]) -> List[Any]:
        return self._shards[collection].retrieve(list(ids), payload, False)

    def count(self, collection: Collection, scope: Scope) -> int:
        if scope.is_empty:
            return 0
        return int(self._shards[collection].count(qe.CountRequest(exact=True, filter=_filter(scope))))

    def last_round(self, scope: Scope) -> Optional[Hit]:
        records, _ = self._shards[Collection.ROUNDS].scroll(
            qe.ScrollRequest(limit=1, filter=_filter(scope), with_payload=True,
                             order_by=qe.OrderBy(schema.SEQ, qe.Direction.Desc))
        )
        return Hit.of(records[0]) if records else None

    def first_round_ids(self, scope: Scope, limit: int) -> List[str]:
        if scope.is_empty:
            return []
        records, _ = self._shards[Collection.ROUNDS].scroll(
            qe.ScrollRequest(limit=limit, filter=_filter(scope), with_payload=False,
                             order_by=qe.OrderBy(schema.SEQ, qe.Direction.Asc))
        )
        return [str(r.id) for r in records]

    def memories(self) -> Dict[str, int]:
        """Read from the open round shard, or, where this process has not opened the store, from the
        round shard opened for this read and closed after it."""
        with self._lock:
            if Collection.ROUNDS in self._shards:
                return _memory_counts(self._shards[Collection.ROUNDS])
            if not (self.path / MANIFEST).exists():
                return {}
            shard = self._load([Collection.ROUNDS])[Collection.ROUNDS]
            try:
                return _memory_counts(shard)
            finally:
                shard.close()

    def delete(self, collection: Collection, scope: Scope) -> None:
        if not scope.is_empty:
            shard = self._shards[collection]
            shard.update(qe.UpdateOperation.delete_points_by_filter(_filter(scope)))
            shard.optimize()  # a segment mostly deleted is vacuumed

    def set_payloads(self, collection: Collection, updates: Sequence[Tuple[Sequence[str], Dict[str, Any]]]) -> None:
        for ids, payload in updates:
            if ids:
                self._shards[collection].update(qe.UpdateOperation.set_payload(list(ids), payload))

    def optimize(self) -> None:
        """What each write does already: merge new points into the store's segments."""
        for shard in self._shards.values():
            shard.optimize()

    def close(self) -> None:
        with _registry_lock:  # held to the end: a reopen meanwhile would find the shards still locked
            self._refs -= 1
            if self._refs > 0:
                return
            _registry.pop(str(self.path), None)
            try:
                self._restore_manifest()  # else the next open is refused for points without one
            except RuntimeError as e:
                logger.warning("%s", e)
            for shard in self._shards.values():
                shard.flush()
                shard.close()
            self._shards.clear()


def _memory_counts(shard: qe.EdgeShard) -> Dict[str, int]:
    found = shard.facet(qe.FacetRequest(key=schema.MEMORY_ID, limit=MAX_MEMORIES, exact=True))
    return {str(hit.value): int(hit.count) for hit in found.hits}


def _with_indexes(shard: qe.EdgeShard, in_ram: bool) -> qe.EdgeShard:
    """Create the payload indexes ``shard`` lacks, so a store written by an older version gains
    those added since (its filters would work without them, but by scanning every point)."""
    have = set(shard.info().payload_schema)
    memory = _memory(in_ram)
    for key in schema.INDEXED_KEYWORDS:
        if key not in have:
            shard.update(qe.UpdateOperation.create_field_index(
                key, qe.KeywordIndexParams(is_tenant=key == schema.MEMORY_ID, memory=memory)))
    for key in schema.INDEXED_INTEGERS:
        if key not in have:
            shard.update(qe.UpdateOperation.create_field_index(key, qe.IntegerIndexParams(lookup=True, range=True, memory=memory)))
    return shard


def _sizes(dims: LaneDims) -> Dict[str, int]:
    return {"text": dims.text, "visual": dims.visual}


def _where(in_ram: Optional[bool]) -> str:
    return "in RAM" if in_ram else "on disk"


def _memory(in_ram: bool) -> Optional[qe.Memory]:
    """On disk: Qdrant reads the pages a search needs through the OS page cache (``Cold``). In RAM:
    Edge's own default, which stores made before this choice have."""
    return None if in_ram else qe.Memory.Cold


def _config(collection: Collection, dims: LaneDims, in_ram: bool) -> qe.EdgeConfig:
    """No HNSW graph (``m=0``): a question searches one memory, whose points the ``memory_id``
    index finds, and scores them all; a graph over every memory would cost minutes to build and
    RAM to hold, and answer no question this store is asked."""
    memory = _memory(in_ram)
    indexing = ROUNDS_INDEXING_KB if collection is Collection.ROUNDS else INDEXING_KB
    common: Dict[str, Any] = dict(
        max_search_threads=SEARCH_THREADS,
        hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000, memory=memory),
        optimizers=qe.EdgeOptimizersConfig(default_segment_number=SEGMENTS, max_segment_size=MAX_SEGMENT_KB,
                                           indexing_threshold=indexing),
        payload_memory=qe.Memory.Cold,
        id_tracker_memory=memory,
    )
    sparse = {name: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=memory) for name in SPARSE_VECTORS[collection]}

    def dense(size: int, **kwargs: Any) -> qe.EdgeVectorParams:
        return qe.EdgeVectorParams(size=size, distance=qe.Distance.Cosine, memory=memory, **kwargs)

    if collection is Collection.TEXT:
        return qe.EdgeConfig(vectors={schema.TEXT_DENSE: dense(dims.text)}, sparse_vectors=sparse, **common)
    if collection is Collection.IMAGE:
        vectors = {schema.TEXT_DENSE: dense(dims.text), schema.VISUAL: dense(dims.visual)}
        if dims.regions:
            vectors[schema.VISUAL_REGIONS] = dense(dims.visual, multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim))
        return qe.EdgeConfig(vectors=vectors, sparse_vectors=sparse, **common)
    # The round store holds payloads, and the marker (stores made before have the lane, unused).
    return qe.EdgeConfig(sparse_vectors={MARKER: qe.EdgeSparseVectorParams(memory=memory)}, **common)


def _request(search: Search, limit: int) -> qe.QueryRequest:
    query = qe.Query.Nearest(_vector(search.vector), using=search.using)
    return qe.QueryRequest(limit=limit, query=query, filter=_filter(search.scope), with_payload=True)


def _vector(v: Vector) -> Any:
    return qe.SparseVector(list(v.indices), list(v.values)) if isinstance(v, Sparse) else list(v)


def _filter(scope: Scope) -> qe.Filter:
    def condition(key: str, kind: str, value: Any) -> Union[qe.FieldCondition, qe.IsEmptyCondition, qe.Filter]:
        if kind == "empty":
            return qe.IsEmptyCondition(key=key)
        if kind == "none":
            return qe.Filter(must_not=[qe.FieldCondition(key=key, match=qe.MatchAny(value))])
        if kind == "range":
            return qe.FieldCondition(key=key, range=qe.RangeFloat(gte=value[0], lte=value[1]))
        return qe.FieldCondition(key=key, match=qe.MatchAny(value) if kind == "any" else qe.MatchValue(value))

    return qe.Filter(must=[condition(*c) for c in conditions(scope)])
