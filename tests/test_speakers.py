"""A question that names one of the memory's two speakers ("What has Melanie painted?") is answered by
what that speaker said: told who the user and the assistant are, the word searches keep to the named
speaker's units. Real MiniLM, on both backends."""

from __future__ import annotations

from llama_index_vmem import VMemConfig, schema
from llama_index_vmem.store import Collection

#: Two friends, Caroline (the user) and Melanie (the assistant), both painting. Caroline's own rounds
#: say "painting" most often; the one Melanie painted says it once.
FRIENDS = [
    {"user": "I finally finished my painting of a sunset over the lake! My best painting yet.",
     "assistant": "Caroline, it's gorgeous. Those warm colours!", "session_id": "D1", "timestamp": "2024-06-17"},
    {"user": "How was your weekend?", "assistant": "Lovely. The kids and I painted a horse on the barn wall.",
     "session_id": "D1", "timestamp": "2024-06-17"},
    {"user": "My painting class starts portraits next week. Painting faces scares me.",
     "assistant": "You'll be great at it.", "session_id": "D1", "timestamp": "2024-06-17"},
    {"user": "Did you watch the match?", "assistant": "No, we went camping by the river.",
     "session_id": "D2", "timestamp": "2024-06-24"},
]
NAMES = {"user_name": "Caroline", "assistant_name": "Melanie"}


def _keys(index, question, **overrides):
    return [n.node.metadata[schema.ROUND_KEY] for n in index.as_retriever(**overrides).retrieve(question)]


def test_a_question_naming_one_speaker_is_answered_by_what_that_speaker_said(make_index):
    index = make_index()
    index.add_rounds(FRIENDS)
    assert _keys(index, "What has Melanie painted?")[0] != "D1:2", "untold who Melanie is, her friend's painting comes first"
    assert _keys(index, "What has Melanie painted?", **NAMES)[0] == "D1:2"
    assert _keys(index, "What has Caroline painted?", **NAMES)[0] in ("D1:1", "D1:3")
    assert _keys(index, "What has Melanie painted?", user_name="Melanie", assistant_name="Melanie")[0] != "D1:2", \
        "both named: anyone's words"


def test_the_names_are_set_once_for_an_index_and_the_reason_is_shown(make_index):
    index = make_index(config=VMemConfig(**NAMES))
    index.add_rounds(FRIENDS)
    top = index.as_retriever(k=1).retrieve("What has Melanie painted?")[0]
    assert top.node.metadata[schema.ROUND_KEY] == "D1:2"
    assert "names Melanie (assistant): the word searches keep to Melanie's own units" in top.node.metadata["vmem"]["reasons"]


def test_a_store_search_kept_to_roles_finds_only_units_spoken_in_them(make_index):
    index = make_index()
    index.add_rounds(FRIENDS)
    found = index.store.scroll(Collection.TEXT, index.scope(roles=("assistant",)))
    assert len(found) == len(FRIENDS) and {h.payload[schema.ROLE] for h in found} == {"assistant"}
    everyone = index.store.scroll(Collection.TEXT, index.scope())
    assert {h.payload[schema.ROLE] for h in everyone} == {"user", "assistant"}
