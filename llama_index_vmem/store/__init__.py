"""Lane stores: Qdrant Edge embedded on disk (default) or a Qdrant server through qdrant-client."""

from .base import Collection, Hit, LaneDims, LaneStore, PointData, Scope
from .edge import EdgeLaneStore, open_edge_store
from .server import ServerLaneStore

__all__ = ["Collection", "EdgeLaneStore", "Hit", "LaneDims", "LaneStore", "PointData", "Scope", "ServerLaneStore", "open_edge_store"]
