"""Without an LLM, a question's picture still reaches the word searches: its words are read off the
stored picture it looks most like (real photos, the packaged EfficientNet)."""

from __future__ import annotations

import pytest
from llama_index.core.schema import ImageNode
from PIL import Image

from llama_index_vmem import EfficientNetImageEncoder, VMemQueryBundle


@pytest.fixture(scope="module")
def efficientnet():
    return EfficientNetImageEncoder()


def _conversation(photos):
    """No picture has a caption: what each shows is only in the words said around it."""
    day = dict(session_id="D1", timestamp="2024-05-04")
    return [
        dict(day, user="Look what my son built for the science fair!", assistant="Impressive! Does it have a name?",
             images=[{"image_id": "IMG_1", "path": str(photos["rocket"])}]),
        dict(day, user="He calls it Comet Nine.", assistant="A great name for it."),
        dict(day, user="My coffee this morning.", assistant="Nice latte art!", images=[{"image_id": "IMG_2", "path": str(photos["coffee"])}]),
        dict(day, user="We named the new puppy Biscuit.", assistant="Cute!"),
        dict(day, user="The cat found the sunny spot again.", assistant="So cosy.", images=[{"image_id": "IMG_3", "path": str(photos["chelsea"])}]),
    ]


def test_a_photo_of_a_stored_thing_finds_what_it_was_called(open_memory, photos, efficientnet, tmp_path):
    index = open_memory(image_encoder=efficientnet)
    index.add_rounds(_conversation(photos))
    crop = tmp_path / "rocket-crop.png"
    with Image.open(photos["rocket"]) as im:
        im.crop((im.width // 8, 0, im.width, im.height * 7 // 8)).save(crop)
    hits = [h for h in index.as_retriever(k=2).retrieve(VMemQueryBundle("What did he call it?", image_path=str(crop)))
            if not isinstance(h.node, ImageNode)]
    assert sorted(h.node.metadata["round_key"] for h in hits) == ["D1:1", "D1:2"], "the pictured round and the one naming it"
    enriched = hits[0].node.metadata["vmem"]["anchors"]["enriched"]
    assert enriched["from"] == {"round": "D1:1", "image_id": "IMG_1"}
    assert {"son", "built", "science", "fair"} <= set(enriched["text"].split()), enriched["text"]
    assert "no LLM" in enriched["source"]


def test_a_caption_given_with_the_question_is_used_rather_than_a_guess(open_memory, photos, efficientnet):
    index = open_memory(image_encoder=efficientnet)
    index.add_rounds(_conversation(photos))
    hits = index.as_retriever(k=2).retrieve(VMemQueryBundle("What did he call it?", image_path=str(photos["rocket"]),
                                                            image_caption="a model rocket"))
    enriched = hits[0].node.metadata["vmem"]["anchors"]["enriched"]
    assert "from" not in enriched and enriched["text"] == "What did he call it? model rocket"
