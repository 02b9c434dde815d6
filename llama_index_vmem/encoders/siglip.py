"""SigLIP / SigLIP2 through transformers: the paper's image encoder (``google/siglip2-base-patch16-384``)."""

from __future__ import annotations

import asyncio
from typing import Any, List

from llama_index.core.embeddings.multi_modal_base import MultiModalEmbedding
from llama_index.core.schema import ImageType
from pydantic import Field, PrivateAttr

from ..images import open_rgb
from .quiet import quiet_loading


class SiglipImageEncoder(MultiModalEmbedding):
    """Image (and text) embeddings from a SigLIP-family model id or local path, L2-normalised.

    ``local_files_only=True`` keeps it offline; set it False to let transformers fetch the model.
    """

    model_name: str = Field(default="google/siglip2-base-patch16-384")
    local_files_only: bool = Field(default=False)
    device: str = Field(default="cpu")
    embed_batch_size: int = Field(default=16, gt=0)
    _model: Any = PrivateAttr(default=None)
    _processor: Any = PrivateAttr(default=None)
    _tokenizer: Any = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "SiglipImageEncoder"

    @property
    def dimension(self) -> int:
        return int(self._load()[0].config.vision_config.hidden_size)

    def _load(self) -> Any:
        if self._model is None:
            from transformers import AutoImageProcessor, AutoModel

            with quiet_loading():
                self._processor = AutoImageProcessor.from_pretrained(self.model_name, local_files_only=self.local_files_only)
                self._model = AutoModel.from_pretrained(self.model_name, local_files_only=self.local_files_only)
            self._model = self._model.to(self.device).eval()
        return self._model, self._processor

    def _get_image_embeddings(self, img_file_paths: List[ImageType]) -> List[List[float]]:
        import torch

        model, processor = self._load()
        inputs = processor(images=[open_rgb(p) for p in img_file_paths], return_tensors="pt").to(self.device)
        with torch.inference_mode():
            feats = _as_tensor(model.get_image_features(**inputs))
        return torch.nn.functional.normalize(feats, dim=-1).tolist()

    def _get_image_embedding(self, img_file_path: ImageType) -> List[float]:
        return self._get_image_embeddings([img_file_path])[0]

    async def _aget_image_embedding(self, img_file_path: ImageType) -> List[float]:
        return await asyncio.to_thread(self._get_image_embedding, img_file_path)

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        import torch

        model, _ = self._load()
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_name, local_files_only=self.local_files_only)
        inputs = self._tokenizer(texts, padding="max_length", truncation=True, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            feats = _as_tensor(model.get_text_features(**inputs))
        return torch.nn.functional.normalize(feats, dim=-1).tolist()

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)


def _as_tensor(output: Any) -> Any:
    """transformers 5 may return a model output instead of a tensor from ``get_*_features``."""
    return output if hasattr(output, "dim") else output.pooler_output
