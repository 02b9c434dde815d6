"""``VMemChatEngine``: chat over a V-Mem memory that sees the user's attached image and remembers.

Each turn retrieves with the user's text and attached image (V-Mem's routed cases), sends the
query engine's answer prompt with delivered context after the chat history, and appends the
finished exchange to the memory as a new round, so later turns and later sessions recall it.
LlamaIndex's ``ContextChatEngine`` over ``index.as_retriever()`` retrieves with the text alone and
writes nothing to the memory.

The chat history keeps the text of each exchange: a past image comes back through the memory, in
the engine's delivery mode (text, or labelled pixels), so a text-only model is never sent pixels.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
from dataclasses import replace
from itertools import takewhile
from typing import TypeVar

from llama_index.core.callbacks import trace_method
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponseAsyncGen,
    ChatResponseGen,
    ImageBlock,
    MessageRole,
)
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.llms import LLM
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.types import Thread

from . import images as image_io
from . import schema
from .delivery import content_tokens, messages_tokens
from .errors import VMemInputError, keywords_listed
from .memory_block import VMemMemoryBlock
from .messages import now, query_from_message
from .node_parser import INSTRUCTION_ROLES, RoundInput, round_spans
from .query_engine import REPLY_TOKENS, AnswerRequest, VMemQueryEngine
from .round_memory import RoundMemory
from .times import read_time

logger = logging.getLogger(__name__)

T = TypeVar("T")


class VMemChatEngine(BaseChatEngine):
    """Chat with long-term multimodal memory: ``chat(message, image_path=None, image_caption=None)``.

    ``message`` is a string or a ``ChatMessage`` (an ``ImageBlock`` in it is the attached image,
    ``additional_kwargs["image_captions"]`` its caption); ``image_path=`` (a path or URL) attaches
    an image to a string message. ``reset()`` starts a new conversation; the memory keeps its rounds.
    """

    def __init__(
        self,
        index: RoundMemory,
        query_engine: VMemQueryEngine,
        memory: BaseMemory,
        system_prompt: str | None = None,
        session_id: str | None = None,
    ) -> None:
        if any(_same_memory(block.index, index) for block in getattr(memory, "memory_blocks", [])
               if isinstance(block, VMemMemoryBlock)):
            raise VMemInputError("memory", "has a VMemMemoryBlock on this memory, which would store every exchange "
                                           "a second time: the chat engine stores each exchange itself")
        self.index = index
        self.query_engine = query_engine
        #: The query engine's (and its retriever's): a turn is one "chat" trace, its retrieval inside it.
        self.callback_manager = query_engine.callback_manager
        self.session_id = session_id
        self._llm: LLM = query_engine.llm
        self._memory = memory
        self._prefix = [ChatMessage(role=self._llm.metadata.system_role, content=system_prompt)] if system_prompt else []

    @classmethod
    @keywords_listed
    def from_defaults(
        cls,
        index: RoundMemory,
        query_engine: VMemQueryEngine,
        memory: BaseMemory | None = None,
        chat_history: list[ChatMessage] | None = None,
        system_prompt: str | None = None,
        session_id: str | None = None,
    ) -> VMemChatEngine:
        """A chat answering with ``query_engine`` (``index.as_query_engine(...)``) over ``index``.
        Exchanges are stored under ``session_id``; without one, under the session its retriever's
        ``filters`` keep it to, so a chat kept to a session recalls what was said in it (one kept
        to several must say which)."""
        kept = query_engine.retriever.filter
        sessions = kept.session_ids
        if sessions is not None and session_id is None:
            if len(sessions) > 1:
                raise VMemInputError("session_id", f"is needed: filters keep the chat to sessions {', '.join(sessions)}; "
                                                   "name the one its exchanges go in, or they are never recalled")
            [session_id] = sessions
        elif not kept.keeps_session(None if session_id is None else str(session_id)):
            logger.warning("chat exchanges go in session %s, which filters leave out: this chat will not recall them", session_id)
        stamp = now()
        if not kept.keeps_time(read_time(stamp)):
            logger.warning("chat exchanges are stamped %s, which the time filters leave out: this chat will not recall them", stamp)
        window = query_engine.llm.metadata.context_window
        if window <= REPLY_TOKENS:
            raise VMemInputError("llm", f"has a {window}-token window: a chat needs more than the {REPLY_TOKENS} "
                                        "tokens it keeps for the answer")
        memory = memory or Memory.from_defaults(chat_history=chat_history, token_limit=window - REPLY_TOKENS)
        return cls(index, query_engine, memory, system_prompt=system_prompt, session_id=session_id)

    @property
    def chat_history(self) -> list[ChatMessage]:
        return self._memory.get_all()

    def reset(self) -> None:
        self._memory.reset()

    # -- one turn -----------------------------------------------------------------------------

    def _prepare(self, user: ChatMessage, pending: RoundInput, history: list[ChatMessage]) -> tuple[AnswerRequest, list[ChatMessage]]:
        """Retrieval with the user's text and image, and the LLM input: the history, then the answer
        prompt. ``Memory`` budgets the history alone, so the oldest turns that would push the input
        past the model's window (less room for the reply) are left out of this call. The history's
        leading system messages (a static block, recalled memory blocks) are always sent, and so are
        a chat answer prompt's, which join them ahead of the history."""
        lead = _instructions(history)
        turns = history[len(lead):]
        reserved = messages_tokens([*self._prefix, *lead])
        request = self.query_engine.prepare(query_from_message(self.index, _fetched(user, pending)), reserved=reserved)
        instructions = _instructions(request.messages)
        ask = request.messages[len(instructions):]
        sent = reserved + messages_tokens(request.messages)
        room = self._llm.metadata.context_window - REPLY_TOKENS - sent
        kept: list[ChatMessage] = []
        for message in reversed(turns):
            room -= content_tokens(message.blocks)
            if room < 0:
                break
            kept.append(message)
        if len(kept) < len(turns):  # a cut history starts at a user's turn, not mid-exchange
            while kept and kept[-1].role != MessageRole.USER:
                kept.pop()
        return request, [*self._prefix, *lead, *instructions, *reversed(kept), *ask]

    def _user_round(self, user: ChatMessage) -> RoundInput:
        """The user's half of this turn's round, checked as ``add_messages`` checks it: a message the
        memory cannot store (audio without a transcript, an unsupported block) raises
        ``VMemInputError`` naming the item before the LLM is called, the chat history is written or
        the memory grows. ``_remember`` stores this half, so a transcriber runs once per turn."""
        [pending] = self.index.rounds_from_messages([user], session_id=self.session_id)
        return pending

    def _remember(self, pending: RoundInput, answer: str) -> ChatMessage:
        """The exchange becomes a round of the memory (with the user's image), stamped when it ended
        (``messages.now``: local time of day, to the second).
        Returns the user's turn for the chat history as the round tells it, each picture as
        ``[Image <id>] caption``: an image-only turn is not an empty message, and history and memory
        name a picture alike. Every turn happened, so one alike an earlier one of the same second
        is stored too, not taken for that one added again."""
        [stored] = self.index.add_round_inputs([replace(pending, assistant=answer, timestamp=now())], dedupe=False)
        named = [replace(img, image_id=image_id) for img, image_id in zip(pending.images, stored.metadata[schema.IMAGE_IDS])]
        spans = round_spans(replace(pending, images=named), stored.metadata[schema.ROUND_KEY])  # ids as stored
        return ChatMessage(role=MessageRole.USER,
                           content="\n".join(text for role, text in spans if role != schema.Role.ASSISTANT.value and text))

    async def _aremember(self, pending: RoundInput, answer: str) -> None:
        """``_remember``, then the exchange into the chat history, as one step: a cancellation
        meanwhile (a timeout, a closing event loop) waits for both and goes on after, so the history
        gets the turn the memory got (the round's write, once begun, ends anyway).

        The round is written by ``run_in_executor``, not ``asyncio.to_thread``: a closing event loop
        cancels every task, and a cancelled task would stop waiting for a thread that writes on."""
        work = functools.partial(contextvars.copy_context().run, self._remember, pending, answer)
        said, stopped = await _through_cancellation(asyncio.get_running_loop().run_in_executor(None, work))
        exchange = [said, ChatMessage(role=MessageRole.ASSISTANT, content=answer)]
        _, stopped_too = await _through_cancellation(asyncio.ensure_future(self._memory.aput_messages(exchange)))
        if stopped or stopped_too:
            raise asyncio.CancelledError

    @trace_method("chat")
    @keywords_listed
    def chat(
        self,
        message: str | ChatMessage,
        chat_history: list[ChatMessage] | None = None,
        image_path: str | os.PathLike | None = None,
        image_caption: str | None = None,
    ) -> AgentChatResponse:
        user = _user_message(message, image_path, image_caption)
        pending = self._user_round(user)
        if chat_history is not None:
            self._memory.set(chat_history)
        request, llm_input = self._prepare(user, pending, self._memory.get(input=_asked(user)))
        answer = (self._llm.chat(llm_input).message.content or "").strip()
        said = self._remember(pending, answer)
        self._memory.put_messages([said, ChatMessage(role=MessageRole.ASSISTANT, content=answer)])
        return AgentChatResponse(response=answer, source_nodes=request.nodes, metadata=request.metadata)

    @trace_method("chat")
    @keywords_listed
    async def achat(
        self,
        message: str | ChatMessage,
        chat_history: list[ChatMessage] | None = None,
        image_path: str | os.PathLike | None = None,
        image_caption: str | None = None,
    ) -> AgentChatResponse:
        user = _user_message(message, image_path, image_caption)
        pending = await asyncio.to_thread(self._user_round, user)
        if chat_history is not None:
            await self._memory.aset(chat_history)
        request, llm_input = await asyncio.to_thread(self._prepare, user, pending, await self._memory.aget(input=_asked(user)))
        answer = ((await self._llm.achat(llm_input)).message.content or "").strip()
        await self._aremember(pending, answer)
        return AgentChatResponse(response=answer, source_nodes=request.nodes, metadata=request.metadata)

    @trace_method("chat")
    @keywords_listed
    def stream_chat(
        self,
        message: str | ChatMessage,
        chat_history: list[ChatMessage] | None = None,
        image_path: str | os.PathLike | None = None,
        image_caption: str | None = None,
    ) -> StreamingAgentChatResponse:
        """The exchange is written (history and memory) when the stream ends, whether or not the
        caller reads it; a stream that fails writes nothing, as a failed ``chat`` does."""
        user = _user_message(message, image_path, image_caption)
        pending = self._user_round(user)
        if chat_history is not None:
            self._memory.set(chat_history)
        request, llm_input = self._prepare(user, pending, self._memory.get(input=_asked(user)))
        stream = self._llm.stream_chat(llm_input)

        def remembered() -> ChatResponseGen:
            answer = ""
            for chunk in stream:
                answer += chunk.delta or ""
                yield chunk
            self._memory.put(self._remember(pending, answer.strip()))  # LlamaIndex puts the reply after it

        response = StreamingAgentChatResponse(chat_stream=remembered(), source_nodes=request.nodes)
        response.write_response_to_history_thread = Thread(target=response.write_response_to_history, args=(self._memory,))
        response.write_response_to_history_thread.start()
        return response

    @trace_method("chat")
    @keywords_listed
    async def astream_chat(
        self,
        message: str | ChatMessage,
        chat_history: list[ChatMessage] | None = None,
        image_path: str | os.PathLike | None = None,
        image_caption: str | None = None,
    ) -> StreamingAgentChatResponse:
        """The exchange is written (history and memory) when the stream ends, whether or not the
        caller reads it while the event loop runs; a stream that fails writes nothing."""
        user = _user_message(message, image_path, image_caption)
        pending = await asyncio.to_thread(self._user_round, user)
        if chat_history is not None:
            await self._memory.aset(chat_history)
        request, llm_input = await asyncio.to_thread(self._prepare, user, pending, await self._memory.aget(input=_asked(user)))
        stream = await self._llm.astream_chat(llm_input)

        async def remembered() -> ChatResponseAsyncGen:
            answer = ""
            async for chunk in stream:
                answer += chunk.delta or ""
                yield chunk
            await self._aremember(pending, answer.strip())

        response = StreamingAgentChatResponse(achat_stream=remembered(), source_nodes=request.nodes)
        response.awrite_response_to_history_task = asyncio.create_task(response.awrite_response_to_history(_ALREADY_PUT))
        return response


class _AlreadyPut:
    """The history LlamaIndex's stream writer puts a streamed reply into: ``_aremember`` put the
    whole exchange in the real one, as one step a cancellation cannot split, so this keeps nothing."""

    async def aput(self, message: ChatMessage) -> None:
        """Nothing to put: the reply is in the chat history already."""


_ALREADY_PUT = _AlreadyPut()


async def _through_cancellation(future: asyncio.Future[T]) -> tuple[T, bool]:
    """``future``'s result, awaited to its end even if the awaiting task is cancelled meanwhile, and whether it was."""
    stopped = False
    while True:
        try:
            return await asyncio.shield(future), stopped
        except asyncio.CancelledError:
            if future.cancelled():
                raise
            stopped = True


def _user_message(message: str | ChatMessage, image_path: str | os.PathLike | None, image_caption: str | None) -> ChatMessage:
    """The user's turn as one message: ``image_path`` becomes its ``ImageBlock``, ``image_caption`` that
    image's caption, as ``add_messages`` reads them."""
    if isinstance(message, ChatMessage):
        user = message.model_copy(deep=True)
    elif isinstance(message, str):
        user = ChatMessage(role=MessageRole.USER, content=message)
    else:  # ChatMessage would take a number as no content, and the turn would read as empty
        raise VMemInputError("message", f"must be text or a ChatMessage, got {type(message).__name__}")
    attached = any(isinstance(b, ImageBlock) for b in user.blocks)
    if image_path is not None:
        if not isinstance(image_path, (str, os.PathLike)):
            raise VMemInputError("image_path", f"must be a str path or URL, or a path, got {type(image_path).__name__}")
        if attached:
            raise VMemInputError("image_path", "the message already has an ImageBlock; attach the image one way")
        user.blocks.append(_image_block(image_path))
    if image_caption is not None:
        if not attached and image_path is None:
            raise VMemInputError("image_caption", "describes an attached image, but none is attached")
        user.additional_kwargs = {**user.additional_kwargs, "image_captions": [image_caption]}
    return user


def _image_block(image_path: str | os.PathLike) -> ImageBlock:
    """``image_path`` as an ``ImageBlock``; a file that cannot be read is refused in the words the
    retriever uses for a query image, not in pydantic's."""
    try:
        return ImageBlock(url=image_path) if image_io.is_url(image_path) else ImageBlock(path=image_path)
    except ValueError:  # pydantic's: the file does not exist, or is no file
        image_io.read_source("image_path", path=image_path)  # raises, saying why in plain words
        raise VMemInputError("image_path", f"cannot attach {image_path}") from None


def _instructions(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The leading system and developer messages: they are sent first, whatever is cut after them."""
    return list(takewhile(lambda m: m.role in INSTRUCTION_ROLES, messages))


def _asked(user: ChatMessage) -> str | None:
    """The turn's text as ``Memory`` hands it to its memory blocks (it takes text only), so a block
    recalls for this turn and not the one before, as with LlamaIndex's own chat engines."""
    return user.content or None


def _fetched(user: ChatMessage, pending: RoundInput) -> ChatMessage:
    """The user's turn with each URL image as the bytes ``_user_round`` fetched, so retrieval does
    not fetch it a second time (and sees the very image the round stores)."""
    fetched = iter(pending.images)
    blocks = []
    for block in user.blocks:
        if isinstance(block, ImageBlock):
            image = next(fetched)
            if block.url is not None and block.path is None and block.image is None:
                block = ImageBlock(image=image.data, image_mimetype=block.image_mimetype, detail=block.detail)
        blocks.append(block)
    return user.model_copy(update={"blocks": blocks})


def _same_memory(a: RoundMemory, b: RoundMemory) -> bool:
    return (a.store.identity, a.memory_id) == (b.store.identity, b.memory_id)
