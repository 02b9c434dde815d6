"""A memory as a portable zip archive: ``memory.json`` (points, payloads, vectors) and ``images/``.

Vectors travel with the points, so an import answers exactly as the export did, on any backend;
the archive records which encoders made them and an import into a store built with other
encoders is refused. Importing under another ``memory_id`` re-derives every id from the new
memory, so the copy shares nothing with the original. An archive holding what no add could have
stored (a unit apart from its round, a key no lookup could name, a vector element Qdrant would not
keep as given) is refused whole, naming the point, before anything is written.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple, Union

import numpy as np

from . import images as image_io
from . import schema, times
from .encoders import encoder_differences, same_encoders
from .encoders.bm25 import Sparse
from .errors import VMemInputError
from .lifecycle import check_id
from .store import Collection, LaneDims, PointData
from .store.base import MAX_SEQ, SPARSE_VECTORS

if TYPE_CHECKING:
    from .round_memory import RoundMemory

logger = logging.getLogger(__name__)

FORMAT = 1
MEMORY_JSON = "memory.json"
IMAGES = "images"
#: What ``memory.json`` must hold to be read at all (its points are checked as they are loaded).
DOCUMENT_FIELDS = {"memory_id": str, "encoders": dict, "collections": dict}
#: Payload keys that hold text wherever they are given (``round_key`` always), and lists of text.
TEXT_KEYS = (schema.TEXT, schema.SESSION_ID, schema.TIMESTAMP, schema.MODALITY, schema.ROLE,
             schema.IMAGE_ID, schema.CAPTION, schema.IMAGE_PATH)
TEXT_LIST_KEYS = (schema.UNIT_IDS, schema.IMAGE_IDS)
#: What a unit shares with its round: an add writes them once for the round and its units.
SHARED_KEYS = (schema.ROUND_KEY, schema.SEQ, schema.SESSION_ID, schema.TIMESTAMP)
#: Sparse vector indices Qdrant stores: unsigned 32-bit numbers.
SPARSE_INDICES = 2**32
#: The largest vector element Qdrant stores as given: it keeps vectors as float32, where more is inf.
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: How many times its own size an archive may unpack to. An export unpacks to about three times
#: (vectors written as decimals, pictures already compressed); a zip bomb to hundreds or thousands.
MAX_INFLATION = 50
#: What any archive may unpack to, however small the zip: a few memories' worth of points.
MIN_UNPACKED_LIMIT = 64 * 1024 * 1024
#: The lane each unit collection holds, as an add writes it in ``modality``.
LANES = {Collection.TEXT: schema.Lane.TEXT.value, Collection.IMAGE: schema.Lane.IMAGE.value}


def archive_path(path: Union[str, os.PathLike]) -> Path:
    """``path`` as a Path, or an error naming the archive where it is no text path at all (a
    number, bytes, a path object that gives bytes)."""
    try:
        text = os.fspath(path)
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise VMemInputError("archive", f"the path must be a str or os.PathLike, got {type(path).__name__}")
    return Path(text)


def export_memory(index: "RoundMemory", path: Union[str, os.PathLike]) -> Path:
    """Write every point of ``index``'s memory and its saved images to a zip at ``path``."""
    path = archive_path(path)
    if path.is_dir():
        raise VMemInputError(f"archive {path}", "is a directory: name the zip file to write")
    if not path.parent.is_dir():
        raise VMemInputError(f"archive {path}", f"cannot be written: there is no folder {path.parent}")
    index.image_fence.check_write(f"archive {path}", path)
    points = {c: index.store.points(c, index.scope()) for c in Collection}
    written = {p.id for p in points[Collection.ROUNDS]}  # units of a killed add, not yet swept, stay behind
    points.update({c: [p for p in points[c] if p.payload[schema.ROUND_ID] in written] for c in (Collection.TEXT, Collection.IMAGE)})
    sources = _image_files(index, points[Collection.IMAGE])
    document = {
        "format": FORMAT,
        "memory_id": index.memory_id,
        "encoders": index.manifest(),
        "collections": {c.value: [_point_to_json(p) for p in points[c]] for c in Collection},
    }
    image_io.write_atomically(path, lambda tmp: _write_zip(tmp, sources, document))
    logger.info("memory %s: exported %d rounds to %s", index.memory_id, len(points[Collection.ROUNDS]), path)
    return path


def _write_zip(path: Path, sources: Dict[str, Path], document: Dict[str, Any]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, source in sources.items():
            archive.write(source, f"{IMAGES}/{name}")
        archive.writestr(MEMORY_JSON, json.dumps(document))


def _image_files(index: "RoundMemory", points: List[PointData]) -> Dict[str, Path]:
    """Each saved image file of ``points`` once, by archive name. Checked before anything is
    written: an import requires every image a point names, so an archive missing one is refused."""
    files: Dict[str, Path] = {}
    for p in points:
        if not p.payload.get(schema.IMAGE_PATH):
            continue
        source = index.image_file(p.payload[schema.IMAGE_PATH])
        item = f"memory {index.memory_id} image {p.payload.get(schema.IMAGE_ID)!r}"
        if not source.is_file():
            raise VMemInputError(item, f"has no file at {source}; it cannot be exported")
        if source.name not in files and not image_io.intact(source):
            raise VMemInputError(item, f"file {source} no longer holds the picture stored under its name (changed or "
                                       "cut short since), and import would refuse the archive: add the picture again "
                                       "to mend it, or forget its round")
        files.setdefault(source.name, source)
    return files


@dataclass
class Archive:
    """A read archive: where it came from, its document and its image files by name."""

    path: Path
    document: Dict[str, Any]
    #: Image files by name; each name is its content's hash, checked on reading.
    images: Dict[str, image_io.LoadedImage]

    @property
    def memory_id(self) -> str:
        return self.document["memory_id"]


def read_archive(path: Union[str, os.PathLike], max_unpacked_bytes: Optional[int] = None) -> Archive:
    """Read and check an archive: images are validated like any user image (size, decoding) and
    must be named by their content, so a crafted file cannot pass for another picture.
    ``max_unpacked_bytes`` replaces the limit on what it may unpack to (see ``_check_unpacked_size``)."""
    path = archive_path(path)
    if max_unpacked_bytes is not None and (type(max_unpacked_bytes) is not int or max_unpacked_bytes < 1):
        raise VMemInputError("max_unpacked_bytes", f"must be a positive int, got {max_unpacked_bytes!r}")
    try:
        with zipfile.ZipFile(path) as archive:
            _check_unpacked_size(path, archive, max_unpacked_bytes)
            document = json.loads(archive.read(MEMORY_JSON))
            images = {}
            for info in archive.infolist():
                if info.filename.startswith(f"{IMAGES}/") and not info.is_dir():
                    images[Path(info.filename).name] = _image(path, archive, info)
    except VMemInputError:  # already names the archive, or the picture in it
        raise
    except (OSError, KeyError, ValueError, EOFError, zlib.error, zipfile.BadZipFile) as e:  # zlib, EOF: damaged deflate data
        raise VMemInputError(f"archive {path}", f"is not a memory archive ({e})") from e
    if not isinstance(document, dict):
        raise VMemInputError(f"archive {path}", f"is not a memory archive ({MEMORY_JSON} holds no object)")
    missing = [key for key, kind in DOCUMENT_FIELDS.items() if not isinstance(document.get(key), kind)]
    if missing:
        raise VMemInputError(f"archive {path}", f"is not a memory archive ({MEMORY_JSON} lacks {', '.join(missing)})")
    if document.get("format") != FORMAT:
        raise VMemInputError(f"archive {path}", f"has format {document.get('format')!r}; this version reads {FORMAT}")
    return Archive(path, document, images)


def _check_unpacked_size(path: Path, archive: zipfile.ZipFile, limit: Optional[int]) -> None:
    """Refuse a zip that would unpack to far more than an export of its size does, before any of
    it is read: everything is read into memory, so a small crafted zip could exhaust it. zipfile
    stops each entry at its declared size, so the declared sizes bound what is read. An export of
    very repetitive text can exceed the default; its owner sets ``limit`` to read it."""
    unpacked = sum(info.file_size for info in archive.infolist())
    if limit is not None:
        if unpacked > limit:
            raise VMemInputError(f"archive {path}", f"unpacks to {unpacked} bytes, over max_unpacked_bytes={limit}")
        return
    limit = max(MIN_UNPACKED_LIMIT, MAX_INFLATION * path.stat().st_size)
    if unpacked > limit:
        raise VMemInputError(f"archive {path}", f"unpacks to {unpacked} bytes, over the {limit} an archive of its size "
                                                f"may hold ({MAX_INFLATION} times its size): it is no export, or one "
                                                f"to read with max_unpacked_bytes={unpacked} or more")


def _image(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> image_io.LoadedImage:
    item = f"archive {path} image {info.filename}"
    if info.file_size > image_io.MAX_IMAGE_BYTES:
        raise VMemInputError(item, f"is {info.file_size} bytes, over the {image_io.MAX_IMAGE_BYTES} limit")
    loaded = image_io.validate(item, archive.read(info))
    if Path(info.filename).name != loaded.file_name:
        raise VMemInputError(item, "is not named by its content's hash")
    return loaded


def check_encoders(archive: Archive, manifest: Dict[str, Any]) -> None:
    """Refuse an import whose encoders (the store ``manifest`` they make) are not the archive's:
    its vectors would rank as noise against theirs."""
    if not same_encoders(archive.document["encoders"], manifest):
        raise VMemInputError(f"archive {archive.path}", f"was encoded with other encoders "
                                                        f"({encoder_differences(archive.document['encoders'], manifest)}): "
                                                        "pass those it was made with")


def import_memory(index: "RoundMemory", archive: Archive) -> int:
    """Load ``archive`` into ``index``'s memory, which must be empty and use the archive's encoders
    (``check_encoders``); returns the rounds loaded."""
    if len(index):
        raise VMemInputError(f"memory {index.memory_id}", "already holds rounds; import into an empty memory")
    try:
        points = {c: [_point_from_json(p) for p in archive.document["collections"][c.value]] for c in Collection}
        rehome = _Rehome(index, archive, points[Collection.ROUNDS] + points[Collection.TEXT] + points[Collection.IMAGE])
        rehomed = {c: [rehome(p) for p in points[c]] for c in Collection}
        _check(rehomed, index.lane_dims)
    except (KeyError, TypeError, ValueError) as e:
        raise VMemInputError(f"archive {archive.path}", f"has a malformed point ({e!r})") from e
    written: List[Path] = []
    try:  # pictures after the units that record them, as an add writes them
        for c in (Collection.TEXT, Collection.IMAGE):
            index.store.upsert(c, rehomed[c])
        image_io.save_each(archive.images.values(), index.image_dir, written)
        # In conversation order, as an add writes them: an import killed part-way (a Qdrant client
        # takes them in batches) leaves whole rounds from the first on, and the units past the last
        # go as a killed add's do: at the next add, or at the next open where no other process reaches.
        index.store.upsert(Collection.ROUNDS, sorted(rehomed[Collection.ROUNDS], key=lambda p: p.payload[schema.SEQ]))
    except BaseException:
        for c in (Collection.ROUNDS, Collection.IMAGE, Collection.TEXT):
            index.store.delete(c, index.scope())
        for target in written:
            target.unlink(missing_ok=True)
        raise
    logger.info("memory %s: imported %d rounds from %s", index.memory_id, len(points[Collection.ROUNDS]), archive.path)
    return len(points[Collection.ROUNDS])


class _Rehome:
    """Rewrites archived points for the importing memory: ids, links, memory id, image paths."""

    def __init__(self, index: "RoundMemory", archive: Archive, points: List[PointData]) -> None:
        self.index = index
        self.archive = archive
        self.ids: Dict[str, str] = {}
        for p in points:
            key = p.payload[schema.ROUND_KEY]
            unit = p.payload.get(schema.UNIT_INDEX)
            self.ids[p.id] = (schema.round_id(index.memory_id, key) if unit is None
                              else schema.unit_id(index.memory_id, key, unit))

    def __call__(self, p: PointData) -> PointData:
        payload = dict(p.payload, **{schema.MEMORY_ID: self.index.memory_id})
        payload[schema.TIME] = times.stored_time(payload.get(schema.TIMESTAMP))  # read here, as an add reads it: an archive's may be stale or missing
        payload[schema.ROUND_ID] = self.ids[payload[schema.ROUND_ID]]
        if payload.get(schema.PREV_ROUND_ID):  # a link to a round that is not archived leads nowhere
            payload[schema.PREV_ROUND_ID] = self.ids.get(payload[schema.PREV_ROUND_ID])
        if schema.UNIT_IDS in payload:
            payload[schema.UNIT_IDS] = [self.ids[u] for u in payload[schema.UNIT_IDS]]
        if payload.get(schema.IMAGE_PATH):
            name = Path(payload[schema.IMAGE_PATH]).name
            if name not in self.archive.images:
                raise ValueError(f"image {name!r} of point {p.id} is not in the archive")
            payload[schema.IMAGE_PATH] = str(self.index.image_dir / name)
        return PointData(self.ids[p.id], payload, p.vectors)


def _check(points: Dict[Collection, List[PointData]], dims: LaneDims) -> None:
    """What the store, the nodes read back and the round walks rely on and a hand-edited archive
    could break, checked before anything is written: each point on its own (``_check_point``), each
    round with its units (``_check_rounds``), and round links that end."""
    sizes = {schema.TEXT_DENSE: dims.text, schema.VISUAL: dims.visual, schema.VISUAL_REGIONS: dims.visual}
    for c, ps in points.items():
        seen: Set[str] = set()  # ids come from round keys (and unit numbers): one id twice is one key twice
        for p in ps:
            _check_point(c, p, sizes)
            if p.id in seen:
                what = "round" if c is Collection.ROUNDS else f"unit {p.payload[schema.UNIT_INDEX]} of round"
                raise ValueError(f"two points are {what} {p.payload[schema.ROUND_KEY]!r}")
            seen.add(p.id)
    _check_rounds(points)
    _check_links(points[Collection.ROUNDS])


def _check_point(c: Collection, p: PointData, sizes: Dict[str, int]) -> None:
    """Whole-number positions, text where text is read (a number there makes every listing or
    search that reaches the point fail), UTF-8 the store can take, vectors the store can take, and
    units as an add writes them (``_check_unit``)."""
    positions = (schema.SEQ,) if c is Collection.ROUNDS else (schema.SEQ, schema.UNIT_INDEX)
    if not all(type(p.payload.get(key)) is int for key in positions):
        raise ValueError(f"point {p.id}: {' and '.join(positions)} must be whole numbers")
    if not isinstance(p.payload[schema.ROUND_KEY], str):
        raise ValueError(f"point {p.id}: round_key must be text")
    for key in TEXT_KEYS:
        if not isinstance(p.payload.get(key), (str, type(None))):
            raise ValueError(f"point {p.id}: {key} must be text, not {type(p.payload[key]).__name__}")
    for key in TEXT_LIST_KEYS:
        value = p.payload.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"point {p.id}: {key} must be a list of text")
    if not schema.is_utf8(json.dumps(p.payload, ensure_ascii=False)):
        raise ValueError(f"point {p.id}: its payload holds text that cannot be stored as UTF-8 (a lone surrogate)")
    if c in LANES:
        _check_unit(c, p)
    for name, v in p.vectors.items():
        _check_vector(p, name, v, sizes, SPARSE_VECTORS[c])


def _check_unit(c: Collection, p: PointData) -> None:
    """A unit in its own lane, numbered within its round, with vectors to be found by, and a picture
    file exactly when it says it has pixels: a later add sharing that picture reads the file the
    unit names, and one naming none failed there with a bare error. Its text is not held to the
    add limit, which bounds each field given, not a unit's text with captions folded in."""
    payload = p.payload
    if payload.get(schema.MODALITY) != LANES[c]:
        raise ValueError(f"point {p.id}: modality must be {LANES[c]!r} in the {c.value} collection")
    if not 0 <= payload[schema.UNIT_INDEX] <= MAX_SEQ:
        raise ValueError(f"point {p.id}: unit_index must be from 0 to {MAX_SEQ}")
    if not p.vectors:
        raise ValueError(f"point {p.id}: a unit must have vectors")
    if c is Collection.IMAGE and (type(payload.get(schema.HAS_PIXELS)) is not bool
                                  or payload[schema.HAS_PIXELS] != bool(payload.get(schema.IMAGE_PATH))):
        raise ValueError(f"point {p.id}: has_pixels must be true exactly when the unit names an image_path")


def _check_vector(p: PointData, name: str, v: Any, sizes: Dict[str, int], sparse_names: Tuple[str, ...]) -> None:
    """A vector of the store's names and sizes, of elements it stores as they are: Edge takes NaN,
    inf and ``True`` into a vector silently (and a search then ranks by NaN), and fails on a string
    or an index past its 32 bits with an error that names nothing."""
    if isinstance(v, Sparse):
        if name not in sparse_names or len(v.indices) != len(v.values) or not _sparse_indices(v.indices) or not all(
                _element(x) for x in v.values):
            raise ValueError(f"point {p.id}: sparse vector {name!r} must pair distinct whole-number indices "
                             f"(0 to {SPARSE_INDICES - 1}) with finite numbers")
        return
    rows = v if name == schema.VISUAL_REGIONS else [v]
    if name not in sizes or not rows or any(len(row) != sizes[name] for row in rows):
        raise ValueError(f"point {p.id}: vector {name!r} does not fit this store ({sizes})")
    if not all(_element(x) for row in rows for x in row):
        raise ValueError(f"point {p.id}: vector {name!r} must hold finite numbers")


def _sparse_indices(indices: Tuple[Any, ...]) -> bool:
    """Whether ``indices`` are distinct and each one a term Qdrant can store (an unsigned 32-bit number)."""
    return all(type(i) is int and 0 <= i < SPARSE_INDICES for i in indices) and len(set(indices)) == len(indices)


def _element(x: Any) -> bool:
    """Whether ``x`` is a vector element Qdrant stores as given: a number (not ``True``) that stays
    finite as a float32 (NaN fails the comparison)."""
    return type(x) in (int, float) and abs(x) <= FLOAT32_MAX


def _check_rounds(points: Dict[Collection, List[PointData]]) -> None:
    """Every unit belongs to a round of the archive and shares its key, ``seq``, session and time,
    as an add writes them; each round's ``seq`` is one the store compares exactly, and its ids can
    be named again (``_check_ids``). A unit with another ``seq`` than its round's, or a ``seq`` past
    ``MAX_SEQ``, would be taken by the next add for a killed write's leftover and deleted with its
    pictures."""
    rounds = {r.id: r for r in points[Collection.ROUNDS]}
    images: Dict[str, List[PointData]] = {r: [] for r in rounds}
    for c in (Collection.TEXT, Collection.IMAGE):
        for p in points[c]:
            owner = rounds.get(p.payload.get(schema.ROUND_ID))
            if owner is None:
                raise ValueError(f"point {p.id}: its round {p.payload.get(schema.ROUND_ID)} is not in the archive")
            other = [key for key in SHARED_KEYS if p.payload.get(key) != owner.payload.get(key)]
            if other:
                raise ValueError(f"point {p.id}: its {' and '.join(other)} must be its round's ({owner.id})")
            if c is Collection.IMAGE:
                images[owner.id].append(p)
    for r in rounds.values():
        if not 1 <= r.payload[schema.SEQ] <= MAX_SEQ:
            raise ValueError(f"point {r.id}: seq must be from 1 to {MAX_SEQ}, not {r.payload[schema.SEQ]}")
        _check_ids(r, images[r.id])


def _check_ids(r: PointData, images: List[PointData]) -> None:
    """Refuse a round whose key, session or image ids a lookup could never name again (``forget``,
    ``rounds``, images by id): checked as lookups check them (``check_id``: no NUL, not empty,
    UTF-8), not by today's stricter add rules, so a store an earlier version wrote still imports."""
    given = [("round_key", r.payload[schema.ROUND_KEY]), ("session_id", r.payload.get(schema.SESSION_ID))]
    for name, value in given + [("image_id", u.payload.get(schema.IMAGE_ID)) for u in images]:
        try:
            check_id(name, value)
        except VMemInputError as e:
            raise ValueError(f"point {r.id}: {e}") from None


def _check_links(rounds: List[PointData]) -> None:
    """Refuse round links back that loop: walking a round's neighbours would never end."""
    prev = {p.id: p.payload.get(schema.PREV_ROUND_ID) for p in rounds}
    ended: Set[str] = set()  # rounds whose links back are known to end
    for start in prev:
        walked: Set[str] = set()
        r = start
        while r in prev and r not in ended:
            if r in walked:
                raise ValueError(f"round {r}: its links back loop")
            walked.add(r)
            r = prev[r]
        ended |= walked


def _point_to_json(p: PointData) -> Dict[str, Any]:
    vectors = {n: {"indices": list(v.indices), "values": list(v.values)} if isinstance(v, Sparse) else v
               for n, v in p.vectors.items()}
    return {"id": p.id, "payload": p.payload, "vectors": vectors}


def _point_from_json(data: Dict[str, Any]) -> PointData:
    if not isinstance(data, dict) or not isinstance(data.get("payload"), dict) or not isinstance(data.get("vectors"), dict):
        raise ValueError("a point must be an object with a payload object and a vectors object")
    vectors = {n: Sparse(tuple(v["indices"]), tuple(v["values"])) if isinstance(v, dict) else v
               for n, v in data["vectors"].items()}
    return PointData(data["id"], data["payload"], vectors)
