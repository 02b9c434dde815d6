"""When the anchor LLM is down, slow or answers junk, retrieval goes on with the anchor written
without an LLM, warns once and says so in ``metadata["vmem"]``; ``strict_anchors=True`` raises.
An answer or chat call that fails still raises and stores nothing.

The LLM is the real ``llama-index-llms-openai`` client against an OpenAI-compatible HTTP server
on the loopback interface, which records what it was sent."""

from __future__ import annotations

import json
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List

import openai
import pytest
from llama_index.core.schema import ImageNode
from llama_index.llms.openai import OpenAI

from llama_index_vmem import EfficientNetImageEncoder, VMemConfig, VMemInputError, VMemQueryBundle
from llama_index_vmem.errors import VMemAnchorError, VMemAnchorWarning
from test_picture_words import _conversation as picture_words_conversation  # what a photo shows is only in the words around it

FRIENDS = "Which picture shown in the conversation is about friends?"
NAMED = "What did he call it?"


class ChatServer:
    """An OpenAI-compatible chat-completions endpoint: ``mode`` says how it answers the next request
    ("fail": HTTP 500; "hang": no answer until ``release``; "reply": ``content``; "junk json": a 200
    whose body is not a chat completion). ``received`` holds each request's JSON body."""

    def __init__(self) -> None:
        self.mode = "fail"
        self.content = ""
        self.received: List[Dict[str, Any]] = []
        self.released = threading.Event()
        self.url = ""

    def release(self) -> None:
        self.released.set()

    def texts(self, i: int = -1) -> str:
        """The text parts of request ``i``'s messages, joined."""
        parts = [m["content"] if isinstance(m["content"], str) else "\n".join(p.get("text", "") for p in m["content"])
                 for m in self.received[i]["messages"]]
        return "\n".join(parts)

    def body(self) -> bytes:
        if self.mode == "fail":
            return json.dumps({"error": {"message": "the model is down", "type": "server_error"}}).encode()
        if self.mode == "junk json":
            return b'{"unexpected": true}'
        if self.mode == "hang":
            self.released.wait()
        return json.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": self.content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }).encode()


@pytest.fixture
def server() -> Iterator[ChatServer]:
    state = ChatServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            state.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = state.body()
            self.send_response(500 if state.mode == "fail" else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()  # polled often: shutdown is quick
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield state
    finally:
        state.release()
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def llm(server: ChatServer) -> OpenAI:
    return OpenAI(model="gpt-4o-mini", api_base=server.url, api_key="test", max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def efficientnet():
    return EfficientNetImageEncoder()


def _pictures(photos) -> List[Dict[str, Any]]:
    """A question for a picture: 'friends' is in no caption."""
    def shared(key, user, image_id, photo, caption):
        return {"round_key": key, "session_id": "D1", "user": user, "assistant": "Nice.",
                "images": [{"image_id": image_id, "path": str(photos[photo]), "caption": caption}]}
    return [
        {"round_key": "D1:1", "session_id": "D1", "user": "I moved to Lisbon in May.", "assistant": "Exciting!"},
        shared("D1:2", "Last night was so much fun.", "IMG_1", "astronaut", "Four people laughing together around a campfire at night"),
        shared("D1:3", "Dinner tonight.", "IMG_2", "coffee", "A bowl of ramen with egg and scallions on a wooden table"),
        shared("D1:4", "View from the office.", "IMG_3", "rocket", "A city skyline of glass towers at sunset"),
    ]


def _found(nodes) -> List[tuple]:
    """What a retrieval returned, in order: each node's id and score."""
    return [(n.node.node_id, n.score) for n in nodes]


def _explained(nodes) -> Dict[str, Any]:
    return nodes[0].node.metadata["vmem"]


def _retrieve_warned(retriever, query) -> tuple:
    """The result and the ``VMemAnchorWarning``s it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = retriever.retrieve_with_plan(query)
    return result, [w for w in caught if issubclass(w.category, VMemAnchorWarning)]


def test_a_question_for_a_picture_is_answered_from_memory_while_the_llm_answers_500(make_index, photos, server, llm):
    index = make_index()
    index.add_rounds(_pictures(photos))
    offline = index.as_retriever().retrieve(FRIENDS)
    retriever = index.as_retriever(llm=llm)

    result, warned = _retrieve_warned(retriever, VMemQueryBundle(FRIENDS))
    assert f"Question: {FRIENDS}" in server.texts(0), "the hypothetical-caption prompt was sent"
    assert len(server.received) == 1, "no retries"
    assert _found(result.nodes) == _found(offline), "the same rounds, in the same order, as with no LLM"
    hypo = result.anchors[next(a for a in result.anchors if a.value == "hypo_caption")]
    assert hypo.text == FRIENDS and hypo.source.startswith("raw query (the LLM failed: InternalServerError: Error code: 500")
    explained = _explained(result.nodes)
    assert explained["anchors"]["hypo_caption"]["source"] == hypo.source
    assert explained["llm_fallback"] == {"hypo_caption": hypo.llm_fallback} == result.llm_fallback
    assert "the model is down" in hypo.llm_fallback
    assert len(warned) == 1 and str(warned[0].message).startswith(f"anchor hypo_caption: {hypo.llm_fallback}. Retrieval goes on")

    again, warned_again = _retrieve_warned(retriever, FRIENDS)
    assert len(server.received) == 2, "a failure is not cached: the next question asks the LLM again"
    assert warned_again == [] and _explained(again.nodes)["llm_fallback"] == explained["llm_fallback"], "warned once per retriever"

    server.mode, server.content = "reply", "Four friends laughing together around a campfire at night"
    back = retriever.retrieve_with_plan(FRIENDS)
    assert _explained(back.nodes)["anchors"]["hypo_caption"] == {"text": server.content, "source": "llm"}
    assert _explained(back.nodes)["llm_fallback"] is None and back.nodes[0].node.metadata["round_key"] == "D1:2"


def test_a_photo_asked_about_borrows_the_stored_pictures_words_while_the_vision_llm_answers_500(
        open_memory, photos, efficientnet, server, llm):
    index = open_memory(image_encoder=efficientnet)
    index.add_rounds(picture_words_conversation(photos))
    question = VMemQueryBundle(NAMED, image_path=str(photos["rocket"]))
    offline = index.as_retriever(k=2).retrieve(question)

    result, warned = _retrieve_warned(index.as_retriever(k=2, llm=llm), question)
    sent = server.received[0]["messages"][0]["content"]
    assert [p["type"] for p in sent] == ["image_url", "text"] and NAMED in sent[1]["text"], "the photo and the question were sent"
    assert _found(result.nodes) == _found(offline)
    enriched, without = _explained(result.nodes)["anchors"]["enriched"], _explained(offline)["anchors"]["enriched"]
    assert enriched["text"] == without["text"] and enriched["from"] == without["from"] == {"round": "D1:1", "image_id": "IMG_1"}
    assert enriched["source"] == without["source"].replace("(no LLM)", f"({result.llm_fallback['enriched']})")
    assert "the LLM failed: InternalServerError" in enriched["source"]
    assert sorted(n.node.metadata["round_key"] for n in result.nodes if not isinstance(n.node, ImageNode)) == ["D1:1", "D1:2"]
    assert len(warned) == 1


@pytest.mark.parametrize("mode, content, problem", [
    ("reply", " \n ", "the LLM's answer has no usable caption: ''"),
    ("junk json", "", "the LLM failed: "),
], ids=["blank", "not_a_chat_completion"])
def test_a_junk_caption_is_not_searched_with(make_index, photos, server, llm, mode, content, problem):
    index = make_index()
    index.add_rounds(_pictures(photos))
    server.mode, server.content = mode, content
    result, warned = _retrieve_warned(index.as_retriever(llm=llm), FRIENDS)
    assert _found(result.nodes) == _found(index.as_retriever().retrieve(FRIENDS))
    assert result.llm_fallback["hypo_caption"].startswith(problem) and len(warned) == 1
    assert _explained(result.nodes)["anchors"]["hypo_caption"]["source"] == f"raw query ({result.llm_fallback['hypo_caption']})"


@pytest.mark.parametrize("content", ["I'm sorry, I can't see the image.", '{"keywords": [7, null]}'], ids=["prose", "no_words"])
def test_a_vision_reply_with_no_keywords_falls_back_to_the_caption_keywords(make_index, photos, server, llm, content):
    index = make_index()
    index.add_rounds(picture_words_conversation(photos))
    server.mode, server.content = "reply", content
    question = VMemQueryBundle(NAMED, image_path=str(photos["rocket"]), image_caption="a model rocket")
    result, _ = _retrieve_warned(index.as_retriever(llm=llm), question)
    enriched = _explained(result.nodes)["anchors"]["enriched"]
    assert enriched["text"] == f"{NAMED} model rocket"
    assert enriched["source"] == f"raw query + attached image caption keywords (the LLM's answer has no usable keywords: {content!r:.80})"


def test_an_llm_that_hangs_is_given_up_on_after_anchor_timeout_and_its_late_answer_is_kept(make_index, photos, server, llm):
    index = make_index()
    index.add_rounds(_pictures(photos))
    server.mode, server.content = "hang", "Four friends laughing together around a campfire at night"
    retriever = index.as_retriever(llm=llm, anchor_timeout=0.5)
    result, warned = _retrieve_warned(retriever, FRIENDS)
    assert result.llm_fallback == {"hypo_caption": "the LLM gave no answer within 0.5 s"} and len(warned) == 1
    assert _found(result.nodes) == _found(index.as_retriever().retrieve(FRIENDS))

    server.release()
    for worker in [t for t in threading.enumerate() if t.name == "vmem-hypo_caption-anchor"]:
        worker.join(10)
    late = retriever.retrieve_with_plan(FRIENDS)
    assert late.llm_fallback == {} and _explained(late.nodes)["anchors"]["hypo_caption"]["source"] == "llm"
    assert len(server.received) == 1, "the late answer was cached"


def test_strict_anchors_raise_naming_the_anchor_with_the_clients_error_as_cause(make_index, photos, server, llm):
    index = make_index()
    index.add_rounds(_pictures(photos))
    with warnings.catch_warnings():
        warnings.simplefilter("error", VMemAnchorWarning)
        with pytest.raises(VMemAnchorError, match=r"^anchor hypo_caption: the LLM failed: InternalServerError") as raised:
            index.as_retriever(llm=llm, strict_anchors=True).retrieve(FRIENDS)
        assert raised.value.anchor == "hypo_caption" and isinstance(raised.value.__cause__, openai.InternalServerError)
        with pytest.raises(VMemAnchorError, match="^anchor hypo_caption: the LLM gave no answer within 0.5 s"):
            server.mode = "hang"
            index.as_retriever(llm=llm).retrieve_with_plan(FRIENDS, strict_anchors=True, anchor_timeout=0.5)
    assert len(index) == 4


def test_a_failed_answer_or_chat_still_raises_and_stores_nothing(make_index, photos, server, llm):
    index = make_index()
    index.add_rounds(_pictures(photos))
    with pytest.warns(VMemAnchorWarning):  # the anchor falls back; the answer cannot
        with pytest.raises(openai.InternalServerError):
            index.as_query_engine(llm=llm).query(FRIENDS)
    assert FRIENDS in server.texts(-1) and "campfire" in server.texts(-1), "the answer prompt, with the memory, was sent"
    chat = index.as_chat_engine(llm=llm, session_id="C1")
    with pytest.raises(openai.InternalServerError):
        chat.chat("My sister Ingrid lives in Bergen.")
    assert "My sister Ingrid lives in Bergen." in server.texts(-1)
    assert len(index) == 4 and chat.chat_history == []


def test_anchor_timeout_must_be_a_positive_number_of_seconds():
    with pytest.raises(VMemInputError, match=r"^config anchor_timeout: must be a number of at least 0.1, got 0"):
        VMemConfig(anchor_timeout=0)
    with pytest.raises(VMemInputError, match="^config strict_anchors: must be True or False"):
        VMemConfig(strict_anchors="yes")
