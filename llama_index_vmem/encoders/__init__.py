"""Encoders: MiniLM for the text lane, an image encoder for the image lane's visual signal.

The embedded default image encoder is EfficientNet-Lite0 (weights ship in a package, so it runs
offline); SigLIP/SigLIP2, the paper's configuration, is one argument away.
"""

import re
from typing import Any, Dict

from .efficientnet import EfficientNetImageEncoder
from .siglip import SiglipImageEncoder
from .bm25 import Bm25Encoder, Sparse
from .text import default_text_embedding

__all__ = ["Bm25Encoder", "Sparse", "EfficientNetImageEncoder", "SiglipImageEncoder", "default_text_embedding", "encoder_id",
           "encoder_differences", "same_encoders"]

#: Where an installed package's files live, up to the package itself.
_INSTALLED = re.compile(r"^.*[/\\](?:site|dist)-packages[/\\]")


def encoder_id(encoder: Any) -> str:
    """A stable name recorded in a store's manifest, so a reopened store refuses a different encoder.

    A model loaded from an installed package (the packaged MiniLM) is named by its path inside
    ``site-packages``: the same package in another environment, Python version or machine is the
    same encoder, so stores and archives move between them."""
    return _portable(f"{encoder.class_name()}:{getattr(encoder, 'model_name', '')}")


def same_encoders(stored: Dict[str, Any], wanted: Dict[str, Any]) -> bool:
    """Whether a recorded manifest names the encoders ``wanted`` names; one recorded before names
    were portable (a full site-packages path) still matches."""
    return _portable_values(stored) == _portable_values(wanted)


def encoder_differences(stored: Dict[str, Any], wanted: Dict[str, Any]) -> str:
    """How ``wanted`` differs from a recorded manifest, key by key (``region_tiles: built with True,
    asked for False``), so a refusal says what to pass rather than printing two manifests."""
    old, new = _portable_values(stored), _portable_values(wanted)
    return "; ".join(f"{key}: built with {old.get(key)!r}, asked for {new.get(key)!r}"
                     for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key))


def _portable(name: str) -> str:
    kind, colon, model = name.partition(":")
    return f"{kind}{colon}{_INSTALLED.sub('', model)}"


def _portable_values(manifest: Dict[str, Any]) -> Dict[str, Any]:
    return {k: _portable(v) if isinstance(v, str) else v for k, v in manifest.items()}
