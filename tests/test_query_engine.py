"""What reaches the answering model: the paper's prompts, chosen by route, with the image note."""

import asyncio
import re

import pytest
from llama_index.core.base.llms.types import ImageBlock, MessageRole, TextBlock
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import ImageNode
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_vmem import VMemInputError, VMemQueryBundle
from llama_index_vmem.delivery import block_groups, content_tokens
from llama_index_vmem.prompts import ANSWER_PROMPT
from llama_index_vmem.query_engine import REPLY_TOKENS


def _memory(make_index, photos):
    index = make_index()
    index.add_rounds([
        {"round_key": "D1:1", "session_id": "D1", "timestamp": "2024-06-17", "user": "My cat is called Mochi.", "assistant": "Cute."},
        {"round_key": "D1:2", "session_id": "D1", "timestamp": "2024-06-17", "user": "Here she is.", "assistant": "A Bengal!",
         "images": [{"image_id": "D1:IMG_001", "path": str(photos["chelsea"]), "caption": "a tabby cat lying down"}]},
        {"round_key": "D2:1", "session_id": "D2", "timestamp": "2024-07-01", "user": "I moved to Lisbon.", "assistant": "Lovely city."},
    ])
    return index


def test_answer_prompt_is_verbatim_and_filled_with_time_ordered_blocks(make_index, photos, scripted_llm):
    llm = scripted_llm(default="Mochi")
    engine = _memory(make_index, photos).as_query_engine(llm=llm)
    response = engine.query("What is my cat called?")
    assert str(response) == "Mochi"
    sent = llm.prompts[-1]
    assert sent.startswith("You are answering a question using a person’s conversation history.")
    assert "- If the answer is genuinely not in the context, reply exactly: Information not found" in sent
    assert "QUESTION: What is my cat called?" in sent
    assert "[seen 2024-06-17, session D1, rounds D1:1 to D1:2]" in sent
    assert sent.index("My cat is called Mochi.") < sent.index("Here she is.")
    assert "[Image D1:IMG_001] a tabby cat lying down" in sent
    assert response.source_nodes and response.metadata["case"] == "text->text"


class _KeepOnly(BaseNodePostprocessor):
    """A user's postprocessor: keeps the blocks that mention ``word``, and says what it was given."""

    word: str
    seen: list = []

    def _postprocess_nodes(self, nodes, query_bundle=None):
        self.seen.append((query_bundle.query_str, [n.node.get_content() for n in nodes]))
        return [n for n in nodes if self.word in n.node.get_content()]


@pytest.mark.parametrize("engine", ["query", "chat"])
def test_node_postprocessors_get_the_neighbour_blocks_and_decide_what_is_delivered(make_index, photos, scripted_llm, engine):
    llm = scripted_llm(default="Lisbon")
    keep = _KeepOnly(word="Lisbon", seen=[])
    index = _memory(make_index, photos)
    if engine == "query":
        response = index.as_query_engine(llm=llm, delivery="text", node_postprocessors=[keep]).query("Where do I live and what is my cat called?")
        assert [n.node.get_content() for n in response.source_nodes] == [c for c in keep.seen[0][1] if "Lisbon" in c]
        assert [n.node.get_content() for n in index.as_query_engine(llm=llm, node_postprocessors=[keep]).retrieve(
            VMemQueryBundle("Where do I live and what is my cat called?"))] == [c for c in keep.seen[0][1] if "Lisbon" in c]
    else:
        index.as_chat_engine(llm=llm, delivery="text", node_postprocessors=[keep]).chat("Where do I live and what is my cat called?")
    question, given = keep.seen[0]
    assert question == "Where do I live and what is my cat called?"
    assert any("Mochi" in c for c in given) and any("Lisbon" in c for c in given), "it got every block"
    assert any(c.startswith("[seen ") for c in given), "blocks, not bare rounds"
    sent = llm.prompts[0]
    assert "I moved to Lisbon." in sent and "Mochi" not in sent


class _Reverse(BaseNodePostprocessor):
    """A reranker's stand-in: puts the blocks it gets in the opposite order."""

    seen: list = []

    def _postprocess_nodes(self, nodes, query_bundle=None):
        self.seen.append(nodes)
        return list(reversed(nodes))


def test_node_postprocessors_get_the_blocks_alone_and_each_blocks_pictures_follow_it(make_index, photos, scripted_llm):
    index = _memory(make_index, photos)
    index.add_round(user="My new bike.", images=[{"image_id": "D2:IMG_001", "path": str(photos["rocket"]), "caption": "a red bike"}],
                    session_id="D2", round_key="D2:2")
    query = VMemQueryBundle("Show me the photo of my cat")
    reverse = _Reverse(seen=[])
    plain = index.as_query_engine(llm=scripted_llm(default="ok"), delivery="pixels").retrieve(query)
    got = index.as_query_engine(llm=scripted_llm(default="ok"), delivery="pixels", node_postprocessors=[reverse]).retrieve(query)

    def layout(nodes):
        return [(g[0].node.get_content(), [i.node.metadata["image_id"] for i in g[1:]]) for g in block_groups(nodes)]

    assert any(isinstance(n.node, ImageNode) for n in plain) and len(layout(plain)) > 1
    assert not any(isinstance(n.node, ImageNode) for n in reverse.seen[0])
    assert layout(got) == layout(plain)[::-1]


def _in_session(session):
    return MetadataFilters(filters=[MetadataFilter(key="session_id", value=session)])


@pytest.mark.parametrize("ask", ["text", "image"])
def test_a_session_filter_keeps_retrieval_to_that_session(make_index, photos, scripted_llm, ask):
    index = _memory(make_index, photos)
    query = VMemQueryBundle("Where do I live and what is my cat called?") if ask == "text" else \
        VMemQueryBundle("Who is this?", image_path=str(photos["chelsea"]))
    sessions = lambda nodes: {n.node.metadata["session_id"] for n in nodes}
    assert "D1" in sessions(index.as_retriever().retrieve(query)), "unfiltered, the cat's session answers"
    assert sessions(index.as_retriever(filters=_in_session("D2")).retrieve(query)) == {"D2"}
    llm = scripted_llm(default="Lisbon")
    response = index.as_query_engine(llm=llm, delivery="text", filters=_in_session("D2")).query(query)
    assert sessions(response.source_nodes) == {"D2"} and "Mochi" not in llm.prompts[-1]


def test_a_filter_of_several_sessions_keeps_retrieval_to_them(make_index, photos):
    """Several sessions, as a stock user writes them (``in`` a list, or ``==`` each joined by OR), were
    refused; an empty filter list, which stock retrievers take as no filter, was refused too."""
    index = _memory(make_index, photos)
    index.add_round(user="My cat Mochi visited the vet in Porto.", assistant="Hope she is well.", session_id="D3")
    question = "Where does my cat Mochi live?"
    sessions = lambda retriever: {n.node.metadata["session_id"] for n in retriever.retrieve(question)}
    assert sessions(index.as_retriever()) == {"D1", "D2", "D3"}
    either = [MetadataFilters(filters=[MetadataFilter(key="session_id", value=["D2", "D3"], operator=FilterOperator.IN)]),
              MetadataFilters(filters=[MetadataFilter(key="session_id", value="D2"), MetadataFilter(key="session_id", value="D3")],
                              condition=FilterCondition.OR)]
    for filters in either:
        assert sessions(index.as_retriever(filters=filters)) == {"D2", "D3"}
    assert sessions(index.as_retriever(filters=MetadataFilters(filters=[]))) == {"D1", "D2", "D3"}


def test_a_filter_leaving_sessions_out_keeps_every_other_round_and_those_in_no_session(make_index, photos):
    """``!=`` and ``not in`` were refused. They keep every round outside the sessions named, a round in
    no session too, as LlamaIndex's own vector store reads them; with ``==`` or ``in``, both must hold."""
    index = _memory(make_index, photos)
    index.add_round(user="My cat Mochi visited the vet in Porto.", assistant="Hope she is well.", session_id="D3")
    index.add_round(user="Mochi chased a moth.", assistant="Ha.")
    question = "Where does my cat Mochi live?"
    sessions = lambda *leaves: {n.node.metadata.get("session_id") for n in
                                index.as_retriever(filters=MetadataFilters(filters=list(leaves))).retrieve(question)}
    assert sessions() == {"D1", "D2", "D3", None}
    assert sessions(MetadataFilter(key="session_id", value="D1", operator=FilterOperator.NE)) == {"D2", "D3", None}
    assert sessions(MetadataFilter(key="session_id", value=["D1", "D3"], operator=FilterOperator.NIN)) == {"D2", None}
    assert sessions(MetadataFilter(key="session_id", value="D1", operator=FilterOperator.NE),
                    MetadataFilter(key="session_id", value="D2", operator=FilterOperator.NE)) == {"D3", None}
    assert sessions(MetadataFilter(key="session_id", value=["D1", "D2"], operator=FilterOperator.IN),
                    MetadataFilter(key="session_id", value="D1", operator=FilterOperator.NE)) == {"D2"}
    picture = index.as_retriever(filters=MetadataFilters(filters=[
        MetadataFilter(key="session_id", value="D2", operator=FilterOperator.NE)])).retrieve_with_plan("Show me the photo of my cat.")
    assert picture.plan.case.value == "text->image" and not picture.filter_fallback
    assert "D2" not in {n.node.metadata.get("session_id") for n in picture.nodes}


def test_a_response_says_when_the_picture_filter_found_no_round(make_index, photos, scripted_llm):
    """A question for a picture keeps to rounds holding one or next to one; where none matches (a
    session without pictures), the ranking falls back to every round. Only ``retrieve_with_plan``
    said so; the response's metadata now does too."""
    index = _memory(make_index, photos)
    question = "Show me the photo of my flat in Lisbon."
    answers = {session: index.as_query_engine(llm=scripted_llm(default="ok"), filters=_in_session(session)).query(question)
               for session in ("D1", "D2")}
    assert {s: (a.metadata["case"], a.metadata["filter_fallback"]) for s, a in answers.items()} == {
        "D1": ("text->image", False), "D2": ("text->image", True)}
    explained = {session: {n.node.metadata["vmem"]["filter_fallback"] for n in index.as_retriever(filters=_in_session(session)).retrieve(question)
                           if "vmem" in n.node.metadata} for session in ("D1", "D2")}
    assert explained == {"D1": {False}, "D2": {True}}, "a plain retrieve() sees it in each node's explanation"


def _timed(*bounds, session=None):
    leaves = [MetadataFilter(key="timestamp", value=value, operator=op) for op, value in bounds]
    return MetadataFilters(filters=leaves + ([MetadataFilter(key="session_id", value=session)] if session else []))


def _dated_memory(make_index):
    index = make_index()
    index.add_rounds([
        {"round_key": "A:1", "session_id": "A", "timestamp": "2024-05-30 18:00", "user": "My cat Mochi hates the vet.", "assistant": "Poor Mochi."},
        {"round_key": "A:2", "session_id": "A", "timestamp": "2024-06-01 09:00", "user": "Mochi caught a mouse today.", "assistant": "Wow."},
        {"round_key": "B:1", "session_id": "B", "timestamp": "2024-06-15", "user": "Mochi slept on my laptop.", "assistant": "Cats."},
        {"round_key": "B:2", "session_id": "B", "timestamp": "1:56 pm on 2 July, 2024", "user": "Mochi turned three.", "assistant": "Happy birthday!"},
        {"round_key": "B:3", "session_id": "B", "user": "Mochi likes tuna.", "assistant": "Noted."},
    ])
    return index


def test_a_time_filter_keeps_retrieval_to_rounds_seen_in_its_range(make_index):
    """``timestamp`` filters were refused; they now keep retrieval to the rounds seen in the range, read as
    ``list_rounds(since=, until=)`` reads one (any written date; a round without one is in no range)."""
    index = _dated_memory(make_index)
    question = "What did my cat Mochi do?"
    keys = lambda filters: sorted(n.node.metadata["round_key"] for n in index.as_retriever(filters=filters).retrieve(question))
    assert keys(None) == ["A:1", "A:2", "B:1", "B:2", "B:3"]
    june = [(FilterOperator.GTE, "2024-06-01"), (FilterOperator.LT, "2024-07-01")]
    assert keys(_timed(*june)) == ["A:2", "B:1"]
    assert keys(_timed(*june, session="B")) == ["B:1"]
    assert keys(_timed((FilterOperator.GT, "2024-06-01 09:00"))) == ["B:1", "B:2"], "GT leaves the bound out"
    assert keys(_timed((FilterOperator.LTE, "2024-06-01 09:00"))) == ["A:1", "A:2"], "LTE keeps it"
    assert keys(_timed((FilterOperator.GTE, "July 2024"))) == ["B:2"]
    assert keys(_timed((FilterOperator.LTE, "2024-06-01"))) == ["A:1", "A:2"], "a date is its whole day: <= keeps 09:00 on it"
    assert keys(_timed((FilterOperator.GT, "2024-06-01"))) == ["B:1", "B:2"], "and > starts after it"
    assert keys(_timed((FilterOperator.GT, "June 2024"))) == ["B:2"] and keys(_timed((FilterOperator.LTE, "May 2024"))) == ["A:1"]
    assert keys(_timed((FilterOperator.GTE, "2024-06-01"), (FilterOperator.GTE, "2024-06-10"))) == ["B:1", "B:2"], "bounds are ANDed"
    assert keys(_timed((FilterOperator.GTE, "2025-01-01"))) == []
    assert keys(_timed((FilterOperator.LTE, "9999-12-31"))) == ["A:1", "A:2", "B:1", "B:2"], "to the calendar's end: every dated round"
    assert keys(_timed((FilterOperator.GT, "9999"))) == [], "past the calendar's end: none"
    with pytest.raises(VMemInputError, match="^query image: "):
        index.as_retriever(filters=_timed((FilterOperator.GTE, "2025-01-01"))).retrieve(
            VMemQueryBundle("Is this Mochi?", image_path="/nonexistent/mochi.png"))
    index.add_round(round_key="B:4", session_id="B", timestamp="2024-06-20", user="Mochi met the neighbour's dog.", assistant="Oh no.")
    assert keys(_timed(*june)) == ["A:2", "B:1", "B:4"], "a round added after the retriever was made is in its range"


@pytest.mark.parametrize("value, end", [
    ("2024", "2025-01-01"), ("June 2024", "2024-07-01"), ("2024-06-30", "2024-07-01"), ("20240617", "2024-06-18"),
    ("1:56 pm on 8 May, 2023", "2023-05-08 13:57"), ("2024-06-17 10:15", "2024-06-17 10:16"),
    ("2024-06-17 10:15:30", "2024-06-17 10:15:31"), ("2024-06-17T10:15:30+02:00", "2024-06-17 08:15:31"),
    ("2024-06-17T10:15:30.25", "2024-06-17 10:15:30.250001"), ("17.06.2024 10:15:30", "2024-06-17 10:15:31"),
])
def test_a_time_bound_ends_after_the_period_its_value_names(value, end):
    """``<=`` and ``>`` end after the period a value names. Seconds were read as an instant (dateutil
    sets the microseconds with them), so ``<= "10:15:30"`` left out 10:15:30.25."""
    from datetime import datetime

    from llama_index_vmem.times import period_end

    assert period_end(value) == datetime.fromisoformat(end)


def test_a_time_filter_holds_for_picture_questions_and_answers_with_no_memory_outside_it(make_index, photos, scripted_llm):
    """The picture filter falls back to every round when none near a picture matches: it must fall back
    to every round in the time range, and a range holding no round asks the LLM with no memory at all."""
    index = _memory(make_index, photos)
    question = "Show me the photo of my flat in Lisbon."
    july = _timed((FilterOperator.GTE, "2024-07-01"))
    result = index.as_retriever(filters=july).retrieve_with_plan(question)
    assert result.plan.case.value == "text->image" and result.filter_fallback
    assert [r.node.metadata["round_key"] for r in result.nodes] == ["D2:1"]
    llm = scripted_llm(default="Information not found")
    response = index.as_query_engine(llm=llm, filters=_timed((FilterOperator.LT, "2024-01-01"))).query("What is my cat called?")
    assert response.source_nodes == [] and "Mochi" not in llm.prompts[-1] and "Lisbon" not in llm.prompts[-1]


def test_a_time_filter_keeps_the_pictures_a_round_borrows_in_its_range(make_index, photos):
    """A picture question returns, for a round without a picture, the pictures of the rounds next to
    it. With a time filter those came from outside the range (May's and July's for June's rounds)."""
    index = make_index()
    index.add_rounds([
        {"round_key": "S:1", "session_id": "S", "timestamp": "2024-05-31 20:00", "user": "Look at my cat Mochi!", "assistant": "Cute.",
         "images": [{"image_id": "IMG_MAY", "path": str(photos["chelsea"]), "caption": "a tabby cat lying down"}]},
        {"round_key": "S:2", "session_id": "S", "timestamp": "2024-06-01 09:00", "user": "Mochi the cat was sleeping all day.", "assistant": "Aww."},
        {"round_key": "S:3", "session_id": "S", "timestamp": "2024-06-10", "user": "I drank a coffee in Lisbon.", "assistant": "Nice."},
        {"round_key": "S:4", "session_id": "S", "timestamp": "2024-07-05", "user": "Here's my coffee and my cat.", "assistant": "Yum.",
         "images": [{"image_id": "IMG_JUL", "path": str(photos["coffee"]), "caption": "a cup of coffee"}]},
    ])
    june = index.as_retriever(filters=_timed((FilterOperator.GTE, "2024-06-01"), (FilterOperator.LT, "2024-07-01")))
    nodes = june.retrieve("Show me the photo of my cat")
    assert {n.node.metadata["round_key"] for n in nodes if not isinstance(n.node, ImageNode)} == {"S:2", "S:3"}
    assert [n.node.metadata["image_id"] for n in nodes if isinstance(n.node, ImageNode)] == []
    assert {n.node.metadata["image_id"] for n in index.as_retriever().retrieve("Show me the photo of my cat")
            if isinstance(n.node, ImageNode)} == {"IMG_MAY", "IMG_JUL"}


@pytest.mark.parametrize("filters", [
    MetadataFilters(filters=[MetadataFilter(key="user", value="Mochi")]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value=None, operator=FilterOperator.NE)]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value="D1"), MetadataFilter(key="session_id", value="D2")]),
    MetadataFilters(filters=[MetadataFilters(filters=[MetadataFilter(key="session_id", value="D1")])]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value="")]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value=None)]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value="D1")], condition=FilterCondition.NOT),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value=[], operator=FilterOperator.IN)]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value=["D1", ""], operator=FilterOperator.IN)]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value="D1", operator=FilterOperator.IN)]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value="D1", operator=FilterOperator.NIN)]),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value="D1"), MetadataFilter(key="session_id", value="D2",
                                                                                          operator=FilterOperator.NE)],
                    condition=FilterCondition.OR),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value="D1"), MetadataFilter(key="user", value="Mochi")],
                    condition=FilterCondition.OR),
    {"session_id": "D1"},
    _timed((FilterOperator.EQ, "2024-06-17")),
    _timed((FilterOperator.GTE, "not a date")),
    _timed((FilterOperator.GTE, 1718582400)),
    MetadataFilters(filters=[MetadataFilter(key="session_id", value="D1"), MetadataFilter(key="timestamp", value="2024-06-17",
                                                                                          operator=FilterOperator.GTE)],
                    condition=FilterCondition.OR),
], ids=["other_key", "not_equal_none", "two_and", "nested", "empty_session", "no_session", "negated", "in_none", "in_empty_id",
        "in_not_a_list", "not_in_not_a_list", "or_not_equal", "or_other_key", "dict", "time_equal", "time_unreadable", "time_number", "time_or"])
def test_a_filter_retrieval_cannot_apply_is_refused_by_name_not_ignored(make_index, photos, filters):
    index = _memory(make_index, photos)
    with pytest.raises(VMemInputError) as caught:
        index.as_retriever(filters=filters)
    assert caught.value.item in ("filters", "filters session_id", "filters timestamp")


@pytest.mark.parametrize("mode", ["query", "aquery"])
def test_tracing_sees_the_query_and_its_retrieval_as_with_a_stock_engine(make_index, photos, scripted_llm, mode):
    """Callback handlers (LlamaDebugHandler) get the QUERY and RETRIEVE events, instrumentation handlers
    (Langfuse, Arize, ...) the retrieval start and end, with the nodes retrieved."""
    from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    class Seen(BaseEventHandler):
        events: list = []

        def handle(self, event, **kwargs):
            self.events.append(event)

    seen, debug = Seen(), LlamaDebugHandler()
    get_dispatcher().add_event_handler(seen)
    try:
        engine = _memory(make_index, photos).as_query_engine(llm=scripted_llm(default="Mochi"),
                                                             callback_manager=CallbackManager([debug]))
        response = engine.query("What is my cat called?") if mode == "query" else asyncio.run(engine.aquery("What is my cat called?"))
    finally:
        get_dispatcher().event_handlers.remove(seen)
    [(start, end)] = debug.get_event_pairs(CBEventType.RETRIEVE)
    assert start.payload["query_str"] == "What is my cat called?" and end.payload["nodes"]
    assert debug.get_event_pairs(CBEventType.QUERY)[0][1].payload["response"] is response
    [ended] = [e for e in seen.events if e.class_name() == "RetrievalEndEvent"]
    assert [e.class_name() for e in seen.events].count("RetrievalStartEvent") == 1
    assert [n.node.node_id for n in ended.nodes] == [n.node.node_id for n in end.payload["nodes"]]


def _long_days(make_index):
    index = make_index()
    story = "We walked along the harbour, looked at the boats, talked about work, the weather and the old town. " * 16
    index.add_rounds([{"user": f"Day {i}: {story}" + (" My cat Mochi chased a laser pointer." if i == 7 else ""),
                       "assistant": "Sounds like a lovely day. " * 8, "session_id": f"D{i}"}
                      for i in range(20)])
    return index


def _window_llm(scripted_llm, window):
    from llama_index.core.llms import LLMMetadata

    class WindowLLM(scripted_llm):
        @property
        def metadata(self):
            return LLMMetadata(model_name="scripted", context_window=window, is_chat_model=True)

    return WindowLLM(default="It chased a laser pointer.")


def test_the_prompt_fits_the_models_window_leaving_out_the_least_relevant_blocks(make_index, scripted_llm):
    """Twelve long rounds (one per session: a block each) overflow a 4k window: whole blocks go, least relevant
    first, the best stays, and the question and instructions are never cut."""
    from llama_index_vmem.delivery import content_tokens
    from llama_index_vmem.query_engine import REPLY_TOKENS

    index = _long_days(make_index)
    small, large = _window_llm(scripted_llm, 4096), _window_llm(scripted_llm, 100_000)
    answer = index.as_query_engine(llm=small).query("What did my cat chase?")
    index.as_query_engine(llm=large).query("What did my cat chase?")
    [sent], [whole] = small.chats[-1], large.chats[-1]
    assert content_tokens(sent.blocks) <= 4096 - REPLY_TOKENS < content_tokens(whole.blocks)
    assert "My cat Mochi chased a laser pointer." in sent.content and "QUESTION: What did my cat chase?" in sent.content
    assert sent.content.count("[session ") < whole.content.count("[session ")
    assert len(answer.source_nodes) == sent.content.count("[session ")  # the sources are what was sent
    chat = index.as_chat_engine(llm=small, system_prompt="You are a kind assistant. " * 40)
    for question in ("What did my cat chase?", "And what else happened that day?"):
        chat.chat(question)
        assert sum(content_tokens(m.blocks) for m in small.chats[-1]) <= 4096 - REPLY_TOKENS
    assert small.chats[-1][0].content.startswith("You are a kind assistant.")


def test_a_window_with_no_room_for_memory_sends_none_and_names_no_source(make_index, scripted_llm, caplog):
    """Before, the best block was kept as the answer's source though not a line of it was sent, or
    only its header ``[session D7, round D7:1]`` was (the round's text being one long line)."""
    index = _long_days(make_index)
    sent_blocks = set()
    for window in range(400, 900, 50):
        tiny = _window_llm(scripted_llm, window)
        caplog.clear()
        with caplog.at_level("WARNING", logger="llama_index_vmem.query_engine"):
            answer = index.as_query_engine(llm=tiny).query("What did my cat chase?")
        [sent] = tiny.chats[-1]
        context = sent.content.split("QUESTION: What did my cat chase?")[0]
        headers = re.findall(r"^\[session [^\]]*\]$", context, re.MULTILINE)
        assert len(answer.source_nodes) == len(headers), window
        sent_blocks.add(len(headers))
        for header in headers:  # every block sent brings more than its header
            assert context.split(header, 1)[1].strip().split("\n")[0].startswith("User:"), window
        assert ("leaves no room for memory in scripted's" in caplog.text) == (not headers), window
    assert sent_blocks == {0, 1}, "windows from none to one block's worth"


def test_the_sources_are_the_blocks_sent_whether_cut_or_skipped_as_forgotten(make_index, photos, scripted_llm):
    """Pixels delivery skips a block forgotten since it was retrieved, so sent blocks are matched to
    their nodes by header, not by place: by place, the forgotten block was named a source and the
    last block sent was not."""
    from llama_index_vmem.postprocessor import BLOCK_ROUND_IDS

    cuts = 0
    for window in range(700, 1250, 120):
        index = make_index(memory_id=f"w{window}")
        index.add_rounds([{"user": f"Day {i}: my cat Mochi chased a laser pointer near the harbour boats.",
                           "assistant": "Nice.", "session_id": f"D{i}"} for i in range(12)])
        llm = _window_llm(scripted_llm, window)
        engine = index.as_query_engine(llm=llm, delivery="pixels")
        deliver = engine.deliverer.deliver

        def forget_first_then_deliver(nodes, query=None):
            first = next(n.node for n in nodes if not isinstance(n.node, ImageNode))
            index.forget([r.metadata["round_key"] for r in index.get_rounds(first.metadata[BLOCK_ROUND_IDS]).values()])
            return deliver(nodes, query)

        engine.deliverer.deliver = forget_first_then_deliver
        answer = engine.query(VMemQueryBundle("What did my cat chase?", image_path=str(photos["chelsea"])))
        [sent] = llm.chats[-1]
        text = "".join(b.text for b in sent.blocks if isinstance(b, TextBlock))
        headers = re.findall(r"^\[session [^\]]*\]$", text, re.MULTILINE)
        sources = [n.node.get_content().split("\n", 1)[0] for n in answer.source_nodes if not isinstance(n.node, ImageNode)]
        assert sources == headers, window
        cuts += len(headers) < 11
    assert cuts, "some window cuts the context"


def test_conflict_question_gets_the_conflict_prompt(make_index, photos, scripted_llm):
    llm = scripted_llm(default="No")
    _memory(make_index, photos).as_query_engine(llm=llm).query("Is there a contradiction about where I live?")
    assert llm.prompts[-1].startswith("You are checking a person’s conversation history for a conflict or contradiction.")
    assert "OUTPUT EXACTLY ONE WORD" in llm.prompts[-1]


def test_attached_image_note_names_the_visual_match(make_index, photos, scripted_llm):
    llm = scripted_llm({"You can SEE": '{"keywords": ["cat", "tabby"]}'}, default="It is Mochi")
    engine = _memory(make_index, photos).as_query_engine(llm=llm)
    engine.query(VMemQueryBundle("What is the name of this animal?", image_path=str(photos["chelsea"]), image_caption="a striped cat"))
    note = llm.prompts[-1].split("ANSWER:")[0]
    assert ("[ATTACHED IMAGE] The user’s attached image shows: a striped cat. It visually matches a conversation image: "
            "(D1:IMG_001 -- \"a tabby cat lying down\").") in llm.prompts[-1]
    assert "do NOT reply \"Information not found\"" in note


def test_prompts_are_exposed_and_replaceable(make_index, photos, scripted_llm):
    llm = scripted_llm(default="ok")
    engine = _memory(make_index, photos).as_query_engine(llm=llm)
    prompts = engine.get_prompts()
    assert {"answer_prompt", "conflict_prompt", "image_note_prompt", "image_note_matched_prompt",
            "hypo_caption:hypo_caption_prompt", "enriched_anchor:enriched_anchor_prompt"} <= set(prompts)
    assert prompts["answer_prompt"].get_template() == ANSWER_PROMPT.get_template()
    engine.update_prompts({"answer_prompt": PromptTemplate("CTX {context} Q {question}"),
                           "hypo_caption:hypo_caption_prompt": PromptTemplate("Describe the ONE image for: {q}")})
    engine.query("Where do I live?")
    assert llm.prompts[-1].startswith("CTX ") and llm.prompts[-1].endswith("Q Where do I live?")
    engine.query("Which photo shows my cat?")
    assert "Describe the ONE image for: Which photo shows my cat?" in llm.prompts


@pytest.mark.parametrize("key, prompt, words", [
    ("answer_prompt", PromptTemplate("Context: {context_str}\nQuery: {query_str}"), "must use {context}, {question}"),
    ("answer_prompt", PromptTemplate("{context}\nQ: {question}\nAgain: {context}"), "must use {context} once"),
    ("answer_prompt", PromptTemplate("{context}\nQ: {question}\nReply in {language}."), "uses {language}, which the engine does not fill"),
    ("answer_prompt", "{context}\nQ: {question}", "must be a PromptTemplate or ChatPromptTemplate, got str"),
    ("image_note_matched_prompt", PromptTemplate("{query_caption} matches {image_id} ({stored_caption})"), "uses {stored_caption}"),
    ("hypo_caption:hypo_caption_prompt", PromptTemplate("Caption the photo for: {question}"), "must use {q}"),
    ("enriched_anchor:enriched_anchor_prompt", PromptTemplate("List keywords."), "must use {q}"),
], ids=["stock_variable_names", "context_twice", "a_variable_never_filled", "a_plain_string", "note_variable_never_filled",
        "hypo_caption_without_q", "enriched_anchor_without_q"])
def test_a_prompt_the_engine_would_send_half_filled_is_refused(make_index, photos, scripted_llm, key, prompt, words):
    """Each would reach the model with a literal "{...}" or fail only when a question is asked."""
    engine = _memory(make_index, photos).as_query_engine(llm=scripted_llm(default="ok"))
    before = engine.get_prompts()[key].get_template()
    with pytest.raises(VMemInputError, match=re.escape(words)) as caught:
        engine.update_prompts({key: prompt})
    assert caught.value.item == f"prompt {key.split(':')[-1]}"
    assert engine.get_prompts()[key].get_template() == before, "the prompt in use stays"


def test_a_variable_of_the_users_own_is_accepted_once_given_by_partial_format(make_index, photos, scripted_llm):
    llm = scripted_llm(default="Mochi")
    engine = _memory(make_index, photos).as_query_engine(llm=llm, delivery="text")
    engine.update_prompts({"answer_prompt": PromptTemplate("{context}\nQ: {question}\nReply in {language}.").partial_format(language="French")})
    engine.query("What is my cat called?")
    assert llm.prompts[-1].endswith("Q: What is my cat called?\nReply in French.")


def _chat_prompt():
    from llama_index.core.prompts import ChatPromptTemplate

    return ChatPromptTemplate.from_messages([("system", "You are Ada. Answer in French."),
                                             ("user", "Context:\n{context}\n\nQuestion: {question}")])


@pytest.mark.parametrize("delivery", ["text", "pixels"])
def test_a_chat_prompt_template_is_sent_as_its_own_messages_with_the_context_where_it_names_it(make_index, photos, scripted_llm, delivery):
    """A system message stays a system message (flattened into one user message it would reach the
    model as user text prefixed "system:"), and the delivered pictures go in the message that holds {context}."""
    llm = scripted_llm(default="Mochi")
    engine = _memory(make_index, photos).as_query_engine(llm=llm, delivery=delivery, answer_prompt=_chat_prompt())
    response = engine.query("Show me the photo of my cat")
    system, user = llm.chats[-1]
    assert (system.role, system.content) == (MessageRole.SYSTEM, "You are Ada. Answer in French.")
    assert user.role == MessageRole.USER
    text = "".join(b.text for b in user.blocks if isinstance(b, TextBlock))
    assert text.startswith("Context:\n[seen 2024-06-17, session D1, rounds D1:1 to D1:2]")
    assert text.endswith("Question: Show me the photo of my cat")
    assert sum(isinstance(b, ImageBlock) for b in user.blocks) == (1 if delivery == "pixels" else 0)
    assert str(response) == "Mochi" and response.source_nodes


def test_a_selector_is_checked_template_by_template_and_sends_the_one_it_selects(make_index, photos, scripted_llm):
    """LlamaIndex's stock prompts are selectors: a chat template for chat models, text for the rest."""
    from llama_index.core.prompts import ChatPromptTemplate, SelectorPromptTemplate

    engine = _memory(make_index, photos).as_query_engine(llm=scripted_llm(default="Mochi"), delivery="text")
    always = lambda llm: True  # noqa: E731
    broken = SelectorPromptTemplate(default_template=PromptTemplate("{context}\nQ: {question}"),
                                    conditionals=[(always, PromptTemplate("Q: {question}"))])
    with pytest.raises(VMemInputError, match=re.escape("must use {context}")):
        engine.update_prompts({"answer_prompt": broken})
    chat = ChatPromptTemplate.from_messages([("system", "Answer in {language}."), ("user", "{context}\nQ: {question}")])
    engine.update_prompts({"answer_prompt": SelectorPromptTemplate(default_template=PromptTemplate("{context}\nQ: {question}"),
                                                                   conditionals=[(always, chat.partial_format(language="French"))])})
    engine.query("What is my cat called?")
    system, user = engine.llm.chats[-1]
    assert system.content == "Answer in French." and user.content.endswith("Q: What is my cat called?")


def test_a_chat_prompt_with_the_context_outside_a_user_message_is_refused(make_index, photos, scripted_llm):
    """Pixels delivery puts pictures where {context} is; chat APIs refuse them in a system message."""
    from llama_index.core.prompts import ChatPromptTemplate

    engine = _memory(make_index, photos).as_query_engine(llm=scripted_llm(default="ok"))
    for messages in ([("system", "Memory:\n{context}"), ("user", "{question}")], [("system", "Memory:\n{context}\nQ: {question}")]):
        with pytest.raises(VMemInputError, match="must put {context} in a user message, not a system one") as caught:
            engine.update_prompts({"conflict_prompt": ChatPromptTemplate.from_messages(messages)})
        assert caught.value.item == "prompt conflict_prompt"


def test_a_chat_prompt_templates_messages_count_against_the_window(make_index, scripted_llm):
    """The system message is sent, so it is counted: the context shrinks to leave it room, and the
    system message and the question are never cut."""
    from llama_index.core.prompts import ChatPromptTemplate

    system = "You are Ada, a careful assistant who answers briefly. " * 300
    prompt = ChatPromptTemplate.from_messages([("system", system), ("user", "Context:\n{context}\n\nQuestion: {question}")])
    index = _long_days(make_index)
    small, large = _window_llm(scripted_llm, 6000), _window_llm(scripted_llm, 100_000)
    index.as_query_engine(llm=small, answer_prompt=prompt).query("What did my cat chase?")
    index.as_query_engine(llm=large, answer_prompt=prompt).query("What did my cat chase?")
    assert sum(content_tokens(m.blocks) for m in small.chats[-1]) <= 6000 - REPLY_TOKENS
    assert sum(content_tokens(m.blocks) for m in large.chats[-1]) > 6000 - REPLY_TOKENS
    [sent_system, sent], [_, whole] = small.chats[-1], large.chats[-1]
    assert sent_system.content == system and sent.content.endswith("Question: What did my cat chase?")
    assert 0 < sent.content.count("[session ") < whole.content.count("[session ")


def test_a_prompt_sent_as_text_inside_another_message_is_refused_as_a_chat_prompt_template(make_index, photos, scripted_llm):
    """The image notes sit inside the answer's context and the enriched anchor prompt beside the
    attached image: a chat template's roles would reach the model as text."""
    from llama_index.core.prompts import ChatPromptTemplate

    engine = _memory(make_index, photos).as_query_engine(llm=scripted_llm(default="ok"))
    for key, text in (("image_note_prompt", "The user attached: {query_caption}"),
                      ("image_note_matched_prompt", "The user attached: {query_caption}"),
                      ("enriched_anchor:enriched_anchor_prompt", "Keywords for: {q}")):
        before = engine.get_prompts()[key].get_template()
        with pytest.raises(VMemInputError, match="not a ChatPromptTemplate") as caught:
            engine.update_prompts({key: ChatPromptTemplate.from_messages([("system", "Be brief."), ("user", text)])})
        assert caught.value.item == f"prompt {key.split(':')[-1]}"
        assert engine.get_prompts()[key].get_template() == before, "the prompt in use stays"


def test_a_prompt_naming_the_variables_through_template_var_mappings_is_accepted_and_filled(make_index, photos, scripted_llm):
    """``template_var_mappings`` is LlamaIndex's way to reuse a prompt written for other variable names:
    the engine fills ``context`` and ``question``, which the mapping sends to ``{context_str}`` and ``{query_str}``."""
    llm = scripted_llm(default="Mochi")
    engine = _memory(make_index, photos).as_query_engine(llm=llm, delivery="text")
    engine.update_prompts({"answer_prompt": PromptTemplate("Context:\n{context_str}\n\nQuestion: {query_str}\nAnswer:",
                                                           template_var_mappings={"context": "context_str", "question": "query_str"})})
    engine.query("What is my cat called?")
    assert llm.prompts[-1].startswith("Context:\n[seen 2024-06-17, session D1, rounds D1:1 to D1:2]")
    assert llm.prompts[-1].endswith("Question: What is my cat called?\nAnswer:")
    with pytest.raises(VMemInputError, match=re.escape("must use {context} once")):
        engine.update_prompts({"answer_prompt": PromptTemplate("{ctx}\n{question}\n{ctx}", template_var_mappings={"context": "ctx"})})


@pytest.mark.parametrize("delivery", ["text", "pixels"])
def test_an_image_several_retrieved_rounds_return_is_listed_once_after_its_own_round(make_index, photos, scripted_llm, delivery):
    """A round without a picture returns its neighbours' (Appendix B): with those neighbours retrieved
    too, their pictures were listed once per round in the nodes and in the answer's sources. Each is
    listed once, after the round it was shared in."""
    index = make_index()
    index.add_rounds([
        {"user": "Here is my new cat!", "assistant": "A tabby!", "session_id": "D1",
         "images": [{"image_id": "D1:IMG_001", "path": str(photos["chelsea"]), "caption": "a tabby cat lying down"}]},
        {"user": "Her name is Mochi.", "assistant": "Lovely name.", "session_id": "D1"},
        {"user": "My morning coffee", "assistant": "Looks strong.", "session_id": "D1",
         "images": [{"image_id": "D1:IMG_002", "path": str(photos["coffee"]), "caption": "a cup of coffee on a saucer"}]},
    ])
    question = "show me the photo of Mochi"
    result = index.as_retriever(k=3).retrieve_with_plan(question)
    listed = [n.node.metadata.get("image_id") or n.node.metadata["round_key"] for n in result.nodes]
    assert listed == ["D1:2", "D1:1", "D1:IMG_001", "D1:3", "D1:IMG_002"]
    response = index.as_query_engine(llm=scripted_llm(default="D1:IMG_001"), delivery=delivery, k=3).query(question)
    assert [n.node.metadata.get("image_id") for n in response.source_nodes] == [None, "D1:IMG_001", "D1:IMG_002"]


def test_anchor_is_cached_for_the_same_input(make_index, photos, scripted_llm):
    llm = scripted_llm(default="a tabby cat lying on a blanket")
    retriever = _memory(make_index, photos).as_retriever(llm=llm)
    for _ in range(3):
        retriever.retrieve("Which photo shows my cat?")
    assert sum("ONE image" in p for p in llm.prompts) == 1
    retriever.retrieve("Which photo shows my city?")
    assert sum("ONE image" in p for p in llm.prompts) == 2


def test_async_query_and_retrieve(make_index, photos, scripted_llm):
    llm = scripted_llm(default="Lisbon")
    index = _memory(make_index, photos)

    async def run():
        nodes = await index.as_retriever().aretrieve("Where did I move?")
        response = await index.as_query_engine(llm=llm).aquery("Where did I move?")
        return nodes, response

    nodes, response = asyncio.run(run())
    assert nodes[0].node.metadata["round_key"] == "D2:1"
    assert str(response) == "Lisbon"


def test_anchor_transforms_keep_the_attached_image(scripted_llm, photos):
    from llama_index.core.schema import QueryBundle

    from llama_index_vmem.anchors import EnrichedAnchorTransform, HypoCaptionTransform

    llm = scripted_llm({"You can SEE": '```json\n{"keywords": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]}\n```'},
                       default="a caption")
    query = QueryBundle("What is this?", image_path=str(photos["coffee"]))
    enriched = EnrichedAnchorTransform(llm, max_keywords=8).run(query)
    assert enriched.image_path == str(photos["coffee"])
    assert enriched.query_str == "What is this? a b c d e f g h"  # at most 8 keywords, fences tolerated
    assert HypoCaptionTransform(llm).run(query).image_path == str(photos["coffee"])


def test_caption_keywords_are_distinct_content_words_in_order():
    from llama_index_vmem.anchors import caption_keywords

    caption = "Close-up of a tall foxglove, its pink-purple bells hanging down; the Foxglove again, don't 3D"
    assert caption_keywords(caption, 8) == ["Close-up", "tall", "foxglove", "pink-purple", "bells", "hanging"]  # "Foxglove" repeats, "down" and "don't" are stopwords
    assert caption_keywords(caption, 2) == ["Close-up", "tall"]
    assert caption_keywords("the and of", 8) == []


def test_config_overrides_per_index_and_per_query(make_index, photos):
    from llama_index.core.llms import MockLLM

    from llama_index_vmem import VMemConfig

    index = make_index(config=VMemConfig(k=2))
    index.add_rounds([{"user": f"note {i} about tea", "assistant": "ok", "session_id": "S"} for i in range(6)])
    retriever = index.as_retriever()
    assert len(retriever.retrieve("tea")) == 2
    assert len(retriever.retrieve_with_plan("tea", k=4).nodes) == 4
    assert len(index.as_retriever(k=3).retrieve("tea")) == 3
    assert len(index.as_retriever(similarity_top_k=3).retrieve("tea")) == 3  # LlamaIndex's name for k
    # ... and the count for every question: an aggregation question ("how many") widens k, not similarity_top_k
    assert len(index.as_retriever(k=3).retrieve("How many teas did I note?")) == 6
    assert len(index.as_retriever(similarity_top_k=3).retrieve("How many teas did I note?")) == 3
    assert len(index.as_retriever(similarity_top_k=3, aggregation_k=5).retrieve("How many teas did I note?")) == 5
    with pytest.raises(VMemInputError, match="similarity_top_k"):
        index.as_retriever(k=2, similarity_top_k=3)
    with pytest.raises(TypeError, match=r"unsupported option\(s\) \['response_mode'\]; the query engine takes answer_prompt.*"
                                        r"its retriever takes .*neighbor_window"):
        index.as_query_engine(llm=MockLLM(), response_mode="compact")
    with pytest.raises(TypeError, match=r"unsupported option\(s\) \['sesion_id'\]; the chat engine takes .*session_id"):
        index.as_chat_engine(llm=MockLLM(), sesion_id="D9")


def test_streaming_query_engine_streams_the_answer_sync_and_async(make_index, photos):
    from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
    from llama_index.core.llms import MockLLM

    engine = _memory(make_index, photos).as_query_engine(llm=MockLLM(), streaming=True)  # MockLLM streams the prompt back
    response = engine.query("Where did I move?")
    assert isinstance(response, StreamingResponse) and response.metadata["case"] == "text->text"
    streamed = "".join(response.response_gen)
    assert "QUESTION: Where did I move?" in streamed and "I moved to Lisbon." in streamed
    assert ["D2:1"] in [n.node.metadata["rounds"] for n in response.source_nodes]

    async def run():
        response = await engine.aquery("Where did I move?")
        return response, "".join([t async for t in response.async_response_gen()])

    response, streamed_async = asyncio.run(run())
    assert isinstance(response, AsyncStreamingResponse) and streamed_async == streamed


def test_a_retrieval_says_how_long_the_llm_took_for_its_anchors(make_index, photos, scripted_llm):
    """Search and the LLM's anchors are timed apart, so latency can be reported with and without the LLM."""
    import time

    class SlowLLM(scripted_llm):
        def complete(self, prompt, formatted=False, **kwargs):
            time.sleep(0.25)
            return super().complete(prompt, formatted, **kwargs)

    index = make_index()
    index.add_rounds([{"user": "Dinner tonight.", "assistant": "Yum.", "session_id": "S",
                       "images": [{"image_id": "S:IMG_1", "path": str(photos["coffee"]), "caption": "a cup of coffee"}]}])
    question = "Which picture shown in the conversation is about coffee?"
    llm = SlowLLM(default="a mug of coffee")
    timed = index.as_retriever(llm=llm).retrieve_with_plan(question)
    assert len(llm.prompts) == 1 and timed.anchor_seconds >= 0.25  # the raw-query anchor costs nothing
    assert sorted(a.seconds > 0 for a in timed.anchors.values()) == [False, True]
    untimed = index.as_retriever().retrieve_with_plan(question)
    assert untimed.anchor_seconds == 0.0


def test_engines_fall_back_to_settings_llm_as_stock_engines_do(make_index, photos, scripted_llm, monkeypatch):
    from llama_index.core import Settings

    index = _memory(make_index, photos)
    with pytest.raises(ValueError, match="pass llm=, or set Settings.llm"):
        index.as_query_engine()
    monkeypatch.setattr(Settings, "_llm", scripted_llm(default="Lisbon"))  # as `Settings.llm = ...` sets it
    assert str(index.as_query_engine().query("Where did I move?")) == "Lisbon"
    assert str(index.as_chat_engine().chat("Where did I move?")) == "Lisbon"
    assert "I moved to Lisbon." in Settings.llm.prompts[-1]


class _ChunkedLLM:
    """Streams its answer in chunks padded with whitespace, and records which call it got."""

    CHUNKS = ["", "  ", "\n The", " answer", " is ", "\n", "Lisbon.", "  \n", ""]

    @staticmethod
    def make():
        from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
        from llama_index.core.llms import MockLLM
        from pydantic import PrivateAttr

        def chunk(text):
            return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=text)

        class Chunked(MockLLM):
            _calls: list = PrivateAttr(default_factory=list)

            @property
            def calls(self):
                return self._calls

            def chat(self, messages, **kwargs):
                self._calls.append("chat")
                return chunk("".join(_ChunkedLLM.CHUNKS))

            async def achat(self, messages, **kwargs):
                self._calls.append("achat")
                return chunk("".join(_ChunkedLLM.CHUNKS))

            def stream_chat(self, messages, **kwargs):
                self._calls.append("stream_chat")
                return (chunk(c) for c in _ChunkedLLM.CHUNKS)

            async def astream_chat(self, messages, **kwargs):
                self._calls.append("astream_chat")

                async def gen():
                    for c in _ChunkedLLM.CHUNKS:
                        yield chunk(c)

                return gen()

        return Chunked()


def test_async_query_calls_the_llms_async_chat(make_index, photos):
    llm = _ChunkedLLM.make()
    engine = _memory(make_index, photos).as_query_engine(llm=llm)
    assert str(asyncio.run(engine.aquery("Where did I move?"))) == "The answer is \nLisbon."
    assert llm.calls == ["achat"]


def test_a_streamed_answer_is_stripped_as_the_whole_answer_is(make_index, photos):
    llm = _ChunkedLLM.make()
    index = _memory(make_index, photos)
    whole = str(index.as_query_engine(llm=llm).query("Where did I move?"))
    engine = index.as_query_engine(llm=llm, streaming=True)
    deltas = list(engine.query("Where did I move?").response_gen)

    async def run():
        response = await engine.aquery("Where did I move?")
        return [t async for t in response.async_response_gen()]

    async_deltas = asyncio.run(run())
    assert "".join(deltas) == "".join(async_deltas) == whole == "The answer is \nLisbon."
    assert all(deltas) and all(async_deltas), "no empty deltas"
    assert llm.calls == ["chat", "stream_chat", "astream_chat"]


@pytest.mark.parametrize("call", [
    lambda index: index.as_retriever().retrieve(None),
    lambda index: index.as_retriever().retrieve(b"cat"),
    lambda index: asyncio.run(index.as_retriever().aretrieve(None)),
    lambda index: index.as_retriever().retrieve_with_plan(123),
    lambda index: index.as_query_engine(llm=MockLLM()).query(None),
    lambda index: asyncio.run(index.as_query_engine(llm=MockLLM()).aquery(b"cat")),
], ids=["retrieve_none", "retrieve_bytes", "aretrieve_none", "retrieve_with_plan_int", "query_none", "aquery_bytes"])
def test_a_query_that_is_neither_text_nor_a_query_bundle_is_refused_by_name(make_index, photos, call):
    """LlamaIndex's retrieval and query events would fail on it first, with a pydantic or attribute
    error that names no query."""
    index = _memory(make_index, photos)
    with pytest.raises(VMemInputError, match="must be text or a QueryBundle") as caught:
        call(index)
    assert caught.value.item == "query"
    assert len(index) == 3


def test_a_cut_context_keeps_the_attached_picture_with_its_label(make_index, photos, scripted_llm, caplog):
    """Pixels delivery ends with the user's attached picture, under its label. Before, the window's
    cut came from the end, so a tight window dropped the picture and sent its label alone, naming a
    picture the model never saw; the picture's room is now set aside before the memory is fitted.
    Memory comes first: where the picture would leave no room for any, label and picture go and
    the note describes it."""
    from llama_index_vmem.delivery import content_tokens
    from llama_index_vmem.query_engine import REPLY_TOKENS

    index = make_index()
    index.add_rounds([{"user": f"Day {i}: my cat Mochi chased a laser pointer near the harbour boats, then slept.",
                       "assistant": "Nice. " * 20, "session_id": f"D{i}"} for i in range(12)])
    label = "[attached image: the user's ATTACHED picture]"
    cut, pictured = 0, set()
    for window in range(600, 2100, 100):
        llm = _window_llm(scripted_llm, window)
        caplog.clear()
        with caplog.at_level("WARNING", logger="llama_index_vmem.query_engine"):
            index.as_query_engine(llm=llm, delivery="pixels").query(
                VMemQueryBundle("What did my cat chase?", image_path=str(photos["chelsea"])))
        [sent] = llm.chats[-1]
        after_label = "".join("I" if isinstance(b, ImageBlock) else b.text for b in sent.blocks).split(label)
        pictured.add(len(after_label) == 2)
        if len(after_label) == 2:
            assert after_label[1].startswith("I"), window  # the label, then its picture
            assert "[session " in sent.content, window  # and memory with it
        else:
            assert not any(isinstance(b, ImageBlock) for b in sent.blocks), window
            assert "attached picture leaves no room for memory in scripted's" in caplog.text
            assert "[ATTACHED IMAGE] The user’s attached image shows" in sent.content, window
        assert content_tokens(sent.blocks) <= window - REPLY_TOKENS, window
        cut += sent.content.count("[session ") < 12
    assert cut and pictured == {True, False}, "windows from no room for the picture to room for every block"
