"""Which LLM and encoders a memory works with: those given, read as LlamaIndex reads them
(an object, or a string ``resolve_llm`` / ``resolve_embed_model`` knows, or a LangChain model they
wrap), else the packaged encoders and, for answering, ``Settings.llm``. Anything else is refused
here, by name, rather than by the first question that needs it."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from llama_index.core import Settings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.embeddings.multi_modal_base import MultiModalEmbedding
from llama_index.core.embeddings.utils import EmbedType, resolve_embed_model
from llama_index.core.llms import LLM
from llama_index.core.llms.utils import LLMType, resolve_llm

from .encoders import EfficientNetImageEncoder, default_text_embedding
from .errors import VMemInputError


def as_llm(llm: Optional[LLMType]) -> Optional[LLM]:
    """``llm=`` as an ``LLM``, or None for none (``resolve_llm`` would make None a ``MockLLM``)."""
    if llm is None or isinstance(llm, LLM):
        return llm
    return _resolved("llm", llm, resolve_llm, LLM)


def settings_llm() -> LLM:
    """LlamaIndex's global LLM; unset, LlamaIndex reaches for OpenAI, so say what is missing."""
    try:
        return Settings.llm
    except (ImportError, ValueError) as e:
        raise ValueError(f"a query or chat engine needs an LLM: pass llm=, or set Settings.llm ({e})") from None


def encoders(embed_model: Optional[EmbedType], image_encoder: Optional[MultiModalEmbedding]) -> Tuple[BaseEmbedding, MultiModalEmbedding]:
    """The encoders given, or the packaged defaults (MiniLM, EfficientNet-Lite0) in their place.
    ``Settings.embed_model`` is not read: a store keeps the encoders it was built with."""
    text = embed_model if isinstance(embed_model, BaseEmbedding) else (
        default_text_embedding() if embed_model is None else _resolved("embed_model", embed_model, resolve_embed_model, BaseEmbedding))
    image = EfficientNetImageEncoder() if image_encoder is None else image_encoder
    if not isinstance(image, MultiModalEmbedding):
        raise VMemInputError("image_encoder", f"must be a LlamaIndex MultiModalEmbedding, got {type(image).__name__}")
    return text, image


def _resolved(item: str, given: Any, resolve: Any, kind: type) -> Any:
    """``resolve(given)``, LlamaIndex's reading of a string or LangChain model; its own refusal of a
    string it does not know stands, and anything else it cannot make a ``kind`` of is refused by name
    (it only asserts, not at all under ``python -O``, or fails on comparing the object to a string)."""
    try:
        resolved = resolve(given)
    except Exception:
        if isinstance(given, str):
            raise
        resolved = None
    if not isinstance(resolved, kind):
        raise VMemInputError(item, f"must be a LlamaIndex {kind.__name__}, got {type(given).__name__}")
    return resolved
