"""LLM-written search anchors, as LlamaIndex query transforms (the only module that calls an LLM
on the retrieval path).

* ``HypoCaptionTransform`` (text->image): the caption the wanted image most likely has.
* ``EnrichedAnchorTransform`` (image+text->text): the question plus at most 8 keywords a vision
  LLM reads off the attached image.
* ``caption_keywords``: without a vision LLM, the attached image's caption stands in for those
  keywords, cut to the same shape (content words, capped).

Both keep ``image_path`` (``HyDEQueryTransform`` drops it) and cache by input, so the same
question costs one LLM call. Both raise ``VMemAnchorError`` naming the anchor when the LLM fails,
gives no answer within their time limit, or answers nothing usable; the retriever then searches
with the anchor it writes without an LLM, unless asked to be strict. Failures are not cached: the
next question asks the LLM again.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole, TextBlock
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.llms import LLM
from llama_index.core.llms.utils import LLMType
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import QueryBundle
from llama_index.core.utils import globals_helper
from pydantic import PrivateAttr

from .errors import VMemAnchorError, VMemInputError
from .images import is_url
from .models import as_llm
from .prompts import ENRICHED_ANCHOR_PROMPT, HYPO_CAPTION_PROMPT, check_prompt
from .schema import is_utf8, visible


class _CachedAnchorTransform(BaseQueryTransform):
    """Shared caching, time limit and prompt plumbing; subclasses say how one anchor is made."""

    _llm: LLM = PrivateAttr()
    _prompt: BasePromptTemplate = PrivateAttr()
    _cache: Dict[Tuple[str, ...], str] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    prompt_key: str = "prompt"
    #: The anchor this transform writes, as ``VMemAnchorError`` and ``metadata["vmem"]["anchors"]`` name it.
    anchor_name: str = "anchor"

    def __init__(self, llm: LLMType, prompt: Optional[BasePromptTemplate] = None, timeout: Optional[float] = None) -> None:
        super().__init__()
        self._llm = as_llm(llm)
        if self._llm is None:
            raise VMemInputError("llm", "an anchor transform needs an LLM")
        if prompt is not None:
            check_prompt(self.prompt_key, prompt)
        self._prompt = prompt or self.default_prompt()
        self._cache = {}
        self._lock = threading.Lock()
        #: Seconds to wait for the LLM (None: as long as it takes), unless ``run``'s metadata gives ``timeout``.
        self.timeout = timeout

    @classmethod
    def default_prompt(cls) -> BasePromptTemplate:
        raise NotImplementedError

    def _get_prompts(self) -> PromptDictType:
        return {self.prompt_key: self._prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if self.prompt_key in prompts:
            check_prompt(self.prompt_key, prompts[self.prompt_key])
            self._prompt = prompts[self.prompt_key]
            self._cache.clear()

    def _cache_key(self, query: QueryBundle, metadata: Dict) -> Tuple[str, ...]:
        return (self._prompt.get_template(), query.query_str, _image_fingerprint(query.image_path))

    def _run(self, query_bundle: QueryBundle, metadata: Dict) -> QueryBundle:
        key = self._cache_key(query_bundle, metadata)
        with self._lock:
            anchor = self._cache.get(key)
        if anchor is None:
            anchor = self._written_in_time(query_bundle, metadata, key)
        return replace(query_bundle, query_str=anchor, custom_embedding_strs=[anchor], embedding=None)

    def _written_in_time(self, query: QueryBundle, metadata: Dict, key: Tuple[str, ...]) -> str:
        """The anchor, written in a thread of its own when there is a time limit, so a hung LLM holds
        a retrieval no longer than that. The thread is a daemon (a hung call does not hold up the
        program's exit) and runs in the caller's context (tracing sees the call where it was made)."""
        timeout = metadata.get("timeout", self.timeout)
        if timeout is None:
            return self._written(query, metadata, key)
        outcome: Dict[str, Any] = {}

        def write() -> None:
            try:
                outcome["anchor"] = self._written(query, metadata, key)
            except Exception as e:  # handed to the waiting caller, as a direct call would raise it
                outcome["error"] = e

        worker = threading.Thread(target=contextvars.copy_context().run, args=(write,), daemon=True,
                                  name=f"vmem-{self.anchor_name}-anchor")
        worker.start()
        worker.join(min(timeout, threading.TIMEOUT_MAX))
        if worker.is_alive():
            raise VMemAnchorError(self.anchor_name, f"the LLM gave no answer within {timeout:g} s") from TimeoutError()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["anchor"]

    def _written(self, query: QueryBundle, metadata: Dict, key: Tuple[str, ...]) -> str:
        """A fresh anchor, cached; any failure of the LLM call is raised as this anchor's error."""
        try:
            anchor = self._make_anchor(query, metadata)
        except (VMemAnchorError, VMemInputError):
            raise
        except Exception as e:  # the client's own errors differ by provider: connection, status, parsing
            raise VMemAnchorError(self.anchor_name, f"the LLM failed: {_summary(e)}") from e
        with self._lock:
            self._cache[key] = anchor
        return anchor

    def _make_anchor(self, query: QueryBundle, metadata: Dict) -> str:
        raise NotImplementedError

    def _unusable(self, what: str, reply: str) -> VMemAnchorError:
        return VMemAnchorError(self.anchor_name, f"the LLM's answer has no usable {what}: {reply!r:.80}")


class HypoCaptionTransform(_CachedAnchorTransform):
    """Replace a text->image question by the caption its target image would plausibly have."""

    prompt_key = "hypo_caption_prompt"
    anchor_name = "hypo_caption"

    @classmethod
    def default_prompt(cls) -> BasePromptTemplate:
        return HYPO_CAPTION_PROMPT

    def _make_anchor(self, query: QueryBundle, metadata: Dict) -> str:
        caption = self._llm.predict(self._prompt, q=query.query_str).strip()
        if not (visible(caption) and is_utf8(caption)):
            raise self._unusable("caption", caption)
        return caption


class EnrichedAnchorTransform(_CachedAnchorTransform):
    """Append to the question the keywords a vision LLM reads off the attached image: at most
    ``max_keywords``, or the ``max_keywords`` of the ``metadata`` a caller runs it with."""

    prompt_key = "enriched_anchor_prompt"
    anchor_name = "enriched"

    def __init__(self, llm: LLMType, prompt: Optional[BasePromptTemplate] = None, max_keywords: int = 8,
                 timeout: Optional[float] = None) -> None:
        super().__init__(llm, prompt, timeout)
        self.max_keywords = max_keywords

    @classmethod
    def default_prompt(cls) -> BasePromptTemplate:
        return ENRICHED_ANCHOR_PROMPT

    def _cache_key(self, query: QueryBundle, metadata: Dict) -> Tuple[str, ...]:
        return (*super()._cache_key(query, metadata), str(self._max_keywords(metadata)))

    def _max_keywords(self, metadata: Dict) -> int:
        return metadata.get("max_keywords", self.max_keywords)

    def _make_anchor(self, query: QueryBundle, metadata: Dict) -> str:
        if not query.image_path:
            return query.query_str
        blocks: List[Any] = [_image_block(query.image_path), TextBlock(text=self._prompt.format(q=query.query_str))]
        reply = self._llm.chat([ChatMessage(role=MessageRole.USER, blocks=blocks)]).message.content or ""
        keywords = parse_keywords(reply)
        if not keywords:
            raise self._unusable("keywords", reply)
        return " ".join([query.query_str, *keywords[: self._max_keywords(metadata)]])


def parse_keywords(reply: str) -> List[str]:
    """``{"keywords": [...]}`` from a model reply, tolerating code fences and prose around it."""
    match = re.search(r"\{.*\}", reply, re.DOTALL)
    if match:
        try:
            value = json.loads(match.group(0)).get("keywords", [])
            if isinstance(value, list):  # words only: a number or a nested object says nothing to search with
                return [k.strip() for k in value if isinstance(k, str) and visible(k) and is_utf8(k)]
        except (json.JSONDecodeError, AttributeError):
            pass
    return []


def caption_keywords(caption: str, max_keywords: int) -> List[str]:
    """The caption's first ``max_keywords`` distinct content words, in order.

    Appended whole, a caption outweighs the question in the anchor; cut to keywords, it weighs what
    the vision LLM's keywords weigh. Captions name their subject first, so the first words are kept.
    """
    words: Dict[str, str] = {}
    for word in re.findall(r"[^\W\d_]{2,}(?:['’-][^\W\d_]+)*", caption):
        if word.lower() not in globals_helper.stopwords:
            words.setdefault(word.lower(), word)
    return list(words.values())[:max_keywords]


def _summary(error: Exception) -> str:
    """``Type: message`` on one line, cut short: a server's error page can be long."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= 200 else text[:199] + "…"


def _image_block(image_path: str) -> ImageBlock:
    if is_url(image_path):
        return ImageBlock(url=image_path)
    return ImageBlock(path=Path(image_path))


def _image_fingerprint(image_path: Optional[str]) -> str:
    """Content hash of a local image (so an edited file is a new input), else the URL itself."""
    if not image_path:
        return ""
    path = Path(image_path)
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return image_path
