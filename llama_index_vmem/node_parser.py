"""Conversations -> round parent nodes with one child node per unit (zero LLM calls).

A round is one user message and the assistant message after it. Each text span (user text,
assistant text, ``[Audio: <transcript>]``) is a ``TextNode`` unit and each image an ``ImageNode``
unit. Image captions are folded into the text of the message that shared the image (V-Mem,
Appendix H) and kept on the image unit. Images are validated here, before anything is written;
the index writes their bytes when it commits the round.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union

from llama_index.core.base.llms.types import AudioBlock, ChatMessage, ImageBlock, MessageRole, TextBlock
from llama_index.core.node_parser.interface import NodeParser
from llama_index.core.schema import (
    BaseNode,
    ImageDocument,
    ImageNode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from pydantic import Field, PrivateAttr

from . import images, schema, times
from .schema import is_utf8, visible
from .errors import VMemInputError

#: Turns an audio block into its transcript.
Transcriber = Callable[[AudioBlock], str]
#: The roles a reply comes under: providers name the assistant differently (Cohere, Gemini).
ASSISTANT_ROLES = (MessageRole.ASSISTANT, MessageRole.CHATBOT, MessageRole.MODEL)
#: Instructions to the model rather than conversation (``developer`` is OpenAI's newer ``system``).
INSTRUCTION_ROLES = (MessageRole.SYSTEM, MessageRole.DEVELOPER)


@dataclass
class ImageInput:
    """One image of a round: pixels (path, bytes or URL) and/or a caption, and a readable id."""

    image_id: Optional[str] = None
    path: Optional[str] = None
    data: Optional[bytes] = None
    url: Optional[str] = None
    caption: Optional[str] = None
    role: str = schema.Role.USER.value
    #: ``data`` already read and checked (by the message parser), so storing it decodes it no second
    #: time; only what ``images.validate`` returned counts.
    checked: Optional[images.LoadedImage] = field(default=None, repr=False, compare=False)

    @property
    def has_pixels(self) -> bool:
        return any(x is not None for x in (self.path, self.data, self.url))


@dataclass
class RoundInput:
    """A round before parsing; ``round_key`` defaults to ``<session>:<seq>``."""

    user: str = ""
    assistant: str = ""
    images: List[ImageInput] = field(default_factory=list)
    audio_transcripts: List[str] = field(default_factory=list)
    session_id: Optional[str] = None
    #: Text, a ``date``/``datetime`` or epoch seconds, stored as ``times.stored_timestamp`` says.
    timestamp: Optional[Union[str, datetime.date, int, float]] = None
    round_key: Optional[str] = None
    #: What the caller gave it as (``round 3``, ``message 4``): errors name that, not a default key
    #: the caller never saw.
    origin: Optional[str] = field(default=None, compare=False, repr=False)

    def item(self, fallback: Union[int, str]) -> str:
        """How errors name this round: as the caller gave it, else by its key, else ``fallback``
        (its place in the call, or the default key it is about to get)."""
        shown = self.round_key is not None and visible(str(self.round_key))
        return self.origin or f"round {_printable(str(self.round_key)[:200]) if shown else fallback}"


@dataclass
class ParsedRound:
    """A round ready to encode and write: nodes plus the image bytes still to be saved."""

    round_node: TextNode
    units: List[TextNode]
    pending_images: Dict[Path, images.LoadedImage]

    @property
    def round_key(self) -> str:
        return self.round_node.metadata[schema.ROUND_KEY]

    @property
    def session_id(self) -> Optional[str]:
        return self.round_node.metadata.get(schema.SESSION_ID)


def default_round_key(session_id: Optional[str], n: int) -> str:
    """The key of a round given none: ``D2:3`` in session ``D2``, ``R17`` outside any session."""
    return f"{session_id}:{n}" if session_id else f"R{n}"


def last_default_number(session_id: str, keys: Iterable[str]) -> int:
    """The highest ``n`` of the keys in ``session_id``'s default form (``D2:n``), 0 for none."""
    prefix = f"{session_id}:"
    numbers = (key[len(prefix):] for key in keys if key.startswith(prefix))
    return max((int(n) for n in numbers if _DEFAULT_NUMBER.fullmatch(n)), default=0)


def round_input_from_dict(item: str, data: Mapping[str, Any], reading: times.TimestampReading = times.TimestampReading()) -> RoundInput:
    """``{user, assistant, images: [{image_id, path|bytes|url, caption, role}], audio, session_id, timestamp, round_key}``.

    An image's ``role`` (``user`` by default) says whose message shared it: its caption is folded there.
    """
    if isinstance(data, ChatMessage) or (isinstance(data, Mapping) and {"role", "content"} & set(data) and not {"user", "assistant"} & set(data)):
        raise VMemInputError(item, "is a chat message, not a round dict: give chat messages to add_messages([...]), "
                                   "or write a round as {'user': ..., 'assistant': ...}")
    if not isinstance(data, Mapping):
        raise VMemInputError(item, f"a round must be a dict, got {type(data).__name__}")
    key = data.get("round_key")
    if isinstance(key, (str, int)) and not isinstance(key, bool) and visible(str(key)):
        item = f"round {_printable(str(key)[:200])}"
    known = {"user", "assistant", "images", "audio", "session_id", "timestamp", "round_key"}
    unknown = set(data) - known
    if unknown:
        raise VMemInputError(item, f"unknown round fields {sorted(unknown, key=repr)} (known: {sorted(known)})")
    raw_images = [] if data.get("images") is None else data["images"]  # not `or`: an array has no truth value
    if not isinstance(raw_images, (list, tuple)):
        raise VMemInputError(item, "'images' must be a list of dicts")
    parsed_images = []
    for i, img in enumerate(raw_images, start=1):
        if not isinstance(img, Mapping):
            raise VMemInputError(f"{item} image {i}", f"must be a dict, got {type(img).__name__}")
        extra = set(img) - {"image_id", "path", "bytes", "url", "caption", "role"}
        if extra:
            raise VMemInputError(_image_item(item, img.get("image_id"), i), f"unknown image fields {sorted(extra, key=repr)}")
        parsed_images.append(ImageInput(image_id=img.get("image_id"), path=img.get("path"), data=img.get("bytes"),
                                        url=img.get("url"), caption=img.get("caption"),
                                        role=img.get("role", schema.Role.USER.value)))
    raw = RoundInput(user=data.get("user", ""), assistant=data.get("assistant", ""), images=parsed_images,
                     audio_transcripts=[] if data.get("audio") is None else data["audio"], session_id=data.get("session_id"),
                     timestamp=data.get("timestamp"), round_key=data.get("round_key"), origin=item)
    return checked_round(item, raw, reading)


def checked_round(item: str, r: RoundInput, reading: times.TimestampReading = times.TimestampReading()) -> RoundInput:
    """``r`` with every field checked and in its stored form (ids as text, a date in ISO 8601): a
    round built by hand is refused where a dict with the same values is, naming ``item``, rather
    than failing in the store with an error that names nothing."""
    for key in ("user", "assistant"):
        if not isinstance(getattr(r, key), str):
            raise VMemInputError(item, f"'{key}' must be a string, got {type(getattr(r, key)).__name__}")
    if not isinstance(r.images, (list, tuple)):
        raise VMemInputError(item, f"'images' must be a list, got {type(r.images).__name__}")
    images = []
    for i, img in enumerate(r.images, start=1):
        if not isinstance(img, ImageInput):
            raise VMemInputError(f"{item} image {i}", f"must be an ImageInput, got {type(img).__name__}")
        name = _image_item(item, img.image_id, i)
        if img.role not in (schema.Role.USER.value, schema.Role.ASSISTANT.value):
            raise VMemInputError(name, f"'role' must be 'user' or 'assistant', got {img.role!r}")
        images.append(replace(img, image_id=optional_str(name, "image_id", img.image_id),
                              caption=optional_text(name, "caption", img.caption)))
    audio = r.audio_transcripts
    if not isinstance(audio, (list, tuple)) or not all(isinstance(a, str) for a in audio):
        raise VMemInputError(item, "'audio' must be a list of transcript strings")
    return replace(r, images=images, audio_transcripts=list(audio),
                   session_id=optional_str(item, "session_id", r.session_id, empty_ok=False),
                   timestamp=optional_timestamp(item, r.timestamp, reading),
                   round_key=optional_str(item, "round_key", r.round_key, empty_ok=False))


def _image_item(item: str, image_id: Any, position: int) -> str:
    """How errors name an image: by its id where that is text, else by its place in the round (from 1)."""
    return f"{item} image {image_id if isinstance(image_id, str) else position}"


def optional_str(item: str, name: str, value: Any, empty_ok: bool = True) -> Optional[str]:
    """``value`` as a string, or None; an id (``empty_ok=False``) must also have a visible character."""
    if value is None:
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise VMemInputError(item, f"'{name}' must be a string, got {type(value).__name__}")
    if "\x00" in str(value):  # ids are derived from keys joined by NUL
        raise VMemInputError(item, f"'{name}' must not contain NUL")
    if not empty_ok and not visible(str(value)):
        raise VMemInputError(item, f"'{name}' must have a visible character (leave it out for the default)")
    return str(value)


def optional_timestamp(item: str, value: Any, reading: times.TimestampReading = times.TimestampReading()) -> Optional[str]:
    """A round's timestamp as stored (``times.stored_timestamp``), or an error naming ``item``."""
    if isinstance(value, str):
        optional_str(item, "timestamp", value)  # refuses NUL, as in every stored string
    return reading.stored(item, value)


def optional_text(item: str, name: str, value: Any) -> Optional[str]:
    """``value`` if it is text, or None: a caption is words, so a number is refused, not taken as
    its digits as an id's number is (``optional_str``)."""
    if value is not None and not isinstance(value, str):
        raise VMemInputError(item, f"'{name}' must be a string, got {type(value).__name__}")
    return value


#: The most characters one text field may hold: more than any LLM's context window takes (so any turn a
#: chat model can answer fits), while a round's points stay inside a Qdrant server's 32 MB request
#: limit (upserts are batched by size too, ``store.server.REQUEST_BYTES``).
MAX_TEXT_CHARS = 1_000_000


def check_text(rounds: Sequence[RoundInput]) -> None:
    """Refuse text that cannot be stored, naming the round and field, before the store sees any of
    it: text that is not UTF-8 (a lone surrogate, as a careless decode leaves) fails in the store
    with a bare error, and a session id is used in a store filter before the round is parsed; text
    over ``MAX_TEXT_CHARS`` would be stored whole while only its start is ever embedded."""
    for i, r in enumerate(rounds, start=1):
        fields = {"user": r.user, "assistant": r.assistant, "session_id": r.session_id, "timestamp": r.timestamp,
                  "round_key": r.round_key}
        fields.update({f"audio {n}": text for n, text in enumerate(r.audio_transcripts, start=1)})
        for n, img in enumerate(r.images, start=1):
            fields.update({f"image {n} image_id": img.image_id, f"image {n} caption": img.caption})
        item = r.item(i)
        for name, value in fields.items():
            if not isinstance(value, str):
                continue
            if len(value) > MAX_TEXT_CHARS:
                raise VMemInputError(item, f"'{name}' is {len(value)} characters, over the {MAX_TEXT_CHARS} limit")
            if not is_utf8(value):
                raise VMemInputError(item, f"'{name}' is not valid UTF-8 text (it holds a lone surrogate)")


def refuse_repeated_keys(keys: Sequence[str]) -> None:
    """A key names one round: a call giving it to two is refused, naming it."""
    duplicates = [k for k, n in Counter(keys).items() if n > 1]
    if duplicates:
        raise VMemInputError(f"round {min(duplicates)}", "duplicate round key in this call")


def content_hash(r: RoundInput) -> str:
    """What makes an exchange the same one added again: its text, audio transcripts, pictures (by
    their pixels' bytes, so a path, bytes or URL of one picture are alike, with their ids, captions
    and roles as given), session and timestamp; not its key, which the memory compares apart.
    ``r``'s images must be loaded (``RoundNodeParser.load_images``)."""
    pictures = [[img.image_id, image_identity(img), img.caption, img.role] for img in r.images]
    content = [r.user, r.assistant, r.audio_transcripts, pictures, r.session_id, r.timestamp]
    return hashlib.sha256(json.dumps(content, ensure_ascii=False).encode("utf-8")).hexdigest()


#: The number of a default key (``D2:17``): ASCII digits, as many as an int holds without a fuss.
_DEFAULT_NUMBER = re.compile(r"[0-9]{1,18}")


def _printable(text: str) -> str:
    """``text`` as an error message can print it, a lone surrogate escaped."""
    return text if is_utf8(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


class RoundNodeParser(NodeParser):
    """Parse chat messages, round dicts or documents into round and unit nodes.

    Parents are linked to children with PARENT/CHILD and rounds to rounds with PREVIOUS/NEXT;
    ``include_prev_next_rel`` is off because LlamaIndex would otherwise chain units together.
    """

    memory_id: str = Field(default="default", description="Memory the parsed rounds belong to.")
    image_dir: Optional[str] = Field(default=None, description="Where image bytes will be saved.")
    include_prev_next_rel: bool = Field(default=False)
    _transcriber: Optional[Transcriber] = PrivateAttr(default=None)

    def __init__(self, transcriber: Optional[Transcriber] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._transcriber = transcriber

    @classmethod
    def class_name(cls) -> str:
        return "RoundNodeParser"

    # -- public entry points ------------------------------------------------------------------

    def load_images(self, r: RoundInput, item: str, key: Optional[str] = None) -> RoundInput:
        """``r`` with every image's pixels read and checked, so parsing only names and places them:
        a URL is fetched and a picture decoded here, before the caller takes its write lock. Errors
        name an image by its id, which needs the round's ``key`` when the image has none of its own
        (else by its position)."""
        ids = image_ids(r.images, key, item) if key else [i.image_id if visible(i.image_id) else str(n) for n, i in enumerate(r.images, start=1)]
        loaded = []
        for img, image_id in zip(r.images, ids):
            name = f"{item} image {image_id}"
            if not img.has_pixels and not visible(img.caption):
                raise VMemInputError(name, "has neither pixels nor a caption")
            if not img.has_pixels:  # a caption alone: a ``checked`` has no bytes given to vouch for
                img = replace(img, checked=None)
            elif not images.validated(img.checked):
                source = images.read_source(name, path=img.path, data=img.data, url=img.url, fence=self._fence())
                img = replace(img, checked=images.validate(name, source))
            loaded.append(img)
        return replace(r, images=loaded)

    def parse_rounds(self, rounds: Sequence[RoundInput], first_seq: int = 1) -> List[ParsedRound]:
        """Parse rounds numbered from ``first_seq``; each round links to the one before it in its session."""
        parsed = [self._parse_round(r, first_seq + i) for i, r in enumerate(rounds)]
        refuse_repeated_keys([p.round_key for p in parsed])
        last: Dict[Optional[str], ParsedRound] = {}
        for nxt in parsed:
            prev = last.get(nxt.session_id)
            if prev is not None:
                prev.round_node.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=nxt.round_node.node_id)
                nxt.round_node.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=prev.round_node.node_id)
            last[nxt.session_id] = nxt
        return parsed

    def rounds_from_messages(
        self,
        messages: Sequence[ChatMessage],
        session_id: Optional[str] = None,
        timestamp: Optional[Union[str, datetime.date, int, float]] = None,
        reading: times.TimestampReading = times.TimestampReading(),
    ) -> List[RoundInput]:
        """Pair each user message with the assistant message after it.

        Per-message extras travel in ``additional_kwargs``: ``image_ids`` and ``image_captions``
        (one per image block, in order) and ``transcripts`` (one per audio block, in order).
        System and developer messages are skipped; a reply may come under any of ``ASSISTANT_ROLES``;
        any other order than user, assistant, user, ... is an error.
        """
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise VMemInputError("messages", f"must be a list of ChatMessage, got {type(messages).__name__}")
        session_id = optional_str("messages", "session_id", session_id, empty_ok=False)
        timestamp = optional_timestamp("messages", timestamp, reading)
        rounds: List[RoundInput] = []
        awaiting_reply = False
        for i, msg in enumerate(messages, start=1):
            item = f"message {i}"
            if not isinstance(msg, ChatMessage):
                hint = ": build it with ChatMessage(role=..., content=...)" if isinstance(msg, Mapping) else ""
                raise VMemInputError(item, f"must be a ChatMessage, got {type(msg).__name__}{hint}")
            if msg.role in INSTRUCTION_ROLES:
                continue
            if msg.role == MessageRole.USER:
                if awaiting_reply:
                    raise VMemInputError(item, "two user messages in a row: a round is a user message then an assistant reply")
                asked_at = i
                rounds.append(RoundInput(session_id=session_id, timestamp=timestamp, origin=item))
                self._fill_from_message(item, msg, rounds[-1], schema.Role.USER.value)
            elif msg.role in ASSISTANT_ROLES:
                if not awaiting_reply:
                    raise VMemInputError(item, "assistant message without a user message before it")
                self._fill_from_message(item, msg, rounds[-1], schema.Role.ASSISTANT.value)
                rounds[-1].origin = f"messages {asked_at}-{i}"  # the exchange, from its user message to this reply
            else:
                known = ", ".join(r.value for r in (MessageRole.USER, *ASSISTANT_ROLES, *INSTRUCTION_ROLES))
                raise VMemInputError(item, f"role {msg.role.value!r} is not one of {known}")
            awaiting_reply = msg.role == MessageRole.USER
        if not rounds:
            raise VMemInputError("messages", "conversation is empty")
        return rounds

    # -- NodeParser interface -----------------------------------------------------------------

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> List[BaseNode]:
        """Each document is one round: its text is the user span, an ``ImageDocument`` adds its image."""
        rounds = []
        for doc in nodes:
            img = []
            if isinstance(doc, (ImageDocument, ImageNode)) and (doc.image_path or doc.image or doc.image_url):
                img.append(ImageInput(path=doc.image_path, url=doc.image_url, caption=doc.text or None,
                                      data=doc.resolve_image().read() if doc.image and not doc.image_path else None))
            rounds.append(RoundInput(user="" if img else doc.get_content(), images=img,
                                     session_id=doc.metadata.get(schema.SESSION_ID),
                                     timestamp=doc.metadata.get(schema.TIMESTAMP),
                                     round_key=doc.metadata.get(schema.ROUND_KEY)))
        out: List[BaseNode] = []
        for parsed in self.parse_rounds(rounds, first_seq=kwargs.get("first_seq", 1)):
            out.append(parsed.round_node)
            out.extend(parsed.units)
        return out

    # -- internals ----------------------------------------------------------------------------

    def _fill_from_message(self, item: str, msg: ChatMessage, target: RoundInput, role: str) -> None:
        ids, captions, transcripts = (message_extra(item, msg, name) for name in ("image_ids", "image_captions", "transcripts"))
        texts: List[str] = []
        n_img = n_audio = 0
        for block in msg.blocks:
            if isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, ImageBlock):
                target.images.append(self._image_from_block(f"{item} image {n_img + 1}", block, ids, captions, n_img, role))
                n_img += 1
            elif isinstance(block, AudioBlock):
                target.audio_transcripts.append(self._transcribe(f"{item} audio {n_audio + 1}", block, transcripts, n_audio))
                n_audio += 1
            else:
                raise VMemInputError(item, f"unsupported content block {type(block).__name__}")
        for name, given, blocks in (("image_ids", ids, n_img), ("image_captions", captions, n_img), ("transcripts", transcripts, n_audio)):
            if len(given) > blocks:  # an entry for no block: a list out of step with its blocks, or a block lost
                raise VMemInputError(item, f"additional_kwargs[{name!r}] has {len(given)} entries for {blocks} "
                                           f"{'audio' if name == 'transcripts' else 'image'} block(s): one per block, in order")
        text = "\n".join(t for t in texts if visible(t))
        if role == schema.Role.USER.value:
            target.user = text
        else:
            target.assistant = text

    def _image_from_block(self, item: str, block: ImageBlock, ids: List[Any], captions: List[Any], i: int, role: str) -> ImageInput:
        """The block's image, read and checked now: a chat engine refuses a turn whose image it
        cannot store before its LLM answers, and the bytes in hand are stored without a second read
        (a URL is fetched once, outside the memory's write lock)."""
        data = block_bytes(block)
        image = ImageInput(
            image_id=optional_str(item, "image_id", ids[i]) if i < len(ids) else None,
            path=str(block.path) if block.path is not None else None,
            data=data,
            url=str(block.url) if block.url is not None and block.path is None and data is None else None,
            caption=optional_text(item, "caption", captions[i]) if i < len(captions) else None,
            role=role,
        )
        if not image.has_pixels:
            if not visible(image.caption):
                raise VMemInputError(item, "has neither pixels nor a caption")
            return image
        raw = images.read_source(item, path=image.path, data=image.data, url=image.url, fence=self._fence())
        checked = images.validate(item, raw)
        return replace(image, path=None, url=None, data=checked.data, checked=checked)

    def _transcribe(self, item: str, block: AudioBlock, transcripts: List[Any], i: int) -> str:
        if i < len(transcripts):
            if not isinstance(transcripts[i], str):
                raise VMemInputError(item, f"transcript must be a string, got {type(transcripts[i]).__name__}")
            return transcripts[i]
        if self._transcriber is None:
            raise VMemInputError(item, "audio needs a transcript (additional_kwargs['transcripts']) or a transcriber")
        text = self._transcriber(block)
        if not isinstance(text, str):
            raise VMemInputError(item, f"transcriber returned {type(text).__name__}, not str")
        return text

    def _parse_round(self, r: RoundInput, seq: int) -> ParsedRound:
        session = r.session_id
        key = r.round_key or default_round_key(session, seq)
        item = r.item(key)
        rid = schema.round_id(self.memory_id, key)
        shared = {
            schema.MEMORY_ID: self.memory_id,
            schema.ROUND_ID: rid,
            schema.ROUND_KEY: key,
            schema.SESSION_ID: session,
            schema.TIMESTAMP: r.timestamp,
            schema.TIME: times.stored_time(r.timestamp),
            schema.SEQ: seq,
        }
        pending: Dict[Path, images.LoadedImage] = {}
        image_units: List[Dict[str, Any]] = []
        r = self.load_images(r, item, key)
        for img, image_id in zip(r.images, image_ids(r.images, key, item)):
            path = None
            if img.checked is not None:
                loaded = img.checked
                path = self._image_path(loaded)
                pending[path] = loaded
            image_units.append({"image_id": image_id, "path": path, "caption": img.caption if visible(img.caption) else ""})

        spans = round_spans(r, key)
        units: List[TextNode] = []
        for role, text in spans:
            if visible(text):
                units.append(self._text_unit(shared, len(units), role, text))
        for img in image_units:
            units.append(self._image_unit(shared, len(units), img))
        if not units:
            raise VMemInputError(item, "round is empty: no text, audio or image")

        round_node = TextNode(
            id_=rid,
            text=round_text(spans),
            metadata={
                **shared,
                schema.IMAGE_IDS: [img["image_id"] for img in image_units],
                schema.UNIT_IDS: [u.node_id for u in units],
            },
        )
        round_node.relationships[NodeRelationship.CHILD] = [RelatedNodeInfo(node_id=u.node_id) for u in units]
        for u in units:
            u.relationships[NodeRelationship.PARENT] = RelatedNodeInfo(node_id=rid)
        return ParsedRound(round_node=round_node, units=units, pending_images=pending)

    def _fence(self) -> Optional[images.Fence]:
        return images.Fence.around(Path(self.image_dir)) if self.image_dir else None

    def _image_path(self, loaded: images.LoadedImage) -> Path:
        if self.image_dir is None:
            raise VMemInputError("image", "this parser has no image_dir to save images under")
        return Path(self.image_dir) / loaded.file_name

    def _text_unit(self, shared: Dict[str, Any], index: int, role: str, text: str) -> TextNode:
        meta = {**shared, schema.UNIT_INDEX: index, schema.MODALITY: schema.Lane.TEXT.value, schema.ROLE: role}
        return TextNode(id_=schema.unit_id(self.memory_id, shared[schema.ROUND_KEY], index), text=text, metadata=meta)

    def _image_unit(self, shared: Dict[str, Any], index: int, img: Dict[str, Any]) -> ImageNode:
        meta = {
            **shared,
            schema.UNIT_INDEX: index,
            schema.MODALITY: schema.Lane.IMAGE.value,
            schema.ROLE: schema.Role.IMAGE.value,
            schema.IMAGE_ID: img["image_id"],
            schema.IMAGE_PATH: str(img["path"]) if img["path"] else None,
            schema.CAPTION: img["caption"],
            schema.HAS_PIXELS: img["path"] is not None,
        }
        return ImageNode(
            id_=schema.unit_id(self.memory_id, shared[schema.ROUND_KEY], index),
            text=img["caption"],
            image_path=meta[schema.IMAGE_PATH],
            metadata=meta,
        )


def image_ids(imgs: Sequence[ImageInput], round_key: str, item: str) -> List[str]:
    """Each image's id: its own, or (given none that shows) ``<round key>:IMG_<n>`` by position,
    moved past the ids its round's other images were given, so every image it shows can be named apart."""
    given = [img.image_id for img in imgs if visible(img.image_id)]
    repeated = next((i for i in given if given.count(i) > 1), None)
    if repeated is not None:
        raise VMemInputError(f"{item} image {repeated}", "two images of this round have this id")
    taken, out = set(given), []
    for position, img in enumerate(imgs, start=1):
        image_id, n = img.image_id if visible(img.image_id) else None, position
        while not image_id:
            image_id = f"{round_key}:IMG_{n}" if f"{round_key}:IMG_{n}" not in taken else None
            n += 1
        taken.add(image_id)
        out.append(image_id)
    return out


#: The pixel files (``image_identity``) the memory holds under each of these image ids; an id held
#: by caption-only images maps to an empty set, an id not held is left out.
StoredImages = Callable[[Set[str]], Dict[str, Set[str]]]
#: Suffixed ids looked up in one store query when an id must move on.
_ID_CHUNK = 32


@dataclass(frozen=True)
class Renamed:
    """An image whose id another picture had, and the id it was stored under."""

    item: str
    given: str
    stored: str


def image_identity(img: ImageInput) -> Optional[str]:
    """The file of a loaded image's pixels (named by content), or None for an image given by caption
    only, which may describe a picture the memory holds: only two different files prove two pictures."""
    return img.checked.file_name if img.checked is not None else None


def stored_image_identity(payload: Mapping[str, Any]) -> Optional[str]:
    """``image_identity`` of a stored image unit, read from its payload."""
    return Path(payload[schema.IMAGE_PATH]).name if payload.get(schema.HAS_PIXELS) else None


def with_distinct_image_ids(rounds: Sequence[RoundInput], stored: StoredImages) -> Tuple[List[RoundInput], List[Renamed]]:
    """``rounds`` (keyed, images loaded) with every image's id written out, so that no id names two
    pictures: an id the memory (or an earlier round of this call) holds for other pixels moves on to
    the first ``<id> (2)``, ``(3)``, ... that no other picture holds and no round of the call names.
    The same pixels shared again, or an image given by caption only, keep their id. Delivery names
    pictures by id (DeliverMem's readable identity), and a camera's ``IMG_0001.jpg`` names a new
    photo every time it is reset. Returns the rounds and what was renamed."""
    planned = [image_ids(r.images, r.round_key, r.item(r.round_key)) for r in rounds]
    named = {image_id for ids in planned for image_id in ids}
    owners = stored(named) if named else {}
    out, renamed = [], []
    for r, ids in zip(rounds, planned):
        images = []
        for img, image_id in zip(r.images, ids):
            identity, final = image_identity(img), image_id
            if not _same_picture(owners.get(image_id, set()), identity):
                final = _free_id(image_id, identity, owners, named, stored)
                renamed.append(Renamed(r.item(r.round_key), image_id, final))
            if identity is not None:
                owners.setdefault(final, set()).add(identity)
            images.append(replace(img, image_id=final))
        out.append(replace(r, images=images))
    return out, renamed


def _same_picture(files: Set[str], identity: Optional[str]) -> bool:
    return identity is None or files <= {identity}


def _free_id(base: str, identity: Optional[str], owners: Dict[str, Set[str]], named: Set[str], stored: StoredImages) -> str:
    """The first ``<base> (n)`` that holds no other picture and that no round of the call names,
    looked up ``_ID_CHUNK`` at a time (fills ``owners`` with what it reads)."""
    def candidates() -> Iterator[str]:
        for first in itertools.count(2, _ID_CHUNK):
            chunk = [f"{base} ({n})" for n in range(first, first + _ID_CHUNK)]
            owners.update(stored({c for c in chunk if c not in owners}))
            yield from chunk

    return next(c for c in candidates() if c not in named and _same_picture(owners.get(c, set()), identity))


def block_bytes(block: ImageBlock) -> Optional[bytes]:
    """The bytes an ``ImageBlock`` holds, None when it names a path instead. An empty one (bytes or
    stream) is ``b""``, for ``images.validate`` to refuse by name: LlamaIndex's reader raises a bare
    ``ValueError`` for it, its only one (undecodable base64 is taken as raw bytes)."""
    if block.image is None or block.path is not None:
        return None
    try:
        return block.resolve_image(as_base64=False).read()
    except ValueError:
        return b""


def message_extra(item: str, message: ChatMessage, name: str) -> List[Any]:
    """``additional_kwargs[name]`` of a chat message: a list, one entry per image or audio block in order."""
    value = (message.additional_kwargs or {}).get(name) or []
    if not isinstance(value, (list, tuple)):
        raise VMemInputError(item, f"additional_kwargs[{name!r}] must be a list, one per block, got {type(value).__name__}")
    return list(value)


def round_spans(r: RoundInput, round_key: str) -> List[Tuple[str, str]]:
    """The round's ``(role, text)`` spans, each image folded into the span of whoever shared it
    (``schema.folded_image``)."""
    folded: Dict[str, List[str]] = {schema.Role.USER.value: [], schema.Role.ASSISTANT.value: []}
    for img, image_id in zip(r.images, image_ids(r.images, round_key, f"round {round_key}")):
        folded[img.role].append(schema.folded_image(image_id, img.caption))
    return [
        (schema.Role.USER.value, "\n".join([r.user] + folded[schema.Role.USER.value]).strip()),
        *[(schema.Role.AUDIO.value, f"[Audio: {t}]") for t in r.audio_transcripts if visible(t)],
        (schema.Role.ASSISTANT.value, "\n".join([r.assistant] + folded[schema.Role.ASSISTANT.value]).strip()),
    ]


def round_text(spans: List[Tuple[str, str]]) -> str:
    """What the answering model reads for a round."""
    labels = {schema.Role.USER.value: "User", schema.Role.ASSISTANT.value: "Assistant", schema.Role.AUDIO.value: "User"}
    return "\n".join(f"{labels[role]}: {text}" for role, text in spans if visible(text))
