"""Answering over a memory with the paper's prompts: answer, conflict, and the attached-image note."""

from __future__ import annotations

import asyncio
from typing import List, Optional

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import Response
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle

from . import delivery, schema
from .postprocessor import NeighborRoundPostprocessor
from .prompts import ANSWER_PROMPT, CONFLICT_PROMPT, IMAGE_NOTE_MATCHED_PROMPT, IMAGE_NOTE_PROMPT
from .retriever import RetrievalResult, VMemRetriever

_NO_DESCRIPTION = "an image (no description was given)"


class VMemQueryEngine(BaseQueryEngine):
    """retrieve (routed) -> neighbour blocks -> context (+ attached-image note) -> one LLM call."""

    def __init__(
        self,
        retriever: VMemRetriever,
        llm: Optional[LLM] = None,
        answer_prompt: Optional[BasePromptTemplate] = None,
        conflict_prompt: Optional[BasePromptTemplate] = None,
        image_note_prompt: Optional[BasePromptTemplate] = None,
        image_note_matched_prompt: Optional[BasePromptTemplate] = None,
    ) -> None:
        super().__init__(callback_manager=retriever.callback_manager)
        if llm is None:
            raise ValueError("as_query_engine needs an llm (any LlamaIndex LLM)")
        self.retriever = retriever
        self.llm = llm
        self.postprocessor = NeighborRoundPostprocessor(retriever._index)
        self._prompts = {
            "answer_prompt": answer_prompt or ANSWER_PROMPT,
            "conflict_prompt": conflict_prompt or CONFLICT_PROMPT,
            "image_note_prompt": image_note_prompt or IMAGE_NOTE_PROMPT,
            "image_note_matched_prompt": image_note_matched_prompt or IMAGE_NOTE_MATCHED_PROMPT,
        }

    def _get_prompts(self) -> PromptDictType:
        return dict(self._prompts)

    def _update_prompts(self, prompts: PromptDictType) -> None:
        self._prompts.update({k: v for k, v in prompts.items() if k in self._prompts})

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"retriever": self.retriever}

    def retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self.postprocessor.postprocess_nodes(self.retriever.retrieve(query_bundle), query_bundle)

    def _context(self, query_bundle: QueryBundle, result: RetrievalResult, nodes: List[NodeWithScore]) -> str:
        context = delivery.text_context(nodes)
        if query_bundle.image_path or getattr(query_bundle, "image_caption", None):
            context = f"{context}\n\n{self._image_note(query_bundle, result)}"
        return context

    def _image_note(self, query_bundle: QueryBundle, result: RetrievalResult) -> str:
        caption = getattr(query_bundle, "image_caption", None) or _NO_DESCRIPTION
        match = result.visual_match
        if match is None:
            return self._prompts["image_note_prompt"].format(query_caption=caption)
        return self._prompts["image_note_matched_prompt"].format(
            query_caption=caption,
            image_id=match.payload.get(schema.IMAGE_ID, ""),
            caption=match.payload.get(schema.CAPTION, ""),
        )

    def _query(self, query_bundle: QueryBundle) -> Response:
        result = self.retriever.retrieve_with_plan(query_bundle)
        nodes = self.postprocessor.postprocess_nodes(result.nodes, query_bundle)
        prompt = self._prompts["conflict_prompt" if result.plan.answer_prompt == "conflict" else "answer_prompt"]
        answer = self.llm.predict(prompt, context=self._context(query_bundle, result, nodes), question=query_bundle.query_str)
        return Response(
            response=answer,
            source_nodes=nodes,
            metadata={
                "case": result.plan.case.value,
                "answer_prompt": result.plan.answer_prompt,
                "anchors": {a.value: v.text for a, v in result.anchors.items()},
                "reasons": list(result.plan.reasons),
            },
        )

    async def _aquery(self, query_bundle: QueryBundle) -> Response:
        return await asyncio.to_thread(self._query, query_bundle)
