"""``RoundMemory``: one memory (``memory_id``) of one lane store, the layer every other part reads
and writes through: its store, encoders, rounds, units and pictures, and the image fence.

Building the memory calls no LLM: rounds are parsed, encoded locally and appended. A round is
written whole or not at all: everything is validated and encoded before the first write, units
go to their lanes first, then their pictures, and the round record last; a failed write is rolled
back, and what a killed one left is swept by the memory's next add (and on opening it, where no
other process can reach the store).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from dataclasses import replace
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Hashable, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.embeddings.multi_modal_base import MultiModalEmbedding
from llama_index.core.llms.utils import LLMType
from llama_index.core.schema import ImageNode, NodeRelationship, RelatedNodeInfo, TextNode
from tqdm.auto import tqdm

from . import archive, lifecycle, models, neighbours
from . import images as image_io
from . import schema, times
from .config import VMemConfig
from .encoders import Bm25Encoder, Sparse, encoder_id, resolve_build_options
from .encoders.text import padded_batches, query_embeddings, token_lengths
from .encoders.threads import query_threads
from .errors import VMemInputError, keywords_listed
from .lifecycle import Selection, StoredRound
from .node_parser import (ParsedRound, Renamed, RoundInput, RoundNodeParser, Transcriber, check_text, checked_round, content_hash,
                          default_round_key, last_default_number, refuse_repeated_keys, round_input_from_dict,
                          stored_image_identity, with_distinct_image_ids)
from .store import Collection, Hit, LaneDims, LaneStore, PointData, Scope
from .times import TimeLike

logger = logging.getLogger(__name__)

#: Query texts whose embeddings a memory keeps: a chat asks again, and rungs of a bench share them.
QUERY_CACHE_SIZE = 256


_write_locks: Dict[Tuple[Hashable, str], threading.Lock] = {}
_write_locks_guard = threading.Lock()
#: Per stored memory, the highest default number (``D2:n``) of each session seen so far, read under
#: the memory's write lock; kept so adding a round to a long session reads none of its other rounds.
_default_numbers: Dict[Tuple[Hashable, str], Dict[str, int]] = {}
#: Handles open per stored memory in this process. With the last one closed, the memory's entries
#: above go: a process serving many users would otherwise keep one per memory it ever opened, and a
#: later store could inherit a closed one's numbers, since an embedded store's identity is its ``id()``.
_open_handles: Dict[Tuple[Hashable, str], int] = {}


def _write_lock(store: LaneStore, memory_id: str) -> threading.Lock:
    """One lock per stored memory in this process, shared by every handle open on it."""
    with _write_locks_guard:
        return _write_locks.setdefault((store.identity, memory_id), threading.Lock())



def _count_handle(store: LaneStore, memory_id: str, change: int) -> None:
    """Count a handle of a stored memory opening (+1) or closed (-1)."""
    key = (store.identity, memory_id)
    with _write_locks_guard:
        left = _open_handles.pop(key, 0) + change
        if left > 0:
            _open_handles[key] = left
        else:
            _write_locks.pop(key, None)
            _default_numbers.pop(key, None)


def _highest_defaults(store: LaneStore, memory_id: str) -> Dict[str, int]:
    """The known highest default number of each session of a stored memory (see ``_default_numbers``)."""
    with _write_locks_guard:
        return _default_numbers.setdefault((store.identity, memory_id), {})


class RoundMemory:
    """A long-term memory of one multimodal conversation (or user), stored in Qdrant lanes."""

    def __init__(
        self,
        store: LaneStore,
        memory_id: str,
        embed_model: BaseEmbedding,
        image_encoder: MultiModalEmbedding,
        image_dir: Path,
        llm: Optional[LLMType] = None,
        config: Optional[VMemConfig] = None,
        transcriber: Optional[Transcriber] = None,
        show_progress: bool = False,
        owns_tempdir: Optional[tempfile.TemporaryDirectory] = None,
        region_tiles: bool = False,
        bm25_b: Optional[float] = None,
        dated_units: Optional[bool] = None,
        reply_context: Optional[bool] = None,
    ) -> None:
        self._closed = False
        counted = False
        try:
            check_memory_id(memory_id)
            _count_handle(store, memory_id, +1)  # before the open's sweep takes the lock: a close meanwhile keeps it
            counted = True
            self._store = store
            self.memory_id = memory_id
            self.embed_model = embed_model
            self.image_encoder = image_encoder
            self.llm = models.as_llm(llm)
            self.config = config or VMemConfig()
            self.show_progress = show_progress
            self.region_tiles = region_tiles
            self.image_dir = image_io.memory_folder(Path(image_dir), memory_id)
            self.image_fence = image_io.Fence.around(self.image_dir)
            #: Derived pixels kept beside the memory's images: labelled copies made for delivery, and
            #: attached query images given as bytes or URLs. Caches, but of this memory's pictures; one
            #: unused for a day (``images.STALE_CACHE_S``) goes when the memory next opens.
            self.delivered_dir = self.image_dir / "delivered"
            self.attached_dir = self.image_dir / "attached"
            self._parser = RoundNodeParser(memory_id=memory_id, image_dir=str(self.image_dir), transcriber=transcriber)
            self._tempdir = owns_tempdir
            self._query_vectors: "OrderedDict[str, Tuple[float, ...]]" = OrderedDict()
            self._query_lock = threading.Lock()
            #: Query texts the text encoder has embedded so far (cache misses), for benchmarks and tests.
            self.query_texts_encoded = 0
            self._encode_query_pixels = lru_cache(maxsize=8)(self._embed_query_pixels)
            self.lane_dims = self._dims()
            #: How units are encoded (``encoders.BUILD_DEFAULTS``): as asked, else as the store was built.
            self.build_options = resolve_build_options(store.recorded_manifest(), bm25_b=bm25_b, dated_units=dated_units,
                                                       reply_context=reply_context)
            self.bm25 = Bm25Encoder(b=self.build_options["bm25_b"])
            store.ensure_collections(self.lane_dims, self.manifest())
            if store.exclusive:
                with _write_lock(store, memory_id):  # another handle of this memory may be writing
                    self._backfill_times()
                    self._sweep_unfinished(self._last_seq())
                    lifecycle.sweep_trash(self)
            else:  # on a server another process may be mid-write: its leftovers wait for the next add or forget. No
                self._backfill_times()  # lock, so the open waits on no write of this process; the backfill skips what one deletes
            image_io.sweep_stale(self.image_dir.rglob("*.tmp"), image_io.STALE_TEMPORARY_S)  # killed writes' leftovers
            for cache in (self.delivered_dir, self.attached_dir):  # flat: a folder in one is none of its files
                if not cache.is_symlink():
                    image_io.sweep_stale(cache.glob("*"), image_io.STALE_CACHE_S)
        except BaseException:
            if counted:
                _count_handle(store, memory_id, -1)
            store.close()  # a memory that fails to open (refused, bad id, a failed sweep) must not hold the shared store open
            raise

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called on this handle, as a file object's ``closed`` says."""
        return self._closed

    @property
    def store(self) -> LaneStore:
        """The lane store. A closed handle refuses here, by name, rather than failing deep in a
        backend or, while another handle keeps the store open, quietly working on."""
        if self._closed:
            raise VMemInputError(f"memory {self.memory_id!r}", "this handle is closed; open the memory again")
        return self._store


    def _dims(self) -> LaneDims:
        text_dim = len(self.embed_model.get_text_embedding("dimension probe"))
        visual_dim = getattr(self.image_encoder, "dimension", None)
        if visual_dim is None:  # an encoder that does not say: embed a blank image, in memory
            from PIL import Image

            probe = io.BytesIO()
            Image.new("RGB", (32, 32)).save(probe, format="PNG")
            probe.seek(0)
            visual_dim = len(self.image_encoder.get_image_embedding(probe))
        return LaneDims(text=text_dim, visual=int(visual_dim), regions=self.region_tiles)

    def manifest(self) -> Dict[str, Any]:
        return manifest_of(self.embed_model, self.image_encoder, self.region_tiles, self.build_options)

    def scope(self, **narrowing: Any) -> Scope:
        """Every store call goes through this: it pins the call to this memory."""
        return Scope(memory_id=self.memory_id, **narrowing)

    # -- ingestion ----------------------------------------------------------------------------

    @keywords_listed
    def add_round(
        self,
        user: str = "",
        assistant: str = "",
        images: Optional[Sequence[Mapping[str, Any]]] = None,
        session_id: Optional[str] = None,
        timestamp: Optional[Union[str, date, int, float]] = None,
        round_key: Optional[str] = None,
        audio: Optional[Sequence[str]] = None,
        *,
        dedupe: bool = True,
        dayfirst: Optional[bool] = None,
        lenient: bool = False,
    ) -> TextNode:
        """Append one round; returns its round node (the stored one, where it was stored already).
        ``timestamp``, ``dayfirst`` and ``lenient`` are read as in ``add_rounds``."""
        data = {"user": user, "assistant": assistant, "images": images, "audio": audio,
                "session_id": session_id, "timestamp": timestamp, "round_key": round_key}
        return self.add_rounds([data], dedupe=dedupe, dayfirst=dayfirst, lenient=lenient)[0]

    @keywords_listed
    def add_rounds(self, rounds: Sequence[Mapping[str, Any]], *, dedupe: bool = True, dayfirst: Optional[bool] = None,
                   lenient: bool = False) -> List[TextNode]:
        """Append round dicts ``{user, assistant, images, audio, session_id, timestamp, round_key}``;
        returns a round node for each, in order.

        A ``timestamp`` is text, a ``datetime``, a ``date`` or epoch seconds (``times.stored_timestamp``).
        A date whose day and month could be swapped ("06/07/2024") is refused unless ``dayfirst``
        says which comes first; text that reads as no time ("yesterday") is refused unless
        ``lenient``, which stores it as given (a time range then never selects its round).

        As LlamaIndex's ingestion pipeline skips a document it has already stored, a round whose
        exchange this memory already holds is not stored again: the same text, audio transcripts,
        pictures (the same pixels, ids, captions), session and timestamp, and the same key where one
        is given. Its stored round is returned in its place, and an INFO log says so; so running a
        script again stores nothing twice. A key stored with other content is refused, as ever.
        ``dedupe=False`` stores every round given (an exchange that really happened again, with no
        timestamp to tell it apart)."""
        if isinstance(rounds, Mapping) or not isinstance(rounds, Sequence):
            raise VMemInputError("rounds", f"must be a list of round dicts, got {type(rounds).__name__}")
        if not rounds:
            raise VMemInputError("rounds", "conversation is empty")
        reading = times.TimestampReading(dayfirst, lenient)
        inputs = [round_input_from_dict(f"round {i}", r, reading) for i, r in enumerate(rounds, start=1)]
        return self._commit(inputs, dedupe)

    @keywords_listed
    def add_messages(
        self, messages: Sequence[ChatMessage], session_id: Optional[str] = None,
        timestamp: Optional[Union[str, date, int, float]] = None, *, dedupe: bool = True, dayfirst: Optional[bool] = None,
        lenient: bool = False,
    ) -> List[TextNode]:
        """Append a chat transcript: each user message and the assistant reply after it is a round
        (an exchange already stored is not stored again, and ``timestamp`` is read, as in ``add_rounds``)."""
        rounds = self.rounds_from_messages(messages, session_id=session_id, timestamp=timestamp, dayfirst=dayfirst, lenient=lenient)
        return self.add_round_inputs(rounds, dedupe=dedupe, lenient=lenient)

    @keywords_listed
    def rounds_from_messages(
        self, messages: Sequence[ChatMessage], session_id: Optional[str] = None,
        timestamp: Optional[Union[str, date, int, float]] = None, *, dayfirst: Optional[bool] = None, lenient: bool = False,
    ) -> List[RoundInput]:
        """Check and split chat messages into rounds as ``add_messages`` does, storing nothing (audio
        is transcribed here), so a chat engine can refuse a turn before its LLM answers it."""
        reading = times.TimestampReading(dayfirst, lenient)
        rounds = self._parser.rounds_from_messages(messages, session_id=session_id, timestamp=timestamp, reading=reading)
        check_text(rounds)
        return rounds

    @keywords_listed
    def add_round_inputs(self, rounds: Sequence[RoundInput], *, dedupe: bool = True, dayfirst: Optional[bool] = None,
                         lenient: bool = False) -> List[TextNode]:
        """Append rounds made by ``rounds_from_messages``, or built by hand (checked as round dicts
        are; an exchange already stored is not stored again, as in ``add_rounds``)."""
        if not isinstance(rounds, Sequence) or not rounds or not all(isinstance(r, RoundInput) for r in rounds):
            given = rounds if isinstance(rounds, Sequence) else ()
            hint = "; chat messages go to add_messages" if any(isinstance(r, ChatMessage) for r in given) else ""
            raise VMemInputError("rounds", f"must be a non-empty list of RoundInput, got {rounds!r:.200}{hint}")
        reading = times.TimestampReading(dayfirst, lenient)
        return self._commit([checked_round(r.item(i), r, reading) for i, r in enumerate(rounds, start=1)], dedupe)

    async def aadd_round(self, *args: Any, **kwargs: Any) -> TextNode:
        return await asyncio.to_thread(lambda: self.add_round(*args, **kwargs))

    async def aadd_rounds(self, rounds: Sequence[Mapping[str, Any]], **kwargs: Any) -> List[TextNode]:
        return await asyncio.to_thread(lambda: self.add_rounds(rounds, **kwargs))

    async def aadd_messages(self, messages: Sequence[ChatMessage], **kwargs: Any) -> List[TextNode]:
        return await asyncio.to_thread(lambda: self.add_messages(messages, **kwargs))

    def _commit(self, inputs: List[RoundInput], dedupe: bool) -> List[TextNode]:
        """Store ``inputs``; returns a round node for each, in order. With ``dedupe``, an exchange
        already stored (``_already_stored``) is not stored again: its stored round stands for it."""
        check_text(inputs)
        refuse_repeated_keys([r.round_key for r in inputs if r.round_key is not None])  # else a repeat could pass as stored
        # fetched and decoded outside the lock: a slow URL holds up no other writer of this memory
        inputs = [self._parser.load_images(r, r.item(i), r.round_key) for i, r in enumerate(inputs, start=1)]
        hashes = [content_hash(r) for r in inputs]
        with _write_lock(self.store, self.memory_id):
            last = self._last_seq()
            self._sweep_unfinished(last)
            stored = self._already_stored(inputs, hashes) if dedupe else {}
            self._mend_pictures(inputs[i] for i in stored)
            fresh = [i for i in range(len(inputs)) if i not in stored]
            parsed, renamed = self._write([inputs[i] for i in fresh], [hashes[i] for i in fresh], last) if fresh else ([], [])
        if stored:
            again = [stored[i].metadata[schema.ROUND_KEY] for i in sorted(stored)]
            logger.info("memory %s: %d round(s) already stored, not stored again: %s%s", self.memory_id, len(again),
                        ", ".join(again[:5]), ", ..." if len(again) > 5 else "")
        stamps = [p.round_node.metadata for p in parsed]  # read once, by the parser, into the stored time
        unreadable = sorted({m[schema.TIMESTAMP] for m in stamps if m[schema.TIMESTAMP] and m[schema.TIME] == times.NO_TIME})
        if unreadable:  # stored and shown as given, but a time range can never select these rounds
            logger.warning("memory %s: timestamp(s) %s are not dates the time filters read: since/until will not "
                           "select their rounds (give a date with its year, or a datetime)",
                           self.memory_id, ", ".join(map(repr, unreadable[:5])))
        for r in renamed:
            logger.warning("%s image %s: another picture has this id (in this memory or earlier in this call); stored as %r",
                           r.item, r.given, r.stored)
        if parsed:
            logger.info("memory %s: added %d rounds", self.memory_id, len(parsed))
        made = dict(zip(fresh, (p.round_node for p in parsed)))
        return [stored[i] if i in stored else made[i] for i in range(len(inputs))]

    def _write(self, inputs: List[RoundInput], hashes: List[str], last: int) -> Tuple[List[ParsedRound], List[Renamed]]:
        """Key, parse, encode and write new rounds after the round ``last`` (under the write lock),
        whole or not at all; returns them and the images whose ids moved on."""
        keyed, renamed = with_distinct_image_ids(self._with_default_keys(inputs, first_seq=last + 1), self._stored_images)
        parsed = self._parser.parse_rounds(keyed, first_seq=last + 1)
        self._reject_existing(parsed)
        for p, digest in zip(parsed, hashes, strict=True):
            p.round_node.metadata[schema.CONTENT_HASH] = digest
        before = self._link_to_stored(parsed)
        text_points, image_points = self._encode(parsed, before)
        round_points = [PointData(p.round_node.node_id, _round_payload(p)) for p in parsed]
        written: List[Path] = []
        try:  # pictures after the units that record them: the sweep finds a killed add's files through its units
            self.store.upsert(Collection.TEXT, text_points)
            self.store.upsert(Collection.IMAGE, image_points)
            image_io.save_each((loaded for p in parsed for loaded in p.pending_images.values()), self.image_dir, written)
            self.store.upsert(Collection.ROUNDS, round_points)
        except BaseException:
            self._rollback([p.round_node.node_id for p in parsed], written)
            raise
        known = _highest_defaults(self.store, self.memory_id)
        for p in parsed:
            if p.session_id in known:
                known[p.session_id] = max(known[p.session_id], last_default_number(p.session_id, [p.round_key]))
        return parsed, renamed

    def _already_stored(self, inputs: List[RoundInput], hashes: List[str]) -> Dict[int, TextNode]:
        """The stored round each input repeats, by its place in ``inputs``: one filtered lookup.

        A round given a key repeats the stored round of that key where their content is the same (a
        stored key with other content is refused later, as before). A round without one repeats a
        stored round of the same content: the n-th such input of the call the n-th such round in
        conversation order, so a transcript that holds one exchange twice is stored twice, and
        added again matches round for round. Rounds stored before content hashes existed are never
        matched."""
        hits = self.store.scroll(Collection.ROUNDS, self.scope(content_hashes=tuple(dict.fromkeys(hashes))))
        unclaimed: Dict[str, List[Hit]] = {}
        for hit in hits:
            unclaimed.setdefault(hit.payload[schema.CONTENT_HASH], []).append(hit)
        found: Dict[int, Hit] = {}
        keyed = [i for i, r in enumerate(inputs) if r.round_key is not None]
        for i in keyed + [i for i, r in enumerate(inputs) if r.round_key is None]:  # a keyed round claims its own first
            same = [h for h in unclaimed.get(hashes[i], []) if inputs[i].round_key in (None, h.payload[schema.ROUND_KEY])]
            if same:
                found[i] = same[0]
                unclaimed[hashes[i]].remove(same[0])
        return {i: schema.round_from_payload(h.id, h.payload) for i, h in found.items()}

    def _mend_pictures(self, rounds: Iterable[RoundInput]) -> None:
        """Write again the pictures of rounds added again whose files were damaged or lost since:
        adding a picture again mends it (``images.save``), a round already stored too."""
        for r in rounds:
            for img in r.images:
                if img.checked is not None:
                    image_io.save(img.checked, self.image_dir)

    def _link_to_stored(self, parsed: List[ParsedRound]) -> Dict[str, str]:
        """Link each session's first new round to that session's last stored round; returns the text
        of each stored round linked to, by id (what the new round's reply context reads).

        Links stay within a session, so rounds of two sessions written in turn (or by two
        threads at once) still chain their own conversation; rounds outside any session form
        one conversation of their own.
        """
        texts: Dict[str, str] = {}
        for p in parsed:
            if NodeRelationship.PREVIOUS in p.round_node.relationships:
                continue
            before = self.store.last_round(self.scope(session_id=p.session_id, sessionless=p.session_id is None))
            if before is not None:
                p.round_node.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=before.id)
                texts[before.id] = before.payload.get(schema.TEXT, "")
        return texts

    def _backfill_times(self) -> None:
        """Give the points an older version wrote, before ``schema.TIME`` existed, their timestamp's
        reading, so time ranges (a filter on it) reach them. Once only: a point with no readable
        timestamp gets ``times.NO_TIME``. Idempotent, so another process's open may race it."""
        for collection in Collection:
            by_time: Dict[int, List[str]] = {}
            for h in self.store.scroll(collection, self.scope(lacking=schema.TIME), keys=[schema.TIMESTAMP]):
                by_time.setdefault(times.stored_time(h.payload.get(schema.TIMESTAMP)), []).append(h.id)
            self.store.set_payloads(collection, [(ids, {schema.TIME: t}) for t, ids in by_time.items()])

    def _last_seq(self) -> int:
        """The memory's highest round ``seq``, 0 when it is empty."""
        last = self.store.last_round(self.scope())
        return int(last.payload[schema.SEQ]) if last is not None else 0

    def _sweep_unfinished(self, last: int) -> None:
        """Drop units past the last whole round: a process killed mid-write left them roundless,
        and the pictures it saved for them, unless a whole round shows them too. Files go first, so
        a sweep killed part-way leaves units for the next one to find."""
        unfinished = self.scope(seq_range=(last + 1, 2**62))
        for path in lifecycle.unshared_images(self, self.store.scroll(Collection.IMAGE, unfinished)):
            path.unlink(missing_ok=True)
        for collection in (Collection.TEXT, Collection.IMAGE):
            self.store.delete(collection, unfinished)

    def _with_default_keys(self, inputs: List[RoundInput], first_seq: int) -> List[RoundInput]:
        """Give each round without a key the next free default: numbered within its session past
        the highest number it holds (``D2:1``, ``D2:2``, ...; so a gap a forget left is not filled
        out of order) or by sequence outside one (``R17``), moved past every key this memory holds
        or this call gives, so a default never collides with a key a caller chose."""
        taken = {r.round_key for r in inputs if r.round_key is not None}
        next_in_session: Dict[str, int] = {}
        keys: Dict[int, str] = {}
        pending = [i for i, r in enumerate(inputs) if r.round_key is None]
        while pending:  # a default taken by a round of another session moves on, and is checked again
            for i in pending:
                session = inputs[i].session_id
                if session is not None and session not in next_in_session:
                    next_in_session[session] = max(self._highest_default(session), last_default_number(session, taken)) + 1
                n = next_in_session[session] if session is not None else first_seq + i
                while default_round_key(session, n) in taken:
                    n += 1
                keys[i] = default_round_key(session, n)
                taken.add(keys[i])
                if session is not None:
                    next_in_session[session] = n + 1
            stored = self._stored_keys([keys[i] for i in pending])
            pending = [i for i in pending if keys[i] in stored]
        return [replace(r, round_key=keys[i]) if i in keys else r for i, r in enumerate(inputs)]

    def _highest_default(self, session: str) -> int:
        """The highest default number the session's stored keys hold: read once per session and
        process, then kept by every add and dropped by every forget (stored keys that collide are
        still caught by ``_stored_keys``)."""
        known = _highest_defaults(self.store, self.memory_id)
        if session not in known:
            stored = (h.payload[schema.ROUND_KEY] for h in self.store.scroll(Collection.ROUNDS, self.scope(session_id=session)))
            known[session] = last_default_number(session, stored)
        return known[session]

    def _stored_keys(self, keys: Sequence[str]) -> set:
        ids = tuple(schema.round_id(self.memory_id, k) for k in keys)
        return {h.payload[schema.ROUND_KEY] for h in self.store.scroll(Collection.ROUNDS, self.scope(round_ids=ids))} if ids else set()

    def _stored_images(self, image_ids: Set[str]) -> Dict[str, Set[str]]:
        """The pixel files (``stored_image_identity``) this memory holds under each of these ids."""
        files: Dict[str, Set[str]] = {}
        for h in self.store.scroll(Collection.IMAGE, self.scope(image_ids=tuple(image_ids))):
            identity = stored_image_identity(h.payload)
            files.setdefault(h.payload[schema.IMAGE_ID], set()).update([identity] if identity else [])
        return files

    def _reject_existing(self, parsed: List[ParsedRound]) -> None:
        ids = tuple(p.round_node.node_id for p in parsed)
        existing = self.store.scroll(Collection.ROUNDS, self.scope(round_ids=ids))
        if existing:
            key = existing[0].payload[schema.ROUND_KEY]
            raise VMemInputError(f"round {key}", "a round with this key is already stored in this memory")

    def _rollback(self, round_ids: List[str], written: List[Path]) -> None:
        scope = self.scope(round_ids=tuple(round_ids))
        for collection in (Collection.ROUNDS, Collection.IMAGE, Collection.TEXT):
            self.store.delete(collection, scope)
        for path in written:
            path.unlink(missing_ok=True)

    def _encode(self, parsed: List[ParsedRound], stored_texts: Mapping[str, str]) -> Tuple[List[PointData], List[PointData]]:
        """Encode every unit of the new rounds, batched; nothing already stored is touched.
        ``stored_texts``: the text of each stored round a new round follows (``_link_to_stored``)."""
        units = [u for p in parsed for u in p.units]
        texts = [u for u in units if not isinstance(u, ImageNode)]
        imgs = [u for u in units if isinstance(u, ImageNode)]
        captioned = [u for u in imgs if u.text]
        encoded = [schema.encoding_text(u, self.build_options["dated_units"]) for u in texts + captioned]
        dense = self._embed_texts(encoded)
        sparse = self.bm25.documents(encoded)
        vectors: Dict[str, Dict[str, Any]] = {u.node_id: {} for u in units}
        for u, d, s in zip(texts + captioned, dense, sparse, strict=True):
            vectors[u.node_id].update({schema.TEXT_DENSE: d, schema.TEXT_SPARSE: s})
        if self.build_options["reply_context"]:
            round_texts = {**stored_texts, **{p.round_node.node_id: p.round_node.text for p in parsed}}
            before = [round_texts.get(p.round_node.prev_node.node_id, "") if p.round_node.prev_node else "" for p in parsed]
            for unit_id, v in self.reply_context_vectors([(p.units, text) for p, text in zip(parsed, before)]).items():
                vectors[unit_id][schema.TEXT_CONTEXT_SPARSE] = v
        pixels = [u for u in imgs if u.metadata[schema.HAS_PIXELS]]
        if pixels:
            pending = {str(k): v for p in parsed for k, v in p.pending_images.items()}
            blobs = [pending[u.image_path].data for u in pixels]
            if self.region_tiles:
                crops = [image_io.region_crops(b) for b in blobs]
                flat = iter(self._embed_images([c for cs in crops for c in cs]))
                for u, cs in zip(pixels, crops, strict=True):
                    regions = [next(flat) for _ in cs]  # the whole image first, then its tiles
                    vectors[u.node_id][schema.VISUAL] = regions[0]
                    vectors[u.node_id][schema.VISUAL_REGIONS] = regions
            else:
                for u, v in zip(pixels, self._embed_images(blobs), strict=True):
                    vectors[u.node_id][schema.VISUAL] = v
        make = lambda u: PointData(u.node_id, schema.node_to_payload(u), vectors[u.node_id])  # noqa: E731
        return [make(u) for u in texts], [make(u) for u in imgs]

    def reply_context_vectors(self, rounds: Sequence[Tuple[Sequence[TextNode], str]]) -> Dict[str, Sparse]:
        """The reply-context BM25 vector (``schema.reply_context_texts``) of each text unit of each
        ``(round's units, text of the round before it)``, by unit id."""
        contexts: Dict[str, str] = {}
        for units, previous in rounds:
            text_units = [u for u in units if not isinstance(u, ImageNode)]
            contexts.update(schema.reply_context_texts(text_units, previous, self.build_options["dated_units"]))
        return dict(zip(contexts, self.bm25.documents(list(contexts.values())), strict=True))

    def _embed_texts(self, texts: List[str]) -> List[List[float]]:
        """Length-sorted batches sized by padded length: little padding, few calls."""
        out: List[List[float]] = [[] for _ in texts]
        batches = padded_batches(token_lengths(self.embed_model, texts))
        for batch in tqdm(batches, desc="Encoding texts", disable=not self.show_progress):
            for i, e in zip(batch, self.embed_model.get_text_embedding_batch([texts[i] for i in batch]), strict=True):
                out[i] = e
        return out

    def _embed_images(self, blobs: List[bytes]) -> List[List[float]]:
        batch = getattr(self.image_encoder, "embed_batch_size", 16)
        out: List[List[float]] = []
        chunks = range(0, len(blobs), batch)
        for start in tqdm(chunks, desc="Encoding images", disable=not self.show_progress):
            out.extend(self.image_encoder.get_image_embedding_batch([io.BytesIO(b) for b in blobs[start:start + batch]]))
        return out

    # -- reads used by the retriever and postprocessor ----------------------------------------

    def encode_query_texts(self, texts: Sequence[str]) -> List[List[float]]:
        """Query embeddings, cached: one question's signals (and a repeated question) embed a text
        once, and the texts not cached are embedded together, in one forward pass where the encoder
        can (``query_embeddings``): a question and its picture's words cost one pass, not two."""
        with self._query_lock:
            found = {t: self._query_vectors[t] for t in texts if t in self._query_vectors}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            with query_threads():
                found.update(zip(missing, map(tuple, query_embeddings(self.embed_model, missing)), strict=True))
        with self._query_lock:
            self.query_texts_encoded += len(missing)
            for t in dict.fromkeys(texts):
                self._query_vectors[t] = found[t]
                self._query_vectors.move_to_end(t)
            while len(self._query_vectors) > QUERY_CACHE_SIZE:
                self._query_vectors.popitem(last=False)
        return [list(found[t]) for t in texts]

    def clear_query_cache(self) -> None:
        with self._query_lock:
            self._query_vectors.clear()
        self._encode_query_pixels.cache_clear()

    def load_query_image(self, image: str) -> image_io.LoadedImage:
        """The query image read within the memory's fence and checked; bad input names "query image"."""
        return image_io.validate("query image", image_io.read_source("query image", **_image_source(image),
                                                                     fence=self.image_fence))

    def _embed_query_pixels(self, data: bytes) -> Tuple[float, ...]:
        with query_threads():
            return tuple(self.image_encoder.get_image_embedding(io.BytesIO(data)))

    def encode_query_image(self, image: str) -> List[float]:
        """Query image embedding, cached by the picture's bytes: one question's visual searches (the
        visual signal, the words borrowed from the picture it looks like) encode it once, and an
        edited file is encoded anew."""
        return list(self._encode_query_pixels(self.load_query_image(image).data))

    def get_rounds(self, round_ids: Iterable[str]) -> Dict[str, TextNode]:
        """Round nodes by id (ids of other memories are simply not found)."""
        hits = self.store.scroll(Collection.ROUNDS, self.scope(round_ids=tuple(round_ids)))
        return {h.id: schema.round_from_payload(h.id, h.payload) for h in hits}

    def unit(self, point_id: str, payload: Dict[str, Any]) -> TextNode:
        """A stored unit as a node; an image's file as ``image_file`` finds it."""
        if payload.get(schema.IMAGE_PATH):
            payload = {**payload, schema.IMAGE_PATH: str(self.image_file(payload[schema.IMAGE_PATH]))}
        return schema.unit_from_payload(point_id, payload)

    def image_file(self, recorded: str) -> Path:
        """Where a stored image's file is now. Payloads keep the path the file was saved at, but a
        store that was moved or copied holds its files in its own image folder, under the same
        (content-hash) name: that copy is the one to read, and the only one ``forget`` deletes.
        The recorded path is read only where this folder has no such file (a store reopened with
        another ``image_dir``)."""
        own = self.image_dir / Path(recorded).name
        return own if own.is_file() or not Path(recorded).is_file() else Path(recorded)

    def images_near(self, rounds: Sequence[TextNode], window: int,
                    time_range: Optional[times.MicrosRange] = None) -> Dict[str, List[ImageNode]]:
        """Each round's own images, or, for a round without one, the images of its linked rounds
        within ``window`` (nearest first, the earlier side first), never across a session's edge
        nor, given a ``time_range`` (retrieval's filter), out of it."""
        own = self.images_of(r.node_id for r in rounds if r.metadata.get(schema.IMAGE_IDS, True))  # a round lists its pictures
        out = {r.node_id: own.get(r.node_id, []) for r in rounds}
        borrowing = {r.node_id: r.metadata for r in rounds if not out[r.node_id]}
        for layer in neighbours.steps(self, borrowing, window):
            found = self.images_of((rid for near in layer.values() for rid in near), time_range)
            for origin, near in layer.items():
                out[origin] += [img for rid in near for img in found.get(rid, [])]
        return out

    def images_of(self, round_ids: Iterable[str], time_range: Optional[times.MicrosRange] = None) -> Dict[str, List[ImageNode]]:
        """The image units of these rounds (seen in ``time_range``, if given), by round id, in conversation order."""
        by_round: Dict[str, List[ImageNode]] = {}
        for hit in self.store.scroll(Collection.IMAGE, self.scope(round_ids=tuple(dict.fromkeys(round_ids)), time_range=time_range)):
            by_round.setdefault(hit.payload[schema.ROUND_ID], []).append(self.unit(hit.id, hit.payload))
        return by_round

    # -- the life of a memory -----------------------------------------------------------------

    def rounds(self, round_keys: Optional[Iterable[str]] = None, *, session_id: Optional[str] = None,
               since: Optional[TimeLike] = None, until: Optional[TimeLike] = None,
               offset: int = 0, limit: int = 100) -> List[StoredRound]:
        """The memory's rounds in conversation order, each with its units, a page at a time.

        Filters combine: round keys, a session, a time range ``since <= timestamp < until``.
        """
        return lifecycle.list_rounds(self, Selection(round_keys, session_id, since, until), offset, limit)

    def forget(self, round_keys: Optional[Iterable[str]] = None, *, session_id: Optional[str] = None,
               since: Optional[TimeLike] = None, until: Optional[TimeLike] = None) -> int:
        """Forget rounds (by key, session and/or time range, combined) everywhere; all or nothing.

        Returns how many rounds were forgotten. Forgetting the whole memory is ``forget_all()``,
        so a call with no filter never empties a memory by accident.
        """
        selection = Selection(round_keys, session_id, since, until)
        if selection.is_everything:
            raise VMemInputError("forget", "name round keys, a session or a time range; forget_all() forgets everything")
        with _write_lock(self.store, self.memory_id):
            _highest_defaults(self.store, self.memory_id).clear()
            return lifecycle.forget(self, selection)

    def forget_all(self) -> int:
        """Forget the whole memory: every point, saved image and delivered copy."""
        with _write_lock(self.store, self.memory_id):
            _highest_defaults(self.store, self.memory_id).clear()
            return lifecycle.forget(self, Selection())

    def export_archive(self, path: Union[str, os.PathLike]) -> Path:
        """Write this memory (points with vectors, and images) to a portable zip archive."""
        with _write_lock(self.store, self.memory_id):
            return archive.export_memory(self, path)

    def import_archive(self, data: archive.Archive) -> None:
        """Load a read archive into this memory, which must be empty."""
        with _write_lock(self.store, self.memory_id):
            archive.import_memory(self, data)

    def __len__(self) -> int:
        return self.store.count(Collection.ROUNDS, self.scope())

    # -- LlamaIndex conventions ---------------------------------------------------------------
    def optimize(self) -> None:
        """Compact the embedded store, every memory in it, as each write already does: new points
        go to segments on disk once about 50,000 vectors have gathered. Worth calling once on a
        store written by a version that did not, whose points all sit in segments held in RAM
        (100k rounds: about 1.5 GB). A server optimizes itself."""
        self.store.optimize()

    def close(self) -> None:
        """Release the store (shared stores close with their last handle); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        _count_handle(self._store, self.memory_id, -1)
        self._store.close()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> "RoundMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: The most characters a memory id may hold: a tenant key (a user id, an email, a uuid), which every
#: point of the memory carries, so a batch of points stays far inside a server's request limit.
MAX_MEMORY_ID_CHARS = 1024


def check_memory_id(memory_id: Any) -> None:
    if not isinstance(memory_id, str) or not memory_id or "\x00" in memory_id or not schema.is_utf8(memory_id):
        raise VMemInputError("memory_id", f"must be a non-empty UTF-8 string without NUL, got {memory_id!r:.200}")
    if len(memory_id) > MAX_MEMORY_ID_CHARS:
        raise VMemInputError("memory_id", f"is {len(memory_id)} characters, over the {MAX_MEMORY_ID_CHARS} limit")
    if not schema.visible(memory_id):  # a blank or invisible id opens a memory no one can tell from another
        raise VMemInputError("memory_id", "must have a visible character")


def manifest_of(embed_model: BaseEmbedding, image_encoder: MultiModalEmbedding, region_tiles: bool,
                build_options: Dict[str, Any]) -> Dict[str, Any]:
    """What a store records of the encoders that made its vectors (and how they were used), and
    refuses others by."""
    return {
        "format": 1,
        "text_encoder": encoder_id(embed_model),
        "image_encoder": encoder_id(image_encoder),
        "region_tiles": region_tiles,
        **build_options,
    }


def _round_payload(p: ParsedRound) -> Dict[str, Any]:
    payload = schema.node_to_payload(p.round_node)
    prev = p.round_node.relationships.get(NodeRelationship.PREVIOUS)
    payload[schema.PREV_ROUND_ID] = prev.node_id if prev is not None else None
    return payload


def _image_source(image: str) -> Dict[str, str]:
    return {"url": image} if image_io.is_url(image) else {"path": image}
