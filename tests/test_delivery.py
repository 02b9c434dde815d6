"""What reaches the model in each delivery mode (recorded by LlamaIndex's MockLLMWithChatMemoryOfLastCall)."""

import base64
import hashlib
import re
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ImageBlock, TextBlock
from llama_index.core.llms import MockLLM
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.schema import ImageNode
from PIL import Image, ImageChops

from llama_index_vmem import VMemQueryBundle
from llama_index_vmem.delivery import ATTACHMENT_LABEL, DeliveryMode, DeliveryPostprocessor, ImageBudget, default_mode, label_box
from llama_index_vmem.errors import VMemInputError


def _memory(make_index, photos):
    index = make_index()
    img = lambda i, name, caption: {"image_id": i, "path": str(photos[name]), "caption": caption}  # noqa: E731
    index.add_rounds([
        {"round_key": "D1:1", "session_id": "D1", "timestamp": "2024-06-17", "user": "We went to the launch site.", "assistant": "Fun!"},
        {"round_key": "D1:2", "session_id": "D1", "timestamp": "2024-06-17", "user": "The rocket on the pad.", "assistant": "Tall!",
         "images": [img("D1:IMG_001", "rocket", "a rocket on a launch pad")]},
        {"round_key": "D1:3", "session_id": "D1", "timestamp": "2024-06-17", "user": "And a rocket selfie.", "assistant": "Nice.",
         "images": [img("D1:IMG_002", "astronaut", "an astronaut portrait near a rocket"),
                    img("D1:IMG_003", "coffee", "coffee before the rocket launch")]},
        {"round_key": "D2:1", "session_id": "D2", "timestamp": "2024-07-01", "user": "My cat Mochi.", "assistant": "Cute.",
         "images": [img("D2:IMG_001", "chelsea", "a tabby cat")]},
    ])
    return index


class ChatMock(MockLLMWithChatMemoryOfLastCall):
    """Keeps every call: LlamaIndex's synthesizer may send the context in several calls."""

    sent: list = []

    @property
    def metadata(self):
        meta = super().metadata
        meta.is_chat_model = True  # LlamaIndex's multimodal synthesis asks for a chat model
        return meta

    def chat(self, messages, **kwargs):
        self.sent.extend(b for m in messages for b in m.blocks)
        return super().chat(messages, **kwargs)


def _sent(llm):
    [message] = llm.last_chat_messages
    return message.blocks


def test_text_mode_sends_one_text_block_with_time_headers(make_index, photos):
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = _memory(make_index, photos).as_query_engine(llm=llm, delivery="text")
    response = engine.query("Which photo shows the rocket?")
    [block] = _sent(llm)
    assert isinstance(block, TextBlock)
    assert "[seen 2024-06-17, session D1, rounds D1:1 to D1:3]" in block.text
    assert "[Image D1:IMG_001] a rocket on a launch pad" in block.text
    assert response.metadata["delivery"] == "text"


def test_pixels_mode_puts_labelled_images_after_their_round(make_index, photos):
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = _memory(make_index, photos).as_query_engine(llm=llm, delivery="pixels", image_budget=ImageBudget(max_images=2, max_side=256))
    engine.query("Which photo shows the rocket?")
    blocks = _sent(llm)
    kinds = ["image" if isinstance(b, ImageBlock) else "text" for b in blocks]
    assert kinds.count("image") == 2  # the budget
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    assert text.startswith("You are answering a question using a person’s conversation history.")
    assert text.index("[seen 2024-06-17, session D1") < text.index("The rocket on the pad.") < text.index("[image D1:IMG_001]")
    assert text.index("[image D1:IMG_001]") < text.index("And a rocket selfie.")
    assert "[not shown to keep within the image budget of 2: " in text
    # Each image follows the text naming it, and carries that id in its pixels.
    for i, block in enumerate(blocks):
        if isinstance(block, ImageBlock):
            named = re.findall(r"\[image ([^\]]+)\]$", blocks[i - 1].text.strip())[0]
            original = {"D1:IMG_001": "rocket", "D1:IMG_002": "astronaut", "D1:IMG_003": "coffee"}[named]
            _assert_stamped(block.path, photos[original], named, 256)


def _assert_stamped(delivered_path, original_path, label, max_side):
    delivered = Image.open(delivered_path).convert("RGB")
    expected = Image.open(original_path).convert("RGB")
    expected.thumbnail((max_side, max_side))
    assert delivered.size == expected.size and max(delivered.size) <= max_side
    box = label_box(delivered.size, label)
    assert box[2] < delivered.width / 2 and box[3] < delivered.height / 2  # a corner, not the centre
    diff = ImageChops.difference(delivered, expected)
    assert diff.crop(box).getbbox() is not None  # the label changed its corner
    outside = diff.copy()
    outside.paste((0, 0, 0), box)
    assert outside.getbbox() is None  # and nothing else


def test_attachment_is_delivered_and_labelled_and_originals_untouched(make_index, photos, tmp_path):
    before = hashlib.sha256(photos["rocket"].read_bytes()).hexdigest()
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = _memory(make_index, photos).as_query_engine(llm=llm, delivery="pixels", image_budget=ImageBudget(max_images=8, max_side=300))
    engine.query(VMemQueryBundle("Which picture in our chat is this?", image_path=str(photos["chelsea"]), image_caption="a cat"))
    blocks = _sent(llm)
    images = [i for i, b in enumerate(blocks) if isinstance(b, ImageBlock)]
    last = images[-1]
    assert ATTACHMENT_LABEL in blocks[last - 1].text
    _assert_stamped(blocks[last].path, photos["chelsea"], ATTACHMENT_LABEL, 300)
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    assert "[image D2:IMG_001]" in text and "[seen 2024-07-01, session D2, round D2:1]" in text
    assert hashlib.sha256(photos["rocket"].read_bytes()).hexdigest() == before


def test_an_attachment_given_as_a_data_url_is_delivered_like_a_file(make_index, photos, tmp_path):
    """Retrieval reads a URL; delivery stamps the local copy the query engine keeps of it. A photo's
    data URL is far longer than a file name may be, and is still read as a URL."""
    index = _memory(make_index, photos)
    picture = photos["coffee"]
    url = "data:image/png;base64," + base64.b64encode(picture.read_bytes()).decode()
    assert len(url) > 100_000
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = index.as_query_engine(llm=llm, delivery="pixels", image_budget=ImageBudget(max_images=8, max_side=300))
    engine.query(VMemQueryBundle("Which picture in our chat is this?", image_path=url))
    blocks = _sent(llm)
    last = max(i for i, b in enumerate(blocks) if isinstance(b, ImageBlock))
    assert ATTACHMENT_LABEL in blocks[last - 1].text
    _assert_stamped(blocks[last].path, picture, ATTACHMENT_LABEL, 300)
    [kept] = index.attached_dir.iterdir()
    assert kept.read_bytes() == picture.read_bytes(), "kept once, beside the memory's images"


def test_a_corrupt_data_url_attachment_is_bad_input_not_a_missing_file(make_index, photos):
    """A stock engine's query reaches delivery with its URL as given: the same check names it."""
    from llama_index_vmem import NeighborRoundPostprocessor

    index = _memory(make_index, photos)
    query = VMemQueryBundle("Which picture is this?", image_path="data:image/png;base64,bm90IGFuIGltYWdl")
    nodes = NeighborRoundPostprocessor(index).postprocess_nodes(index.as_retriever().retrieve(query.query_str), query)
    with pytest.raises(VMemInputError, match="^query image: not an image"):
        DeliveryPostprocessor(index).postprocess_nodes(nodes, query)


@pytest.mark.parametrize("spoil", ["missing", "not_an_image"])
def test_an_attachment_path_that_cannot_be_read_is_bad_input_that_names_it(make_index, photos, tmp_path, spoil):
    """A path no V-Mem retriever has read (a stock engine's query), or one spoilt since retrieval,
    reached the label stamp as a bare ``FileNotFoundError`` or PIL's ``UnidentifiedImageError``."""
    from llama_index_vmem import NeighborRoundPostprocessor

    index = _memory(make_index, photos)
    path = tmp_path / "attached.png"
    if spoil == "not_an_image":
        path.write_text("hello")
    query = VMemQueryBundle("Which picture is this?", image_path=str(path))
    nodes = NeighborRoundPostprocessor(index).postprocess_nodes(index.as_retriever().retrieve(query.query_str), query)
    with pytest.raises(VMemInputError, match=f"^query image: .*{path.name}|^query image: not an image"):
        DeliveryPostprocessor(index).postprocess_nodes(nodes, query)


@pytest.mark.parametrize("mode", [DeliveryMode.PIXELS, DeliveryMode.TEXT])
def test_delivery_postprocessor_alone_assembles_the_neighbour_blocks_itself(make_index, photos, mode):
    """Without ``NeighborRoundPostprocessor`` in front it delivers the same content, not an ``AttributeError``."""
    from llama_index_vmem import NeighborRoundPostprocessor

    index = _memory(make_index, photos)
    query = VMemQueryBundle("Which photo shows the rocket?")
    nodes = index.as_retriever().retrieve(query)
    blocks = NeighborRoundPostprocessor(index).postprocess_nodes(nodes, query)
    deliver = DeliveryPostprocessor(index, mode=mode, budget=ImageBudget(3, 200))
    alone, after = deliver.postprocess_nodes(nodes, query), deliver.postprocess_nodes(blocks, query)
    sent = lambda out: [(type(n.node).__name__, n.node.get_content()) for n in out]  # noqa: E731
    assert sent(alone) == sent(after)
    assert "[seen 2024-06-17, session D1, rounds D1:1 to D1:3]" in alone[0].node.get_content()
    assert sum(isinstance(n.node, ImageNode) for n in alone) == (3 if mode is DeliveryMode.PIXELS else 0)


@pytest.mark.parametrize("mode", [DeliveryMode.PIXELS, DeliveryMode.TEXT])
def test_nodes_of_other_retrievers_fused_in_pass_both_postprocessors_in_place(make_index, photos, mode):
    """A QueryFusionRetriever over V-Mem and a document retriever (or another memory's retriever):
    V-Mem's rounds become its blocks where its best round was; every other node stays as it was."""
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_vmem import NeighborRoundPostprocessor

    index = _memory(make_index, photos)
    other = make_index(memory_id="other")
    other.add_round(user="My rocket is a model kit.", assistant="Fun.", session_id="O1")
    query = VMemQueryBundle("Which photo shows the rocket?")
    ours, theirs = index.as_retriever().retrieve(query), other.as_retriever().retrieve(query)
    doc_a, doc_b = (NodeWithScore(node=TextNode(text=f"DOC {x}: rockets are tall"), score=0.5) for x in "AB")
    fused = [doc_a, *ours[:2], doc_b, *theirs, *ours[2:]]
    blocks = NeighborRoundPostprocessor(index).postprocess_nodes(fused, query)
    assert blocks[0] is doc_a and "[seen 2024-06-17, session D1, rounds D1:1 to D1:3]" in blocks[1].node.get_content()
    assert [n for n in blocks if n is doc_b or n in theirs] == [doc_b, *theirs]
    delivered = DeliveryPostprocessor(index, mode=mode, budget=ImageBudget(3, 200)).postprocess_nodes(fused, query)
    assert delivered[0] is doc_a and "rounds D1:1 to D1:3" in delivered[1].node.get_content()
    assert delivered[-len(theirs) - 1:] == [doc_b, *theirs]
    assert sum(isinstance(n.node, ImageNode) for n in delivered) == (3 if mode is DeliveryMode.PIXELS else 0)


@pytest.mark.parametrize("model, mode", [("gpt-4o-mini", DeliveryMode.PIXELS), ("gemini-2.5-flash", DeliveryMode.PIXELS),
                                         ("Qwen2.5-VL-32B", DeliveryMode.PIXELS), ("gpt-3.5-turbo", DeliveryMode.TEXT),
                                         ("o1", DeliveryMode.PIXELS), ("o4-mini", DeliveryMode.PIXELS),
                                         ("openai/o3-2025-04-16", DeliveryMode.PIXELS), ("o1-mini", DeliveryMode.TEXT),
                                         ("o1-preview", DeliveryMode.TEXT), ("o3-mini-2025-01-31", DeliveryMode.TEXT),
                                         ("demo1", DeliveryMode.TEXT), ("qwen2.5vl:7b", DeliveryMode.PIXELS),
                                         ("qwen3-vl:8b", DeliveryMode.PIXELS), ("qwen2.5:7b", DeliveryMode.TEXT)])
def test_default_mode_follows_the_model(model, mode):
    class Named(MockLLM):
        @property
        def metadata(self):
            meta = super().metadata
            meta.model_name = model
            return meta

    assert default_mode(Named()) is mode
    assert default_mode(MockLLM()) is DeliveryMode.TEXT


def test_stock_multimodal_query_engine_receives_the_labelled_images(make_index, photos, tmp_path):
    from llama_index.core.query_engine import RetrieverQueryEngine

    from llama_index_vmem import NeighborRoundPostprocessor
    from llama_index_vmem.delivery import DeliveryPostprocessor

    index = _memory(make_index, photos)
    llm = ChatMock()
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(), llm=llm, multimodal=True,
        node_postprocessors=[NeighborRoundPostprocessor(index), DeliveryPostprocessor(index, budget=ImageBudget(3, 200))])
    engine.query("Which photo shows the rocket?")
    images = [b for b in llm.sent if isinstance(b, ImageBlock)]
    assert len(images) == 3
    text = "".join(b.text for b in llm.sent if isinstance(b, TextBlock))
    assert "[seen 2024-06-17, session D1, rounds D1:1 to D1:3]" in text and "[image D1:IMG_001]" in text
    first = tmp_path / "first.png"
    first.write_bytes(images[0].resolve_image(as_base64=False).read())  # LlamaIndex sends it inline
    _assert_stamped(first, photos["rocket"], "D1:IMG_001", 200)


def test_multimodal_context_chat_engine_receives_the_labelled_images(make_index, photos, tmp_path):
    from llama_index.core.chat_engine import MultiModalContextChatEngine

    from llama_index_vmem import NeighborRoundPostprocessor
    from llama_index_vmem.delivery import DeliveryPostprocessor

    index = _memory(make_index, photos)
    llm = ChatMock()
    chat = MultiModalContextChatEngine.from_defaults(
        retriever=index.as_retriever(), multi_modal_llm=llm,
        node_postprocessors=[NeighborRoundPostprocessor(index), DeliveryPostprocessor(index, budget=ImageBudget(2, 200))])
    chat.chat("Which photo shows the rocket?")
    images = [b for b in llm.sent if isinstance(b, ImageBlock)]
    assert len(images) == 2
    assert "[image D1:IMG_001]" in "".join(b.text for b in llm.sent if isinstance(b, TextBlock))


def test_a_tight_image_budget_keeps_the_best_match_not_the_earliest(make_index, photos):
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = _memory(make_index, photos).as_query_engine(llm=llm, delivery="pixels", image_budget=ImageBudget(max_images=1))
    response = engine.query(VMemQueryBundle("Which photo is this?", image_path=str(photos["chelsea"])))
    cat_block = next(n.node for n in response.source_nodes if "D2:1" in n.node.metadata.get("vmem", {}))
    assert cat_block.metadata["vmem"]["D2:1"]["ranks"]["visual"] == 1, "blocks come in time order, after D1's"
    text = "".join(b.text for b in _sent(llm) if isinstance(b, TextBlock))
    shown = re.findall(r"\[image (\S+)\]", text)
    assert shown == ["D2:IMG_001"], "the cat round matches the cat photo best; earlier rounds' images wait"


def test_the_retrievers_explanation_is_not_sent_to_stock_engines(make_index, photos):
    nodes = _memory(make_index, photos).as_retriever().retrieve("Which photo shows the rocket?")
    assert "vmem" in nodes[0].node.metadata
    assert "vmem" not in nodes[0].node.get_content(metadata_mode="llm")


def test_a_stored_image_whose_file_is_gone_costs_that_picture_not_the_answer(make_index, photos, caplog):
    """A file deleted outside the memory (or by a ``forget`` running meanwhile) is named in the text,
    and its budget slot goes to the next image."""
    index = _memory(make_index, photos)
    [cat] = [u for u in index.rounds(["D2:1"])[0].units if u.metadata.get("image_id") == "D2:IMG_001"]
    assert index.image_dir in Path(cat.image_path).parents, "the memory's own copy, not the caller's photo"
    Path(cat.image_path).unlink()
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = index.as_query_engine(llm=llm, delivery="pixels", image_budget=ImageBudget(max_images=1))
    engine.query(VMemQueryBundle("Which photo is this?", image_path=str(photos["chelsea"])))
    blocks = _sent(llm)
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    assert "[image D2:IMG_001: its file could not be read, not shown]" in text
    shown = re.findall(r"\[image (\S+)\]", text)
    assert len(shown) == 1 and shown != ["D2:IMG_001"], "the slot went to another stored image"
    assert sum(isinstance(b, ImageBlock) for b in blocks) == 2  # that image and the attachment
    assert "D2:IMG_001" in caplog.text


def test_a_round_forgotten_between_retrieval_and_delivery_is_left_out(make_index, photos):
    """A query racing a forget: the blocks it retrieved may name rounds that are gone by delivery."""
    from llama_index_vmem.delivery import Deliverer

    index = _memory(make_index, photos)
    nodes = index.as_query_engine(llm=MockLLM(), delivery="pixels").retrieve(VMemQueryBundle("Which photo shows the rocket?"))
    index.forget(["D1:1", "D1:2", "D1:3"])
    content = Deliverer(index, DeliveryMode.PIXELS).deliver(nodes)
    text = "".join(b.text for b in content if isinstance(b, TextBlock))
    assert "D1:" not in text and "round D2:1" in text, "the rounds still held are delivered"
    assert sum(isinstance(b, ImageBlock) for b in content) == 1


@pytest.mark.parametrize("mode", ["text", "pixels"])
def test_a_picture_a_round_borrows_reaches_the_model_when_its_own_round_does_not(make_index, photos, mode):
    """With no neighbours in the context (aggregation, or ``neighbor_window=0``), the picture a
    round without one returns from the round before it is in no round text the model reads."""
    index = make_index()
    index.add_rounds([
        {"round_key": "D1:1", "session_id": "D1", "user": "Look at this!",
         "images": [{"image_id": "D1:IMG_001", "path": str(photos["horse"]), "caption": "IMG_4471.jpg"}]},
        {"round_key": "D1:2", "session_id": "D1", "user": "That was my pony Rex at the farm.", "assistant": "Lovely."},
        {"round_key": "D2:1", "session_id": "D2", "user": "My cat Mochi.",
         "images": [{"image_id": "D2:IMG_001", "path": str(photos["chelsea"]), "caption": "a tabby cat"}]},
    ])
    llm = MockLLMWithChatMemoryOfLastCall()
    response = index.as_query_engine(llm=llm, delivery=mode, k=1, neighbor_window=0).query("Show me the photo of my pony Rex")
    assert [n.node.metadata.get("image_id") for n in response.source_nodes if n.node.metadata.get("image_id")] == ["D1:IMG_001"]
    blocks = _sent(llm)
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    assert "[Image D1:IMG_001, shared in round D1:1] IMG_4471.jpg" in text
    if mode == "pixels":
        assert "[image D1:IMG_001]" in text and sum(isinstance(b, ImageBlock) for b in blocks) == 1


def test_delivered_content_splits_into_blocks_only_where_a_block_header_follows():
    """A round's own text may hold the separator (a user's markdown rule): only a separator that
    delivery put before a ``[seen ..., session ..., round ...]`` header starts a block."""
    from llama_index_vmem.delivery import BLOCK_SEPARATOR, join_blocks, split_blocks

    first = f"[seen 2024-06-17, session D1, round D1:1]\nUser: My notes:{BLOCK_SEPARATOR}part two\nAssistant: Ok."
    second = "[session D2, rounds D2:1 to D2:2]\nUser: My cat Mochi."
    content = [TextBlock(text=first), TextBlock(text=BLOCK_SEPARATOR + second), ImageBlock(url="data:image/png;base64,AA==")]
    parts = split_blocks(content)
    assert [[b.text for b in p if isinstance(b, TextBlock)] for p in parts] == [[first], [second]]
    assert isinstance(parts[1][-1], ImageBlock)
    assert join_blocks(parts)[0].text == first + BLOCK_SEPARATOR + second


def test_an_image_node_is_delivered_from_the_memorys_own_copy_never_from_the_path_it_names(make_index, photos, caplog):
    """Nodes reach delivery from the caller (``DeliveryPostprocessor`` takes any list): one that claims
    this memory must not make it read another file on the machine, and one it does not hold is left out."""
    from llama_index_vmem.delivery import Deliverer, label_image

    index = make_index()
    index.add_rounds([
        {"round_key": "D1:1", "session_id": "D1", "user": "Look at this!",
         "images": [{"image_id": "D1:IMG_001", "path": str(photos["horse"]), "caption": "IMG_4471.jpg"}]},
        {"round_key": "D1:2", "session_id": "D1", "user": "That was my pony Rex at the farm.", "assistant": "Lovely."},
    ])
    nodes = index.as_query_engine(llm=MockLLM(), delivery="pixels", k=1, neighbor_window=0).retrieve(
        VMemQueryBundle("Show me the photo of my pony Rex"))
    [at] = [i for i, n in enumerate(nodes) if isinstance(n.node, ImageNode)]
    real = nodes[at].node
    secret = str(photos["astronaut"])  # any image file the process can read
    nodes[at].node = real.model_copy(update={"image_path": secret})
    forged = ImageNode(id_="forged", image_path=secret, text="a forged picture",
                       metadata=real.metadata | {"image_id": "D9:IMG_999"})
    nodes.insert(at + 1, nodes[at].model_copy(update={"node": forged}))
    deliverer = Deliverer(index, DeliveryMode.PIXELS)
    content = deliverer.deliver(nodes)
    [image] = [b for b in content if isinstance(b, ImageBlock)]
    stored = label_image(real.image_path, "D1:IMG_001", deliverer.cache_dir, deliverer.budget.max_side)
    assert Path(image.path) == stored != label_image(secret, "D1:IMG_001", deliverer.cache_dir, deliverer.budget.max_side)
    text = "".join(b.text for b in content if isinstance(b, TextBlock))
    assert "[Image D1:IMG_001, shared in round D1:1] IMG_4471.jpg" in text and "D9:IMG_999" not in text
    assert "image D9:IMG_999 not delivered: this memory holds no such image" in caplog.text


def test_two_pictures_given_one_id_are_delivered_apart_and_a_picture_shared_again_keeps_its_id(make_index, photos, caplog):
    """A camera names every photo ``IMG_0001.jpg`` after a reset: each picture must still reach the
    model under an id of its own, or it cannot tell which one the user means. Only other pixels
    move an id on: a caption alone may describe the stored picture again."""
    import logging

    index = make_index()
    img = lambda name, image_id="IMG_0001": {"image_id": image_id, "path": str(photos[name])}  # noqa: E731
    index.add_rounds([{"round_key": "T:1", "session_id": "T", "user": "Our rocket trip.", "images": [img("rocket")]}])
    with caplog.at_level(logging.WARNING, logger="llama_index_vmem"):
        index.add_rounds([{"round_key": "T:2", "session_id": "T", "user": "My cat at home.", "images": [img("chelsea")]},
                          {"round_key": "T:3", "session_id": "T", "user": "The rocket once more.", "images": [img("rocket")]},
                          {"round_key": "T:4", "session_id": "T", "user": "That rocket again.",
                           "images": [{"image_id": "IMG_0001", "caption": "the rocket"}]},
                          {"round_key": "T:5", "session_id": "T", "user": "Horse.", "images": [img("horse")]},
                          {"round_key": "T:6", "session_id": "T", "user": "Coffee.", "images": [img("coffee", "IMG_0001 (3)")]}])
        index.add_rounds([{"round_key": "T:7", "session_id": "T", "user": "The cat again.", "images": [img("chelsea")]}])
    ids = {r.round.metadata["round_key"]: r.round.metadata["image_ids"] for r in index.rounds()}
    assert ids == {"T:1": ["IMG_0001"], "T:2": ["IMG_0001 (2)"], "T:3": ["IMG_0001"], "T:4": ["IMG_0001"],
                   "T:5": ["IMG_0001 (4)"], "T:6": ["IMG_0001 (3)"], "T:7": ["IMG_0001 (2)"]}, \
        "a rename skips an id a later round of the call names, and finds the id the same picture was given before"
    assert ("round T:2 image IMG_0001: another picture has this id (in this memory or earlier in this call); "
            "stored as 'IMG_0001 (2)'") in caplog.text
    assert caplog.text.count("another picture has this id") == 3
    assert "[Image IMG_0001 (4)]" in index.rounds(["T:5"])[0].round.text

    llm = MockLLMWithChatMemoryOfLastCall()
    index.as_query_engine(llm=llm, delivery="pixels", similarity_top_k=7).query("Which photos did I share?")
    blocks = _sent(llm)
    labels = {}
    for i, block in enumerate(blocks):
        if isinstance(block, ImageBlock):
            label = re.findall(r"\[image ([^\]]+)\]$", blocks[i - 1].text.strip())[0]
            labels.setdefault(label, set()).add(hashlib.sha256(Path(block.path).read_bytes()).hexdigest())
    assert {"IMG_0001", "IMG_0001 (2)", "IMG_0001 (4)"} <= set(labels) and all(len(files) == 1 for files in labels.values())


def test_a_rename_is_looked_up_a_chunk_at_a_time_and_not_logged_when_the_add_fails(make_index, photos, caplog, monkeypatch):
    import logging

    index = make_index()
    index.add_rounds([{"round_key": f"K:{n}", "images": [{"image_id": "P" if n == 0 else f"P ({n + 1})", "path": str(photos[name])}]}
                      for n, name in enumerate(["rocket", "chelsea", "coffee", "horse"])])
    calls = []
    lookup = index._stored_images
    monkeypatch.setattr(index, "_stored_images", lambda ids: calls.append(sorted(ids)) or lookup(ids))
    with caplog.at_level(logging.WARNING, logger="llama_index_vmem"):
        [node] = index.add_rounds([{"round_key": "K:9", "images": [{"image_id": "P", "path": str(photos["camera"])}]}])
        assert node.metadata["image_ids"] == ["P (5)"] and len(calls) == 2, "the id as given, then one chunk of suffixes"
        caplog.clear()
        with pytest.raises(VMemInputError, match="already stored"):
            index.add_rounds([{"round_key": "K:9", "images": [{"image_id": "P", "path": str(photos["astronaut"])}]}])
    assert "another picture has this id" not in caplog.text, "nothing was stored, so nothing was renamed"


@pytest.mark.parametrize("mode", ["text", "pixels"])
def test_each_round_of_a_block_reaches_the_model_with_its_own_time(make_index, mode):
    """A block header carries its first round's time. A neighbour delivered from outside a time
    filter, or a session running over several days, is dated by a line of its own, not by the header."""
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    index = make_index()
    index.add_rounds([
        {"round_key": "D1:1", "session_id": "D1", "timestamp": "2024-05-31", "user": "We booked the flights.", "assistant": "Great."},
        {"round_key": "D1:2", "session_id": "D1", "timestamp": "2024-06-01", "user": "I ate paella in Valencia.", "assistant": "Yum."},
        {"round_key": "D1:3", "session_id": "D1", "timestamp": "2024-06-01", "user": "Then a walk by the sea.", "assistant": "Nice."},
        {"round_key": "D1:4", "session_id": "D1", "timestamp": "2024-07-03", "user": "Back home, tired.", "assistant": "Rest."},
    ])
    june = MetadataFilters(filters=[MetadataFilter(key="timestamp", value="2024-06-01", operator=FilterOperator.GTE),
                                    MetadataFilter(key="timestamp", value="2024-07-01", operator=FilterOperator.LT)])
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = index.as_query_engine(llm=llm, delivery=mode, filters=june, k=2)
    engine.query("Where did I eat paella?")
    text = "".join(b.text for b in _sent(llm) if isinstance(b, TextBlock))
    assert "[seen 2024-05-31, session D1, rounds D1:1 to D1:4]" in text
    assert "[seen 2024-06-01, round D1:2]\nUser: I ate paella in Valencia." in text
    assert "[seen 2024-07-03, round D1:4]\nUser: Back home, tired." in text
    assert text.count("[seen ") == 3, "a round seen when the round before it was gets no line of its own"


def test_a_round_without_a_time_after_one_with_a_time_is_not_dated_by_it_and_a_cut_keeps_no_bare_time_line():
    from llama_index_vmem import schema
    from llama_index_vmem.delivery import content_tokens, cut

    dated = {"timestamp": "2024-06-17", "round_key": "S:1"}
    assert schema.seen_line(dated, {"round_key": "S:2"}) == "[seen at a time not recorded, round S:2]\n"
    assert schema.seen_line({"round_key": "S:1"}, {"round_key": "S:2"}) == ""
    assert schema.seen_line(dated, dict(dated, round_key="S:2")) == ""
    text = ("[seen 2024-06-17, session S, rounds S:1 to S:2]\nUser: We planted tomatoes.\nAssistant: Nice.\n\n"
            "[seen 2024-07-02, round S:2]\nUser: The slugs ate them all.")
    budget = content_tokens([TextBlock(text=text.split("\nUser: The slugs")[0])])
    [kept] = cut([TextBlock(text=text)], budget)
    assert kept.text.rstrip().endswith("Assistant: Nice.") and "round S:2]" not in kept.text


# -- node ids: the same retrieval gives the same ids (issue 34) ------------------------------------


def _ids(index, question):
    """The node ids of each postprocessor's output for ``question``, and the retrieved rounds' ids."""
    from llama_index_vmem import NeighborRoundPostprocessor

    query = VMemQueryBundle(question)
    nodes = index.as_retriever().retrieve(query)
    blocks = NeighborRoundPostprocessor(index).postprocess_nodes(nodes, query)
    delivered = DeliveryPostprocessor(index, budget=ImageBudget(3, 200)).postprocess_nodes(nodes, query)
    return {"rounds": [n.node.node_id for n in nodes if "unit_ids" in n.node.metadata],
            "blocks": [n.node.node_id for n in blocks], "delivered": [n.node.node_id for n in delivered]}


def test_a_block_keeps_the_id_of_its_best_round_and_delivered_nodes_keep_theirs(make_index, photos):
    """Ids were random per call: a chat could not cite a source across turns, and two runs of an
    evaluation disagreed. A block is named by the best round retrieved in it, as a sentence window
    keeps its sentence's id."""
    from llama_index_vmem import NeighborRoundPostprocessor

    index = _memory(make_index, photos)
    first, again = _ids(index, "Which photo shows the rocket?"), _ids(index, "Which photo shows the rocket?")
    assert first == again
    blocks = NeighborRoundPostprocessor(index).postprocess_nodes(index.as_retriever().retrieve("Which photo shows the rocket?"))
    for block in (b.node for b in blocks if "round_ids" in b.node.metadata):
        best = next(r for r in first["rounds"] if r in block.metadata["round_ids"])  # the retriever ranks best first
        assert block.node_id == best and index.get_rounds([best])[best].metadata["round_key"] in block.metadata["matched_rounds"]
    assert len(set(first["delivered"])) == len(first["delivered"]) > 1, "delivered nodes are told apart"
    assert set(first["delivered"]).isdisjoint(first["rounds"]), "a delivered run of text or picture is no round"
    assert _ids(index, "What is my cat called?")["blocks"] != first["blocks"]


def test_retriever_evaluator_scores_the_block_of_the_expected_round_as_a_hit(make_index, photos):
    """``RetrieverEvaluator`` compares node ids: with random block ids it scored every question 0."""
    from llama_index.core.evaluation import RetrieverEvaluator

    from llama_index_vmem import NeighborRoundPostprocessor

    index = _memory(make_index, photos)
    cat = next(r for r in index.rounds() if r.round.metadata["round_key"] == "D2:1").round
    evaluator = RetrieverEvaluator.from_metric_names(["hit_rate", "mrr"], retriever=index.as_retriever(),
                                                     node_postprocessors=[NeighborRoundPostprocessor(index)])
    result = evaluator.evaluate("Which animal is Mochi?", expected_ids=[cat.node_id])
    assert result.metric_vals_dict["hit_rate"] == 1.0 and result.metric_vals_dict["mrr"] > 0
    assert evaluator.evaluate("Which animal is Mochi?", expected_ids=[cat.node_id]).retrieved_ids == result.retrieved_ids


_IDS_IN_A_CHILD = """
import json, sys
from llama_index_vmem import VMemIndex, VMemQueryBundle, NeighborRoundPostprocessor
from llama_index_vmem.delivery import DeliveryPostprocessor, ImageBudget
from llama_index_vmem.encoders import SiglipImageEncoder

index = VMemIndex.from_defaults(path=sys.argv[1], image_encoder=SiglipImageEncoder(model_name=sys.argv[2], local_files_only=True))
query = VMemQueryBundle(sys.argv[3])
nodes = index.as_retriever().retrieve(query)
blocks = NeighborRoundPostprocessor(index).postprocess_nodes(nodes, query)
delivered = DeliveryPostprocessor(index, budget=ImageBudget(3, 200)).postprocess_nodes(nodes, query)
print(json.dumps({"rounds": [n.node.node_id for n in nodes if "unit_ids" in n.node.metadata],
                  "blocks": [n.node.node_id for n in blocks], "delivered": [n.node.node_id for n in delivered]}))
index.close()
"""


@pytest.mark.slow  # two fresh processes, each loading the encoders: 10 s
def test_another_process_gets_the_same_ids_for_the_same_retrieval(tmp_path, minilm, tiny_siglip, photos):
    import json
    import subprocess
    import sys

    from llama_index_vmem import VMemIndex

    store = tmp_path / "memory"
    index = _memory(lambda: VMemIndex.from_defaults(path=store, embed_model=minilm, image_encoder=tiny_siglip), photos)
    question = "Which photo shows the rocket?"
    try:
        here = _ids(index, question)
    finally:
        index.close()  # an embedded store is one process's at a time
    child = subprocess.run([sys.executable, "-c", _IDS_IN_A_CHILD, str(store), tiny_siglip.model_name, question],
                           capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]
    assert json.loads(child.stdout.strip().splitlines()[-1]) == here
