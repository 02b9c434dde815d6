"""llama-index-vmem: V-Mem modality-routed long-term memory of multimodal conversations."""

from .config import VMemConfig
from .delivery import DeliveryMode, DeliveryPostprocessor, ImageBudget
from .encoders import EfficientNetImageEncoder, SiglipImageEncoder
from .errors import VMemInputError
from .index import VMemIndex
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
    "VMemConfig",
    "VMemIndex",
    "VMemInputError",
    "VMemQueryBundle",
    "VMemQueryEngine",
    "VMemRetriever",
]
