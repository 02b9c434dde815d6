"""``VMemMemoryBlock``: V-Mem as the long-term block of LlamaIndex's ``Memory`` (agents, chat engines).

``Memory`` keeps the latest messages verbatim and flushes the oldest into its blocks. This block
stores what is flushed as rounds (images and audio transcripts included) and, on every turn,
recalls the rounds relevant to the latest user message -- its text and its attached image -- as
delivered content: text, or text with labelled pixels.

``Memory`` flushes whatever is oldest, so a flush may hold system and tool messages, tool-call
steps, or a reply whose user message went in an earlier flush. Nothing of that may break a chat:
what V-Mem cannot store is logged and left out, never raised. A failure that is not the content's
(a closed handle, a store that cannot be reached) is raised, once the flush's other exchanges are in.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from pathlib import Path
from typing import Any, Callable

from llama_index.core.base.llms.types import (
    AudioBlock,
    ChatMessage,
    ContentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.schema import NodeWithScore

from .delivery import Deliverer, DeliveryMode, ImageBudget, block_groups, content_tokens, cut, join_blocks, split_blocks
from .errors import VMemInputError
from .messages import attached_image, message_text, query_from_message, today
from .node_parser import ASSISTANT_ROLES, MAX_TEXT_CHARS, optional_str
from .postprocessor import NeighborRoundPostprocessor
from .retriever import VMemRetriever
from .round_memory import RoundMemory
from .schema import VMemQueryBundle, is_utf8, visible

logger = logging.getLogger(__name__)

_STORED_BLOCKS = (TextBlock, ImageBlock, AudioBlock)
#: Message extras that hold one entry per block of a kind, in order (as ``add_messages`` reads them).
_PER_BLOCK_EXTRAS = {"image_ids": ImageBlock, "image_captions": ImageBlock, "transcripts": AudioBlock}
_REACT_THOUGHT = re.compile(r"^[ \t]*Thought:", re.MULTILINE)
_REACT_STEP = re.compile(r"^[ \t]*(?:Action|Observation):", re.MULTILINE)
_REACT_ANSWER = re.compile(r"^[ \t]*Answer:", re.MULTILINE)


class VMemMemoryBlock(BaseMemoryBlock[list[ContentBlock]]):
    """Long-term multimodal memory for ``Memory.from_defaults(memory_blocks=[VMemMemoryBlock(index=...)])``.

    ``delivery`` is ``"text"`` (default) or ``"pixels"``. ``Memory`` puts blocks into the system
    message by default, where most chat APIs take no images: with pixels, pass
    ``Memory.from_defaults(..., insert_method="user")``. ``llm`` writes the anchors of cross-modal
    questions (default: the index's LLM; without one, anchors fall back to the raw question).
    Rounds are stored under ``session_id``, stamped with the day they were flushed.
    """

    name: str = Field(default="long_term_memory", description="The memory block's name (its tag in the prompt).")
    index: RoundMemory = Field(exclude=True, description="The V-Mem memory rounds are stored in and recalled from.")
    llm: LLM | None = Field(default=None, exclude=True, description="Writes anchors; default: the index's LLM.")
    delivery: DeliveryMode = Field(default=DeliveryMode.TEXT, description="text or pixels.")
    image_budget: ImageBudget | None = Field(default=None, description="Cap on delivered images (pixels).")
    session_id: str | None = Field(default=None, description="Session the flushed rounds are stored under.")
    priority: int = Field(default=1, description="Memory's truncation priority: 1, so recall is cut to fit "
                                                 "Memory's token_limit (0 never cuts it).")
    tokenizer_fn: Callable[[str], list] | None = Field(
        default=None, exclude=True,
        description="Counts tokens when recall is cut: give the Memory's own tokenizer_fn if you gave it one "
                    "(default: LlamaIndex's global tokenizer, the Memory's default).")
    _retriever: VMemRetriever = PrivateAttr()
    _postprocessor: NeighborRoundPostprocessor = PrivateAttr()
    _deliverer: Deliverer = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        """A ``session_id`` that ``add_messages`` refuses is refused here, as ``VMemInputError`` (pydantic
        would wrap it): taken, it would drop every flushed exchange with only a warning."""
        session_id = optional_str("session_id", "session_id", data.get("session_id"), empty_ok=False)
        if session_id is not None and not is_utf8(session_id):
            raise VMemInputError("session_id", "is not valid UTF-8 text (it holds a lone surrogate)")
        super().__init__(**{**data, "session_id": session_id})

    def model_post_init(self, context: Any, /) -> None:
        self._retriever = VMemRetriever(self.index, config=self.index.config, llm=self.llm or self.index.llm)
        self._postprocessor = NeighborRoundPostprocessor(self.index)
        self._deliverer = Deliverer(self.index, self.delivery, self.image_budget)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> list[ContentBlock]:
        user = latest_user_message(messages or [])
        if user is None:
            return []
        return await asyncio.to_thread(self._recall, user)  # a store count or search is a round-trip to a server

    def _recall(self, message: ChatMessage) -> list[ContentBlock]:
        if len(self.index) == 0:
            return []
        try:
            nodes = self._retrieve(query_from_message(self.index, message))
        except VMemInputError as e:  # a broken attachment must not break the turn
            logger.warning("recalling with the text only: %s", e)
            nodes = self._retrieve(VMemQueryBundle(message_text(message)))
        # No query here: the attachment is already in the user's message, so it is not delivered twice.
        return [_inline(b) for b in self._deliverer.deliver(_best_first(nodes))] if nodes else []

    async def atruncate(self, content: list[ContentBlock], tokens_to_truncate: int) -> list[ContentBlock] | None:
        """Whole neighbour blocks go, least relevant first, until ``tokens_to_truncate`` (counted as
        the ``Memory`` counts, by ``tokenizer_fn``) are freed; when the best block alone is too long,
        its start is kept, cut after a whole line (never its header alone)."""
        budget = content_tokens(content, self.tokenizer_fn) - tokens_to_truncate
        blocks = split_blocks(content)
        while len(blocks) > 1 and content_tokens(join_blocks(blocks), self.tokenizer_fn) > budget:
            blocks.pop()
        return cut(join_blocks(blocks), budget, self.tokenizer_fn) or None

    def _retrieve(self, query: VMemQueryBundle) -> list[NodeWithScore]:
        if not query.query_str and not query.image_path:
            return []
        return self._postprocessor.postprocess_nodes(self._retriever.retrieve_with_plan(query).nodes, query)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Every exchange gets its try, and the first failure is raised after them: ``Memory`` has
        already taken these messages out of its chat history, so one that fails must not cost the
        exchanges after it their place in the memory."""
        failures: list[Exception] = []
        for exchange in _exchanges(messages):
            try:
                await asyncio.to_thread(self._store, exchange)
            except Exception as e:
                logger.error("not stored: a flushed exchange: %s", e)
                failures.append(e)
        if failures:
            raise failures[0]

    def _store(self, exchange: list[ChatMessage]) -> None:
        """One round per exchange, under this block's ``session_id``: not the ``Memory``'s, a random
        uuid that would make every round and image id unreadable. Text V-Mem refuses (over
        ``MAX_TEXT_CHARS``, a lone surrogate) is stored cut or mended, with its pictures and voice
        notes; an exchange still refused (a corrupt image, audio without a transcript) is stored as
        its text; one without any text is dropped with a warning. Every flushed exchange happened, so
        one alike an earlier one of the day (its timestamp is a date) is stored too (``dedupe=False``)."""
        stamp = {"session_id": self.session_id, "timestamp": today(), "dedupe": False}
        try:
            self.index.add_messages(exchange, **stamp)
            return
        except VMemInputError as e:
            if self.index.closed:  # no fault of the exchange's: dropping it with a warning would lose it unseen
                raise
            refused = e
        mended = [_mended(m) for m in exchange]
        if mended != exchange:
            try:
                self.index.add_messages(mended, **stamp)
                logger.warning("stored a flushed exchange with its text cut or mended: %s", refused)
                return
            except VMemInputError as e:
                refused = e
        logger.warning("storing a flushed exchange as text only: %s", refused)
        text_only = [ChatMessage(role=m.role, content=_text(m)) for m in mended]
        try:
            self.index.add_messages(text_only, **stamp)
        except VMemInputError as e:
            logger.warning("not stored: a flushed exchange with nothing V-Mem can keep: %s", e)


def _text(message: ChatMessage) -> str:
    """A message's text blocks as ``add_messages`` joins them."""
    return "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock) and visible(b.text))


def _mended(message: ChatMessage) -> ChatMessage:
    """``message`` with its text as V-Mem can store it, in one block where its first text block was,
    for an exchange it refused: ``Memory`` has already taken the exchange out of its history, so
    what cannot be stored is left out, and said to be, rather than the whole exchange lost. A lone
    surrogate becomes "?"; text past the limit is cut, with a note of how much."""
    text = _text(message)
    stored = text.encode("utf-8", "replace").decode("utf-8")
    if len(stored) > MAX_TEXT_CHARS:
        kept = MAX_TEXT_CHARS - 100  # room for the note
        stored = stored[:kept] + f"\n[{len(stored) - kept} characters over the limit of {MAX_TEXT_CHARS} not stored]"
    if stored == text:
        return message
    first = next(i for i, b in enumerate(message.blocks) if isinstance(b, TextBlock))
    blocks = [TextBlock(text=stored) if i == first else b for i, b in enumerate(message.blocks)
              if i == first or not isinstance(b, TextBlock)]
    return ChatMessage(role=message.role, blocks=blocks, additional_kwargs=message.additional_kwargs)


def _exchanges(messages: list[ChatMessage]) -> list[list[ChatMessage]]:
    """Flushed messages as the ``[user, assistant]`` pairs ``add_messages`` takes. Replies after the
    first (an agent's answer after its tool steps) join the exchange's reply; a reply without its
    user message (flushed earlier) becomes a round of its own."""
    out: list[list[ChatMessage]] = []
    for i, message in enumerate(messages, start=1):
        kept = _storable(i, message)
        if kept is None:
            continue
        if kept.role == MessageRole.USER:
            out.append([kept])
        elif out and len(out[-1]) == 1:
            out[-1].append(kept)
        elif out:
            out[-1][1] = _joined(out[-1][1], kept)
        else:
            out.append([ChatMessage(role=MessageRole.USER, content=""), kept])
    return out


def _storable(i: int, message: ChatMessage) -> ChatMessage | None:
    """The message (the ``i``-th flushed, from 1) as V-Mem stores it: user or assistant, text, image and audio blocks only, and of a
    ReAct agent's reply its answer alone."""
    if message.role != MessageRole.USER and message.role not in ASSISTANT_ROLES:
        logger.info("not stored: flushed %s message %d %.80r", message.role.value, i, message.content)
        return None
    role = MessageRole.USER if message.role == MessageRole.USER else MessageRole.ASSISTANT
    blocks = [b for b in message.blocks if isinstance(b, _STORED_BLOCKS)]
    skipped = [type(b).__name__ for b in message.blocks if not isinstance(b, _STORED_BLOCKS)]
    if skipped:
        logger.info("not stored: %s of flushed message %d", ", ".join(skipped), i)
    if role == MessageRole.ASSISTANT and any(isinstance(b, TextBlock) and _react_answer(b.text) != b.text for b in blocks):
        logger.info("not stored: the ReAct steps of flushed message %d (its answer is)", i)
        blocks = [TextBlock(text=_react_answer(b.text)) if isinstance(b, TextBlock) else b for b in blocks]
    if not any(not isinstance(b, TextBlock) or visible(b.text) for b in blocks):
        logger.info("not stored: flushed %s message %d has no text, image or audio", message.role.value, i)
        return None
    return ChatMessage(role=role, blocks=blocks, additional_kwargs=message.additional_kwargs)


def _react_answer(text: str) -> str:
    """A ReAct agent's reply carries its scratchpad (``Thought:``, ``Action:``, ``Observation:``);
    what it told the user follows the first ``Answer:`` after the last ``Thought:``, and a step with
    none told the user nothing. A reply that merely opens with "Thought:" is no scratchpad."""
    if not text.lstrip().startswith("Thought:"):
        return text
    *_, last_thought = _REACT_THOUGHT.finditer(text)
    answer = _REACT_ANSWER.search(text, last_thought.end())
    if answer:
        return text[answer.end():].strip()
    return "" if _REACT_STEP.search(text) else text


def _joined(reply: ChatMessage, more: ChatMessage) -> ChatMessage:
    """Two replies of one exchange as one: blocks in order, and each per-block extra list
    (``image_ids``, ``image_captions``, ``transcripts``) kept aligned with its blocks."""
    extras = {name: [*_per_block(reply, name, kind), *_per_block(more, name, kind)]
              for name, kind in _PER_BLOCK_EXTRAS.items() if name in reply.additional_kwargs or name in more.additional_kwargs}
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[*reply.blocks, *more.blocks],
                       additional_kwargs={**reply.additional_kwargs, **more.additional_kwargs, **extras})


def _per_block(message: ChatMessage, name: str, kind: type) -> list[Any]:
    """``additional_kwargs[name]`` with one entry per block of ``kind`` (None where it gives none)."""
    count = sum(isinstance(b, kind) for b in message.blocks)
    given = list(message.additional_kwargs.get(name) or [])[:count]
    return given + [None] * (count - len(given))


def _best_first(nodes: list[NodeWithScore]) -> list[NodeWithScore]:
    """Neighbour blocks, each with the image nodes after it, best first: ``Memory`` truncates a
    block's content from its end, so the least relevant go first."""
    return [n for group in sorted(block_groups(nodes), key=lambda g: -(g[0].score or 0.0)) for n in group]


def latest_user_message(messages: list[ChatMessage]) -> ChatMessage | None:
    """The message to recall for. ``Memory.aget(input=text)`` appends the text again as a new message,
    without the image: then the stored message with the same text and its image is the one."""
    users = [m for m in messages if m.role == MessageRole.USER]
    if len(users) > 1 and not attached_image(users[-1]) and message_text(users[-1]) == message_text(users[-2]):
        return users[-2]
    return users[-1] if users else None


def _inline(block: ContentBlock) -> ContentBlock:
    """A delivered image keeps its path and also carries its bytes as a data URL: ``Memory``'s template
    reads images through banks, which opens files only under ``BANKS_MEDIA_ROOT`` (default: the
    working directory) but passes data URLs through."""
    if not isinstance(block, ImageBlock) or block.path is None:
        return block
    data = base64.b64encode(Path(block.path).read_bytes()).decode()
    return ImageBlock(path=block.path, url=f"data:{block.image_mimetype};base64,{data}", image_mimetype=block.image_mimetype)
