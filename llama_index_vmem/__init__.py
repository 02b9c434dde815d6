"""llama-index-vmem: V-Mem modality-routed long-term memory of multimodal conversations."""

from .chat_engine import VMemChatEngine
from .config import VMemConfig
from .delivery import DeliveryMode, DeliveryPostprocessor, ImageBudget
from .encoders import EfficientNetImageEncoder, SiglipImageEncoder
from .errors import VMemInputError
from .index import VMemIndex
from .memory_block import VMemMemoryBlock
from .node_parser import RoundNodeParser
from .postprocessor import NeighborRoundPostprocessor
from .query_engine import VMemQueryEngine
from .retriever import VMemRetriever
from .router import Case, KeywordRules, ModalityRouter, RoutePlan
from .schema import VMemQueryBundle

__all__ = [
    "Case",
    "DeliveryMode",
    "DeliveryPostprocessor",
    "EfficientNetImageEncoder",
    "ImageBudget",
    "KeywordRules",
    "ModalityRouter",
    "NeighborRoundPostprocessor",
    "RoundNodeParser",
    "RoutePlan",
    "SiglipImageEncoder",
    "VMemChatEngine",
    "VMemConfig",
    "VMemIndex",
    "VMemInputError",
    "VMemMemoryBlock",
    "VMemQueryBundle",
    "VMemQueryEngine",
    "VMemRetriever",
]
