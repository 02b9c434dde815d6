"""``VMemIndex``: the user's front door. It opens a memory (``from_defaults``, ``from_archive``)
and makes LlamaIndex's retriever, query engine and chat engine over it; what a memory holds and
how it is read and written lives in ``RoundMemory``, which it is.
"""

from __future__ import annotations

import inspect
import logging
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, Iterable, Mapping, Optional, Set, Union

from llama_index.core.embeddings.multi_modal_base import MultiModalEmbedding
from llama_index.core.embeddings.utils import EmbedType
from llama_index.core.llms.utils import LLMType

from . import archive, models
from .config import VMemConfig
from .encoders import BUILD_DEFAULTS, resolve_build_options
from .errors import VMemInputError, keywords_listed
from .node_parser import Transcriber
from .round_memory import MAX_MEMORY_ID_CHARS, RoundMemory, check_memory_id, manifest_of
from .store import LaneStore, open_edge_store

if TYPE_CHECKING:
    from .chat_engine import VMemChatEngine
    from .query_engine import VMemQueryEngine
    from .retriever import VMemRetriever

__all__ = ["DEFAULT_MEMORY_ID", "MAX_MEMORY_ID_CHARS", "VMemIndex"]

#: The memory ``from_defaults`` opens when given no ``memory_id``.
DEFAULT_MEMORY_ID = "default"

logger = logging.getLogger(__name__)


def _keywords(fn: Any, *passed: str) -> Set[str]:
    """The keyword options ``fn`` takes, less those the ``as_*`` method passes itself."""
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.kind is not p.VAR_KEYWORD} - {"self", *passed}


@lru_cache(maxsize=None)  # signatures do not change: read them once
def _retriever_options() -> FrozenSet[str]:
    from .retriever import VMemRetriever

    return frozenset(_keywords(VMemRetriever.__init__, "index", "config") | set(VMemConfig.__dataclass_fields__) | {"similarity_top_k"})


@lru_cache(maxsize=None)
def _engine_options() -> FrozenSet[str]:
    from .query_engine import VMemQueryEngine

    return frozenset(_keywords(VMemQueryEngine.__init__, "retriever", "llm"))


@lru_cache(maxsize=None)
def _chat_options() -> FrozenSet[str]:
    from .chat_engine import VMemChatEngine

    return frozenset(_keywords(VMemChatEngine.from_defaults, "index", "query_engine"))


def _server_store(url: Optional[str], client: Any, api_key: Optional[str], prefix: str, in_ram: Optional[bool]) -> LaneStore:
    """A store on a Qdrant server: ``client`` as given (the caller closes it), else one made for ``url``.
    qdrant-client loads in a second, so only here, for a server."""
    from .store.server import ServerLaneStore

    if client is not None:
        return ServerLaneStore(client, prefix=prefix, owns_client=False, in_ram=in_ram)
    from qdrant_client import QdrantClient

    return ServerLaneStore(QdrantClient(url=url, api_key=api_key), prefix=prefix, owns_client=True, in_ram=in_ram)


def _check_options(kwargs: Mapping[str, Any], accepted: Mapping[str, Iterable[str]]) -> None:
    """A misspelt option fails where it is given, naming what each layer takes: engines pass the
    options they do not take down to the retriever, whose own list would leave theirs out."""
    unknown = sorted(set(kwargs) - set().union(*accepted.values()))
    if unknown:
        raise TypeError(f"unsupported option(s) {unknown}; "
                        + "; ".join(f"{what} takes {', '.join(sorted(names))}" for what, names in accepted.items()))


class VMemIndex(RoundMemory):
    """A long-term memory of one multimodal conversation (or user): open one with ``from_defaults``."""

    @classmethod
    @keywords_listed
    def from_defaults(
        cls,
        path: Optional[Union[str, Path]] = None,
        url: Optional[str] = None,
        memory_id: Optional[str] = None,
        embed_model: Optional[EmbedType] = None,
        image_encoder: Optional[MultiModalEmbedding] = None,
        llm: Optional[LLMType] = None,
        config: Optional[VMemConfig] = None,
        *,
        client: Any = None,
        api_key: Optional[str] = None,
        collection_prefix: str = "vmem",
        image_dir: Optional[Union[str, Path]] = None,
        transcriber: Optional[Transcriber] = None,
        show_progress: bool = False,
        region_tiles: bool = False,
        bm25_b: Optional[float] = None,
        dated_units: Optional[bool] = None,
        reply_context: Optional[bool] = None,
        in_ram: Optional[bool] = None,
    ) -> "VMemIndex":
        """Open (or create) a memory.

        ``memory_id`` names the memory in its store (default ``"default"``): a store holds many, and
        ``list_memories`` lists them. A new id starts a new, empty memory. Opening a store without a
        ``memory_id`` where it holds other memories but none named ``"default"`` logs a warning
        naming them: the memory opened is empty, and the caller most likely meant one of those.

        ``path=None, url=None``: a temporary embedded store, removed on ``close()``.
        ``path``: a Qdrant Edge store on disk; reopening it restores the memory exactly.
        ``url`` (or ``client``, any ``QdrantClient``): a Qdrant server; collections are shared by
        all memories, with ``memory_id`` as the tenant key. Images are kept under ``image_dir``
        (default: ``path/images``, or a temporary directory). ``region_tiles=True`` also stores each
        image as whole + 2x2 overlapping tiles, compared by MaxSim, for the visual signal (five image
        encodings per image; fixed when the store is created). ``bm25_b`` (BM25 length normalisation,
        default 0), ``dated_units`` (units searched with their round's timestamp in front, default
        True) and ``reply_context`` (units also searched read after the exchange before them, default
        True) are fixed when the store is created too: left None, a memory follows its store's (one
        built before they were recorded: 0.75, False and False), and another value is refused.

        ``in_ram=True`` makes a store that keeps its vectors and indexes in RAM, for speed where RAM
        is plenty; by default they stay on disk and a question reads the few pages it needs. A store
        keeps what it was made with (one made before this choice has them in RAM): None opens it as
        it is, and the other value is refused on an embedded store. A server's collections keep
        what they were made with.
        """
        named = memory_id is not None
        memory_id = DEFAULT_MEMORY_ID if memory_id is None else memory_id
        check_memory_id(memory_id)
        embed_model, image_encoder = models.encoders(embed_model, image_encoder)  # before the store: a failure here holds nothing open
        tmp = None
        if client is not None or url is not None:
            store: LaneStore = _server_store(url, client, api_key, collection_prefix, in_ram)
            if image_dir is None:
                if path is None:
                    logger.warning("memory %s: its rounds stay on the server but its pictures go to a temporary folder "
                                   "that close() deletes; pass image_dir= (or path=) to keep them", memory_id)
                    tmp = tempfile.TemporaryDirectory(prefix="vmem-")
                    path = tmp.name
                image_dir = Path(path) / "images"
        else:
            if path is None:
                tmp = tempfile.TemporaryDirectory(prefix="vmem-")
                path = tmp.name
            store = open_edge_store(Path(path) / "qdrant", in_ram)
            image_dir = image_dir or Path(path) / "images"
        index = cls(
            store=store,
            memory_id=memory_id,
            embed_model=embed_model,
            image_encoder=image_encoder,
            image_dir=Path(image_dir),
            llm=llm,
            config=config,
            transcriber=transcriber,
            show_progress=show_progress,
            owns_tempdir=tmp,
            region_tiles=region_tiles,
            bm25_b=bm25_b,
            dated_units=dated_units,
            reply_context=reply_context,
        )
        try:
            index._say_if_absent(named)
        except BaseException:
            index.close()
            raise
        return index

    @classmethod
    def list_memories(cls, path: Optional[Union[str, Path]] = None, *, url: Optional[str] = None, client: Any = None,
                      api_key: Optional[str] = None, collection_prefix: str = "vmem") -> Dict[str, int]:
        """The memories a store holds, by ``memory_id``, with how many rounds each holds: the ids
        ``from_defaults(..., memory_id=...)`` opens. Give the store as ``from_defaults`` does
        (``path``, or ``url``/``client`` and ``collection_prefix``); nothing is created, and a
        store not created yet holds none."""
        if path is None and url is None and client is None:
            raise VMemInputError("list_memories", "name the store: path=, url= or client=")
        store = _server_store(url, client, api_key, collection_prefix, None) if client is not None or url is not None \
            else open_edge_store(Path(path) / "qdrant")
        try:
            return dict(sorted(store.memories().items()))
        finally:
            store.close()

    def _say_if_absent(self, named: bool) -> None:
        """Warn when an unnamed open found an empty ``"default"`` beside other memories: a reopened
        store that shows nothing is most often one opened without its ``memory_id``. A new memory
        named on purpose is only logged at INFO: a server serving many users creates them daily."""
        if len(self) or (named and not logger.isEnabledFor(logging.INFO)):
            return  # counting every memory of a large store only to log it is work no one reads
        others = {m: n for m, n in self.store.memories().items() if m != self.memory_id}
        if not others:
            return
        shown = ", ".join(f"{m!r} ({n} rounds)" for m, n in sorted(others.items())[:10]) + (", ..." if len(others) > 10 else "")
        if named:
            logger.info("memory %r is new: its store holds %d other memories", self.memory_id, len(others))
            return
        logger.warning("no memory_id given, so memory %r was opened, and it is empty; this store holds %s. Pass memory_id= "
                       "to open one of those; to start a new memory here, pass its new id (memory_id=%r included)",
                       self.memory_id, shown, self.memory_id)

    @classmethod
    def from_archive(cls, archive_path: Union[str, os.PathLike], /, memory_id: Optional[str] = None, *,
                     max_unpacked_bytes: Optional[int] = None, **store_kwargs: Any) -> "VMemIndex":
        """Open a memory (``from_defaults(**store_kwargs)``: any store or backend) and load an
        archive into it. The memory must be empty; ``memory_id`` defaults to the archived one, and
        ``region_tiles`` and the build options (``bm25_b``, ``dated_units``, ``reply_context``) to the archive's. An archive is refused when it would unpack to over 50
        times its size (and 64 MiB), as no export does unless its text is very repetitive; give
        ``max_unpacked_bytes`` to read such an export whole."""
        data = archive.read_archive(archive_path, max_unpacked_bytes)
        # Checked before a store is opened: one opened with other encoders would be created with
        # them (server collections too) and refuse the corrected retry.
        tiles = data.document["encoders"].get("region_tiles")
        if isinstance(tiles, bool):
            store_kwargs.setdefault("region_tiles", tiles)
        options = resolve_build_options(data.document["encoders"], **{k: store_kwargs.get(k) for k in BUILD_DEFAULTS})
        store_kwargs.update(options)
        store_kwargs["embed_model"], store_kwargs["image_encoder"] = models.encoders(store_kwargs.get("embed_model"), store_kwargs.get("image_encoder"))
        archive.check_encoders(data, manifest_of(store_kwargs["embed_model"], store_kwargs["image_encoder"],
                                                 store_kwargs.get("region_tiles", False), options))
        index = cls.from_defaults(memory_id=data.memory_id if memory_id is None else memory_id, **store_kwargs)
        try:
            index.import_archive(data)
        except BaseException:
            index.close()
            raise
        return index

    # -- LlamaIndex conventions ---------------------------------------------------------------

    def as_retriever(self, **kwargs: Any) -> "VMemRetriever":
        """``VMemConfig`` fields (``k=5``) override this index's config for this retriever.

        ``similarity_top_k``, LlamaIndex's name for how many nodes come back, sets ``k`` and, unless
        given too, ``aggregation_k``: a stock engine or tool sized for that many must not get 30
        rounds because a question says "how many" or "list"."""
        from .retriever import VMemRetriever

        if "similarity_top_k" in kwargs:
            top_k = kwargs.pop("similarity_top_k")
            if kwargs.get("k", top_k) != top_k:
                raise VMemInputError("similarity_top_k", f"is another name for k; got k={kwargs['k']} and similarity_top_k={top_k}")
            kwargs["k"] = top_k
            kwargs.setdefault("aggregation_k", top_k)
        _check_options(kwargs, {"a V-Mem retriever": _retriever_options()})
        overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in VMemConfig.__dataclass_fields__}
        router = kwargs.get("router")
        if router is not None and not callable(getattr(router, "route", None)):  # else each query fails on it
            raise VMemInputError("router", f"must be a ModalityRouter (or have its route(query, config)), got {type(router).__name__}")
        kwargs.setdefault("llm", self.llm)
        return VMemRetriever(self, config=self.config.override(**overrides), **kwargs)

    def as_query_engine(self, llm: Optional[LLMType] = None, **kwargs: Any) -> "VMemQueryEngine":
        """Answers with ``llm``, else this index's, else ``Settings.llm`` (as stock engines do); the
        same LLM writes the retriever's anchors."""
        from .delivery import DeliveryMode
        from .query_engine import VMemQueryEngine

        _check_options(kwargs, {"the query engine": _engine_options(), "its retriever": _retriever_options()})
        llm = models.as_llm(llm) or self.llm or models.settings_llm()
        engine_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in _engine_options()}
        delivery = engine_kwargs.get("delivery")
        if delivery is not None and delivery not in tuple(DeliveryMode):  # the engine's enum lookup names no option
            raise VMemInputError("delivery", f"must be one of {', '.join(m.value for m in DeliveryMode)}, got {delivery!r}")
        return VMemQueryEngine(retriever=self.as_retriever(llm=llm, **kwargs), llm=llm, **engine_kwargs)

    def as_chat_engine(self, llm: Optional[LLMType] = None, **kwargs: Any) -> "VMemChatEngine":
        """Chat that retrieves with the user's text and attached image and appends each exchange as a
        round; ``memory``, ``chat_history``, ``system_prompt``, ``session_id`` go to the chat engine,
        the rest to ``as_query_engine``."""
        from .chat_engine import VMemChatEngine

        if "streaming" in kwargs:  # the query engine's option would be taken and do nothing here
            raise TypeError("a chat engine streams through stream_chat() and astream_chat(); it takes no streaming=")
        _check_options(kwargs, {"the chat engine": _chat_options(), "its query engine": _engine_options() - {"streaming"},
                                "its retriever": _retriever_options()})
        chat_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in _chat_options()}
        return VMemChatEngine.from_defaults(self, self.as_query_engine(llm=llm, **kwargs), **chat_kwargs)
