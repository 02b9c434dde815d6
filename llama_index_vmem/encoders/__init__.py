"""Encoders: MiniLM for the text lane, an image encoder for the image lane's visual signal.

The embedded default image encoder is EfficientNet-Lite0 (weights ship in a package, so it runs
offline); SigLIP/SigLIP2, the paper's configuration, is one argument away.
"""

import re
from typing import Any, Dict, Optional

from .efficientnet import EfficientNetImageEncoder
from .siglip import SiglipImageEncoder
from .bm25 import Bm25Encoder, Sparse
from .text import default_text_embedding

__all__ = ["Bm25Encoder", "Sparse", "EfficientNetImageEncoder", "SiglipImageEncoder", "default_text_embedding", "encoder_id",
           "encoder_differences", "same_encoders", "resolve_build_options", "BUILD_DEFAULTS", "BUILD_LEGACY"]

#: Build-time options of the text lane, recorded in a store's manifest beside the encoders; a new
#: store takes these. ``bm25_b``: BM25 length normalisation of unit weights. Qdrant's 0.75 with its
#: avg_len=256 against conversation units of ~25 tokens saturates term frequency at once and favours
#: short chit-chat; 0 (saturation by k1 only) ranks LoCoMo turns better. ``dated_units``: units are
#: encoded, dense and BM25, after their round's timestamp (``schema.encoding_text``), as a LlamaIndex
#: user's node carries its date; the stored text stays as given. ``reply_context``: each text unit also
#: has a BM25 vector of itself read after the exchange before it (``schema.reply_context_texts``), which
#: a third text search ranks by, so a reply is found by what it answers.
BUILD_DEFAULTS: Dict[str, Any] = {"bm25_b": 0.0, "dated_units": True, "reply_context": True}
#: What a manifest that records no such option means: the store was built before it existed, and its
#: vectors were made this way (so new rounds are too: one store never mixes two encodings).
BUILD_LEGACY: Dict[str, Any] = {"bm25_b": 0.75, "dated_units": False, "reply_context": False}

#: Where an installed package's files live, up to the package itself.
_INSTALLED = re.compile(r"^.*[/\\](?:site|dist)-packages[/\\]")


def encoder_id(encoder: Any) -> str:
    """A stable name recorded in a store's manifest, so a reopened store refuses a different encoder.

    A model loaded from an installed package (the packaged MiniLM) is named by its path inside
    ``site-packages``: the same package in another environment, Python version or machine is the
    same encoder, so stores and archives move between them."""
    return _portable(f"{encoder.class_name()}:{getattr(encoder, 'model_name', '')}")


def resolve_build_options(recorded: Optional[Dict[str, Any]], **asked: Any) -> Dict[str, Any]:
    """Each build-time option (``BUILD_DEFAULTS``): as ``asked`` where given (not None); else as the
    store's ``recorded`` manifest says (``BUILD_LEGACY`` where it predates the option); else, for a
    new store (``recorded`` None), the default. A value asked for that the store's differs from is
    refused when the store is opened, as other encoders are."""
    unknown = set(asked) - set(BUILD_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown build options {sorted(unknown)}")
    base = BUILD_DEFAULTS if recorded is None else {k: recorded.get(k, v) for k, v in BUILD_LEGACY.items()}
    out = {k: base[k] if asked.get(k) is None else asked[k] for k in BUILD_DEFAULTS}
    b = out["bm25_b"]
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 <= b <= 1:
        raise ValueError(f"bm25_b must be a number from 0 to 1, got {b!r:.100}")
    for flag in ("dated_units", "reply_context"):
        if not isinstance(out[flag], bool):
            raise ValueError(f"{flag} must be True or False, got {out[flag]!r:.100}")
    return {**out, "bm25_b": float(b)}


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
    """Names made portable, and the build options a manifest from before them lacks filled in as
    they were (``BUILD_LEGACY``): such a store matches a memory that follows it."""
    return {**BUILD_LEGACY, **{k: _portable(v) if isinstance(v, str) else v for k, v in manifest.items()}}
