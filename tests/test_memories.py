"""The memories a store holds: listed by id with their round counts, and an open that finds an
empty memory beside others says so."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict

import pytest

from llama_index_vmem import VMemIndex, VMemInputError
from llama_index_vmem.store import ServerLaneStore

WARNED = "no memory_id given"


def where(index: VMemIndex, tmp_path: Path) -> Dict[str, Any]:
    """How ``list_memories`` names the store ``make_index`` opened ``index`` in."""
    if isinstance(index.store, ServerLaneStore):
        return {"client": index.store.client}
    return {"path": tmp_path / "memory"}


@pytest.fixture
def alice_and_bob(make_index) -> VMemIndex:
    alice = make_index(memory_id="alice")
    alice.add_rounds([{"user": "I love espresso", "session_id": "D1"}, {"user": "and croissants", "session_id": "D1"}])
    make_index(memory_id="bob").add_round(user="I ride horses")
    return alice


def test_a_store_lists_its_memories_with_their_rounds(alice_and_bob, tmp_path):
    assert VMemIndex.list_memories(**where(alice_and_bob, tmp_path)) == {"alice": 2, "bob": 1}


def test_an_embedded_store_is_listed_when_no_memory_of_it_is_open(tmp_path, minilm, tiny_siglip):
    path = tmp_path / "closed"
    with VMemIndex.from_defaults(path=path, memory_id="carol", embed_model=minilm, image_encoder=tiny_siglip) as carol:
        carol.add_round(user="hello")
    assert VMemIndex.list_memories(path) == {"carol": 1}
    with VMemIndex.from_defaults(path=path, memory_id="carol", embed_model=minilm, image_encoder=tiny_siglip) as carol:
        assert len(carol) == 1  # the listing closed what it opened: the store opens again


def test_a_store_not_made_yet_holds_no_memories(tmp_path):
    assert VMemIndex.list_memories(tmp_path / "nothing here") == {}
    assert not (tmp_path / "nothing here").exists()


def test_listing_needs_a_store():
    with pytest.raises(VMemInputError, match=r"^list_memories: name the store"):
        VMemIndex.list_memories()


def test_opening_without_a_memory_id_beside_other_memories_warns_naming_them(alice_and_bob, make_index, caplog):
    with caplog.at_level(logging.INFO, logger="llama_index_vmem"):
        default = make_index(memory_id=None)
    assert len(default) == 0
    [warning] = [r for r in caplog.records if WARNED in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "'alice' (2 rounds)" in warning.getMessage() and "'bob' (1 rounds)" in warning.getMessage()
    assert len(alice_and_bob) == 2  # nothing stored is touched


def test_a_new_memory_named_on_purpose_opens_without_a_warning(alice_and_bob, make_index, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="llama_index_vmem"):
        carol = make_index(memory_id="carol")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "memory 'carol' is new" in caplog.text
    carol.add_round(user="a first round")
    assert VMemIndex.list_memories(**where(carol, tmp_path)) == {"alice": 2, "bob": 1, "carol": 1}


def test_the_default_memory_holding_rounds_opens_without_a_warning(make_index, caplog):
    make_index().add_round(user="hello")
    make_index(memory_id="alice").add_round(user="hi")
    with caplog.at_level(logging.INFO, logger="llama_index_vmem"):
        assert len(make_index()) == 1
    assert WARNED not in caplog.text
