"""Shared fixtures: the real packaged MiniLM, a tiny real SigLIP built at test time, real photos
(scikit-image's bundled samples) and a scripted LLM that records every prompt it was sent."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms import CustomLLM
from pydantic import PrivateAttr

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: Room a RAM disk needs before the tests write there: each test's folder goes when it passes
#: (``tmp_path_retention_policy``), and the most alive at once is a few stores of about 60 MB.
_RAM_DISK_ROOM = 2 << 30


def _ram_disk() -> str | None:
    """A RAM disk with room, where the machine has one. Tests make stores by the hundred, and on a
    disk most of the time making one goes to syncing files (about 0.3 of 0.4 s); a RAM disk syncs
    nothing. What the tests check does not depend on where the files are."""
    shm = "/dev/shm"
    if not os.access(shm, os.W_OK):
        return None
    return shm if shutil.disk_usage(shm).free >= _RAM_DISK_ROOM else None


if not os.environ.get("TMPDIR"):  # a folder the runner chose wins
    tempfile.tempdir = _ram_disk()


@contextlib.contextmanager
def image_server(body: bytes, before_reply: Callable[[], None] = lambda: None) -> Iterator[Tuple[str, List[str]]]:
    """A loopback HTTP server answering every GET with ``body`` once ``before_reply()`` returns;
    yields its address (``http://127.0.0.1:PORT``) and the paths asked for, in order."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: List[str] = []

    class Serve(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            before_reply()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()


#: Benchmark fixtures shipped with the tests, in the benchmarks' own layout (see tests/data/README.md):
#: a slice of two Mem-Gallery dialogues and a synthetic LoCoMo-format file.
BENCH_DATA = Path(__file__).resolve().parent / "data"


class ScriptedLLM(CustomLLM):
    """Answers by the first rule whose key occurs in the prompt; records what it was sent."""

    _rules: List[tuple] = PrivateAttr(default_factory=list)
    _default: str = PrivateAttr(default="")
    prompts: List[str] = []
    chats: List[Sequence[ChatMessage]] = []

    def __init__(self, rules: Dict[str, str] | None = None, default: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._rules = list((rules or {}).items())
        self._default = default
        self.prompts = []
        self.chats = []

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted", is_chat_model=False)

    def _reply(self, prompt: str) -> str:
        return next((reply for key, reply in self._rules if key in prompt), self._default)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self._reply(prompt))

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.chats.append(list(messages))
        text = "\n".join(m.content or "" for m in messages)
        self.prompts.append(text)
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=self._reply(text)))


@pytest.fixture
def scripted_llm() -> Callable[..., ScriptedLLM]:
    return ScriptedLLM


@pytest.fixture(scope="session")
def minilm():
    from llama_index_vmem.encoders import default_text_embedding

    return default_text_embedding()


@pytest.fixture(scope="session")
def tiny_siglip(tmp_path_factory):
    """A randomly initialised SigLIP saved to disk and reloaded offline: the real code path."""
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    from llama_index_vmem.encoders import SiglipImageEncoder

    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    config = SiglipConfig(
        text_config=dict(small, vocab_size=100, max_position_embeddings=16),
        vision_config=dict(small, image_size=32, patch_size=8),
    )
    directory = tmp_path_factory.mktemp("tiny-siglip")
    SiglipModel(config).save_pretrained(directory)
    SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    return SiglipImageEncoder(model_name=str(directory), local_files_only=True)


@pytest.fixture(scope="session")
def photos() -> Dict[str, Path]:
    """Real photos bundled with scikit-image."""
    import skimage

    root = Path(skimage.__file__).parent / "data"
    names = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "horse.png", "camera.png", "hubble_deep_field.jpg"]
    return {n.split(".")[0]: root / n for n in names}


@pytest.fixture(params=["edge", pytest.param("server", marks=pytest.mark.slow)])
def make_index(request, tmp_path, minilm, tiny_siglip):
    """Open memories of one store, on Qdrant Edge or through qdrant-client (its local mode runs the
    server code path); every test using it runs on both, the server one with the long tests
    (``-m slow``). All are closed after the test."""
    from qdrant_client import QdrantClient

    from llama_index_vmem import VMemIndex

    client = QdrantClient(location=":memory:") if request.param == "server" else None
    opened = []

    def make(**kwargs: Any) -> VMemIndex:
        kwargs.setdefault("path", tmp_path / "memory")
        kwargs.setdefault("embed_model", minilm)
        kwargs.setdefault("image_encoder", tiny_siglip)
        if client is not None:
            kwargs.setdefault("client", client)
        index = VMemIndex.from_defaults(**kwargs)
        opened.append(index)
        return index

    yield make
    for index in opened:
        index.close()


@pytest.fixture
def open_memory(make_index):
    """``make_index`` by memory id: several memories of one store."""

    def open_(memory_id: str = "default", **kwargs: Any):
        return make_index(memory_id=memory_id, **kwargs)

    return open_
