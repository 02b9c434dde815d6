"""Answering over a memory with the paper's prompts: answer, conflict, and the attached-image note.

The prompt's ``{context}`` is filled by the delivery stage: text only, or text with labelled pixels
(``delivery="pixels"``, the default for models known to see images). A text prompt is sent as one
user chat message whose blocks are the prompt text around the delivered content; a
``ChatPromptTemplate`` as its own messages, the content in the one that holds ``{context}``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Dict, List, Optional, Sequence, Tuple, Union

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, TextBlock
from llama_index.core.base.response.schema import RESPONSE_TYPE, AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.llms.utils import LLMType
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType

from . import schema
from .delivery import (ContentBlock, Deliverer, DeliveryMode, ImageBudget, block_groups, content_tokens, cut, default_mode, fit,
                       messages_tokens, prompt_messages)
from .messages import local_query
from .models import as_llm
from .postprocessor import NeighborRoundPostprocessor
from .prompts import ANSWER_PROMPT, CONFLICT_PROMPT, IMAGE_NOTE_MATCHED_PROMPT, IMAGE_NOTE_PROMPT, check_prompt
from .retriever import RetrievalResult, VMemRetriever, check_query

logger = logging.getLogger(__name__)

_NO_DESCRIPTION = "an image (no description was given)"


#: The prompts this engine sends itself, by key (the anchors' are the retriever's).
_DEFAULT_PROMPTS = {"answer_prompt": ANSWER_PROMPT, "conflict_prompt": CONFLICT_PROMPT,
                    "image_note_prompt": IMAGE_NOTE_PROMPT, "image_note_matched_prompt": IMAGE_NOTE_MATCHED_PROMPT}


@dataclass
class AnswerRequest:
    """One answer call, ready to send: the prompt's messages, the delivered blocks' nodes, and why."""

    messages: List[ChatMessage]
    nodes: List[NodeWithScore]
    metadata: Dict[str, Any]


#: Tokens of the model's window left free for its answer (as LlamaIndex's chat engines leave).
REPLY_TOKENS = 256


class VMemQueryEngine(BaseQueryEngine):
    """retrieve (routed) -> neighbour blocks -> your ``node_postprocessors`` -> context (+ attached-image
    note) -> one LLM call.

    ``node_postprocessors`` (a reranker, a keyword filter) get the neighbour blocks, in time order,
    each scored by its best round's fused reciprocal-rank score (not a similarity: a cutoff misreads
    it). Delivery keeps the blocks they return in the order they return
    them and, when the prompt would not fit the model's window, leaves out the lowest-scored first.
    """

    def __init__(
        self,
        retriever: VMemRetriever,
        llm: Optional[LLMType] = None,
        answer_prompt: Optional[BasePromptTemplate] = None,
        conflict_prompt: Optional[BasePromptTemplate] = None,
        image_note_prompt: Optional[BasePromptTemplate] = None,
        image_note_matched_prompt: Optional[BasePromptTemplate] = None,
        delivery: Optional[str] = None,
        image_budget: Optional[ImageBudget] = None,
        streaming: bool = False,
        node_postprocessors: Optional[Sequence[BaseNodePostprocessor]] = None,
    ) -> None:
        super().__init__(callback_manager=retriever.callback_manager)
        llm = as_llm(llm)
        if llm is None:
            raise ValueError("as_query_engine needs an llm (any LlamaIndex LLM)")
        self.retriever = retriever
        self.llm = llm
        self.streaming = streaming
        self.postprocessor = NeighborRoundPostprocessor(retriever._index)
        self.node_postprocessors = list(node_postprocessors or [])
        self.deliverer = Deliverer(retriever._index, DeliveryMode(delivery) if delivery else default_mode(llm), image_budget)
        self._prompts: Dict[str, BasePromptTemplate] = dict(_DEFAULT_PROMPTS)
        given = {"answer_prompt": answer_prompt, "conflict_prompt": conflict_prompt,
                 "image_note_prompt": image_note_prompt, "image_note_matched_prompt": image_note_matched_prompt}
        self._update_prompts({key: prompt for key, prompt in given.items() if prompt is not None})

    def _get_prompts(self) -> PromptDictType:
        return dict(self._prompts)

    def _update_prompts(self, prompts: PromptDictType) -> None:
        ours = {key: prompt for key, prompt in prompts.items() if key in _DEFAULT_PROMPTS}
        for key, prompt in ours.items():
            check_prompt(key, prompt)
        self._prompts.update(ours)

    def _get_prompt_modules(self) -> PromptMixinType:
        """The retriever's anchor transforms, one level down (``hypo_caption:hypo_caption_prompt``):
        LlamaIndex's ``update_prompts`` splits a key at one colon, so deeper keys could be read, not set."""
        return self.retriever._get_prompt_modules()

    def query(self, str_or_query_bundle: QueryType) -> RESPONSE_TYPE:
        return super().query(check_query(str_or_query_bundle))

    async def aquery(self, str_or_query_bundle: QueryType) -> RESPONSE_TYPE:
        return await super().aquery(check_query(str_or_query_bundle))

    def retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._blocks(self.retriever.retrieve(query_bundle), query_bundle)

    def _blocks(self, nodes: List[NodeWithScore], query_bundle: QueryBundle) -> List[NodeWithScore]:
        """The neighbour blocks of the retrieved rounds, through the user's postprocessors in turn.
        These get the blocks alone: a block's pictures follow it wherever they put it, since a
        reranker would score a picture on its own and delivery reads pictures by their place."""
        groups = block_groups(self.postprocessor.postprocess_nodes(nodes, query_bundle=query_bundle))
        blocks = [g[0] for g in groups]
        for postprocessor in self.node_postprocessors:
            blocks = postprocessor.postprocess_nodes(blocks, query_bundle=query_bundle)
        pictures = {g[0].node.node_id: g[1:] for g in groups}
        return [n for block in blocks for n in [block, *pictures.get(block.node.node_id, [])]]

    def _content(self, prompt: BasePromptTemplate, query_bundle: QueryBundle, result: RetrievalResult,
                 nodes: List[NodeWithScore], room: int) -> Tuple[List[ChatMessage], List[NodeWithScore]]:
        """The prompt's messages around the delivered blocks (then the attached picture and its note), within
        ``room`` tokens, and the nodes delivered (the answer's sources): blocks that would not fit
        are left out, least relevant first, and a best block too long alone is cut after a whole line.
        The attached picture's room is set aside first, so a cut never sends its label alone. Memory
        comes before the picture: where the picture would leave no room for any, or there is no room
        for the picture, its note describes it instead."""
        question = query_bundle.query_str

        def fitted(extra: List[ContentBlock]) -> Tuple[List[ContentBlock], List[NodeWithScore], bool]:
            budget = room - messages_tokens(prompt_messages(prompt, extra, self.llm, question=question))
            context = self.deliverer.deliver(fit(nodes, budget, self.deliverer.mode is DeliveryMode.PIXELS))
            too_long = content_tokens(context) > budget
            if too_long:
                context = cut(context, budget)
            return context, _sent(context, nodes), too_long

        attachment = self.deliverer.attachment(query_bundle)
        note: List[ContentBlock] = []
        if query_bundle.image_path or schema.query_image_caption(query_bundle):
            note.append(TextBlock(text=f"\n\n{self._image_note(query_bundle, result)}"))
        context, sent, too_long = fitted(attachment + note)
        if attachment and too_long and not sent:
            logger.warning("the attached picture leaves no room for memory in %s's %d-token window (less %d for the "
                           "answer): it is sent as its note only", self.llm.metadata.model_name,
                           self.llm.metadata.context_window, REPLY_TOKENS)
            attachment = []
            context, sent, too_long = fitted(note)
        if too_long and not sent:
            logger.warning("the answer prompt leaves no room for memory in %s's %d-token window (less %d for the "
                           "answer): it is sent without context", self.llm.metadata.model_name,
                           self.llm.metadata.context_window, REPLY_TOKENS)
        return prompt_messages(prompt, context + attachment + note, self.llm, question=question), sent

    def _image_note(self, query_bundle: QueryBundle, result: RetrievalResult) -> str:
        caption = schema.query_image_caption(query_bundle) or _NO_DESCRIPTION
        match = result.visual_match
        if match is None:
            return self._prompts["image_note_prompt"].format(query_caption=caption)
        return self._prompts["image_note_matched_prompt"].format(
            query_caption=caption,
            image_id=match.payload.get(schema.IMAGE_ID, ""),
            caption=match.payload.get(schema.CAPTION, ""),
        )

    def prepare(self, query_bundle: QueryBundle, reserved: int = 0) -> AnswerRequest:
        """Everything of an answer but the LLM call, so a chat engine can send it after its history
        (``reserved``: the tokens it sends besides, which the prompt leaves room for, with
        ``REPLY_TOKENS`` for the answer). A query image given as a URL is made local first: fetched
        and checked once, then retrieval encodes and delivery stamps the same file."""
        query_bundle = local_query(self.retriever._index, schema.as_query(query_bundle))
        result = self.retriever.retrieve_with_plan(query_bundle)
        nodes = self._blocks(result.nodes, query_bundle)
        prompt = self._prompts["conflict_prompt" if result.plan.answer_prompt == "conflict" else "answer_prompt"]
        room = self.llm.metadata.context_window - REPLY_TOKENS - reserved
        messages, nodes = self._content(prompt, query_bundle, result, nodes, room)
        return AnswerRequest(
            messages=messages,
            nodes=nodes,
            metadata={
                "case": result.plan.case.value,
                "answer_prompt": result.plan.answer_prompt,
                "anchors": {a.value: v.text for a, v in result.anchors.items()},
                "reasons": list(result.plan.reasons),
                # a picture was asked for, but no round holding or next to one matched: all rounds were ranked
                "filter_fallback": result.filter_fallback,
                # anchors the LLM should have written but did not (it failed, timed out, answered junk), with why
                "llm_fallback": result.llm_fallback,
                "delivery": self.deliverer.mode.value,
            },
        )

    def _query(self, query_bundle: QueryBundle) -> Union[Response, StreamingResponse]:
        with self.callback_manager.event(CBEventType.QUERY, payload={EventPayload.QUERY_STR: query_bundle.query_str}) as event:
            request = self.prepare(query_bundle)
            if self.streaming:
                trim = _Trim()
                deltas = (trim(chunk.delta or "") for chunk in self.llm.stream_chat(request.messages))
                response = StreamingResponse((d for d in deltas if d), source_nodes=request.nodes, metadata=request.metadata)
            else:
                response = _response(request, self.llm.chat(request.messages))
            event.on_end(payload={EventPayload.RESPONSE: response})
        return response

    async def _aquery(self, query_bundle: QueryBundle) -> Union[Response, AsyncStreamingResponse]:
        with self.callback_manager.event(CBEventType.QUERY, payload={EventPayload.QUERY_STR: query_bundle.query_str}) as event:
            request = await asyncio.to_thread(self.prepare, query_bundle)
            if self.streaming:
                stream = await self.llm.astream_chat(request.messages)
                response = AsyncStreamingResponse(_adeltas(stream), source_nodes=request.nodes, metadata=request.metadata)
            else:
                response = _response(request, await self.llm.achat(request.messages))
            event.on_end(payload={EventPayload.RESPONSE: response})
        return response


def _sent(context: List[ContentBlock], nodes: List[NodeWithScore]) -> List[NodeWithScore]:
    """The nodes of the blocks whose first line (a block's header) the context holds: the answer's
    sources are what the model saw, less a block cut off or skipped (forgotten since retrieval)."""
    text = "".join(b.text for b in context if isinstance(b, TextBlock))
    first_lines = ((group, next((line for line in group[0].node.get_content().splitlines() if line.strip()), ""))
                   for group in block_groups(nodes))
    return [n for group, line in first_lines if line in text for n in group]


def _response(request: AnswerRequest, reply: ChatResponse) -> Response:
    return Response(response=(reply.message.content or "").strip(), source_nodes=request.nodes, metadata=request.metadata)


class _Trim:
    """A streamed answer's deltas as the whole answer is returned, stripped: leading whitespace is
    dropped and trailing whitespace held back until text follows it, so it is dropped at the end."""

    def __init__(self) -> None:
        self.started = False
        self.held = ""

    def __call__(self, delta: str) -> str:
        text = self.held + delta
        body = text.rstrip()
        self.held = text[len(body):]
        if not self.started:
            body = body.lstrip()
            self.started = bool(body)
        return body


async def _adeltas(stream: AsyncGenerator[ChatResponse, None]) -> AsyncGenerator[str, None]:
    trim = _Trim()
    async for chunk in stream:
        delta = trim(chunk.delta or "")
        if delta:
            yield delta
