"""An exchange added again is not stored again (issue 34).

Re-running a script (the README's quick start on ``./memory``) stored its rounds a second time, as
``D1:3`` and ``D1:4``. Now, as LlamaIndex's ingestion pipeline skips a document it already holds, a
round whose exchange the memory holds is answered by its stored round; a changed one is stored.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from conftest import ScriptedLLM
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole, TextBlock

from llama_index_vmem import VMemInputError, VMemMemoryBlock, schema
from llama_index_vmem.store import Collection


def _quick_start(photos):
    return [
        {"user": "Here is my new cat!", "assistant": "A tabby! What's her name?", "session_id": "D1", "timestamp": "2024-06-17",
         "images": [{"image_id": "D1:IMG_001", "path": str(photos["chelsea"]), "caption": "a tabby cat on a sofa"}]},
        {"user": "Her name is Mochi.", "assistant": "Lovely name.", "session_id": "D1"},
        {"user": "Listen.", "audio": ["She purrs like an engine."], "session_id": "D1", "timestamp": "2024-06-18"},
    ]


def _ids(nodes):
    return [n.node_id for n in nodes]


def _points(index):
    return {c: index.store.count(c, index.scope()) for c in Collection}


def test_running_the_same_script_again_stores_nothing_and_returns_the_stored_rounds(make_index, photos, caplog):
    index = make_index()
    first = index.add_rounds(_quick_start(photos))
    points = _points(index)
    with caplog.at_level(logging.INFO, logger="llama_index_vmem"):
        again = index.add_rounds(_quick_start(photos))
    assert _ids(again) == _ids(first) and [n.metadata["round_key"] for n in again] == ["D1:1", "D1:2", "D1:3"]
    assert _points(index) == points and len(index) == 3
    assert "3 round(s) already stored, not stored again: D1:1, D1:2, D1:3" in caplog.text
    assert "added" not in caplog.text
    index.close()
    reopened = make_index()  # the same store, opened again (a script run again)
    assert _ids(reopened.add_rounds(_quick_start(photos))) == _ids(first)
    picture = dict(_quick_start(photos)[0], images=[{"image_id": "D1:IMG_001", "bytes": photos["chelsea"].read_bytes(),
                                                     "caption": "a tabby cat on a sofa"}])
    assert reopened.add_round(**picture).node_id == first[0].node_id, "the same pixels, given as bytes"
    messages = [ChatMessage(role=MessageRole.USER, content="Her name is Mochi."), ChatMessage(role=MessageRole.ASSISTANT, content="Lovely name.")]
    assert _ids(reopened.add_messages(messages, session_id="D1")) == [first[1].node_id]
    assert _points(reopened) == points


@pytest.mark.parametrize("change", [
    {"user": "Here is my new dog!"},
    {"assistant": "A tabby!"},
    {"timestamp": "2024-06-18"},
    {"session_id": "D2"},
    {"images": [{"image_id": "D1:IMG_001", "path": "coffee", "caption": "a tabby cat on a sofa"}]},
    {"images": [{"image_id": "D1:IMG_001", "path": "chelsea", "caption": "a cat"}]},
    {"images": [{"image_id": "IMG_7", "path": "chelsea", "caption": "a tabby cat on a sofa"}]},
    {"audio": ["Meow."]},
], ids=["user", "assistant", "timestamp", "session", "pixels", "caption", "image_id", "audio"])
def test_a_changed_exchange_is_stored(make_index, photos, change):
    index = make_index()
    [first] = index.add_rounds(_quick_start(photos)[:1])
    if "images" in change:
        change = {"images": [dict(img, path=str(photos[img["path"]])) for img in change["images"]]}
    changed = index.add_round(**dict(_quick_start(photos)[0], **change))
    assert changed.node_id != first.node_id and len(index) == 2


def test_a_key_given_again_with_its_content_returns_its_round_and_with_other_content_is_refused(make_index, photos):
    index = make_index()
    keyed = [dict(r, round_key=f"K{i}") for i, r in enumerate(_quick_start(photos))]
    first = index.add_rounds(keyed)
    assert _ids(index.add_rounds(keyed)) == _ids(first)
    with pytest.raises(VMemInputError, match="already stored") as refused:
        index.add_rounds([keyed[0], dict(keyed[1], assistant="What a name.")])
    assert refused.value.item == "round K1" and len(index) == 3, "refused whole, as ever"
    [other_key] = index.add_rounds([dict(keyed[1], round_key="K9")])
    assert other_key.node_id not in _ids(first) and len(index) == 4, "a key is part of what a keyed round is"
    with pytest.raises(VMemInputError, match="duplicate round key"):
        index.add_rounds([keyed[0], keyed[0]])
    [no_key] = index.add_rounds([dict(keyed[2], round_key=None)])
    assert no_key.node_id == first[2].node_id, "a round given no key repeats one given a key"


def test_an_exchange_a_transcript_holds_twice_is_stored_twice_and_matched_round_for_round(make_index):
    index = make_index()
    thanks = {"user": "Thanks!", "assistant": "You're welcome.", "session_id": "S", "timestamp": "2024-06-17"}
    chat = [thanks, {"user": "One more thing.", "assistant": "Yes?", "session_id": "S", "timestamp": "2024-06-17"}, thanks]
    first = index.add_rounds(chat)
    assert len(set(_ids(first))) == 3 and len(index) == 3
    assert _ids(index.add_rounds(chat)) == _ids(first)
    assert _ids(index.add_rounds([thanks])) == [first[0].node_id], "the first of the two it holds"
    assert len(index) == 3
    [third] = index.add_rounds([thanks], dedupe=False)
    assert third.node_id not in _ids(first) and len(index) == 4, "dedupe=False stores every round given"


def test_re_adding_a_round_mends_its_damaged_picture(make_index, photos):
    """Adding a picture again mends its file (``images.save``): a round already stored too."""
    index = make_index()
    [first] = index.add_rounds(_quick_start(photos)[:1])
    [unit] = index.images_of([first.node_id])[first.node_id]
    picture = Path(unit.image_path)
    picture.write_bytes(picture.read_bytes()[:100])
    assert index.add_rounds(_quick_start(photos)[:1])[0].node_id == first.node_id
    assert picture.read_bytes() == photos["chelsea"].read_bytes()


def test_rounds_an_older_version_stored_open_and_are_stored_again(make_index, photos):
    """Rounds without a content hash (written before it existed) are never taken for one added again."""
    index = make_index()
    first = index.add_rounds(_quick_start(photos)[1:2])
    index.store.set_payloads(Collection.ROUNDS, [(_ids(first), {schema.CONTENT_HASH: None})])
    index.close()
    reopened = make_index()
    [again] = reopened.add_rounds(_quick_start(photos)[1:2])
    assert again.node_id != first[0].node_id and again.metadata["round_key"] == "D1:2"
    assert _ids(reopened.add_rounds(_quick_start(photos)[1:2])) == [again.node_id], "the new one has a hash"


def test_a_chat_and_a_memory_block_store_an_exchange_each_time_it_happens(make_index, photos):
    """Their rounds are stamped with the day, so two alike on one day would look like one added again."""
    index = make_index()
    engine = index.as_chat_engine(llm=ScriptedLLM(default="You're welcome."), session_id="C1")
    engine.chat("Thanks!")
    engine.chat("Thanks!")
    assert [r.round.text for r in index.rounds()] == ["User: Thanks!\nAssistant: You're welcome."] * 2
    block = VMemMemoryBlock(index=index, session_id="B1")
    exchange = [ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text="Look!"), ImageBlock(path=photos["chelsea"])]),
                ChatMessage(role=MessageRole.ASSISTANT, content="A cat.")]
    asyncio.run(block.aput(exchange + exchange, from_short_term_memory=True))
    asyncio.run(block.aput(exchange, from_short_term_memory=True))
    assert len(index.rounds(session_id="B1")) == 3
