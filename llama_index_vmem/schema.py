"""Ids, payload keys and node <-> payload conversion: the one vocabulary every module shares.

A *round* is one user/assistant exchange; its *units* are its text spans and images. Rounds and
units are LlamaIndex nodes in memory and Qdrant points on disk; this module is the only place
that knows how one becomes the other, so a payload key is renamed here or nowhere.
"""

from __future__ import annotations

import os
import re
import unicodedata
import uuid
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Dict, List, Optional, Sequence, Union

from llama_index.core.schema import (
    ImageNode,
    QueryBundle,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)

from .errors import VMemInputError

# Payload keys (points of every lane and of the round store).
MEMORY_ID = "memory_id"
ROUND_ID = "round_id"
ROUND_KEY = "round_key"
SEQ = "seq"
SESSION_ID = "session_id"
TIMESTAMP = "timestamp"
#: The timestamp's reading in microseconds since 1970 (``times.stored_time``; ``times.NO_TIME``: none
#: readable), which time ranges filter on.
TIME = "time"
TEXT = "text"
# Unit-only keys.
UNIT_INDEX = "unit_index"
MODALITY = "modality"
ROLE = "role"
IMAGE_ID = "image_id"
IMAGE_PATH = "image_path"
CAPTION = "caption"
HAS_PIXELS = "has_pixels"
# Round-only keys.
IMAGE_IDS = "image_ids"
UNIT_IDS = "unit_ids"
PREV_ROUND_ID = "prev_round_id"
#: A hash of the exchange as it was given (``node_parser.content_hash``), which finds a round added
#: again; rounds stored before it existed have none, and are never taken for one added again.
CONTENT_HASH = "content_hash"

#: Keys that get a payload index in every collection (tenant key first).
INDEXED_KEYWORDS = (MEMORY_ID, ROUND_ID, SESSION_ID, PREV_ROUND_ID, IMAGE_ID, CONTENT_HASH, ROLE)
INDEXED_INTEGERS = (SEQ, TIME)

# Named vectors.
TEXT_DENSE = "text_dense"
TEXT_SPARSE = "text_sparse"
#: BM25 of a text unit read in its context: the exchange before its round, then its own round up to it
#: (``reply_context_texts``), so a reply ("Her name is Mochi.") is found by what it answers.
TEXT_CONTEXT_SPARSE = "text_context_sparse"
VISUAL = "visual"
#: The whole image plus 2x2 overlapping tiles, compared by MaxSim (DeliverMem's R1; opt-in per store).
VISUAL_REGIONS = "visual_regions"


class Lane(str, Enum):
    """A lane indexes the units of one modality."""

    TEXT = "text"
    IMAGE = "image"


class Role(str, Enum):
    USER = "user"
    ASSISTANT = "assistant"
    AUDIO = "audio"
    IMAGE = "image"


_NAMESPACE = uuid.UUID("6f1d3c1e-8a51-4b7e-9a8e-2f0c6d6b9a10")


def round_id(memory_id: str, round_key: str) -> str:
    """Point id of a round: derived from (memory, key), so two memories never share one."""
    return str(uuid.uuid5(_NAMESPACE, f"{memory_id}\x00{round_key}"))


def unit_id(memory_id: str, round_key: str, index: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{memory_id}\x00{round_key}\x00{index}"))


def delivered_id(memory_id: str, position: int, content: str) -> str:
    """Id of a node the delivery stage makes: its place in the delivery and what it holds, so the
    same retrieval delivers the same ids in any process (a source can be cited across turns)."""
    return str(uuid.uuid5(_NAMESPACE, f"{memory_id}\x00delivered\x00{position}\x00{content}"))


def node_to_payload(node: TextNode) -> Dict[str, Any]:
    """The payload a round or unit node is stored with (a unit's vectors are added by the store)."""
    payload = dict(node.metadata)
    payload[TEXT] = node.text
    return payload


def unit_from_payload(point_id: str, payload: Dict[str, Any]) -> TextNode:
    """Rebuild a unit node: an ``ImageNode`` for images (path, never base64), else a ``TextNode``."""
    metadata = {k: v for k, v in payload.items() if k != TEXT}
    parent = RelatedNodeInfo(node_id=payload[ROUND_ID])
    if payload.get(MODALITY) == Lane.IMAGE.value:
        node: TextNode = ImageNode(
            id_=point_id,
            text=payload.get(TEXT, ""),
            image_path=payload.get(IMAGE_PATH),
            metadata=metadata,
        )
    else:
        node = TextNode(id_=point_id, text=payload.get(TEXT, ""), metadata=metadata)
    node.relationships[NodeRelationship.PARENT] = parent
    node.excluded_embed_metadata_keys = list(metadata)
    node.excluded_llm_metadata_keys = list(metadata)
    return node


def round_from_payload(point_id: str, payload: Dict[str, Any]) -> TextNode:
    """Rebuild a round parent node with its CHILD links and its PREVIOUS round link."""
    metadata = {k: v for k, v in payload.items() if k != TEXT}
    node = TextNode(id_=point_id, text=payload.get(TEXT, ""), metadata=metadata)
    node.relationships[NodeRelationship.CHILD] = [
        RelatedNodeInfo(node_id=uid) for uid in payload.get(UNIT_IDS, [])
    ]
    if payload.get(PREV_ROUND_ID):
        node.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=payload[PREV_ROUND_ID])
    node.excluded_embed_metadata_keys = list(metadata)
    node.excluded_llm_metadata_keys = list(metadata)
    return node


def block_header(rounds: List[Dict[str, Any]]) -> str:
    """Readable identity and time of a run of rounds: ``seen 2024-06-17, session D1, rounds D1:2 to D1:4``."""
    first, last = rounds[0], rounds[-1]
    parts = []
    if first.get(TIMESTAMP):
        parts.append(f"seen {first[TIMESTAMP]}")
    if first.get(SESSION_ID):
        parts.append(f"session {first[SESSION_ID]}")
    keys = first.get(ROUND_KEY, "?") if len(rounds) == 1 else f"{first.get(ROUND_KEY, '?')} to {last.get(ROUND_KEY, '?')}"
    parts.append(f"round{'s' if len(rounds) > 1 else ''} {keys}")
    return ", ".join(parts)


#: A line ``seen_line`` writes: ``[seen 2024-07-03, round D1:4]`` or ``[seen at a time not recorded, round D1:4]``.
SEEN_LINE = re.compile(r"\[seen .*, round .*\]")


def encoding_text(unit: TextNode, dated: bool) -> str:
    """What a unit is searched by (dense and BM25): its text, after its round's timestamp where
    ``dated`` and the round has one, ``[8 May, 2023] Ann: ...``. The stored text stays as given."""
    when = unit.metadata.get(TIMESTAMP)
    return f"[{when}] {unit.text}" if dated and when else unit.text


#: How a text span names a picture shared in it (``folded_image``): ``[Image D1:IMG_1]``.
_FOLDED_IMAGE = re.compile(r"\[Image [^\]\n]*\]")


def folded_image(image_id: str, caption: Optional[str]) -> str:
    """A picture as the span of whoever shared it holds it: ``[Image id] caption``, so the text lane
    matches what a picture shows (the paper's folding)."""
    return f"[Image {image_id}] {caption}" if visible(caption) else f"[Image {image_id}]"


def without_pictures(text: str) -> str:
    """A span's text without the names of the pictures folded into it (their captions stay)."""
    return _FOLDED_IMAGE.sub(" ", text)


def reply_context_texts(units: Sequence[TextNode], previous: str, dated: bool) -> Dict[str, str]:
    """What each text unit of one round (``units``, in order) is searched by in its context: the text
    of the round before it in its conversation (``previous``, "" for none), then its own round's
    text units up to and including itself, after the round's timestamp where ``dated``.

    A reply rarely names what it answers: "Her name is Mochi." follows "Here is my new cat! / What's
    her name?". Read after that exchange, the reply is found by "cat" and "name" too."""
    seen = [previous] if visible(previous) else []
    out: Dict[str, str] = {}
    for unit in units:
        seen.append(unit.text)
        out[unit.node_id] = encoding_text(TextNode(text="\n".join(seen), metadata=unit.metadata), dated)
    return out


def dated_texts(rounds: List[TextNode]) -> List[str]:
    """Each round's text, after a ``seen_line`` where it was seen at another time than the round before it."""
    return [(seen_line(prev.metadata, r.metadata) if prev else "") + r.text for prev, r in zip([None, *rounds], rounds)]


def seen_line(previous: Dict[str, Any], current: Dict[str, Any]) -> str:
    """A line giving a round its own time where it differs from the round before it in the block.

    The block header carries the first round's time only; without this a neighbour delivered from
    outside a time filter, or a session running over several days, would reach the model dated by
    another round's time (a round with no time after one with a time, too)."""
    when, before = current.get(TIMESTAMP), previous.get(TIMESTAMP)
    if when == before or not (when or before):
        return ""
    return f"[seen {when or 'at a time not recorded'}, round {current.get(ROUND_KEY, '?')}]\n"


@dataclass
class VMemQueryBundle(QueryBundle):
    """A ``QueryBundle`` whose attached image may also (or only) be known by a caption.

    ``image_caption`` fills the attached-image note; an image given by caption alone (no
    ``image_path``) is matched through stored captions, never through a made-up visual vector.
    """

    image_caption: Optional[str] = None


def as_query(query: Union[str, QueryBundle]) -> QueryBundle:
    """A query as retrieval and answering read it: a string becomes a ``QueryBundle``, and an image
    asked about in no words (``query_str=None``) asks with empty text, not the text "None". An
    ``image_path`` of another type is refused here: read as text, 123 was a missing file "123"."""
    if isinstance(query, str):
        return QueryBundle(query)
    if query.image_path is not None and not isinstance(query.image_path, (str, os.PathLike)):
        raise VMemInputError("query image", f"image_path must be a str path or URL, or a path, got {type(query.image_path).__name__}")
    return replace(query, query_str="") if query.query_str is None else query


def query_image_caption(query: QueryBundle) -> Optional[str]:
    """The attached image's caption, for any ``QueryBundle`` (only ``VMemQueryBundle`` carries one)."""
    caption = getattr(query, "image_caption", None)
    return caption if visible(caption) else None


#: Unicode categories that print nothing: controls, format marks, separators.
_INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp"}


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be stored and encoded: a lone surrogate, as a careless decode leaves, cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def visible(text: Optional[str]) -> bool:
    """Whether ``text`` shows anything: not only spaces, line breaks and invisible marks (zero-width
    spaces, direction marks), which as an id look like no id and as content say nothing."""
    return bool(text) and any(not c.isspace() and unicodedata.category(c) not in _INVISIBLE for c in text)
