"""``HuggingFaceEmbedding`` with bf16 autocast on CPUs that multiply bf16 natively. Importing this
module loads torch and sentence-transformers (seconds), so ``text.default_text_embedding`` imports it
only when it builds the encoder."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch
from llama_index.core.bridge.pydantic import Field
from llama_index.embeddings.huggingface import HuggingFaceEmbedding


def cpu_has_native_bf16() -> bool:
    """True where the CPU multiplies bf16 in hardware (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slower."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private helpers; older torch lacks them
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


class AutocastHuggingFaceEmbedding(HuggingFaceEmbedding):
    """``HuggingFaceEmbedding`` whose CPU forward passes run under bf16 autocast when asked, and
    which counts tokens so ingestion can batch texts of like length.

    Autocast keeps layer norms, softmax and pooling in fp32, so embeddings stay within cosine
    0.9999 of fp32 (full bf16 weights drift to 0.996), while matrix products run about 2x faster
    on CPUs with native bf16. The linear layers' weights are cast to bf16 once, up front: autocast
    would cast them on every batch to the very same values.
    """

    bf16: bool = Field(default=False, description="Run CPU forward passes under bf16 autocast (fixed at construction).")

    def __init__(self, *, bf16: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # the parent hands unknown keywords to SentenceTransformer
        self.bf16 = bf16
        if bf16:
            for module in self._model.modules():
                if isinstance(module, torch.nn.Linear):
                    module.to(torch.bfloat16)

    def token_lengths(self, texts: Sequence[str]) -> List[int]:
        """Token counts as the forward pass will see them (special tokens in, cut at ``max_length``)."""
        if not texts:  # the tokenizer cannot take an empty batch
            return []
        encoded = self._model.tokenizer(list(texts), truncation=True, max_length=self.max_length)
        return [len(ids) for ids in encoded["input_ids"]]

    def get_query_embedding_batch(self, queries: Sequence[str]) -> List[List[float]]:
        """Several questions in one forward pass: a question and the words of its picture cost one
        pass of the model, not two."""
        return self._embed(list(queries), prompt_name="query")

    @classmethod
    def class_name(cls) -> str:
        return "HuggingFaceEmbedding"  # the same weights, so stores built either way stay compatible

    def _embed(self, inputs: List[Any], prompt_name: Optional[str] = None) -> List[List[float]]:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            return super()._embed(inputs, prompt_name)
