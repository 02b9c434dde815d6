"""Questions answered by a round other than the one that names their subject ("Her name is Mochi."
after "Here is my new cat!"): the retriever must return the round a person would point to, not the
round that merely shares the question's words. Real MiniLM; hand-written conversations, one memory each.
"""

from __future__ import annotations

from typing import Dict

import pytest
from answer_cases import CASES, UNSEEN, round_dicts, round_keys

from llama_index_vmem import VMemIndex

ALL = CASES + UNSEEN


@pytest.fixture(scope="module")
def memories(tmp_path_factory, minilm, tiny_siglip):
    """One store, one memory per case, built once for the module. BM25's IDF is computed over the
    whole store (docs/server.md), so each case's keyword scores also count the other cases' words,
    as a user's do among many users' memories; a store per case costs about 1 s more each."""
    path = tmp_path_factory.mktemp("answers") / "memory"
    opened: Dict[str, VMemIndex] = {}
    try:
        for case in ALL:
            index = VMemIndex.from_defaults(path=path, memory_id=case.name, embed_model=minilm, image_encoder=tiny_siglip)
            opened[case.name] = index
            index.add_rounds(round_dicts(case))
        yield opened
    finally:
        for index in opened.values():
            index.close()


def test_the_cases_are_well_formed():
    assert len(CASES) >= 25 and len(UNSEEN) >= 25 and len({c.name for c in ALL}) == len(ALL)
    for case in ALL:
        keys = [f"{sid}:{i + 1}" for sid, _, exchanges in case.sessions for i in range(len(exchanges))]
        assert case.answer in keys, case.name
        assert 5 <= len(keys) <= 14, case.name


#: Share of each list whose answering round must be in the top 2. The goal is 0.9. Without an LLM the
#: retriever finds 70 of the 80 cases written with the rules, and 168 of the 264 written without them
#: (the last two sets, scored once with no change after: 12 and 14 of 24). It misses answers in a
#: later session than their subject, answers four rounds or more after it with a round about someone
#: else's between ("Her friend Joan had hers done on the 2nd"), and answers in words the router's
#: answer kinds do not know ("We've put Hillside first", "Back room of the Mill Lane community centre").
FLOORS = {"written with the rules": (CASES, 0.85), "written without them": (UNSEEN, 0.6)}


@pytest.mark.parametrize("cases, floor", FLOORS.values(), ids=FLOORS.keys())
def test_the_answering_round_is_in_the_top_two(memories, cases, floor):
    missed = []
    for case in cases:
        keys = round_keys(memories[case.name].as_retriever(k=2).retrieve(case.question))
        if case.answer not in keys[:2]:
            missed.append(f"  [{case.kind}] {case.name}: {case.question!r} expected {case.answer}, got {keys[:2]}")
    found = len(cases) - len(missed)
    assert found >= floor * len(cases), (
        f"answering round in the top 2 for {found}/{len(cases)} cases (need {floor:.0%}); missed:\n" + "\n".join(missed))


def test_a_reply_gives_way_to_the_round_that_holds_what_is_asked(memories):
    """"What did they say?" / "A sprain, nothing broken." answers the vet round, but not the question
    "What was the vet bill?": "The bill was 95 ..." holds a price and comes after it in the thread,
    so the sprain round loses its share of the vet round and the bill round carries that share."""
    index, question = memories["vet-bill"], "What was the vet bill for the cat?"
    hits = index.as_retriever(k=3).retrieve(question)
    by_key = {h.node.metadata["round_key"]: h.node.metadata["vmem"] for h in hits}
    assert round_keys(hits)[0] == "D1:3", round_keys(hits)
    assert by_key["D1:3"]["follows"] == "D1:1" and by_key["D1:3"]["ranks"]["holds_answer"] == 1
    assert by_key.get("D1:2", {}).get("follows") is None
    without = round_keys(index.as_retriever(k=3, answer_reach=0).retrieve(question))
    assert without[0] == "D1:2", f"without answer kinds the reply carries and leads: {without}"


def test_a_question_for_what_the_user_said_is_answered_by_the_reply_to_the_assistants_question(memories):
    """"What did I tell you was my reason for learning Italian?" asks for a reply: "Honestly, so I can
    chat to Marco's nonna" answers "What made you pick Italian?", and only its place after that
    question says so. Without answer kinds it is not in the top 2."""
    index, question = memories["italian-reason"], "What did I tell you was my reason for learning Italian?"
    hits = index.as_retriever(k=2).retrieve(question)
    assert "D1:3" in round_keys(hits), round_keys(hits)
    assert next(h for h in hits if h.node.metadata["round_key"] == "D1:3").node.metadata["vmem"]["ranks"]["holds_answer"] <= 2
    assert "D1:3" not in round_keys(index.as_retriever(k=2, answer_reach=0).retrieve(question))


def test_news_opening_a_later_session_carries_from_the_session_before(memories):
    """"Rang them. Earliest was Wednesday the 30th at 8:40" opens a session of its own, a day after
    "I'm pretty sure a filling has cracked": no link leads back, yet it answers "When is my dentist
    appointment?". It holds a time and opens carrying on ("them"), so it carries from the best round
    of the session before. Without answer kinds it trails that round."""
    index, question = memories["cracked-filling-dentist"], "When is my dentist appointment?"
    hits = index.as_retriever(k=2).retrieve(question)
    assert round_keys(hits)[0] == "D2:1", round_keys(hits)
    assert hits[0].node.metadata["vmem"]["follows"].startswith("D1:")
    assert round_keys(index.as_retriever(k=1, answer_reach=0).retrieve(question)) != ["D2:1"]


def test_a_round_holding_the_price_asked_for_carries_from_the_round_naming_the_subject(memories):
    """"Half price in the sale, so 450 instead of 900." never says "sofa": it follows "We went with a
    green corduroy three-seater", which follows the round that does. It holds a price, as the
    question asks, so it carries from the best of the three rounds before it and ranks first; the
    in-laws' 3000 sofa, a new thread, does not."""
    index, question = memories["sofa"], "How much did our new sofa cost?"
    hits = index.as_retriever(k=3).retrieve(question)
    first = hits[0].node.metadata
    assert first["round_key"] == "D1:4", round_keys(hits)
    assert first["vmem"]["ranks"]["holds_answer"] == 1 and first["vmem"]["follows"] == "D1:1"
    assert any(r.startswith("asks for a price:") for r in first["vmem"]["reasons"])
    assert all("holds_answer" not in h.node.metadata["vmem"]["ranks"] for h in hits if h.node.metadata["round_key"] == "D1:5")
    assert "D1:4" not in round_keys(index.as_retriever(k=3, answer_reach=0).retrieve(question)), "without it, the answer is not in the top 3"


def test_readme_cat_question_returns_the_mochi_round(tmp_path, minilm, tiny_siglip, photos):
    index = VMemIndex.from_defaults(path=tmp_path / "memory", memory_id="alice", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        index.add_rounds([
            {"user": "Here is my new cat!", "assistant": "A tabby! What's her name?",
             "images": [{"image_id": "IMG_1", "path": str(photos["chelsea"]), "caption": "a tabby cat"}],
             "session_id": "D1", "timestamp": "2024-06-17"},
            {"user": "Her name is Mochi.", "assistant": "Lovely name.",
             "session_id": "D1", "timestamp": "2024-06-17"},
            {"user": "My coffee this morning.", "assistant": "Nice latte art!",
             "images": [{"image_id": "IMG_2", "path": str(photos["coffee"]), "caption": "a cup of coffee"}],
             "session_id": "D2", "timestamp": "2024-07-02"},
        ])
        keys = round_keys(index.as_retriever(k=2).retrieve("What is my cat called?"))
        assert "D1:2" in keys[:2], f"'What is my cat called?' expected D1:2 (\"Her name is Mochi.\"), got {keys}"
    finally:
        index.close()
