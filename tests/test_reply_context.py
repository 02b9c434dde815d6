"""A reply is found by what it answers: each text unit is also searched read after the exchange
before it (``schema.reply_context_texts``), in a BM25 list of its own."""

from __future__ import annotations

import numpy as np
from llama_index.core.schema import TextNode

from llama_index_vmem import schema
from llama_index_vmem.store import Collection

CAT = [
    {"user": "Guess what, I adopted a cat!", "assistant": "How exciting! What did you name her?",
     "session_id": "D1", "timestamp": "2024-06-17"},
    {"user": "Mochi, because she is white and round.", "assistant": "That suits her.",
     "session_id": "D1", "timestamp": "2024-06-17"},
    {"user": "My sister also wants a cat, a black one.", "assistant": "Two cats in the family!",
     "session_id": "D1", "timestamp": "2024-06-17"},
    {"user": "I bought a new lamp for the desk.", "assistant": "Good light helps.",
     "session_id": "D2", "timestamp": "2024-06-20"},
]


def _unit(text: str, i: int, timestamp: str = "2024-06-17") -> TextNode:
    return TextNode(id_=f"u{i}", text=text, metadata={schema.TIMESTAMP: timestamp})


def test_a_unit_is_read_after_the_exchange_before_it_then_its_own_round_so_far():
    user, assistant = _unit("Mochi.", 0), _unit("That suits her.", 1)
    before = "User: I adopted a cat!\nAssistant: What did you name her?"
    assert schema.reply_context_texts([user, assistant], before, dated=False) == {
        "u0": before + "\nMochi.",
        "u1": before + "\nMochi.\nThat suits her.",
    }
    assert schema.reply_context_texts([user], "", dated=True) == {"u0": "[2024-06-17] Mochi."}, \
        "a conversation's first round has nothing before it"


def _context_vectors(index):
    return {p.payload[schema.ROUND_KEY] + "/" + p.payload[schema.ROLE]: p.vectors[schema.TEXT_CONTEXT_SPARSE]
            for p in index.store.points(Collection.TEXT, index.scope())}


def _same(a, b) -> bool:
    return set(a) == set(b) and all(a[k].indices == b[k].indices and np.allclose(a[k].values, b[k].values) for k in a)


def test_a_round_added_alone_reads_the_stored_round_before_it_as_a_batch_does(open_memory):
    """The round before may be stored already (a chat adds one exchange at a time): its context is the same."""
    batch, one_by_one = open_memory("batch"), open_memory("one")
    batch.add_rounds(CAT)
    for r in CAT:
        one_by_one.add_rounds([r])
    assert _same(_context_vectors(batch), _context_vectors(one_by_one))


def test_the_answering_round_is_found_through_its_context_and_carries_from_the_question_it_answers(open_memory):
    """D1:3 says "cat" too, and the dense search ranks it first; the answer, whose own words say
    neither "cat" nor "name", is found by its context and carries from the question it answers."""
    index = open_memory()
    index.add_rounds(CAT)
    hits = index.as_retriever(k=2).retrieve("What is my cat's name?")
    assert [h.node.metadata[schema.ROUND_KEY] for h in hits] == ["D1:2", "D1:1"], "the answer, then the question"
    answer = hits[0].node.metadata["vmem"]
    assert "text_context_bm25" in answer["ranks"] and "text_bm25" not in answer["ranks"]
    assert answer["follows"] == "D1:1"
    plain = index.as_retriever(k=2, answer_weight=0).retrieve("What is my cat's name?")
    assert [h.node.metadata[schema.ROUND_KEY] for h in plain] == ["D1:1", "D1:3"], "without the carry the distractor wins"


def test_a_forgotten_exchange_no_longer_finds_the_round_after_it(open_memory):
    """The round after a forgotten one is read anew after the round now before it: the forgotten
    words are gone from every vector, not only from the forgotten round's."""
    index = open_memory()
    index.add_rounds(CAT)
    before = _context_vectors(index)
    assert index.forget(["D1:1"]) == 1
    after = _context_vectors(index)
    fresh = open_memory("fresh")
    fresh.add_rounds([dict(r, round_key=k) for r, k in zip(CAT[1:], ["D1:2", "D1:3", "D2:1"])])  # as if never said
    assert _same(after, _context_vectors(fresh))
    assert not _same({"x": before["D1:2/user"]}, {"x": after["D1:2/user"]})
    assert not any("text_context_bm25" in h.node.metadata["vmem"]["ranks"] for h in index.as_retriever(k=3).retrieve("adopted"))
