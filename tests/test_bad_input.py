"""Bad input: every kind raises ``VMemInputError`` naming the offending item and leaves the memory
exactly as before the call (same rounds, same retrieval, same files under the image directory).

Each test starts from a memory of two valid rounds (one with a real photo), snapshots it, makes
one bad call and checks the snapshot again. The bad image is put where a partial write would show:
as the second image of a round whose first image is new, and in the second round of a batch whose
first round is valid.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import pytest
from llama_index.core.base.llms.types import (
    AudioBlock,
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
)
from llama_index.core.llms import MockLLM
from PIL import Image

import llama_index_vmem.images as image_io
from llama_index_vmem import ImageBudget, VMemConfig, VMemIndex, VMemInputError, VMemMemoryBlock, VMemQueryBundle
from llama_index_vmem import schema
from llama_index_vmem.node_parser import ImageInput, RoundInput
from llama_index_vmem.images import LoadedImage

COFFEE_ROUND = {
    "user": "I brewed a fresh espresso this morning",
    "assistant": "Lovely crema on that coffee!",
    "session_id": "D1",
    "round_key": "D1:1",
}
HORSE_ROUND = {
    "user": "We went horse riding along the beach",
    "assistant": "That sounds like a great day out.",
    "session_id": "D1",
    "round_key": "D1:2",
}


# -- helpers ------------------------------------------------------------------------------------


def snapshot(index: VMemIndex) -> Dict[str, Any]:
    """Everything a caller can observe: round count, what retrieval returns, files on disk."""
    hits = index.as_retriever().retrieve("coffee")
    files = sorted(str(p.relative_to(index.image_dir)) for p in index.image_dir.rglob("*"))
    return {
        "len": len(index),
        "retrieved": [n.node.node_id for n in hits],
        "retrieved_text": [n.node.get_content() for n in hits],
        "files": files,
    }


def rejected(index: VMemIndex, call: Callable[[], Any], item: str) -> VMemInputError:
    """``call`` raises VMemInputError for ``item`` and the memory is exactly as before."""
    before = snapshot(index)
    with pytest.raises(VMemInputError) as caught:
        call()
    err = caught.value
    assert isinstance(err, ValueError)
    assert err.item == item, f"error names {err.item!r}, expected {item!r}: {err}"
    assert str(err).startswith(f"{item}: ")
    assert snapshot(index) == before
    return err


def png_bytes(color: Tuple[int, int, int], size: int = 16) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, format="PNG")
    return buf.getvalue()


def user(text: Optional[str] = None, **kwargs: Any) -> ChatMessage:
    """A user message from ``text`` or from ``blocks=`` (``content`` would replace the blocks)."""
    if text is not None:
        kwargs["content"] = text
    return ChatMessage(role=MessageRole.USER, **kwargs)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def memory(make_index, photos) -> VMemIndex:
    """Two valid rounds, the first with a real photo of a cup of coffee."""
    index = make_index()
    coffee_image = {"image_id": "D1:IMG_001", "path": str(photos["coffee"]), "caption": "a cup of coffee"}
    index.add_rounds([dict(COFFEE_ROUND, images=[coffee_image]), HORSE_ROUND])
    assert len(index) == 2
    assert len(list(index.image_dir.rglob("*"))) == 1
    return index


@pytest.fixture
def fresh_image(tmp_path) -> Dict[str, Any]:
    """A valid image not yet in the memory: storing it would add a file."""
    path = tmp_path / "fresh.png"
    path.write_bytes(png_bytes((200, 30, 90)))
    return {"image_id": "D2:IMG_001", "path": str(path), "caption": "a magenta square"}


def _truncated_png(photos) -> bytes:
    buf = io.BytesIO()
    Image.open(photos["astronaut"]).save(buf, format="PNG")
    data = buf.getvalue()
    return data[: len(data) // 2]


#: kind -> (how to build the image source in tmp_path, words the error must contain)
BAD_IMAGES: Dict[str, Tuple[Callable[[Path, Dict[str, Path]], Dict[str, Any]], str]] = {
    "missing_file": (lambda d, ph: {"path": str(d / "no-such-photo.png")}, "not found"),
    "directory_as_path": (lambda d, ph: {"path": str(_mkdir(d / "a-folder.png"))}, "not a regular file"),
    "device_as_path": (lambda d, ph: {"path": "/dev/zero"}, "not a regular file"),  # reports size 0, never ends
    "device_as_file_url": (lambda d, ph: {"url": "file:///dev/zero"}, "not a regular file"),
    "fifo_as_path": (lambda d, ph: {"path": str(_fifo(d / "pipe.png"))}, "not a regular file"),  # would block the writer
    "truncated_png": (lambda d, ph: {"path": str(_write(d / "half.png", _truncated_png(ph)))}, "truncated"),
    "truncated_png_bytes": (lambda d, ph: {"bytes": _truncated_png(ph)}, "truncated"),
    "text_file_named_png": (lambda d, ph: {"path": str(_write(d / "notes.png", b"just some notes\n" * 20))},
                            "not an image"),
    "zero_byte_file": (lambda d, ph: {"path": str(_write(d / "empty.png", b""))}, "empty"),
    "zero_bytes": (lambda d, ph: {"bytes": b""}, "empty"),
    "decompression_bomb": (lambda d, ph: {"path": str(_bomb(d / "bomb.png"))}, "pixel limit"),
    "ftp_url": (lambda d, ph: {"url": "ftp://example.com/cat.png"}, "unsupported URL scheme 'ftp'"),
    "javascript_url": (lambda d, ph: {"url": "javascript:alert(1)"}, "unsupported URL scheme 'javascript'"),
    "str_as_bytes": (lambda d, ph: {"bytes": "iVBORw0KGgo="}, "image bytes must be bytes, got str"),
    "path_of_wrong_type": (lambda d, ph: {"path": 123}, "image path must be a str or path, got int"),
    "url_of_wrong_type": (lambda d, ph: {"url": 5}, "image url must be a str, got int"),
    "url_as_bytes": (lambda d, ph: {"url": b"https://example.com/cat.png"}, "image url must be a str, got bytes"),
    "two_sources": (lambda d, ph: {"path": str(ph["horse"]), "url": "https://example.com/h.png"},
                    "exactly one of path, bytes or url"),
    # PIL hands EPS to Ghostscript, which this file keeps busy forever: not a format read here
    "eps_that_never_ends": (lambda d, ph: {"bytes": b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n{ } loop\n"},
                            "not an image in a format read here"),
    "dds_with_an_unknown_pixel_format": (lambda d, ph: {"bytes": _dds_without_pixel_format()}, "not an image in a format read here"),
    "nul_in_path": (lambda d, ph: {"path": str(d / "a\x00b.png")}, "contains NUL"),
    "nul_in_file_url": (lambda d, ph: {"url": f"file://{d}/a%00b.png"}, "contains NUL"),
    "unclosed_ipv6_url": (lambda d, ph: {"url": "http://[::1/a.png"}, "malformed URL"),
    "space_in_host_url": (lambda d, ph: {"url": "http://exa mple.com/a.png"}, "cannot fetch"),
}


def _dds_without_pixel_format() -> bytes:
    """A DDS file whose pixel-format flags are zeroed: PIL's DDS reader raises NotImplementedError."""
    buf = io.BytesIO()
    Image.new("RGBA", (4, 4)).save(buf, format="DDS")
    data = bytearray(buf.getvalue())
    data[80:84] = bytes(4)
    return bytes(data)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _bomb(path: Path) -> Path:
    """81M pixels (over the 64M limit) that compress to ~10 kB."""
    Image.new("1", (9000, 9000)).save(path)
    assert path.stat().st_size < image_io.MAX_IMAGE_BYTES
    return path


@pytest.fixture(params=sorted(BAD_IMAGES))
def bad_image(request, tmp_path, photos) -> Tuple[Dict[str, Any], str]:
    build, words = BAD_IMAGES[request.param]
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    return build(bad_dir, photos), words


# -- bad images ---------------------------------------------------------------------------------


def test_bad_image_as_second_image_of_round(memory, fresh_image, bad_image):
    source, words = bad_image
    images = [fresh_image, {"image_id": "D2:IMG_002", "caption": "the bad one", **source}]
    err = rejected(
        memory,
        lambda: memory.add_round(user="two new pictures", images=images, session_id="D2", round_key="D2:1"),
        item="round D2:1 image D2:IMG_002",
    )
    assert words in err.problem


def test_bad_image_in_second_round_of_batch(memory, fresh_image, bad_image):
    source, words = bad_image
    rounds = [
        {"user": "a good new picture", "images": [fresh_image], "session_id": "D2", "round_key": "D2:1"},
        {"user": "and a bad one", "images": [{"image_id": "D2:IMG_009", **source}], "session_id": "D2",
         "round_key": "D2:2"},
    ]
    err = rejected(memory, lambda: memory.add_rounds(rounds), item="round D2:2 image D2:IMG_009")
    assert words in err.problem


def test_a_url_that_trickles_its_image_is_given_up_at_the_deadline(memory, monkeypatch):
    """A server sending a byte at a time never trips a per-read timeout; the fetch has one deadline."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    image = png_bytes((10, 200, 10))

    class Trickle(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(image)))
            self.end_headers()
            try:
                for byte in image:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:  # the reader gave up
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(image_io, "_URL_TIMEOUT_S", 0.5)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/green.png"
        err = rejected(memory, lambda: memory.add_round(user="slow", images=[{"image_id": "G", "url": url}], round_key="D2:1"),
                       item="round D2:1 image G")
    finally:
        server.shutdown()
    assert "took over 0.5 s" in err.problem


def test_bad_image_block_in_second_message_round(memory, fresh_image):
    messages = [
        user(blocks=[TextBlock(text="a good picture"), ImageBlock(path=Path(fresh_image["path"]))]),
        assistant("nice"),
        user(blocks=[TextBlock(text="and this one"), ImageBlock(url="ftp://example.com/cat.png")],
             additional_kwargs={"image_ids": ["M:IMG_2"]}),
        assistant("cannot see it"),
    ]
    err = rejected(memory, lambda: memory.add_messages(messages), item="message 3 image 1")
    assert "ftp" in err.problem


@pytest.mark.parametrize("empty", [b"", io.BytesIO(b"")], ids=["bytes", "stream"])
def test_an_image_block_of_empty_bytes_is_refused_as_empty_by_name(memory, fresh_image, empty):
    messages = [user(blocks=[TextBlock(text="a good picture"), ImageBlock(path=Path(fresh_image["path"]))]), assistant("nice"),
                user(blocks=[TextBlock(text="and this one"), ImageBlock(image=empty)]), assistant("I see nothing")]
    err = rejected(memory, lambda: memory.add_messages(messages), item="message 3 image 1")
    assert "empty" in err.problem
    if isinstance(empty, io.BytesIO):  # attached to a question: the memory block's recall goes on by its text
        asked = user(blocks=[TextBlock(text="what is this picture?"), ImageBlock(image=io.BytesIO(b""))])
        assert asyncio.run(VMemMemoryBlock(index=memory).aget([asked]))


@pytest.mark.parametrize("via", ["path", "file_url", "bytes", "data_url"])
def test_image_over_max_bytes(memory, monkeypatch, tmp_path, photos, via):
    small = png_bytes((10, 220, 40))
    monkeypatch.setattr(image_io, "MAX_IMAGE_BYTES", len(small) + 100)
    big_path = photos["chelsea"]
    big = big_path.read_bytes()
    assert len(big) > image_io.MAX_IMAGE_BYTES
    source = {
        "path": {"path": str(big_path)},
        "file_url": {"url": big_path.as_uri()},
        "bytes": {"bytes": big},
        "data_url": {"url": "data:image/png;base64," + base64.b64encode(big).decode()},
    }[via]
    images = [{"image_id": "D2:IMG_001", "bytes": small}, {"image_id": "D2:IMG_002", **source}]
    err = rejected(
        memory,
        lambda: memory.add_round(user="a small and a big picture", images=images, round_key="D2:1"),
        item="round D2:1 image D2:IMG_002",
    )
    assert f"over the {len(small) + 100}" in err.problem


@pytest.mark.parametrize("caption", [None, "", "   ", "\u200b"])
def test_image_with_neither_pixels_nor_caption(memory, fresh_image, caption):
    images = [fresh_image, {"image_id": "D2:IMG_005", "caption": caption}]
    err = rejected(
        memory,
        lambda: memory.add_round(user="look", images=images, round_key="D2:1"),
        item="round D2:1 image D2:IMG_005",
    )
    assert "neither pixels nor a caption" in err.problem


# -- empty conversations and rounds -------------------------------------------------------------


@pytest.mark.parametrize(
    "call, item",
    [
        (lambda m: m.add_rounds([]), "rounds"),
        (lambda m: m.add_messages([]), "messages"),
        (lambda m: m.add_messages([ChatMessage(role=MessageRole.SYSTEM, content="be nice")]), "messages"),
    ],
    ids=["add_rounds_empty", "add_messages_empty", "only_system_message"],
)
def test_empty_conversation(memory, call, item):
    err = rejected(memory, lambda: call(memory), item=item)
    assert "empty" in err.problem


@pytest.mark.parametrize(
    "call, item",
    [
        (lambda m, img: m.add_round(), "round 1"),
        (lambda m, img: m.add_round(user="   ", assistant="\n", round_key="D2:5"), "round D2:5"),
        (lambda m, img: m.add_rounds([{"user": "fine", "images": [img], "round_key": "D2:1"},
                                      {"round_key": "D2:2"}]), "round D2:2"),
        (lambda m, img: m.add_messages([user("hi"), assistant("yo"), user(""), assistant("")]), "messages 3-4"),
        (lambda m, img: m.add_round(audio=["", " \n"], round_key="D2:5"), "round D2:5"),
    ],
    ids=["no_arguments", "whitespace_only", "second_round_of_batch", "empty_messages", "blank_transcripts"],
)
def test_round_with_neither_text_nor_images(memory, fresh_image, call, item):
    """A round is named as the caller gave it, never by a default key it would have got (``round R3``)."""
    err = rejected(memory, lambda: call(memory, fresh_image), item=item)
    assert "round is empty" in err.problem


# -- message order ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "messages, item, words",
    [
        ([assistant("hello there"), user("hi")], "message 1", "assistant message without a user message"),
        ([user("first"), user("second"), assistant("reply")], "message 2", "two user messages in a row"),
        ([user("fine"), assistant("ok"), assistant("again")], "message 3", "assistant message without a user"),
        ([user("fine"), assistant("ok"), user("q"), user("q again")], "message 4", "two user messages in a row"),
        ([user("call a tool"), ChatMessage(role=MessageRole.TOOL, content="42")], "message 2",
         "role 'tool' is not one of user, assistant, chatbot, model, system, developer"),
    ],
    ids=["assistant_first", "two_users", "two_assistants_after_valid_round", "two_users_after_valid_round",
         "tool_role"],
)
def test_message_role_out_of_order(memory, messages, item, words):
    err = rejected(memory, lambda: memory.add_messages(messages), item=item)
    assert words in err.problem


def test_unsupported_content_block(memory):
    messages = [user("fine"), assistant("ok"), user(blocks=[DocumentBlock(data=b"%PDF-1.4 tiny")])]
    err = rejected(memory, lambda: memory.add_messages(messages), item="message 3")
    assert "DocumentBlock" in err.problem


# -- duplicate round keys -----------------------------------------------------------------------


def test_duplicate_round_key_within_one_call(memory, fresh_image):
    rounds = [
        {"user": "first", "images": [fresh_image], "round_key": "D2:1"},
        {"user": "second", "round_key": "D2:1"},
    ]
    err = rejected(memory, lambda: memory.add_rounds(rounds), item="round D2:1")
    assert "duplicate round key" in err.problem


@pytest.mark.parametrize(
    "call, item",
    [
        (lambda m, img: m.add_round(user="again", images=[img], round_key="D1:1"), "round D1:1"),
        (lambda m, img: m.add_rounds([{"user": "new", "images": [img], "round_key": "D2:1"},
                                      {"user": "old key", "round_key": "D1:2"}]), "round D1:2"),
    ],
    ids=["single_round", "second_round_of_batch"],
)
def test_duplicate_round_key_across_calls(memory, fresh_image, call, item):
    err = rejected(memory, lambda: call(memory, fresh_image), item=item)
    assert "already stored" in err.problem


def test_a_default_key_moves_past_keys_callers_chose(make_index):
    """A key a caller chose in the default form never blocks later rounds without a key."""
    index = make_index()
    index.add_round(user="chosen", round_key="R3")
    index.add_round(user="chosen for a session", round_key="S:1")
    keys = [index.add_round(user=f"free {i}").metadata["round_key"] for i in range(3)]
    assert keys == ["R4", "R5", "R6"], "R3 was taken; the next defaults follow it"
    assert index.add_round(user="in session S", session_id="S").metadata["round_key"] == "S:2"
    [batch] = [index.add_rounds([{"user": "one", "session_id": "S"}, {"user": "two", "session_id": "S", "round_key": "S:3"}])]
    assert [r.metadata["round_key"] for r in batch] == ["S:4", "S:3"]
    assert len(index) == 8
    assert [r.round.text for r in index.rounds(["R3", "S:1"])] == ["User: chosen", "User: chosen for a session"]
    index.add_rounds([{"user": "odd digits", "session_id": "S", "round_key": "S:\u00b2"},
                      {"user": "too many digits for an int", "session_id": "S", "round_key": "S:" + "9" * 5000}])
    assert index.add_round(user="still numbered", session_id="S").metadata["round_key"] == "S:5"


def test_a_default_image_id_moves_past_ids_callers_chose(memory):
    import asyncio

    pictures = [{"caption": "a red bike"}, {"image_id": "K:IMG_1", "caption": "a blue car"}, {"image_id": "\u200b", "caption": "a cat"}]
    node = asyncio.run(memory.aadd_round("three pictures", "nice", pictures, round_key="K"))
    assert node.metadata[schema.IMAGE_IDS] == ["K:IMG_2", "K:IMG_1", "K:IMG_3"], "an id that shows nothing is no id"
    assert "[Image K:IMG_2] a red bike" in node.text and "[Image K:IMG_1] a blue car" in node.text


@pytest.mark.parametrize(
    "call, item, field",
    [
        (lambda m: m.add_round(user="caf\udce9 au lait"), "round 1", "user"),
        (lambda m: m.add_round(user="x", round_key="k\ud83d"), "round k\\ud83d", "round_key"),
        (lambda m: m.add_round(user="x", session_id="s\ud83d"), "round 1", "session_id"),
        (lambda m: m.add_rounds([{"user": "fine", "round_key": "D2:1"}, {"user": "x", "images": [{"caption": "caf\udce9"}]}]),
         "round 2", "image 1 caption"),
        (lambda m: m.add_messages([user("caf\udce9")]), "message 1", "user"),
    ],
    ids=["user", "round_key", "session_id", "caption_in_second_round", "message"],
)
def test_text_that_is_not_utf8(memory, call, item, field):
    """A lone surrogate (what a careless decode leaves) would fail in the store with a bare error."""
    err = rejected(memory, lambda: call(memory), item=item)
    assert f"'{field}' is not valid UTF-8 text" in err.problem


@pytest.mark.parametrize(
    "call, item, field",
    [
        (lambda m, big: m.add_round(user=big), "round 1", "user"),
        (lambda m, big: m.add_rounds([{"user": "fine", "round_key": "D2:1"}, {"user": "x", "images": [{"caption": big}]}]),
         "round 2", "image 1 caption"),
        (lambda m, big: m.add_messages([user("hi"), ChatMessage(role=MessageRole.ASSISTANT, content=big)]), "messages 1-2", "assistant"),
    ],
    ids=["user", "caption_in_second_round", "message"],
)
def test_text_over_the_size_limit_is_refused_by_field(memory, call, item, field):
    """Only a text's start is ever embedded, so a huge paste would be stored whole for nothing."""
    from llama_index_vmem.node_parser import MAX_TEXT_CHARS

    memory.add_round(user="a" * MAX_TEXT_CHARS, session_id="S9")  # the limit itself is accepted
    big = "word " * (MAX_TEXT_CHARS // 5) + "!"
    err = rejected(memory, lambda: call(memory, big), item=item)
    assert err.problem == f"'{field}' is {MAX_TEXT_CHARS + 1} characters, over the {MAX_TEXT_CHARS} limit"


# -- wrong types --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, item, words",
    [
        (lambda m: m.add_round(user=123), "round 1", "'user' must be a string, got int"),
        (lambda m: m.add_round(user="hi", assistant=["x"]), "round 1", "'assistant' must be a string, got list"),
        (lambda m: m.add_messages("hello"), "messages", "must be a list of ChatMessage, got str"),
        (lambda m: m.add_messages(user("hello")), "messages", "must be a list of ChatMessage"),
        (lambda m: m.add_rounds({"user": "x"}), "rounds", "must be a list of round dicts, got dict"),
        (lambda m: m.add_rounds([{"user": "ok", "round_key": "D2:1"}, "not a dict"]), "round 2",
         "a round must be a dict, got str"),
        (lambda m: m.add_rounds([{"user": "x", "imagez": []}]), "round 1", "unknown round fields ['imagez']"),
        (lambda m: m.add_messages([user("hi"), {"role": "assistant", "content": "x"}]), "message 2",
         "must be a ChatMessage, got dict"),
        (lambda m: m.add_rounds([{"user": "x", "images": "not a list"}]), "round 1", "'images' must be a list"),
        (lambda m: m.add_rounds([{"user": "x", "images": {"path": "a.png"}}]), "round 1", "'images' must be a list"),
        (lambda m: m.add_round(user="x", images=["photo.png"]), "round 1 image 1", "must be a dict, got str"),
        (lambda m: m.add_round(user="x", images=[{"file": "a.png"}]), "round 1 image 1", "unknown image fields"),
        (lambda m: m.add_round(user="x", session_id=[1]), "round 1", "'session_id' must be a string, got list"),
        (lambda m: m.add_round(user="x", timestamp=True), "round 1", "'timestamp' must be a datetime, a date, epoch seconds or text, got bool"),
        (lambda m: m.add_round(user="x", round_key=True), "round 1", "'round_key' must be a string, got bool"),
        (lambda m: m.add_round(user="x", round_key=""), "round 1", "'round_key' must have a visible character"),
        (lambda m: m.add_round(user="x", round_key="  "), "round 1", "'round_key' must have a visible character"),
        (lambda m: m.add_round(user="x", session_id=""), "round 1", "'session_id' must have a visible character"),
        (lambda m: m.add_messages([user("hi"), assistant("yo")], session_id=""), "messages", "'session_id' must have a visible character"),
        (lambda m: m.add_rounds([{"user": "x", "audio": "a transcript"}]), "round 1", "'audio' must be a list"),
        (lambda m: m.add_round(user="x", round_key="\u200b"), "round 1", "'round_key' must have a visible character"),
        (lambda m: m.add_rounds([{"user": "x", 1: "a", "zz": 2}]), "round 1", "unknown round fields ['zz', 1]"),
        (lambda m: m.add_round(user="x", images=[{"caption": "c", 1: "a", "zz": 2}]), "round 1 image 1", "unknown image fields ['zz', 1]"),
        (lambda m: m.add_round(user="x", audio=5), "round 1", "'audio' must be a list"),
        (lambda m: m.add_round(user="x", audio={"hello": 1}), "round 1", "'audio' must be a list"),
        (lambda m: m.add_round(user="x", round_key="D2:1", images=[{"image_id": "X", "caption": "a"}, {"image_id": "X", "caption": "b"}]),
         "round D2:1 image X", "two images of this round have this id"),
        (lambda m: m.add_messages([user(blocks=[TextBlock(text="hi"), AudioBlock(audio=b"RIFF")],
                                        additional_kwargs={"transcripts": "hello world"})]),
         "message 1", "additional_kwargs['transcripts'] must be a list"),
        (lambda m: m.add_messages([user(blocks=[TextBlock(text="hi"), AudioBlock(audio=b"RIFF")],
                                        additional_kwargs={"transcripts": [None]})]),
         "message 1 audio 1", "transcript must be a string, got NoneType"),
        (lambda m: m.add_messages([user(blocks=[TextBlock(text="hi")], additional_kwargs={"image_ids": "CAT_1"})]),
         "message 1", "additional_kwargs['image_ids'] must be a list"),
        (lambda m: m.add_messages([user(blocks=[TextBlock(text="hi")], additional_kwargs={"image_ids": ["CAT_1"]})]),
         "message 1", "additional_kwargs['image_ids'] has 1 entries for 0 image block(s)"),
        (lambda m: m.add_messages([user(blocks=[TextBlock(text="hi"), AudioBlock(audio=b"RIFF")],
                                        additional_kwargs={"transcripts": ["hello", "world"]})]),
         "message 1", "additional_kwargs['transcripts'] has 2 entries for 1 audio block(s)"),
        (lambda m: m.add_round_inputs([]), "rounds", "non-empty list of RoundInput"),
        (lambda m: m.add_round_inputs([{"user": "x"}]), "rounds", "non-empty list of RoundInput"),
        (lambda m: m.add_round_inputs([RoundInput(user="ok", round_key="D2:1"), RoundInput(user=5)]), "round 2",
         "'user' must be a string, got int"),
        (lambda m: m.add_round_inputs([RoundInput(user="x", round_key=7, audio_transcripts="a transcript")]), "round 7",
         "'audio' must be a list"),
        (lambda m: m.add_round_inputs([RoundInput(user="x", images=[{"caption": "a cat"}])]), "round 1 image 1",
         "must be an ImageInput, got dict"),
        (lambda m: m.add_round_inputs([RoundInput(user="x", images=[ImageInput(image_id="C", caption=3)])]), "round 1 image C",
         "'caption' must be a string, got int"),
        (lambda m: m.add_round_inputs([RoundInput(user="x", timestamp={"day": 1})]), "round 1",
         "'timestamp' must be a datetime, a date, epoch seconds or text, got dict"),
        (lambda m: m.add_round_inputs([RoundInput(user="x", round_key="\u200b")]), "round 1",
         "'round_key' must have a visible character"),
        # a hand-made ``checked`` vouches for nothing: the bytes are checked as any image's are
        (lambda m: m.add_round_inputs([RoundInput(user="x", images=[ImageInput(image_id="C", data=b"junk",
                                                                               checked=LoadedImage(b"junk", "PNG", 1, 1))])]),
         "round 1 image C", "not an image"),
    ],
    ids=[
        "user_int", "assistant_list", "add_messages_str", "add_messages_single_message", "add_rounds_dict",
        "round_not_a_dict", "unknown_round_field", "message_not_a_ChatMessage", "images_str", "images_dict",
        "image_not_a_dict", "unknown_image_field", "session_id_list", "timestamp_float", "round_key_bool",
        "round_key_empty", "round_key_blank", "session_id_empty", "add_messages_session_id_empty", "audio_str_in_dict",
        "round_key_invisible", "round_fields_of_mixed_types", "image_fields_of_mixed_types", "audio_int", "audio_dict",
        "image_id_twice_in_a_round", "transcripts_str", "transcript_none", "image_ids_str",
        "image_ids_for_no_image", "transcripts_past_the_audio",
        "round_inputs_empty", "round_inputs_dicts", "round_input_user_int", "round_input_audio_str",
        "round_input_image_dict", "round_input_caption_int", "round_input_timestamp_dict", "round_input_key_invisible",
        "round_input_forged_check",
    ],
)
def test_wrong_types(memory, call, item, words):
    err = rejected(memory, lambda: call(memory), item=item)
    assert words in err.problem


def test_a_check_an_image_was_not_given_by_validate_vouches_for_nothing(memory, photos, monkeypatch):
    """A caption-only image with a hand-made ``checked`` is stored as its caption, never encoded from
    those bytes; one ``validate`` made counts however many equal ones exist."""
    from llama_index_vmem import images

    memory.add_round_inputs([RoundInput(user="x", round_key="K1", images=[
        ImageInput(image_id="C", caption="a cat", checked=LoadedImage(b"junk", "PNG", 1, 1))])])
    [stored] = memory.rounds(["K1"])
    assert [u.metadata.get("has_pixels") for u in stored.units if u.metadata["modality"] == "image"] == [False]
    data = photos["coffee"].read_bytes()
    first, second = images.validate("a", data), images.validate("b", data)
    del first
    assert images.validated(second) and not images.validated(LoadedImage(data, second.format, second.width, second.height))


def test_add_round_images_given_a_string(memory):
    """``images="not a list"`` is the caller's mistake with ``images``, not with a character of it."""
    err = rejected(memory, lambda: memory.add_round(user="x", images="not a list"), item="round 1")
    assert "'images' must be a list" in err.problem


def test_add_round_audio_given_a_string(memory):
    """A bare transcript string must not be stored as one ``[Audio: c]`` unit per character."""
    err = rejected(memory, lambda: memory.add_round(user="x", audio="hello", round_key="D2:1"), item="round D2:1")
    assert "'audio' must be a list" in err.problem


@pytest.mark.parametrize("field, value", [("session_id", [1]), ("timestamp", {"day": 1})])
def test_add_messages_session_or_timestamp_of_wrong_type(memory, field, value):
    before = snapshot(memory)
    with pytest.raises(VMemInputError) as caught:
        memory.add_messages([user("hi"), assistant("hello")], **{field: value})
    assert field in str(caught.value)
    assert snapshot(memory) == before


def test_image_caption_of_wrong_type(memory, fresh_image):
    images = [fresh_image, {"image_id": "D2:IMG_002", "caption": 123}]
    rejected(memory, lambda: memory.add_round(user="x", images=images, round_key="D2:1"),
             item="round D2:1 image D2:IMG_002")


def test_image_id_of_wrong_type(memory, fresh_image):
    images = [fresh_image, {"image_id": ["D2", "IMG_002"], "caption": "a list as id"}]
    before = snapshot(memory)
    with pytest.raises(VMemInputError) as caught:
        memory.add_round(user="x", images=images, round_key="D2:1")
    assert caught.value.item.startswith("round D2:1 image")
    assert "image_id" in caught.value.problem
    assert snapshot(memory) == before


# -- audio --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "messages, item",
    [
        ([user(blocks=[TextBlock(text="listen"), AudioBlock(audio=b"RIFF....")]), assistant("ok")],
         "message 1 audio 1"),
        ([user("fine"), assistant("ok"), user(blocks=[AudioBlock(audio=b"RIFF....")]), assistant("hm")],
         "message 3 audio 1"),
        ([user(blocks=[AudioBlock(audio=b"RIFF...."), AudioBlock(audio=b"RIFF....")],
               additional_kwargs={"transcripts": ["only the first"]})], "message 1 audio 2"),
    ],
    ids=["first_message", "after_valid_round", "second_block_lacks_transcript"],
)
def test_audio_without_transcript_or_transcriber(memory, messages, item):
    err = rejected(memory, lambda: memory.add_messages(messages), item=item)
    assert "transcript" in err.problem


def test_transcriber_returning_non_string(make_index, photos):
    index = make_index(transcriber=lambda block: None)
    index.add_rounds([dict(COFFEE_ROUND, images=[{"image_id": "D1:IMG_001", "path": str(photos["coffee"])}]),
                      HORSE_ROUND])
    messages = [user(blocks=[AudioBlock(audio=b"RIFF....")]), assistant("ok")]
    err = rejected(index, lambda: index.add_messages(messages), item="message 1 audio 1")
    assert "NoneType" in err.problem


def _audio_round_found(index: VMemIndex, query: str, transcript: str) -> None:
    hits = index.as_retriever().retrieve(query)
    texts = [n.node.get_content() for n in hits]
    assert hits, "nothing retrieved"
    assert f"[Audio: {transcript}]" in texts[0], texts


def test_audio_with_transcript_is_stored_as_text_unit(memory):
    transcript = "a violin concerto played by the lake at sunset"
    messages = [
        user(blocks=[TextBlock(text="Listen to this recording"), AudioBlock(audio=b"RIFF....")],
             additional_kwargs={"transcripts": [transcript]}),
        assistant("Beautiful music."),
    ]
    (node,) = memory.add_messages(messages, session_id="D2")
    assert len(memory) == 3
    assert f"[Audio: {transcript}]" in node.get_content()
    _audio_round_found(memory, "violin concerto by the lake", transcript)
    assert memory.as_retriever().retrieve("violin concerto by the lake")[0].node.node_id == node.node_id


def test_audio_transcribed_by_transcriber_is_stored(make_index):
    transcript = "the train to Lisbon leaves at seven"
    index = make_index(transcriber=lambda block: transcript)
    index.add_rounds([COFFEE_ROUND, HORSE_ROUND])
    (node,) = index.add_messages([user(blocks=[AudioBlock(audio=b"RIFF....")]), assistant("Noted.")])
    assert f"[Audio: {transcript}]" in node.get_content()
    _audio_round_found(index, "train to Lisbon", transcript)


# -- after a rejected call ----------------------------------------------------------------------


def test_memory_usable_after_rejected_call(memory, fresh_image, tmp_path):
    """A rejected call consumes nothing: not the round key, not a sequence number, not a file."""
    missing = {"image_id": "D2:IMG_002", "path": str(tmp_path / "missing.png")}
    with pytest.raises(VMemInputError):
        memory.add_round(user="first try", images=[fresh_image, missing], round_key="D2:1")
    node = memory.add_round(user="second try", images=[fresh_image], round_key="D2:1")
    assert len(memory) == 3
    assert node.metadata[schema.SEQ] == 3
    assert len(list(memory.image_dir.rglob("*"))) == 2


@pytest.mark.parametrize("overrides, item", [
    (dict(similarity_top_k=-1), "config k"), (dict(k=2.0), "config k"), (dict(k=True), "config k"),
    (dict(rrf_kappa=-1), "config rrf_kappa"), (dict(candidate_pool=0), "config candidate_pool"),
    (dict(neighbor_window=1.5), "config neighbor_window"), (dict(routing=1), "config routing"),
    (dict(follow_up_weight=-0.1), "config follow_up_weight"), (dict(follow_up_weight=float("nan")), "config follow_up_weight"),
    (dict(follow_up_weight="0.25"), "config follow_up_weight"), (dict(follow_up_weight=True), "config follow_up_weight"),
    (dict(k=2**32), "config k"), (dict(candidate_pool=2**40), "config candidate_pool"),
    (dict(answer_weight=-1), "config answer_weight"), (dict(answer_weight=float("inf")), "config answer_weight"),
], ids=["negative_k", "float_k", "bool_k", "negative_kappa", "empty_pool", "float_window", "int_as_bool",
        "negative_weight", "nan_weight", "text_weight", "bool_weight", "k_past_what_grpc_takes", "huge_pool",
        "negative_answer_weight", "infinite_answer_weight"])
def test_a_config_value_retrieval_would_misread_is_refused_when_the_retriever_is_made(memory, overrides, item):
    rejected(memory, lambda: memory.as_retriever(**overrides), item=item)


def test_a_page_past_any_count_the_store_takes_lists_what_there_is(memory):
    """``limit=2**64`` for "all" overflowed the embedded store's 64-bit count."""
    everything = [r.round.node_id for r in memory.rounds(limit=1000)]
    assert everything and [r.round.node_id for r in memory.rounds(limit=2**64)] == everything
    assert [r.round.node_id for r in memory.rounds(offset=1, limit=2**64)] == everything[1:]
    assert memory.rounds(offset=2**64) == []


@pytest.mark.parametrize("query, item", [
    ("cat \ud800 name", "query"), (VMemQueryBundle("cat", image_caption=123), "query image caption"),
    (VMemQueryBundle("cat", image_caption="a \udce9 cat"), "query image caption"),
    (VMemQueryBundle("cat", custom_embedding_strs=["a cat", 1]), "query custom_embedding_strs 2"),
    (VMemQueryBundle("cat", custom_embedding_strs=["a \ud800 cat"]), "query custom_embedding_strs 1"),
], ids=["lone_surrogate", "caption_int", "caption_surrogate", "embedding_str_int", "embedding_str_surrogate"])
def test_query_text_that_cannot_be_encoded_is_refused_by_name(memory, query, item):
    rejected(memory, lambda: memory.as_retriever().retrieve(query), item=item)


@pytest.mark.parametrize("name, data", [("corrupt.png", b"not an image"), ("missing.png", None)], ids=["corrupt", "missing"])
def test_a_bad_query_image_is_refused_by_name_before_an_llm_is_asked_about_it(memory, scripted_llm, tmp_path, name, data):
    image = tmp_path / name
    if data is not None:
        image.write_bytes(data)
    llm = scripted_llm(default='{"keywords": ["cat"]}')
    rejected(memory, lambda: memory.as_query_engine(llm=llm).query(VMemQueryBundle("What is this?", image_path=str(image))),
             item="query image")
    assert llm.prompts == [], "no LLM call was paid for"


@pytest.mark.parametrize("call", [
    lambda m: m.as_retriever().retrieve(""),
    lambda m: m.as_retriever().retrieve_with_plan(VMemQueryBundle("  \n")),
    lambda m: m.as_retriever().retrieve_with_plan(VMemQueryBundle("\u200b", image_caption=" \u200e")),
    lambda m: m.as_query_engine(llm=MockLLM()).query(""),
], ids=["retrieve", "retrieve_with_plan_blank", "invisible_text_and_caption", "query_engine"])
def test_an_empty_query_is_refused_not_answered_with_random_rounds(memory, call):
    err = rejected(memory, lambda: call(memory), item="query")
    assert "is empty" in err.problem


@pytest.mark.parametrize("words", ["", None], ids=["empty", "none"])
def test_a_query_of_an_image_alone_is_not_empty(memory, photos, scripted_llm, words):
    """``query_str=None`` is how some callers ask about an image in no words: it asks with empty text."""
    query = VMemQueryBundle(words, image_path=str(photos["coffee"]))
    nodes = memory.as_retriever().retrieve(query)
    assert nodes[0].node.metadata["round_key"] == "D1:1"
    llm = scripted_llm(default="Your espresso.")
    assert str(memory.as_query_engine(llm=llm, delivery="text").query(query)) == "Your espresso."
    assert "QUESTION: \n" in llm.prompts[-1] and "None" not in llm.prompts[-1]


@pytest.mark.parametrize("budget, words", [
    (dict(max_side=0), "'max_side' must be a whole number >= 1"), (dict(max_side=-5), "'max_side' must be a whole number >= 1"),
    (dict(max_side="big"), "'max_side' must be a whole number"), (dict(max_images=-1), "'max_images' must be a whole number >= 0"),
    (dict(max_images=2.5), "'max_images' must be a whole number"), (dict(max_images=True), "'max_images' must be a whole number"),
], ids=["side_zero", "side_negative", "side_str", "images_negative", "images_float", "images_bool"])
def test_an_image_budget_that_would_fail_at_answer_time_or_lift_the_cap_is_refused_when_made(budget, words):
    """A bad budget failed only when an answer was delivered (division by zero, a bare TypeError),
    and ``max_images=-1`` silently delivered every image."""
    with pytest.raises(VMemInputError) as caught:
        ImageBudget(**budget)
    assert caught.value.item == "image_budget" and words in caught.value.problem


def test_an_image_budget_that_is_not_an_image_budget_is_refused_when_the_engine_is_made(memory):
    """``image_budget=5`` was taken, then failed each answer with an AttributeError."""
    err = rejected(memory, lambda: memory.as_query_engine(llm=MockLLM(), delivery="pixels", image_budget=5), item="image_budget")
    assert "must be an ImageBudget, got int" in err.problem


@pytest.mark.parametrize("session_id, words", [
    ("   ", "must have a visible character"), ("", "must have a visible character"), ("chat\ud800", "not valid UTF-8"),
], ids=["blank", "empty", "lone_surrogate"])
def test_a_memory_block_refuses_a_session_id_add_messages_would_refuse(memory, session_id, words):
    """The block was made, then every exchange the ``Memory`` flushed to it was dropped with only a warning."""
    err = rejected(memory, lambda: VMemMemoryBlock(index=memory, session_id=session_id), item="session_id")
    assert words in err.problem


def test_a_memory_block_takes_a_session_id_as_add_messages_does(memory):
    block = VMemMemoryBlock(index=memory, session_id=7)
    assert block.session_id == "7"


@pytest.mark.parametrize("call, item", [
    (lambda m, bad: m.add_round(user="look", images=[{"image_id": "P", "path": bad}], round_key="K1"), "round K1 image P"),
    (lambda m, bad: m.add_round(user="look", images=[{"image_id": "P", "url": "file://" + bad}], round_key="K1"), "round K1 image P"),
    (lambda m, bad: m.as_retriever().retrieve(VMemQueryBundle("which photo is this?", image_path=bad)), "query image"),
], ids=["round_path", "round_file_url", "query_image"])
def test_an_image_path_with_a_lone_surrogate_is_refused_by_name(memory, tmp_path, call, item):
    """No file name decodes to a lone surrogate such as \\ud800: every OS call on it raised a bare UnicodeEncodeError."""
    err = rejected(memory, lambda: call(memory, f"{tmp_path}/photo\ud800.png"), item=item)
    assert "lone surrogate" in err.problem


def test_an_image_file_whose_name_is_not_utf8_is_still_read(memory, photos, tmp_path):
    """A name of other bytes than UTF-8 decodes to escaped surrogates (\\udce9), and is a file like any other."""
    name = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.png")
    Path(name).write_bytes(Path(photos["coffee"]).read_bytes())
    node = memory.add_round(user="look", images=[{"image_id": "P", "path": name}], round_key="K1")
    assert node.metadata[schema.IMAGE_IDS] == ["P"]


def test_a_pathlib_path_attaches_an_image_wherever_a_path_string_does(memory, photos, scripted_llm):
    """The retriever took a ``Path`` as the query image; the query and chat engines failed on it with a TypeError."""
    photo = Path(photos["coffee"])
    assert isinstance(photo, Path)
    query = VMemQueryBundle("Which photo is this?", image_path=photo)
    found = [n.node.node_id for n in memory.as_retriever().retrieve(query)]
    assert found == [n.node.node_id for n in memory.as_retriever().retrieve(VMemQueryBundle(query.query_str, image_path=str(photo)))]
    llm = scripted_llm(default="Your espresso.")
    assert str(memory.as_query_engine(llm=llm, delivery="pixels").query(query)) == "Your espresso."
    assert "[attached image: the user's ATTACHED picture]" in llm.prompts[-1]
    assert str(memory.as_chat_engine(llm=llm, delivery="text").chat("Which photo is this?", image_path=photo)) == "Your espresso."
    assert len(memory) == 3 and len(memory.rounds()[-1].round.metadata[schema.IMAGE_IDS]) == 1


@pytest.mark.parametrize("call, item", [
    (lambda m: m.as_retriever().retrieve(VMemQueryBundle("What is this?", image_path=123)), "query image"),
    (lambda m: m.as_query_engine(llm=MockLLM(), delivery="text").query(VMemQueryBundle("What is this?", image_path=123)), "query image"),
    (lambda m: m.as_chat_engine(llm=MockLLM(), delivery="text").chat("What is this?", image_path=123), "image_path"),
], ids=["retriever", "query_engine", "chat_engine"])
def test_an_attached_image_that_is_neither_a_path_nor_a_url_is_refused_by_type(memory, call, item):
    """123 was read as the missing file "123", or failed with a TypeError."""
    err = rejected(memory, lambda: call(memory), item=item)
    assert "got int" in err.problem


@pytest.mark.parametrize("call", [
    lambda m, arr: m.add_round(user="x", images=arr, round_key="N1"),
    lambda m, arr: m.add_rounds([{"user": "x", "images": arr, "round_key": "N1"}]),
    lambda m, arr: m.add_round(user="x", audio=arr, round_key="N1"),
], ids=["add_round", "add_rounds", "audio"])
def test_an_array_for_a_list_is_refused_as_not_a_list(memory, call):
    """A numpy array (a DataFrame column's ``.values``) escaped as numpy's ambiguous-truth ValueError."""
    np = pytest.importorskip("numpy")
    err = rejected(memory, lambda: call(memory, np.array([{"caption": "a red bike"}, {"caption": "a blue car"}])), item="round N1")
    assert "must be a list" in err.problem


@pytest.mark.parametrize("call, item", [
    (lambda m, photo: m.add_messages([user(blocks=[TextBlock(text="x"), ImageBlock(path=photo)], additional_kwargs={"image_captions": [42]}),
                                      assistant("ok")]), "message 1 image 1"),
    (lambda m, photo: m.as_chat_engine(llm=MockLLM(), delivery="text").chat("x", image_path=photo, image_caption=42), "message 1 image 1"),
], ids=["add_messages", "chat_engine"])
def test_a_caption_that_is_not_text_is_refused_by_messages_as_by_add_round(memory, photos, call, item):
    """``add_round`` refused ``caption=42``; ``add_messages`` stored it as the caption "42"."""
    err = rejected(memory, lambda: call(memory, str(photos["camera"])), item=item)
    assert "'caption' must be a string, got int" in err.problem


@pytest.mark.parametrize("call, item, words", [
    (lambda m: m.as_retriever(router="x"), "router", "must be a ModalityRouter"),
    (lambda m: m.as_query_engine(llm=MockLLM(), delivery="bogus"), "delivery", "must be one of text, pixels, got 'bogus'"),
    (lambda m: m.as_chat_engine(llm=MockLLM(), delivery="bogus"), "delivery", "must be one of text, pixels"),
], ids=["router", "query_engine_delivery", "chat_engine_delivery"])
def test_an_engine_option_of_the_wrong_kind_is_refused_by_name_when_the_engine_is_made(memory, call, item, words):
    """``router='x'`` was taken and failed each query with an AttributeError; ``delivery='bogus'``
    failed with a bare ValueError naming no option."""
    err = rejected(memory, lambda: call(memory), item=item)
    assert words in err.problem


class BytesPath(os.PathLike):
    """A path object that gives bytes, which ``Path`` refuses with a bare TypeError."""

    def __fspath__(self) -> bytes:
        return b"m.zip"


@pytest.mark.parametrize("call, item, words", [
    (lambda m, tmp: m.as_chat_engine(llm=MockLLM(), delivery="text").chat(123), "message", "must be text or a ChatMessage, got int"),
    (lambda m, tmp: m.rounds(offset=True), "page", "offset must be >= 0"),
    (lambda m, tmp: m.rounds(limit=True), "page", "limit >= 1"),
    (lambda m, tmp: m.export_archive(tmp), "archive {tmp}", "is a directory"),
    (lambda m, tmp: m.export_archive(tmp / "nowhere" / "m.zip"), "archive {tmp}/nowhere/m.zip", "there is no folder"),
    (lambda m, tmp: m.export_archive(5), "archive", "the path must be a str or os.PathLike, got int"),
    (lambda m, tmp: VMemIndex.from_archive(None, path=tmp / "other"), "archive", "must be a str or os.PathLike, got NoneType"),
    (lambda m, tmp: m.export_archive(BytesPath()), "archive", "must be a str or os.PathLike, got BytesPath"),
], ids=["chat_number", "offset_bool", "limit_bool", "export_to_a_folder", "export_into_a_missing_folder", "export_to_a_number",
        "import_from_none", "export_to_a_bytes_path"])
def test_a_turn_page_or_archive_of_the_wrong_kind_is_refused_by_name(memory, tmp_path, call, item, words):
    """``chat(123)`` said the query was empty, ``rounds(offset=True)`` read True as page 1, an
    export to a folder failed with a bare IsADirectoryError, and an archive path of another type
    (``export_archive(5)``) with a bare TypeError."""
    err = rejected(memory, lambda: call(memory, tmp_path), item=item.format(tmp=tmp_path))
    assert words in err.problem


# -- models of the wrong kind --------------------------------------------------------------------


LLM_ENTRY_POINTS = {
    "as_retriever": lambda index, llm: index.as_retriever(llm=llm),
    "as_query_engine": lambda index, llm: index.as_query_engine(llm=llm),
    "as_chat_engine": lambda index, llm: index.as_chat_engine(llm=llm),
    "VMemRetriever": lambda index, llm: __import__("llama_index_vmem").VMemRetriever(index, llm=llm),
    "HypoCaptionTransform": lambda index, llm: __import__("llama_index_vmem.anchors").anchors.HypoCaptionTransform(llm),
}


@pytest.mark.parametrize("entry", sorted(LLM_ENTRY_POINTS))
def test_an_llm_of_the_wrong_kind_is_refused_where_it_is_given(memory, entry):
    """Before, a string or another object was taken and failed at the first question needing an
    LLM (the first text->image one, for a retriever) with an ``AttributeError``. A string is read
    as LlamaIndex reads one (``resolve_llm``), so a name it does not know fails as stock fails."""
    assert rejected(memory, lambda: LLM_ENTRY_POINTS[entry](memory, 3), item="llm").problem == "must be a LlamaIndex LLM, got int"
    with pytest.raises(ValueError, match="llm must start with str 'local'"):
        LLM_ENTRY_POINTS[entry](memory, "gpt-4o")
    assert len(memory) == 2


@pytest.mark.parametrize("item, given, words", [
    ("llm", 3, "must be a LlamaIndex LLM, got int"),
    ("embed_model", 3, "must be a LlamaIndex BaseEmbedding, got int"),
    ("image_encoder", "siglip", "must be a LlamaIndex MultiModalEmbedding, got str"),
    ("embed_model", __import__("numpy").zeros(3), "must be a LlamaIndex BaseEmbedding, got ndarray"),  # == "default" raises
    ("llm", __import__("numpy").zeros(3), "must be a LlamaIndex LLM, got ndarray"),
])
def test_a_model_of_the_wrong_kind_opens_no_memory(tmp_path, item, given, words):
    with pytest.raises(VMemInputError, match=f"^{item}: {words}$"):
        VMemIndex.from_defaults(path=tmp_path / "m", **{item: given})
    assert not (tmp_path / "m" / "qdrant").exists()


@pytest.mark.parametrize("attached, words", [
    ("missing.png", "image file not found: missing.png"),
    (".", "is not a regular file"),
], ids=["missing", "a_folder"])
def test_the_chat_engine_refuses_an_unreadable_photo_in_its_own_words(memory, attached, words):
    """A missing photo was refused in pydantic's words (``1 validation error for ImageBlock ...
    path_not_file``), where the retriever says it plainly."""
    chat = memory.as_chat_engine(llm=MockLLM(), delivery="text")
    err = rejected(memory, lambda: chat.chat("What is this?", image_path=attached), item="image_path")
    assert words in err.problem and "validation error" not in str(err) and "pydantic" not in str(err)
    assert chat.chat_history == []


@pytest.mark.parametrize("given, item", [
    ([ChatMessage(role=MessageRole.USER, content="hi")], "round 1"),
    ([COFFEE_ROUND, {"role": "user", "content": "hi"}], "round 2"),
], ids=["ChatMessage", "message_dict"])
def test_add_rounds_given_chat_messages_points_to_add_messages(memory, given, item):
    err = rejected(memory, lambda: memory.add_rounds(given), item=item)
    assert "is a chat message" in err.problem and "add_messages" in err.problem


def test_add_round_inputs_given_chat_messages_points_to_add_messages(memory):
    err = rejected(memory, lambda: memory.add_round_inputs([ChatMessage(role=MessageRole.USER, content="hi")]), item="rounds")
    assert err.problem.endswith("chat messages go to add_messages")


def test_add_messages_given_a_message_dict_says_how_to_build_one(memory):
    err = rejected(memory, lambda: memory.add_messages([{"role": "user", "content": "hi"}]), item="message 1")
    assert "ChatMessage(role=..., content=...)" in err.problem


@pytest.mark.parametrize("call, takes", [
    (lambda m: m.add_round(user="x", image="a.png"), "user, assistant, images, session_id, timestamp, round_key, audio, dedupe"),
    (lambda m: m.add_rounds([HORSE_ROUND], dedup=False), "rounds, dedupe, dayfirst, lenient"),
    (lambda m: m.add_messages([user("x")], session="S"), "messages, session_id, timestamp, dedupe, dayfirst, lenient"),
    (lambda m: asyncio.run(m.aadd_rounds([HORSE_ROUND], dedup=False)), "rounds, dedupe, dayfirst, lenient"),
    (lambda m: m.as_chat_engine(llm=MockLLM()).chat("hi", image="x.png"), "message, chat_history, image_path, image_caption"),
    (lambda m: m.as_chat_engine(llm=MockLLM()).stream_chat("hi", image="x.png"), "message, chat_history, image_path, image_caption"),
    (lambda m: asyncio.run(m.as_chat_engine(llm=MockLLM()).achat("hi", image="x.png")), "image_path, image_caption"),
    (lambda m: asyncio.run(m.as_chat_engine(llm=MockLLM()).astream_chat("hi", image="x.png")), "image_path, image_caption"),
    (lambda m: VMemIndex.from_defaults(memory="alice"), "path, url, memory_id, embed_model"),
    (lambda m: m.as_retriever(top_k=3), "similarity_top_k"),
    (lambda m: m.as_query_engine(llm=MockLLM(), stream=True), "streaming"),
    (lambda m: m.as_chat_engine(llm=MockLLM(), session="S"), "session_id"),
    (lambda m: VMemConfig(top_k=3), "VMemConfig() got unexpected keyword argument(s) 'top_k'; it takes rrf_kappa, candidate_pool"),
    (lambda m: m.as_retriever().retrieve_with_plan("hi", top_k=3), "unknown VMemConfig fields: 'top_k'; it has rrf_kappa, candidate_pool"),
], ids=["add_round", "add_rounds", "add_messages", "aadd_rounds", "chat", "stream_chat", "achat", "astream_chat",
        "from_defaults", "as_retriever", "as_query_engine", "as_chat_engine", "VMemConfig", "config override"])
def test_an_unknown_keyword_lists_the_accepted_ones(memory, call, takes):
    before = snapshot(memory)
    with pytest.raises(TypeError) as caught:
        call(memory)
    assert takes in str(caught.value)
    assert snapshot(memory) == before
