"""What a user's chat message asks: its text, its attached image and that image's caption.

Shared by the memory block and the chat engine, which both retrieve for a ``ChatMessage`` and
store exchanges stamped with when they happened, and by the query engine and delivery, which
keep a query's attached image as a local file the way a chat message's is kept.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Optional

from llama_index.core.base.llms.types import AudioBlock, ChatMessage, ImageBlock, TextBlock
from llama_index.core.schema import QueryBundle

from . import images as image_io
from .node_parser import block_bytes, message_extra, optional_text
from .schema import VMemQueryBundle, visible

if TYPE_CHECKING:
    from .round_memory import RoundMemory


def message_text(message: ChatMessage) -> str:
    """What a message says in words: its text, and what its voice notes say (their transcripts in
    ``additional_kwargs["transcripts"]``, as ``add_messages`` reads them), in order."""
    transcripts = iter(message_extra("message", message, "transcripts"))
    said = [b.text if isinstance(b, TextBlock) else next(transcripts, None)
            for b in message.blocks if isinstance(b, (TextBlock, AudioBlock))]
    return "\n".join(text for text in said if isinstance(text, str) and visible(text))


def query_from_message(index: "RoundMemory", message: ChatMessage) -> VMemQueryBundle:
    """The question a user message asks: its text, its first image and that image's caption
    (``additional_kwargs["image_captions"]``, as ``add_messages`` reads it)."""
    block = attached_image(message)
    if block is None:
        return VMemQueryBundle(message_text(message))
    captions = message_extra("message", message, "image_captions") or [None]
    caption = optional_text("message", "image caption", captions[0])
    return VMemQueryBundle(message_text(message), image_path=_local_image(index, block), image_caption=caption)


def attached_image(message: ChatMessage) -> ImageBlock | None:
    return next((b for b in message.blocks if isinstance(b, ImageBlock) and (b.path or b.url or b.image)), None)


def _local_image(index: "RoundMemory", block: ImageBlock) -> str:
    """A file of the attached image: retrieval encodes it and pixel delivery stamps a copy of it.
    Bytes and URLs are validated and kept once by content hash beside the memory's images."""
    if block.path is not None:
        return str(block.path)
    data = block_bytes(block)
    return keep_attachment(index, "attached image", data=data, url=None if data is not None else str(block.url))


def local_query(index: "RoundMemory", query: QueryBundle) -> QueryBundle:
    """The query with its image as a local file, so delivery can stamp what retrieval encoded: a URL
    (``data:`` included) is kept like a chat attachment; a local path is left as given."""
    if not query.image_path or not image_io.is_url(query.image_path):
        return query
    return dataclasses.replace(query, image_path=keep_attachment(index, "query image", url=query.image_path))


def keep_attachment(index: "RoundMemory", item: str, *, data: Optional[bytes] = None, url: Optional[str] = None) -> str:
    """Attached bytes or a URL's image, read within the memory's image fence and size limits,
    validated (bad input is a ``VMemInputError`` naming ``item``) and kept once by content hash
    beside the memory's images, where ``forget`` clears it."""
    raw = image_io.read_source(item, data=data, url=url, fence=index.image_fence)
    return str(image_io.save(image_io.validate(item, raw), index.attached_dir))


def today() -> str:
    """The day a memory block stores a flushed exchange, as its timestamp: the block flushes turns
    some time after they were said, so it claims no time of day."""
    return datetime.now().astimezone().date().isoformat()


def now() -> str:
    """When a chat turn ended, as its round's timestamp: local wall-clock time to the second, with
    no offset ("2024-06-17T14:03:27"), so turns of one day are told apart and a time filter reads
    it as the user's own day ("since='2024-06-17'" keeps the turns of that local day)."""
    return datetime.now().replace(microsecond=0).isoformat()
