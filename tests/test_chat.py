"""Chat and agents: the Memory block, the chat engine, the stock ContextChatEngine, the agent example."""

import asyncio
import importlib.util
import logging
from pathlib import Path

import pytest
from conftest import ScriptedLLM
from llama_index.core.base.llms.types import (
    AudioBlock,
    ChatMessage,
    CompletionResponse,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.memory import Memory

from llama_index_vmem import (
    ImageBudget,
    VMemChatEngine,
    VMemConfig,
    VMemInputError,
    VMemMemoryBlock,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class StreamingLLM(ScriptedLLM):
    """Streams its scripted reply word by word, with deltas, as real LLMs do."""

    def stream_complete(self, prompt, formatted=False, **kwargs):
        self.prompts.append(prompt)
        text = ""
        for i, word in enumerate(self._reply(prompt).split(" ")):
            delta = word if i == 0 else f" {word}"
            text += delta
            yield CompletionResponse(text=text, delta=delta)


def _memory(make_index, photos, **kwargs):
    index = make_index(**kwargs)

    def img(image_id, name, caption):
        return {"image_id": image_id, "path": str(photos[name]), "caption": caption}

    d1, d2 = {"session_id": "D1", "timestamp": "2024-06-17"}, {"session_id": "D2", "timestamp": "2024-07-01"}
    index.add_rounds([
        {**d1, "round_key": "D1:1", "user": "My cat is called Mochi.", "assistant": "Cute."},
        {**d1, "round_key": "D1:2", "user": "Here she is.", "assistant": "A tabby!",
         "images": [img("D1:IMG_001", "chelsea", "a tabby cat lying down")]},
        {**d1, "round_key": "D1:3", "user": "Breakfast.", "assistant": "Yum.",
         "images": [img("D1:IMG_002", "coffee", "a cup of coffee with latte art")]},
        {**d2, "round_key": "D2:1", "user": "I moved to Lisbon.", "assistant": "Lovely city."},
        {**d2, "round_key": "D2:2", "user": "Launch day!", "assistant": "Wow.",
         "images": [img("D2:IMG_001", "rocket", "a rocket on a launch pad")]},
    ])
    return index


def _rounds(index):
    return [stored.round for stored in index.rounds(limit=1000)]


# -- the Memory block -------------------------------------------------------------------------


def test_memory_block_stores_what_memory_flushes_and_logs_what_it_leaves_out(make_index, photos, caplog):
    index = make_index()
    block = VMemMemoryBlock(index=index, delivery="text", session_id="S1")
    user, assistant, wav = MessageRole.USER, MessageRole.ASSISTANT, b"RIFF....WAVEfmt "
    flushed = [
        ChatMessage(role=MessageRole.SYSTEM, content="You are helpful."),
        ChatMessage(role=assistant, content="Your parcel arrived on Monday."),  # its user message went earlier
        ChatMessage(role=user, blocks=[TextBlock(text="This is my cat Mochi."), ImageBlock(path=photos["chelsea"])],
                    additional_kwargs={"image_captions": ["a tabby cat lying down"]}),
        ChatMessage(role=assistant, blocks=[ThinkingBlock(content="cats..."), TextBlock(text="She is lovely.")]),
        ChatMessage(role=user, content="What's the weather in Oslo?"),
        ChatMessage(role=assistant, blocks=[TextBlock(text="Let me look that up."),
                                            ToolCallBlock(tool_call_id="1", tool_name="weather", tool_kwargs={})]),
        ChatMessage(role=MessageRole.TOOL, content="12C and rain", additional_kwargs={"tool_call_id": "1"}),
        ChatMessage(role=assistant, content="It is 12C and raining in Oslo."),
        ChatMessage(role=user, blocks=[AudioBlock(audio=wav, format="wav")],
                    additional_kwargs={"transcripts": ["I booked a flight to Lisbon for May."]}),
        ChatMessage(role=assistant, content="Have a great trip!"),
        ChatMessage(role=user, blocks=[TextBlock(text="Listen to my song."), AudioBlock(audio=wav, format="wav")]),
        ChatMessage(role=user, content="Two user messages in a row."),
    ]
    with caplog.at_level(logging.INFO, logger="llama_index_vmem.memory_block"):
        asyncio.run(block.aput(flushed, from_short_term_memory=True, session_id="memory-session"))
    texts = [r.text for r in _rounds(index)]
    assert texts == [
        "Assistant: Your parcel arrived on Monday.",
        "User: This is my cat Mochi.\n[Image S1:2:IMG_1] a tabby cat lying down\nAssistant: She is lovely.",
        "User: What's the weather in Oslo?\nAssistant: Let me look that up.\nIt is 12C and raining in Oslo.",  # one answer, tool steps left out
        "User: [Audio: I booked a flight to Lisbon for May.]\nAssistant: Have a great trip!",
        "User: Listen to my song.",  # audio without a transcript: kept as its text
        "User: Two user messages in a row.",
    ]
    assert _rounds(index)[1].metadata["image_ids"] == ["S1:2:IMG_1"]
    assert all(r.metadata["session_id"] == "S1" and r.metadata["timestamp"] for r in _rounds(index))
    log = caplog.text
    assert "not stored: flushed system message 1" in log and "not stored: flushed tool message 7" in log
    assert "not stored: ThinkingBlock of flushed message 4" in log
    assert "not stored: ToolCallBlock of flushed message 6" in log
    assert "storing a flushed exchange as text only" in log and "audio needs a transcript" in log


def _exchange(question, answer, *blocks):
    return [ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text=question), *blocks]),
            ChatMessage(role=MessageRole.ASSISTANT, content=answer)]


def test_a_flushed_image_of_empty_bytes_is_stored_as_its_text_and_the_rest_of_the_flush_too(make_index, caplog):
    index = make_index()
    block = VMemMemoryBlock(index=index, session_id="S")
    flushed = [*_exchange("My bike is red.", "Noted."), *_exchange("Here is the bike.", "Nice.", ImageBlock(image=b"")),
               *_exchange("The locker code is 4417.", "Got it.")]
    with caplog.at_level(logging.WARNING, logger="llama_index_vmem.memory_block"):
        asyncio.run(block.aput(flushed))
    assert [r.text for r in _rounds(index)] == ["User: My bike is red.\nAssistant: Noted.",
                                               "User: Here is the bike.\nAssistant: Nice.",
                                               "User: The locker code is 4417.\nAssistant: Got it."]
    assert "message 1 image 1: image is empty" in caplog.text


def test_a_flushed_exchange_whose_text_is_refused_is_stored_as_far_as_it_can_be(make_index, caplog):
    """Text over the limit or with a lone surrogate is refused by add_messages; Memory has already
    taken the exchange out of its history, so the block keeps what it can and says what it left out."""
    from llama_index_vmem.node_parser import MAX_TEXT_CHARS

    index = make_index()
    block = VMemMemoryBlock(index=index, session_id="S")
    long_text = "The locker code is 4417. " + "x" * MAX_TEXT_CHARS
    flushed = [*_exchange(long_text, "Noted."), *_exchange("Caf\udce9 at noon.", "See you there."),
               *_exchange("My bike is red.", "Nice.")]
    with caplog.at_level(logging.WARNING, logger="llama_index_vmem.memory_block"):
        asyncio.run(block.aput(flushed))
    first, second, third = (r.text for r in _rounds(index))
    kept = first[len("User: "):first.index("\n[")]
    note = f"\n[{len(long_text) - len(kept)} characters over the limit of {MAX_TEXT_CHARS} not stored]"
    assert long_text.startswith(kept) and first == f"User: {kept}{note}\nAssistant: Noted."
    assert len(kept + note) <= MAX_TEXT_CHARS
    assert second == "User: Caf? at noon.\nAssistant: See you there."
    assert third == "User: My bike is red.\nAssistant: Nice."
    assert "cut or mended" in caplog.text


def test_a_flushed_picture_is_kept_when_only_its_exchanges_text_needs_mending(make_index, photos):
    index = make_index()
    block = VMemMemoryBlock(index=index, session_id="S")
    picture = ImageBlock(path=photos["chelsea"])
    asyncio.run(block.aput(_exchange("Here is my cat Chelsea \udce9", "Cute.", picture)))
    [stored] = index.rounds()
    assert stored.round.text == "User: Here is my cat Chelsea ?\n[Image S:1:IMG_1]\nAssistant: Cute."
    assert stored.round.metadata["image_ids"] == ["S:1:IMG_1"]


def test_a_flush_that_fails_stores_its_other_exchanges_then_raises(make_index, monkeypatch):
    index = make_index()
    block = VMemMemoryBlock(index=index, session_id="S")
    add_messages = index.add_messages

    def server_down_for_the_bike(messages, **kwargs):
        if "bike" in messages[0].content:
            raise ConnectionError("qdrant unreachable")
        return add_messages(messages, **kwargs)

    monkeypatch.setattr(index, "add_messages", server_down_for_the_bike)
    flushed = [*_exchange("My bike is red.", "Noted."), *_exchange("The locker code is 4417.", "Got it.")]
    with pytest.raises(ConnectionError, match="qdrant unreachable"):
        asyncio.run(block.aput(flushed))
    assert [r.text for r in _rounds(index)] == ["User: The locker code is 4417.\nAssistant: Got it."]


def test_a_flush_into_a_closed_memory_is_refused_not_dropped(make_index, tmp_path):
    index = make_index(path=tmp_path / "m", memory_id="m")
    block = VMemMemoryBlock(index=index, session_id="S")
    index.close()
    with pytest.raises(VMemInputError, match="this handle is closed"):
        asyncio.run(block.aput(_exchange("The locker code is 4417.", "Got it.")))


def test_memory_block_stores_a_react_reply_as_its_answer(make_index):
    """A ReAct agent's reply is stored as its answer, without its scratchpad; a step that only
    called a tool told the user nothing and is left out."""
    index = make_index()
    block = VMemMemoryBlock(index=index, delivery="text", session_id="S")
    user, assistant = MessageRole.USER, MessageRole.ASSISTANT
    react = ("Thought: I need the weather tool.\nAction: weather\nAction Input: {'city': 'Oslo'}\n"
             "Observation: 12C, rain\nThought: I can answer without a tool.\nAnswer: It is 12C and raining in Oslo.")
    asyncio.run(block.aput([ChatMessage(role=user, content="What is the weather in Oslo?"),
                            ChatMessage(role=assistant, content="Thought: I need the weather tool.\nAction: weather"),
                            ChatMessage(role=assistant, content=react),
                            ChatMessage(role=user, content="My dog Rex is a beagle."),
                            ChatMessage(role=assistant, content="Thought: I can answer without a tool.\nAnswer: Noted.")]))
    assert [r.text for r in _rounds(index)] == [
        "User: What is the weather in Oslo?\nAssistant: It is 12C and raining in Oslo.",
        "User: My dog Rex is a beagle.\nAssistant: Noted.",
    ]


def test_memory_block_keeps_a_reply_that_only_looks_like_a_react_step(make_index):
    """Only a scratchpad is cut: an ordinary reply that opens with "Thought:" is stored whole, and an
    answer whose own text has "Answer:" lines keeps them."""
    index = make_index()
    block = VMemMemoryBlock(index=index, delivery="text", session_id="S")
    user, assistant = MessageRole.USER, MessageRole.ASSISTANT
    quiz = "Thought: I know this.\nAnswer: Two questions:\nQ: 2+2?\nAnswer: 4\nQ: 3+3?\nAnswer: 6"
    asyncio.run(block.aput([ChatMessage(role=user, content="Any ideas for the weekend?"),
                            ChatMessage(role=assistant, content="Thought: a picnic by the lake would be lovely."),
                            ChatMessage(role=user, content="Quiz me."),
                            ChatMessage(role=assistant, content=quiz)]))
    assert [r.text for r in _rounds(index)] == [
        "User: Any ideas for the weekend?\nAssistant: Thought: a picnic by the lake would be lovely.",
        "User: Quiz me.\nAssistant: Two questions:\nQ: 2+2?\nAnswer: 4\nQ: 3+3?\nAnswer: 6",
    ]


def test_memory_block_recall_is_best_first_and_cut_to_fit_by_whole_blocks(make_index, photos):
    """``Memory`` truncates a block from its end: recall comes best block first and is cut by whole
    neighbour blocks, so what fits is the most relevant; by default (priority 1) Memory does cut it."""
    from llama_index_vmem.delivery import BLOCK_SEPARATOR, content_tokens

    index = _memory(make_index, photos)
    block = VMemMemoryBlock(index=index, delivery="pixels", image_budget=ImageBudget(4, 64))
    question = [ChatMessage(role=MessageRole.USER, content="Where did I move to?")]
    recalled = asyncio.run(block.aget(question))
    text = "".join(b.text for b in recalled if isinstance(b, TextBlock))
    assert text.count(BLOCK_SEPARATOR) == 1 and text.index("I moved to Lisbon.") < text.index(BLOCK_SEPARATOR)
    cut = asyncio.run(block.atruncate(recalled, 1))
    assert "I moved to Lisbon." in "".join(b.text for b in cut if isinstance(b, TextBlock))
    assert BLOCK_SEPARATOR not in "".join(b.text for b in cut if isinstance(b, TextBlock)), "a whole block went"
    assert content_tokens(cut) < content_tokens(recalled)
    assert asyncio.run(block.atruncate(recalled, content_tokens(recalled))) is None
    assert block.priority == 1


def test_memory_block_keeps_the_start_of_its_best_block_when_that_alone_is_too_long(make_index, photos):
    """Cutting by whole blocks alone would leave nothing when the best block exceeds what is left:
    its start is kept instead, header first, cut after a whole line and within the budget."""
    from llama_index_vmem.delivery import BLOCK_SEPARATOR, content_tokens

    index = _memory(make_index, photos)
    block = VMemMemoryBlock(index=index)
    recalled = asyncio.run(block.aget([ChatMessage(role=MessageRole.USER, content="Where did I move to?")]))
    best = recalled[0].text.split(BLOCK_SEPARATOR)[0]
    budget = content_tokens([TextBlock(text=best)]) - 3
    [cut] = asyncio.run(block.atruncate(recalled, content_tokens(recalled) - budget))
    assert content_tokens([cut]) <= budget
    assert cut.text.startswith("[") and best.startswith(cut.text) and len(cut.text) < len(best)
    assert best[len(cut.text) - 1] == "\n", "cut after a whole line"


def test_memory_block_recall_cut_to_its_header_alone_is_no_recall(make_index, photos):
    """A header line (``[seen ..., session D2, rounds ...]``) with none of its rounds tells the agent
    nothing: a cut that would keep only that keeps nothing."""
    from llama_index_vmem.delivery import content_tokens

    index = _memory(make_index, photos)
    block = VMemMemoryBlock(index=index)
    recalled = asyncio.run(block.aget([ChatMessage(role=MessageRole.USER, content="Where did I move to?")]))
    header, first_line = recalled[0].text.split("\n")[:2]
    budget = content_tokens([TextBlock(text=header + "\n")]) + 1
    assert budget < content_tokens([TextBlock(text=f"{header}\n{first_line}\n")])
    assert asyncio.run(block.atruncate(recalled, content_tokens(recalled) - budget)) is None


def test_memory_block_cuts_recall_by_the_memorys_own_tokenizer(make_index, photos):
    """A ``Memory`` counting with its own ``tokenizer_fn`` (here: characters) asks the block to free
    that many of *its* tokens; counted by another tokenizer the block frees too few or too many, and
    ``Memory`` then drops the whole recall. Given the same ``tokenizer_fn``, the best block stays."""
    from llama_index_vmem.delivery import BLOCK_SEPARATOR

    def characters(text: str) -> list:
        return list(text)

    index = _memory(make_index, photos)
    block = VMemMemoryBlock(index=index, tokenizer_fn=characters)
    question = "Where did I move to?"
    recalled = asyncio.run(block.aget([ChatMessage(role=MessageRole.USER, content=question)]))
    best = recalled[0].text.split(BLOCK_SEPARATOR)[0]
    assert BLOCK_SEPARATOR in recalled[0].text and "I moved to Lisbon." in best
    memory = Memory.from_defaults(token_limit=len(best) + 10, tokenizer_fn=characters, memory_blocks=[block])
    [message] = memory.get(input=question)
    assert "I moved to Lisbon." in message.content and BLOCK_SEPARATOR not in message.content


def test_memory_block_recalls_with_the_attached_image(make_index, photos):
    index = _memory(make_index, photos, config=VMemConfig(k=1, neighbor_window=0))  # only the best round
    block = VMemMemoryBlock(index=index, delivery="pixels", image_budget=ImageBudget(max_images=4, max_side=128))

    question = "Which picture in our chat is this?"

    def shown(image: ImageBlock, *after: ChatMessage) -> str:
        message = ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text=question), image])
        content = asyncio.run(block.aget([ChatMessage(role=MessageRole.SYSTEM, content="hi"), message, *after]))
        [i] = [i for i, b in enumerate(content) if isinstance(b, ImageBlock)]  # the attachment is not sent again
        return content[i - 1].text.strip()

    assert shown(ImageBlock(path=photos["coffee"])) == "[image D1:IMG_002]"
    assert shown(ImageBlock(path=photos["rocket"])) == "[image D2:IMG_001]"
    assert shown(ImageBlock(image=photos["chelsea"].read_bytes())) == "[image D1:IMG_001]"  # bytes, not a path
    # Memory.aget(input=...) appends the question again without its image: the image is still used.
    assert shown(ImageBlock(path=photos["rocket"]), ChatMessage(role=MessageRole.USER, content=question)) == "[image D2:IMG_001]"


def test_memory_flushes_an_image_turn_into_the_block_and_recalls_its_pixels(make_index, photos):
    index = make_index()
    block = VMemMemoryBlock(index=index, delivery="pixels")
    memory = Memory.from_defaults(token_limit=1200, chat_history_token_ratio=0.25, insert_method="user", memory_blocks=[block])
    cat = ImageBlock(path=photos["chelsea"])
    memory.put_messages([ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text="This is my cat Mochi."), cat]),
                         ChatMessage(role=MessageRole.ASSISTANT, content="A lovely tabby.")])
    assert len(index) == 0
    memory.put(ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text="What is her name again?"), cat]))
    assert len(index) == 1  # the image turn no longer fits the chat history: flushed into V-Mem
    [message] = memory.get()  # the question, the recalled rounds put before its own blocks
    text = "".join(b.text for b in message.blocks if isinstance(b, TextBlock))
    assert "<long_term_memory>" in text and "User: This is my cat Mochi.\n[Image R1:IMG_1]" in text
    assert text.endswith("What is her name again?")
    recalled, own = [b for b in message.blocks if isinstance(b, ImageBlock)]
    [labelled] = index.delivered_dir.iterdir()  # the stored photo's labelled copy, inlined
    assert recalled.resolve_image(as_base64=False).read() == labelled.read_bytes()
    assert own.path == photos["chelsea"]


def test_memory_block_text_recall_and_empty_memory(make_index, photos, tmp_path):
    index = _memory(make_index, photos)
    block = VMemMemoryBlock(index=index, delivery="text")
    [content] = asyncio.run(block.aget([ChatMessage(role=MessageRole.USER, content="Where did I move to?")]))
    assert "[seen 2024-07-01, session D2, rounds D2:1 to D2:2]" in content.text and "I moved to Lisbon." in content.text
    empty = VMemMemoryBlock(index=make_index(path=tmp_path / "empty", memory_id="empty"))
    assert asyncio.run(empty.aget([ChatMessage(role=MessageRole.USER, content="Where did I move to?")])) == []
    assert asyncio.run(block.aget([ChatMessage(role=MessageRole.ASSISTANT, content="Hello")])) == []


# -- the chat engine --------------------------------------------------------------------------


def test_a_chat_filtered_to_a_session_stores_its_exchanges_in_that_session(make_index, photos, caplog):
    """``filters=`` one session with no ``session_id=`` stored the chat's exchanges in no session,
    so the next chat filtered to that session never recalled them; they now go in that session.
    A ``session_id=`` given beside the filter is kept, with a warning where the filter leaves it
    out, and a chat kept to several sessions must name one."""
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    index = _memory(make_index, photos)
    d2 = MetadataFilters(filters=[MetadataFilter(key="session_id", value="D2")])
    index.as_chat_engine(llm=ScriptedLLM(default="Noted."), filters=d2).chat("Mochi's favourite toy is a felt mouse.")
    with caplog.at_level("WARNING", logger="llama_index_vmem.chat_engine"):
        index.as_chat_engine(llm=ScriptedLLM(default="Noted."), filters=d2, session_id="C9").chat("Mochi sleeps on the sofa.")
    assert "chat exchanges go in session C9, which filters leave out" in caplog.text
    not_c9 = MetadataFilters(filters=[MetadataFilter(key="session_id", value="C9", operator=FilterOperator.NE)])
    caplog.clear()
    with caplog.at_level("WARNING", logger="llama_index_vmem.chat_engine"):
        index.as_chat_engine(llm=ScriptedLLM(default="Noted."), filters=not_c9, session_id="D2")
        assert "filters leave out" not in caplog.text
        index.as_chat_engine(llm=ScriptedLLM(default="Noted."), filters=not_c9, session_id="C9")
    assert "chat exchanges go in session C9, which filters leave out" in caplog.text
    caplog.clear()
    in_2024 = [MetadataFilter(key="timestamp", value="2024", operator=FilterOperator.GTE),
               MetadataFilter(key="timestamp", value="2024", operator=FilterOperator.LTE)]
    since_2024 = MetadataFilters(filters=in_2024[:1])
    with caplog.at_level("WARNING", logger="llama_index_vmem.chat_engine"):
        index.as_chat_engine(llm=ScriptedLLM(default="Noted."), filters=since_2024, session_id="D2")
        assert "time filters leave out" not in caplog.text, "today is after 2024"
        index.as_chat_engine(llm=ScriptedLLM(default="Noted."), filters=MetadataFilters(filters=in_2024), session_id="D2")
    assert "chat exchanges are stamped " in caplog.text and "which the time filters leave out" in caplog.text
    both = MetadataFilters(filters=[MetadataFilter(key="session_id", value=["D1", "D2"], operator=FilterOperator.IN)])
    with pytest.raises(VMemInputError, match="^session_id: is needed: filters keep the chat to sessions D1, D2"):
        index.as_chat_engine(llm=ScriptedLLM(default="Noted."), filters=both)
    index.as_chat_engine(llm=ScriptedLLM(default="Noted."), filters=both, session_id="D1")
    assert [r.round.metadata["session_id"] for r in index.rounds()][-2:] == ["D2", "C9"]
    llm = ScriptedLLM(default="A felt mouse.")
    index.as_chat_engine(llm=llm, filters=d2).chat("What is Mochi's favourite toy?")
    assert "User: Mochi's favourite toy is a felt mouse." in llm.prompts[-1]
    assert "Mochi sleeps on the sofa." not in llm.prompts[-1]


def test_chat_engine_recalls_an_earlier_turn_from_the_memory(make_index, photos):
    index = _memory(make_index, photos)
    llm = ScriptedLLM(default="Noted.")
    engine = index.as_chat_engine(llm=llm, session_id="C1")
    assert isinstance(engine, VMemChatEngine)
    assert str(engine.chat("My sister Ingrid lives in Bergen and teaches violin.")) == "Noted."
    assert len(index) == 6
    engine.reset()  # a new conversation: the chat history is gone, the memory is not
    assert engine.chat_history == []
    engine.chat("What does my sister teach?")
    prompt = llm.prompts[-1]
    context = prompt[prompt.index("CONTEXT"):prompt.index("QUESTION: What does my sister teach?")]
    assert "session C1, round C1:1]\nUser: My sister Ingrid lives in Bergen and teaches violin.\nAssistant: Noted." in context
    assert [m.content for m in engine.chat_history] == ["What does my sister teach?", "Noted."]
    assert len(index) == 7


def test_a_voice_note_asks_its_question_in_its_transcript(make_index, photos):
    index = _memory(make_index, photos)
    llm = ScriptedLLM(default="Lisbon.")
    engine = index.as_chat_engine(llm=llm)
    voice = ChatMessage(role=MessageRole.USER, blocks=[AudioBlock(audio=b"RIFF....WAVEfmt ", format="wav")],
                        additional_kwargs={"transcripts": ["Where did I move to?"]})
    assert str(engine.chat(voice)) == "Lisbon."
    assert "QUESTION: Where did I move to?" in llm.prompts[-1]
    assert "User: I moved to Lisbon." in llm.prompts[-1]
    assert [m.content for m in engine.chat_history] == ["[Audio: Where did I move to?]", "Lisbon."]  # as the round tells it
    assert _rounds(index)[-1].text == "User: [Audio: Where did I move to?]\nAssistant: Lisbon."


def test_an_image_only_turn_is_named_in_the_chat_history_not_left_empty(make_index, photos):
    index = _memory(make_index, photos)
    llm = ScriptedLLM(default="That is Mochi.")
    engine = index.as_chat_engine(llm=llm, session_id="S")
    engine.chat(ChatMessage(role=MessageRole.USER, blocks=[ImageBlock(path=photos["chelsea"])],
                            additional_kwargs={"image_captions": ["a tabby cat"]}))
    engine.chat("What breed did you say she was?")
    assert [m.content for m in engine.chat_history][:2] == ["[Image S:1:IMG_1] a tabby cat", "That is Mochi."]
    assert "[Image S:1:IMG_1] a tabby cat" in llm.prompts[-1], "the next turn's LLM input names the picture"


def test_the_chat_history_names_a_picture_by_the_id_the_memory_stored_it_under(make_index, photos):
    """Another picture already has the id the app sent: history and memory must name the new one alike."""
    index = _memory(make_index, photos)
    index.add_round(user="Our rocket trip.", images=[{"image_id": "IMG_0001", "path": str(photos["rocket"])}])
    engine = index.as_chat_engine(llm=ScriptedLLM(default="That is Mochi."), session_id="S")
    engine.chat(ChatMessage(role=MessageRole.USER, blocks=[ImageBlock(path=photos["chelsea"])],
                            additional_kwargs={"image_ids": ["IMG_0001"], "image_captions": ["a tabby cat"]}))
    assert _rounds(index)[-1].metadata["image_ids"] == ["IMG_0001 (2)"]
    assert engine.chat_history[0].content == "[Image IMG_0001 (2)] a tabby cat"


def test_a_url_image_in_a_chat_turn_is_fetched_once_and_used_for_retrieval_and_storage(make_index, photos):
    from conftest import image_server

    index = _memory(make_index, photos, config=VMemConfig(k=1, neighbor_window=0))
    engine = index.as_chat_engine(llm=ScriptedLLM(default="A launch."), session_id="S")
    with image_server(photos["rocket"].read_bytes()) as (address, requests):
        response = engine.chat(ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text="Seen this before?"),
                                                                          ImageBlock(url=f"{address}/rocket.jpg")]))
    assert requests == ["/rocket.jpg"]
    [found] = response.source_nodes
    assert found.node.metadata["rounds"] == ["D2:2"]
    assert found.node.metadata["vmem"]["D2:2"]["ranks"]["visual"] == 1, "the fetched pixels found the rocket"
    [stored] = index.rounds(session_id="S")
    assert [type(u).__name__ for u in stored.units] == ["TextNode", "TextNode", "ImageNode"], "the round stored the image"


def test_the_history_sent_leaves_room_in_the_window_for_the_answer_prompt(make_index, photos):
    """``Memory`` budgets the history alone: the engine leaves out the oldest turns that would push
    the LLM input, recalled context included, past the model's window."""
    from llama_index.core.base.llms.types import LLMMetadata
    from llama_index.core.utils import get_tokenizer

    class SmallWindow(ScriptedLLM):
        @property
        def metadata(self):
            return LLMMetadata(model_name="small", context_window=1500)

    index = _memory(make_index, photos)
    llm = SmallWindow(default="Noted.")
    engine = index.as_chat_engine(llm=llm, session_id="S")
    facts = [f"Fact {i}: " + " ".join(["my garden has tomatoes and basil"] * 12) for i in range(8)]
    engine.chat(facts[0], chat_history=[ChatMessage(role=MessageRole.SYSTEM, content="The user is Alice.")])
    for fact in facts[1:]:
        engine.chat(fact)
    sent = llm.chats[-1]
    assert sum(len(get_tokenizer()(m.content or "")) for m in sent) <= 1500 - 256
    assert sent[-3].content.startswith("Fact 6:") and sent[-2].content == "Noted.", "the latest turns are kept"
    assert sent[0].content == "The user is Alice.", "the history's system message is always sent"
    assert sent[1].role == MessageRole.USER and not sent[1].content.startswith("Fact 0:"), "the oldest are left out"
    assert len(engine.chat_history) == 17, "the chat history itself keeps every turn"


def test_a_history_that_fits_is_sent_whole_with_its_system_message_and_greeting(make_index, photos):
    """Only a cut history is made to start at a user's turn: a leading system message (a ``Memory``
    static block) and an assistant's greeting reach the LLM when nothing needs leaving out."""
    llm = ScriptedLLM(default="Sure.")
    engine = _memory(make_index, photos).as_chat_engine(llm=llm, session_id="S")
    history = [ChatMessage(role=MessageRole.SYSTEM, content="The user is Alice."),
               ChatMessage(role=MessageRole.ASSISTANT, content="Hi! How can I help?")]
    engine.chat("What is my cat called?", chat_history=history)
    sent = llm.chats[-1]
    assert [m.content for m in sent[:2]] == ["The user is Alice.", "Hi! How can I help?"]
    assert [m.role for m in sent] == ["system", "assistant", "user"]


def test_a_chat_engine_refuses_what_it_could_not_honour_up_front(make_index, photos):
    """``streaming=True`` (a query engine's option) was taken and did nothing; a model whose window
    holds no more than the answer's reserve failed in pydantic's ``Memory(token_limit=-56)``."""
    from llama_index.core.llms import LLMMetadata

    class TinyWindow(ScriptedLLM):
        @property
        def metadata(self):
            return LLMMetadata(model_name="tiny", context_window=200, is_chat_model=True)

    index = _memory(make_index, photos)
    with pytest.raises(TypeError, match=r"streams through stream_chat\(\) and astream_chat\(\); it takes no streaming="):
        index.as_chat_engine(llm=ScriptedLLM(default="ok"), streaming=True)
    with pytest.raises(TypeError, match=r"unsupported option\(s\) \['streamng'\]; .*its query engine takes") as refused:
        index.as_chat_engine(llm=ScriptedLLM(default="ok"), streamng=True)
    assert "streaming" not in str(refused.value)  # the options listed are those a chat takes
    with pytest.raises(VMemInputError, match="^llm: has a 200-token window: a chat needs more than the 256 tokens"):
        index.as_chat_engine(llm=TinyWindow(default="ok"))


def test_chat_engine_sends_the_chat_history_before_the_answer_prompt(make_index, photos):
    llm = ScriptedLLM(default="Sure.")
    engine = _memory(make_index, photos).as_chat_engine(llm=llm, system_prompt="Be brief.")
    engine.chat("Where did I move to?")
    engine.chat("And what is my cat called?")
    messages = llm.chats[-1]
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0].content == "Be brief." and messages[1].content == "Where did I move to?"
    assert messages[-1].content.startswith("You are answering a question using a person’s conversation history.")


def test_a_chat_answer_prompts_system_message_goes_ahead_of_the_history_and_its_question_after(make_index, photos):
    """A system message in the middle of a conversation is refused or misread by many chat APIs."""
    from llama_index.core.prompts import ChatPromptTemplate

    llm = ScriptedLLM(default="Sure.")
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from the memory below."),
                                               ("user", "Memory:\n{context}\n\nQuestion: {question}")])
    engine = _memory(make_index, photos).as_chat_engine(llm=llm, system_prompt="Be brief.", answer_prompt=prompt)
    engine.chat("Where did I move to?")
    engine.chat("And what is my cat called?")
    messages = llm.chats[-1]
    assert [m.role for m in messages] == ["system", "system", "user", "assistant", "user"]
    assert [m.content for m in messages[:4]] == ["Be brief.", "Answer from the memory below.", "Where did I move to?", "Sure."]
    assert messages[-1].content.startswith("Memory:\n[seen ") and messages[-1].content.endswith("Question: And what is my cat called?")


def test_chat_engine_retrieves_with_the_attached_image(make_index, photos):
    index = _memory(make_index, photos)
    llm = ScriptedLLM(default="That is Mochi.")
    engine = index.as_chat_engine(llm=llm, delivery="text")
    response = engine.chat("What is the name of this animal?", image_path=str(photos["chelsea"]), image_caption="a striped cat")
    assert response.metadata["case"] == "image+text->text"
    assert ("It visually matches a conversation image: (D1:IMG_001 -- \"a tabby cat lying down\")") in llm.prompts[-1]
    new_round = _rounds(index)[-1]
    assert new_round.text == "User: What is the name of this animal?\n[Image R6:IMG_1] a striped cat\nAssistant: That is Mochi."
    # The same image as an ImageBlock of a ChatMessage.
    message = ChatMessage(role=MessageRole.USER,
                          blocks=[TextBlock(text="Whose bowl is this?"), ImageBlock(path=photos["coffee"])])
    assert engine.chat(message).metadata["case"] == "image+text->text"
    assert "(D1:IMG_002 -- \"a cup of coffee with latte art\")" in llm.prompts[-1]
    # Text alone takes the text route.
    assert engine.chat("What is the name of my cat?").metadata["case"] == "text->text"
    with pytest.raises(VMemInputError, match="image_path"):
        engine.chat(message, image_path=str(photos["rocket"]))
    with pytest.raises(VMemInputError, match="image_path"):
        engine.chat("What is this?", image_path=str(photos["rocket"]) + ".missing")
    with pytest.raises(VMemInputError, match="image_caption"):
        engine.chat("What is this?", image_caption="a rocket")
    assert len(index) == 8


def test_chat_engine_pixels_delivery_sends_the_labelled_attachment(make_index, photos):
    llm = ScriptedLLM(default="Mochi.")
    engine = _memory(make_index, photos).as_chat_engine(llm=llm, delivery="pixels", image_budget=ImageBudget(2, 128))
    engine.chat("What is the name of this animal?", image_path=str(photos["chelsea"]))
    blocks = llm.chats[-1][-1].blocks
    [i] = [i for i, b in enumerate(blocks) if isinstance(b, TextBlock) and "the user's ATTACHED picture]" in b.text]
    assert isinstance(blocks[i + 1], ImageBlock)
    assert "[image D1:IMG_001]" in "".join(b.text for b in blocks if isinstance(b, TextBlock))


@pytest.mark.parametrize("mode", ["chat", "stream_chat", "achat", "astream_chat"])
def test_every_chat_variant_appends_exactly_one_round_in_one_chat_trace(make_index, photos, mode):
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.callbacks.base_handler import BaseCallbackHandler

    class Traces(BaseCallbackHandler):
        """Which traces a turn opens: a stock chat engine's turn is one "chat" trace, its retrieval inside it."""

        def __init__(self):
            super().__init__([], [])
            self.started = []

        def start_trace(self, trace_id=None):
            self.started.append(trace_id)

        def end_trace(self, trace_id=None, trace_map=None):
            pass

        def on_event_start(self, event_type, payload=None, event_id="", parent_id="", **kwargs):
            return event_id

        def on_event_end(self, event_type, payload=None, event_id="", **kwargs):
            pass

    index = _memory(make_index, photos)
    llm = StreamingLLM(default="Her name is Mochi, a tabby.")
    traces = Traces()
    engine = index.as_chat_engine(llm=llm, session_id="S", callback_manager=CallbackManager([traces]))

    async def consume(response):
        return "".join([d async for d in response.async_response_gen()])

    async def run_async():
        if mode == "achat":
            return str(await engine.achat("What is my cat called?", image_path=str(photos["chelsea"])))
        return await consume(await engine.astream_chat("What is my cat called?", image_path=str(photos["chelsea"])))

    if mode == "chat":
        answer = str(engine.chat("What is my cat called?", image_path=str(photos["chelsea"])))
    elif mode == "stream_chat":
        answer = "".join(engine.stream_chat("What is my cat called?", image_path=str(photos["chelsea"])).response_gen)
    else:
        answer = asyncio.run(run_async())
    assert answer == "Her name is Mochi, a tabby."
    assert traces.started == ["chat"]
    assert len(index) == 6
    [new] = [r for r in _rounds(index) if r.metadata["session_id"] == "S"]
    assert new.text == "User: What is my cat called?\n[Image S:1:IMG_1]\nAssistant: Her name is Mochi, a tabby."
    assert new.metadata["image_ids"] == ["S:1:IMG_1"]
    assert [(m.role, m.content) for m in engine.chat_history] == [  # the picture named as the memory names it
        (MessageRole.USER, "What is my cat called?\n[Image S:1:IMG_1]"), (MessageRole.ASSISTANT, "Her name is Mochi, a tabby.")]


UNSTORABLE = {
    "audio_without_transcript": (lambda photos: [TextBlock(text="Listen to my song."),
                                                 AudioBlock(audio=b"RIFF....WAVEfmt ", format="wav")],
                                 r"^message 1 audio 1: audio needs a transcript"),
    "second_image_corrupt": (lambda photos: [TextBlock(text="Are these the same cat?"), ImageBlock(path=photos["chelsea"]),
                                             ImageBlock(image=b"not an image")], r"^message 1 image 2: not an image"),
    "image_block_empty": (lambda photos: [TextBlock(text="Look!"), ImageBlock()],
                          r"^message 1 image 1: has neither pixels nor a caption"),
}


@pytest.mark.parametrize("bad", sorted(UNSTORABLE))
@pytest.mark.parametrize("mode", ["chat", "stream_chat", "achat", "astream_chat"])
def test_a_message_the_memory_cannot_store_fails_before_the_llm_is_called(make_index, photos, mode, bad):
    """Audio without a transcript, or an image after the first that cannot be read, is named before
    any LLM call; the chat history and the memory stay as they were (even when the call passes a new
    history), and the next turn answers and is stored."""
    index = _memory(make_index, photos)
    llm = StreamingLLM(default="Noted.")
    engine = index.as_chat_engine(llm=llm, session_id="S")

    def turn(message, **kwargs):
        if mode == "chat":
            return str(engine.chat(message, **kwargs))
        if mode == "stream_chat":
            return "".join(engine.stream_chat(message, **kwargs).response_gen)

        async def run():
            if mode == "achat":
                return str(await engine.achat(message, **kwargs))
            return "".join([d async for d in (await engine.astream_chat(message, **kwargs)).async_response_gen()])

        return asyncio.run(run())

    assert turn("My sister lives in Bergen.") == "Noted."
    history, rounds = engine.chat_history, len(index)
    llm.prompts.clear()
    llm.chats.clear()
    blocks, error = UNSTORABLE[bad]
    with pytest.raises(VMemInputError, match=error):
        turn(ChatMessage(role=MessageRole.USER, blocks=blocks(photos)),
             chat_history=[ChatMessage(role=MessageRole.USER, content="A new history.")])
    assert llm.prompts == [] and llm.chats == []
    assert engine.chat_history == history and len(index) == rounds
    assert turn("Where does my sister live?") == "Noted."
    assert [r.text for r in _rounds(index) if r.metadata["session_id"] == "S"] == [
        "User: My sister lives in Bergen.\nAssistant: Noted.", "User: Where does my sister live?\nAssistant: Noted."]
    assert len(index) == rounds + 1


def test_a_chat_engine_refuses_a_memory_block_that_would_store_each_exchange_twice(make_index, photos):
    index = _memory(make_index, photos)
    memory = Memory.from_defaults(memory_blocks=[VMemMemoryBlock(index=index)])
    with pytest.raises(VMemInputError, match="^memory: has a VMemMemoryBlock on this memory"):
        index.as_chat_engine(llm=StreamingLLM(default="Noted."), memory=memory)
    other = make_index(memory_id="notes")  # another memory's block is the user's choice
    assert index.as_chat_engine(llm=StreamingLLM(default="Noted."),
                                memory=Memory.from_defaults(memory_blocks=[VMemMemoryBlock(index=other)])) is not None


@pytest.mark.parametrize("mode", ["chat", "stream_chat", "achat", "astream_chat"])
def test_memory_blocks_recall_for_the_turn_being_answered(make_index, photos, mode):
    """A memory block over another memory recalls for this turn's question, from the first turn on."""
    index = _memory(make_index, photos)
    household = make_index(memory_id="household")
    household.add_rounds([{"user": "Our wifi password is tulip-77.", "assistant": "Saved.", "session_id": "H"},
                          {"user": "The plumber is Jonas, phone 555-0199.", "assistant": "Saved.", "session_id": "H"}])
    memory = Memory.from_defaults(token_limit=4000, memory_blocks=[VMemMemoryBlock(index=household, session_id="H")])
    llm = StreamingLLM(default="Noted.")
    engine = index.as_chat_engine(llm=llm, memory=memory, session_id="S")

    async def run(question):
        if mode == "achat":
            return await engine.achat(question)
        return "".join([d async for d in (await engine.astream_chat(question)).async_response_gen()])

    for question, fact in [("What is the wifi password?", "tulip-77"), ("Who is our plumber?", "Jonas")]:
        if mode == "chat":
            engine.chat(question)
        elif mode == "stream_chat":
            "".join(engine.stream_chat(question).response_gen)
        else:
            asyncio.run(run(question))
        assert fact in llm.prompts[-1]


class BrokenStreamLLM(StreamingLLM):
    """Streams one word, then its connection drops."""

    def stream_complete(self, prompt, formatted=False, **kwargs):
        yield CompletionResponse(text="Her", delta="Her")
        raise ConnectionError("connection reset mid-stream")


@pytest.mark.parametrize("mode", ["stream_chat", "astream_chat"])
def test_a_stream_that_fails_writes_nothing_as_a_failed_chat_does(make_index, photos, mode):
    index = _memory(make_index, photos)
    engine = index.as_chat_engine(llm=BrokenStreamLLM(default="Her name is Mochi."), session_id="S")
    rounds = len(index)

    async def consume():
        return "".join([d async for d in (await engine.astream_chat("What is my cat called?")).async_response_gen()])

    with pytest.raises(ConnectionError, match="connection reset"):
        if mode == "stream_chat":
            "".join(engine.stream_chat("What is my cat called?").response_gen)
        else:
            asyncio.run(consume())
    assert engine.chat_history == [] and len(index) == rounds


@pytest.mark.parametrize("slow", ["round", "history"])
@pytest.mark.parametrize("mode", ["achat", "astream_chat"])
def test_a_turn_cancelled_while_it_is_stored_ends_in_both_the_memory_and_the_history(make_index, photos, monkeypatch, mode, slow):
    """A timeout (``asyncio.wait_for``) that lands while the exchange is being written, to the
    memory or to the chat history: the round's write cannot be stopped once begun, so the history's
    waits for it, then the cancellation goes on. Before, the memory held a turn the history never
    got, or (streamed) got without its reply."""
    import threading
    import time

    index = _memory(make_index, photos)
    engine = index.as_chat_engine(llm=StreamingLLM(default="Noted."), session_id="S")
    writing, remember, put = threading.Event(), engine._remember, Memory.aput_messages

    def slow_remember(*args):
        writing.set()
        time.sleep(0.3)  # a write that takes a while: images to encode, a server far away
        return remember(*args)

    async def slow_put(memory, messages):
        writing.set()
        await asyncio.sleep(0.3)  # a chat store on a server
        return await put(memory, messages)

    if slow == "round":
        monkeypatch.setattr(engine, "_remember", slow_remember)
    else:
        monkeypatch.setattr(Memory, "aput_messages", slow_put)
    rounds = len(index)

    async def turn():
        if mode == "achat":
            return await engine.achat("My sister lives in Bergen.")
        response = await engine.astream_chat("My sister lives in Bergen.")
        return await response.awrite_response_to_history_task

    async def cancel_while_writing():
        task = asyncio.ensure_future(turn())
        await asyncio.to_thread(writing.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_while_writing())
    assert len(index) == rounds + 1
    assert [m.content for m in engine.chat_history] == ["My sister lives in Bergen.", "Noted."]


# -- LlamaIndex's ContextChatEngine over the retriever ----------------------------------------


def test_context_chat_engine_takes_the_retriever_for_text_only(make_index, photos):
    index = _memory(make_index, photos)
    llm = ScriptedLLM(default="You moved to Lisbon.")
    stock = ContextChatEngine.from_defaults(retriever=index.as_retriever(), llm=llm)
    response = stock.chat("Where did I move to?")
    assert str(response) == "You moved to Lisbon."
    assert "User: I moved to Lisbon." in llm.prompts[-1]
    assert response.source_nodes[0].node.metadata["round_key"] == "D2:1"
    # The difference: the stock engine retrieves with the text only and writes nothing to the memory.
    nodes = stock.chat("What is the name of this animal?").source_nodes
    assert nodes and {n.node.metadata["vmem"]["case"] for n in nodes} == {"text->text"}
    assert len(index) == 5
    vmem = index.as_chat_engine(llm=llm).chat("What is the name of this animal?", image_path=str(photos["chelsea"]))
    assert vmem.metadata["case"] == "image+text->text"
    assert len(index) == 6


# -- the agent example ------------------------------------------------------------------------


def _example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agent_example_recalls_turns_flushed_from_short_term_memory(make_index):
    example = _example("agent")
    index = make_index()
    llm = ScriptedLLM({"user: Where does my sister live?": "Thought: I can answer without a tool.\nAnswer: In Bergen."},
                      default="Thought: I can answer without a tool.\nAnswer: Noted.")
    agent, memory = example.build_agent(index, llm, token_limit=80)
    turns = ["My sister Ingrid lives in Bergen.", "I started learning the violin.", "My bike is red.",
             "Where does my sister live?"]

    async def converse():
        return [await example.run(agent, memory, turn) for turn in turns]

    assert asyncio.run(converse()) == ["Noted.", "Noted.", "Noted.", "In Bergen."]
    # The first turns were flushed from the chat history into V-Mem ...
    assert "User: My sister Ingrid lives in Bergen.\nAssistant: Noted." in [r.text for r in _rounds(index)]  # the answer, not ReAct's steps
    last = llm.prompts[-1]
    history = last[last.index("## Current Conversation"):]
    recalled = history[history.index("<long_term_memory>"):history.index("</long_term_memory>")]
    assert "User: My sister Ingrid lives in Bergen." in recalled  # ... and came back through the memory block
    assert "user: My sister Ingrid lives in Bergen." not in history.replace(recalled, "")
