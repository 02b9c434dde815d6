"""Encoders: MiniLM for the text lane, an image encoder for the image lane's visual signal.

The embedded default image encoder is EfficientNet-Lite0 (weights ship in a package, so it runs
offline); SigLIP/SigLIP2, the paper's configuration, is one argument away.
"""

from .efficientnet import EfficientNetImageEncoder
from .siglip import SiglipImageEncoder
from .bm25 import Bm25Encoder, Sparse
from .text import default_text_embedding

__all__ = ["Bm25Encoder", "Sparse", "EfficientNetImageEncoder", "SiglipImageEncoder", "default_text_embedding", "image_encoder_id"]


def image_encoder_id(encoder) -> str:
    """A stable name recorded in a store's manifest, so a reopened store refuses a different encoder."""
    return f"{encoder.class_name()}:{getattr(encoder, 'model_name', '')}"
