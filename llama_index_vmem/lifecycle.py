"""The life of a memory: list its rounds in order, and forget rounds all or nothing.

Qdrant has no transaction across collections, so ``forget`` snapshots the points it changes
(with their vectors, and the neighbour links it rewrites) and puts them back if any step fails,
including moving its image files aside. Files go first, then units, then the relinks, and round
records last: a process killed mid-forget leaves each round it did not finish listed (perhaps
without its units or pictures, never units without their round, which would crowd searches and
could be reached no more). Before it moves anything, a forget writes which rounds it forgets in
the folder its files go to, so the memory's next open (or, on a server, its next forget) finishes
it: a killed forget is never left half done, sending forgotten words to the model meanwhile.
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from llama_index.core.schema import TextNode

from . import schema
from .errors import VMemInputError
from .images import write_atomically
from .node_parser import optional_str
from .store import Collection, Hit, PointData, Scope
from .store.base import MAX_LIMIT
from .times import TimeLike, as_time, micros_range

if TYPE_CHECKING:
    from .round_memory import RoundMemory
    from .store import LaneStore

logger = logging.getLogger(__name__)

#: A kept round's record before and after ``forget`` points its link past the removed rounds.
Relink = Tuple[PointData, PointData]
#: Folder, inside a memory's image folder, where ``forget`` moves files before deleting them.
TRASH_PREFIX = ".forgetting-"
#: The file in that folder naming the rounds the forget removes (``round_keys``; null: everything).
JOURNAL = "forgetting.json"


@dataclass
class StoredRound:
    """One stored round with its units (text spans, then images) in order."""

    round: TextNode
    units: List[TextNode]


@dataclass(frozen=True)
class Selection:
    """Which rounds of a memory a call means; every given criterion must hold."""

    round_keys: Optional[Iterable[str]] = None
    session_id: Optional[str] = None
    since: Optional[TimeLike] = None
    until: Optional[TimeLike] = None

    @property
    def is_everything(self) -> bool:
        return self.round_keys is None and self.session_id is None and self.since is None and self.until is None


def select(index: "RoundMemory", selection: Selection) -> List[Hit]:
    """The round records ``selection`` picks, in conversation order.

    A time range ``since <= seen < until`` compares each round's own timestamp (any format
    ``dateutil`` reads, such as ``2024-06-17`` or ``1:56 pm on 8 May, 2023``; one with a zone in
    UTC); rounds without a readable timestamp are never in it.
    """
    return index.store.scroll(Collection.ROUNDS, _scope(index, selection))


def _scope(index: "RoundMemory", selection: Selection) -> Scope:
    """The store filter for ``selection``: its rounds by id, session and time (each round's stored ``schema.TIME``)."""
    keys = _check_keys(selection.round_keys)
    ids = tuple(schema.round_id(index.memory_id, k) for k in keys) if keys is not None else None
    since = as_time("since", selection.since) if selection.since is not None else None
    until = as_time("until", selection.until) if selection.until is not None else None
    return index.scope(round_ids=ids, session_id=check_id("session_id", selection.session_id),
                       time_range=micros_range(since, until))


def list_rounds(index: "RoundMemory", selection: Selection, offset: int, limit: int) -> List[StoredRound]:
    """One page of the selected rounds, each with its units. The store walks its ``seq`` index to the
    page, reading only the ids of the rounds before it: a page does not read and sort every round of
    the selection."""
    if any(not isinstance(n, int) or isinstance(n, bool) for n in (offset, limit)) or offset < 0 or limit < 1:
        raise VMemInputError("page", f"offset must be >= 0 and limit >= 1, got offset={offset!r}, limit={limit!r}")
    want = min(offset + limit, MAX_LIMIT)  # no memory holds more rounds than a store call reads (``limit=2**64``: "all")
    ids = index.store.first_round_ids(_scope(index, selection), want)[offset:] if offset < want else []
    page = index.store.scroll(Collection.ROUNDS, index.scope(round_ids=tuple(ids)))
    scope = index.scope(round_ids=tuple(h.id for h in page))
    units: Dict[str, List[TextNode]] = {}
    for collection in (Collection.TEXT, Collection.IMAGE):
        for h in index.store.scroll(collection, scope):
            units.setdefault(h.payload[schema.ROUND_ID], []).append(index.unit(h.id, h.payload))
    return [StoredRound(schema.round_from_payload(h.id, h.payload), sorted(units.get(h.id, []), key=lambda u: u.metadata[schema.UNIT_INDEX]))
            for h in page]


def forget(index: "RoundMemory", selection: Selection) -> int:
    """Remove the selected rounds from every lane, the round store and the image folder.

    Returns how many rounds were removed. Rounds after a removed run are relinked to the round
    before it, so neighbour assembly joins across the gap, and their reply contexts are read anew
    after that round: a forgotten exchange's words no longer find the round that followed it.
    """
    sweep_trash(index)
    rounds = select(index, selection)
    if not rounds and not selection.is_everything:
        return 0
    scope = index.scope() if selection.is_everything else index.scope(round_ids=tuple(h.id for h in rounds))
    store = index.store
    snapshot = {c: store.points(c, scope) for c in Collection}
    relinked = _relinks(index, snapshot[Collection.ROUNDS])
    recontexted = _recontexted(index, [new for _, new in relinked])
    # The caches of derived pixels go too: they may hold copies of what is forgotten.
    files = _own_files(index) if selection.is_everything else unshared_images(index, snapshot[Collection.IMAGE])
    files += [index.delivered_dir, index.attached_dir]
    trash = index.image_dir / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
    keys = None if selection.is_everything else [h.payload[schema.ROUND_KEY] for h in rounds]
    trash.mkdir(parents=True)
    write_atomically(trash / JOURNAL, lambda tmp: tmp.write_text(json.dumps({"round_keys": keys})), durable=True)
    try:
        moved = _move_aside(files, trash)
    except BaseException:
        (trash / JOURNAL).unlink(missing_ok=True)
        raise
    try:
        for collection in (Collection.TEXT, Collection.IMAGE):
            store.delete(collection, scope)
        store.upsert(Collection.TEXT, [new for _, new in recontexted])
        store.upsert(Collection.ROUNDS, [new for _, new in relinked])
        store.delete(Collection.ROUNDS, scope)
    except BaseException:
        _restore(store, snapshot, relinked, recontexted)
        _put_back(moved, trash)
        (trash / JOURNAL).unlink(missing_ok=True)  # undone: nothing to finish
        raise
    shutil.rmtree(trash, ignore_errors=True)
    logger.info("memory %s: forgot %d rounds", index.memory_id, len(snapshot[Collection.ROUNDS]))
    return len(snapshot[Collection.ROUNDS])


def _move_aside(files: List[Path], trash: Path) -> List[Path]:
    """Move ``files`` that exist into ``trash``; all of them, or (on failure) none."""
    moved: List[Path] = []
    try:
        for path in files:
            if path.exists():
                trash.mkdir(parents=True, exist_ok=True)
                path.rename(trash / f"{len(moved)}-{path.name}")
                moved.append(path)
    except BaseException:
        _put_back(moved, trash)
        raise
    return moved


def _put_back(moved: List[Path], trash: Path) -> None:
    """Each moved file back where it was. A cache folder that a reader made anew meanwhile stays
    as it is, and what was set aside for it goes with the trash: it only held derived copies."""
    for i, path in enumerate(moved):
        try:
            (trash / f"{i}-{path.name}").rename(path)
        except OSError as exc:
            logger.warning("not put back after a failed forget: %s (%s)", path, exc)


def sweep_trash(index: "RoundMemory") -> None:
    """Finish what a killed ``forget`` began: the files it had moved aside go, and so do the rounds
    its journal names. Run by the next forget, and on opening a memory of a store no other process
    reaches (the caller holds the memory's write lock)."""
    for trash in index.image_dir.glob(f"{TRASH_PREFIX}*"):
        unfinished = _journal(trash)
        shutil.rmtree(trash, ignore_errors=True)
        if unfinished is not None:
            logger.warning("memory %s: finishing a forget that was stopped part-way", index.memory_id)
            forget(index, unfinished)


def _journal(trash: Path) -> Optional[Selection]:
    """The rounds a stopped forget meant to remove; None without a journal (one that never began
    moving, or was undone). Written whole or not at all, so it reads."""
    try:
        keys = json.loads((trash / JOURNAL).read_text())["round_keys"]
    except FileNotFoundError:
        return None
    return Selection() if keys is None else Selection(round_keys=keys)


def _restore(store: "LaneStore", snapshot: Dict[Collection, List[PointData]], relinked: List["Relink"],
             recontexted: List["Relink"]) -> None:
    for collection in (Collection.TEXT, Collection.IMAGE, Collection.ROUNDS):
        store.upsert(collection, snapshot[collection])
    store.upsert(Collection.TEXT, [old for old, _ in recontexted])
    store.upsert(Collection.ROUNDS, [old for old, _ in relinked])


def _relinks(index: "RoundMemory", removed: List[PointData]) -> List["Relink"]:
    """``(old, new)`` records of the kept rounds whose previous round is being removed."""
    prev_of = {p.id: p.payload.get(schema.PREV_ROUND_ID) for p in removed}
    followers = index.store.points(Collection.ROUNDS, index.scope(prev_round_ids=tuple(prev_of)))
    out = []
    for old in followers:
        if old.id in prev_of:
            continue
        prev = old.payload.get(schema.PREV_ROUND_ID)
        while prev in prev_of:
            prev = prev_of[prev]
        out.append((old, PointData(old.id, {**old.payload, schema.PREV_ROUND_ID: prev}, old.vectors)))
    return out


def _recontexted(index: "RoundMemory", followers: List[PointData]) -> List["Relink"]:
    """``(old, new)`` text units of the relinked ``followers`` (their new round records), each new one
    with its reply context read after the round it now follows (none for a memory built without)."""
    if not followers or not index.build_options["reply_context"]:
        return []
    before_ids = tuple({p.payload[schema.PREV_ROUND_ID] for p in followers if p.payload.get(schema.PREV_ROUND_ID)})
    before = {h.id: h.payload.get(schema.TEXT, "") for h in index.store.scroll(Collection.ROUNDS, index.scope(round_ids=before_ids))} \
        if before_ids else {}
    units = index.store.points(Collection.TEXT, index.scope(round_ids=tuple(p.id for p in followers)))
    by_round: Dict[str, List[PointData]] = {}
    for u in sorted(units, key=lambda u: u.payload[schema.UNIT_INDEX]):
        by_round.setdefault(u.payload[schema.ROUND_ID], []).append(u)
    vectors = index.reply_context_vectors([([schema.unit_from_payload(u.id, u.payload) for u in by_round.get(p.id, [])],
                                            before.get(p.payload.get(schema.PREV_ROUND_ID), "")) for p in followers])
    return [(u, PointData(u.id, u.payload, {**u.vectors, schema.TEXT_CONTEXT_SPARSE: vectors[u.id]})) for u in units]


def unshared_images(index: "RoundMemory", removed: Sequence[Union[PointData, Hit]]) -> List[Path]:
    """Saved image files of the removed units that no other unit still points at, in this memory's
    image folder. Files are named by their content's hash, so names compare: one file may be
    recorded by two spellings of its path, or by the path it had before its store was moved."""
    names = {Path(p.payload[schema.IMAGE_PATH]).name for p in removed if p.payload.get(schema.IMAGE_PATH)}
    if not names:
        return []
    gone = {p.id for p in removed}
    kept = {Path(h.payload[schema.IMAGE_PATH]).name for h in index.store.scroll(Collection.IMAGE, index.scope())
            if h.id not in gone and h.payload.get(schema.IMAGE_PATH)}
    return sorted(index.image_dir / name for name in names - kept)  # this memory's own files, never a copy's original


def _own_files(index: "RoundMemory") -> List[Path]:
    """Every file in the memory's image folder, whether a unit records it or not: a picture saved by
    an add that was killed before its round was written is recorded by nothing that is kept."""
    return sorted(p for p in index.image_dir.iterdir() if p.is_file()) if index.image_dir.is_dir() else []


def _check_keys(keys: Optional[Iterable[str]]) -> Optional[List[str]]:
    if keys is None:
        return None
    if isinstance(keys, (str, bytes, Mapping)) or not isinstance(keys, Iterable):
        raise VMemInputError("round_keys", f"must be a list of round keys, got {keys!r}")
    checked = [check_id("round_keys", key) for key in keys]
    if None in checked:
        raise VMemInputError("round_keys", "a round key is None")
    return checked


def check_id(item: str, value: object) -> Optional[str]:
    """A session id or round key as ``add_rounds`` stores it (a number means its text), or None.
    Only what no write ever stored is refused, so a key an earlier version took is still reached."""
    text = optional_str(item, item, value)
    if text == "":
        raise VMemInputError(item, "must not be empty")
    if text is not None and not schema.is_utf8(text):
        raise VMemInputError(item, f"{value!r} cannot be stored as UTF-8")
    return text
