"""Every example in the README's integration sections runs as written, against the packaged
models; a scripted LLM stands in for ``llm`` and qdrant-client's local mode for the server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
#: README sections whose examples must run; they continue from the quick start (``index``, ``llm``).
SECTIONS = ["Memory block", "Chat engine", "Agent", "Many users on a Qdrant server", "Export, import and forget"]


def _examples(section: str) -> list:
    text = README.read_text()
    body = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert body, f"README has no section {section!r}"
    blocks = re.findall(r"```python\n(.*?)```", body.group(1), re.S)
    assert blocks, f"README section {section!r} has no python example"
    return blocks


@pytest.fixture
def namespace(tmp_path, monkeypatch, scripted_llm, photos):
    """What the quick start leaves behind: an open memory with two sessions, and an LLM."""
    import qdrant_client

    from llama_index_vmem import VMemIndex, VMemQueryBundle

    local = qdrant_client.QdrantClient
    monkeypatch.setattr(qdrant_client, "QdrantClient", lambda url=None, **kwargs: local(location=":memory:"))
    monkeypatch.chdir(tmp_path)
    index = VMemIndex.from_defaults(path=tmp_path / "memory", memory_id="alice")
    index.add_rounds([
        {"user": "Here is my new cat!", "assistant": "A tabby! What's her name?", "session_id": "D1",
         "timestamp": "2024-06-17", "images": [{"image_id": "D1:IMG_001", "path": str(photos["chelsea"]), "caption": "a tabby cat"}]},
        {"user": "Her name is Mochi.", "assistant": "Lovely name.", "session_id": "D1", "timestamp": "2024-06-17"},
        {"user": "Coffee again for dinner.", "assistant": "Cook tonight?", "session_id": "D2", "timestamp": "2024-07-02"},
    ])
    yield {"index": index, "llm": scripted_llm(default="Mochi."), "photo": str(photos["chelsea"]),
           "VMemIndex": VMemIndex, "VMemQueryBundle": VMemQueryBundle}
    index.close()


#: What each section's examples must have done, checked after they ran.
OUTCOMES = {
    "Memory block": lambda ns: "Ingrid lives in Bergen." in ns["messages"][0].content,
    "Export, import and forget": lambda ns: len(ns["index"]) == 0 and Path("alice.zip").exists() and ns["copy"]._closed,
}


@pytest.mark.parametrize("section", SECTIONS)
def test_readme_examples_run(section, namespace):
    for code in _examples(section):
        exec(compile(code, f"README.md: {section}", "exec"), namespace)
    assert OUTCOMES.get(section, lambda ns: True)(namespace)
