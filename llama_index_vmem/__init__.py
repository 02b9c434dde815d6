"""llama-index-vmem: V-Mem modality-routed long-term memory of multimodal conversations."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:  # for type checkers and IDEs; at run time each name is imported on first use
    from .chat_engine import VMemChatEngine
    from .config import VMemConfig
    from .delivery import DeliveryMode, DeliveryPostprocessor, ImageBudget
    from .encoders import EfficientNetImageEncoder, SiglipImageEncoder
    from .errors import VMemAnchorError, VMemAnchorWarning, VMemInputError
    from .index import VMemIndex
    from .memory_block import VMemMemoryBlock
    from .node_parser import RoundNodeParser
    from .postprocessor import NeighborRoundPostprocessor
    from .query_engine import VMemQueryEngine
    from .retriever import VMemRetriever
    from .round_memory import RoundMemory
    from .router import AnswerKind, Case, KeywordRules, ModalityRouter, RoutePlan
    from .schema import VMemQueryBundle

#: Each public name and the submodule that defines it. They are imported when first used, not when
#: the package is: light entry points (``vmem-bench --help``) then load neither torch nor LlamaIndex.
_EXPORTS = {
    "AnswerKind": "router",
    "Case": "router",
    "DeliveryMode": "delivery",
    "DeliveryPostprocessor": "delivery",
    "EfficientNetImageEncoder": "encoders",
    "ImageBudget": "delivery",
    "KeywordRules": "router",
    "ModalityRouter": "router",
    "NeighborRoundPostprocessor": "postprocessor",
    "RoundMemory": "round_memory",
    "RoundNodeParser": "node_parser",
    "RoutePlan": "router",
    "SiglipImageEncoder": "encoders",
    "VMemChatEngine": "chat_engine",
    "VMemConfig": "config",
    "VMemAnchorError": "errors",
    "VMemAnchorWarning": "errors",
    "VMemIndex": "index",
    "VMemInputError": "errors",
    "VMemMemoryBlock": "memory_block",
    "VMemQueryBundle": "schema",
    "VMemQueryEngine": "query_engine",
    "VMemRetriever": "retriever",
}

__all__ = [
    "AnswerKind",
    "Case",
    "DeliveryMode",
    "DeliveryPostprocessor",
    "EfficientNetImageEncoder",
    "ImageBudget",
    "KeywordRules",
    "ModalityRouter",
    "NeighborRoundPostprocessor",
    "RoundMemory",
    "RoundNodeParser",
    "RoutePlan",
    "SiglipImageEncoder",
    "VMemAnchorError",
    "VMemAnchorWarning",
    "VMemChatEngine",
    "VMemConfig",
    "VMemIndex",
    "VMemInputError",
    "VMemMemoryBlock",
    "VMemQueryBundle",
    "VMemQueryEngine",
    "VMemRetriever",
]


def __getattr__(name: str) -> Any:
    """A public name, or a submodule (``llama_index_vmem.index``), imported on first access."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    else:
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":  # the submodule exists but something it imports does not
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
