"""Lane stores: Qdrant Edge embedded on disk (default) or a Qdrant server through qdrant-client.

``ServerLaneStore`` is imported on first use: qdrant-client takes about a second to load, and an
embedded memory never needs it."""

from typing import Any

from .base import Collection, Hit, LaneDims, LaneStore, PointData, Scope
from .edge import EdgeLaneStore, open_edge_store

__all__ = ["Collection", "EdgeLaneStore", "Hit", "LaneDims", "LaneStore", "PointData", "Scope", "ServerLaneStore", "open_edge_store"]


def __getattr__(name: str) -> Any:
    if name == "ServerLaneStore":
        from .server import ServerLaneStore

        return ServerLaneStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
