"""Conversations -> round and unit nodes; incremental, append-only ingestion."""

import hashlib

from llama_index.core.base.llms.types import AudioBlock, ChatMessage, ImageBlock, MessageRole, TextBlock
from llama_index.core.schema import ImageNode, NodeRelationship

from llama_index_vmem import RoundNodeParser
from llama_index_vmem.store import Collection


def test_messages_become_rounds_with_units_and_links(tmp_path, photos):
    parser = RoundNodeParser(memory_id="m", image_dir=str(tmp_path))
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content="be nice"),
        ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text="Look at my cat"), ImageBlock(path=photos["chelsea"])],
                    additional_kwargs={"image_ids": ["D1:IMG_001"], "image_captions": ["a tabby cat"]}),
        ChatMessage(role=MessageRole.ASSISTANT, content="So cute!"),
        ChatMessage(role=MessageRole.USER, blocks=[AudioBlock(audio=b"RIFFxxxx", format="wav")],
                    additional_kwargs={"transcripts": ["remind me to buy cat food"]}),
        ChatMessage(role=MessageRole.ASSISTANT, content="Will do."),
    ]
    parsed = parser.parse_rounds(parser.rounds_from_messages(messages, session_id="D1", timestamp="2024-06-17"))
    assert [p.round_key for p in parsed] == ["D1:1", "D1:2"]
    first, second = parsed
    texts = [u.text for u in first.units]
    assert texts[0] == "Look at my cat\n[Image D1:IMG_001] a tabby cat"  # caption folded into the turn
    assert texts[1] == "So cute!"
    image = first.units[2]
    assert isinstance(image, ImageNode) and image.text == "a tabby cat" and image.image is None
    digest = hashlib.sha256(photos["chelsea"].read_bytes()).hexdigest()
    assert image.image_path == str(tmp_path / f"{digest}.png")
    assert [u.text for u in second.units] == ["[Audio: remind me to buy cat food]", "Will do."]
    children = first.round_node.relationships[NodeRelationship.CHILD]
    assert [c.node_id for c in children] == [u.node_id for u in first.units]
    assert all(u.relationships[NodeRelationship.PARENT].node_id == first.round_node.node_id for u in first.units)
    assert first.round_node.relationships[NodeRelationship.NEXT].node_id == second.round_node.node_id
    assert second.round_node.relationships[NodeRelationship.PREVIOUS].node_id == first.round_node.node_id
    assert NodeRelationship.NEXT not in first.units[0].relationships


def test_replies_under_any_providers_assistant_role_are_stored_and_instructions_skipped(tmp_path):
    """Gemini's ``model`` and Cohere's ``chatbot`` reply as the assistant does; a ``developer`` message
    (OpenAI's newer ``system``) is an instruction, skipped as a system message is."""
    parser = RoundNodeParser(memory_id="m", image_dir=str(tmp_path))
    messages = [
        ChatMessage(role=MessageRole.DEVELOPER, content="be brief"),
        ChatMessage(role=MessageRole.USER, content="My cat is Mochi."),
        ChatMessage(role=MessageRole.MODEL, content="Noted, Mochi."),
        ChatMessage(role=MessageRole.USER, content="And my dog is Rex."),
        ChatMessage(role=MessageRole.CHATBOT, content="Noted, Rex."),
    ]
    parsed = parser.parse_rounds(parser.rounds_from_messages(messages, session_id="D1"))
    assert [p.round_node.text for p in parsed] == ["User: My cat is Mochi.\nAssistant: Noted, Mochi.",
                                                  "User: And my dog is Rex.\nAssistant: Noted, Rex."]


def test_transcriber_callable_turns_audio_into_text(tmp_path):
    parser = RoundNodeParser(memory_id="m", image_dir=str(tmp_path), transcriber=lambda block: f"{len(block.audio)} bytes said hello")
    rounds = parser.rounds_from_messages([ChatMessage(role=MessageRole.USER, blocks=[AudioBlock(audio=b"abc", format="wav")])])
    assert parser.parse_rounds(rounds)[0].units[0].text.startswith("[Audio: ")


def test_documents_parse_as_rounds(tmp_path):
    from llama_index.core import Document

    nodes = RoundNodeParser(memory_id="m", image_dir=str(tmp_path)).get_nodes_from_documents([Document(text="hello"), Document(text="world")])
    rounds = [n for n in nodes if NodeRelationship.CHILD in n.relationships]
    assert len(rounds) == 2 and rounds[0].relationships[NodeRelationship.NEXT].node_id == rounds[1].node_id


def test_appending_never_re_encodes_or_rewrites_earlier_rounds(make_index, photos, monkeypatch):
    index = make_index()
    index.add_rounds([{"user": f"round {i} about gardening", "assistant": "ok", "session_id": "S"} for i in range(3)])
    stored_before = {h.id: h.payload for h in index.store.scroll(Collection.TEXT, index.scope())}
    seen = []
    real = type(index.embed_model).get_text_embedding_batch

    def spy(self, texts, **kwargs):
        seen.extend(texts)
        return real(self, texts, **kwargs)

    monkeypatch.setattr(type(index.embed_model), "get_text_embedding_batch", spy)
    [node] = index.add_messages([ChatMessage(role=MessageRole.USER, content="new round about roses"),
                                 ChatMessage(role=MessageRole.ASSISTANT, content="roses need sun")], session_id="S")
    assert sorted(seen) == ["new round about roses", "roses need sun"]
    stored_after = {h.id: h.payload for h in index.store.scroll(Collection.TEXT, index.scope())}
    assert {k: stored_after[k] for k in stored_before} == stored_before
    assert node.metadata["seq"] == 4 and node.metadata["round_key"] == "S:4"
    previous = index.get_rounds([node.node_id])[node.node_id].relationships[NodeRelationship.PREVIOUS]
    assert index.get_rounds([previous.node_id])[previous.node_id].metadata["seq"] == 3


def test_a_message_image_is_read_and_decoded_once(tmp_path, photos, monkeypatch):
    """Splitting messages checks each image before anything is stored; parsing the round reuses
    those checked bytes rather than decoding the picture a second time."""
    from llama_index_vmem import images

    decoded = []
    validate = images.validate
    monkeypatch.setattr(images, "validate", lambda item, data: decoded.append(item) or validate(item, data))
    parser = RoundNodeParser(memory_id="m", image_dir=str(tmp_path))
    message = ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text="My cat"), ImageBlock(path=photos["chelsea"])])
    [parsed] = parser.parse_rounds(parser.rounds_from_messages([message], session_id="D1"))
    assert decoded == ["message 1 image 1"]
    [(path, loaded)] = parsed.pending_images.items()
    assert loaded.data == photos["chelsea"].read_bytes() and path.suffix == ".png"
