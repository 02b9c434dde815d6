"""How vmem-bench turns V-Mem's returned rounds into LoCoMo turn ids, on a hand-built conversation.

V-Mem returns rounds; a LoCoMo round holds several turns and the evidence is one of them. The
returned rounds' matched turns (those whose units a signal's candidate pool held, as
``metadata["vmem"]["pool_units"]`` names them) come first, then the rest of those rounds' turns."""

from typing import Dict, List, Optional

import pytest
from llama_index.core.schema import TextNode

from llama_index_vmem import schema
from llama_index_vmem.bench.data import BenchConversation, BenchImage, BenchQuestion, BenchRound, EvidencePiece
from llama_index_vmem.bench.systems import _matched_first

ANN_1, BOB_2, BOB_3 = "Ann: I adopted a greyhound.", "Bob: Lovely!", "Bob: Here is mine."
CAPTION = "a photo of a tabby cat on a sofa"
ANN_4, BOB_5 = "Ann: We hiked at Mount Tam on Sunday.", "Bob: I stayed home and painted."


def _conversation(gold: List[str]) -> BenchConversation:
    """Two rounds as ``load_locomo`` makes them: Ann's turn and Bob's replies, Bob's photo with D1:3."""
    first = BenchRound("D1:1", "D1", "8 May, 2023", ANN_1, f"{BOB_2}\n{BOB_3}",
                       [BenchImage("D1:3:IMG", CAPTION, role="assistant")], ["D1:1", "D1:2", "D1:3"],
                       [EvidencePiece("user", "D1:1", ANN_1), EvidencePiece("assistant", "D1:2", BOB_2),
                        EvidencePiece("assistant", "D1:3", BOB_3), EvidencePiece("D1:3:IMG", "D1:3", CAPTION)])
    second = BenchRound("D1:4", "D1", "8 May, 2023", ANN_4, BOB_5, [], ["D1:4", "D1:5"],
                        [EvidencePiece("user", "D1:4", ANN_4), EvidencePiece("assistant", "D1:5", BOB_5)])
    question = BenchQuestion("c#0", "What did Bob do on Sunday?", "single-hop", gold, "painted")
    return BenchConversation("c", "locomo", [first, second], [question], speakers=("Ann", "Bob"))


def _returned(key: str, *matched: Dict[str, Optional[str]]) -> TextNode:
    """A returned round as V-Mem hands it over: its key, and the units its signals' pools held."""
    pool = [{"unit": f"{key}/{n}", **about} for n, about in enumerate(matched)]
    return TextNode(text=key, metadata={schema.ROUND_KEY: key, "vmem": {"pool_units": pool}})


USER = {"role": "user", "image_id": None}
ASSISTANT = {"role": "assistant", "image_id": None}
PHOTO = {"role": "image", "image_id": "D1:3:IMG"}


@pytest.mark.parametrize("gold", [[], ["D1:1"], ["D1:3"], ["D1:4", "D1:5"], ["D9:9"]])
def test_the_turn_ids_never_depend_on_the_gold_evidence(gold):
    """The same returned rounds give the same ids whatever the question's evidence is."""
    rounds = [_returned("D1:1", USER), _returned("D1:4", ASSISTANT)]
    assert _matched_first(_conversation(gold), rounds) == ["D1:1", "D1:5", "D1:2", "D1:3", "D1:4"]


def test_matched_turns_come_first_across_rounds():
    """Round D1:4 matched by its assistant span lists Bob's D1:5 before Ann's D1:4; and round D1:4's
    matched turn, though its round ranks second, comes before round D1:1's unmatched Bob turns."""
    conv = _conversation(["D1:5"])
    assert _matched_first(conv, [_returned("D1:4", ASSISTANT)]) == ["D1:5", "D1:4"]
    assert _matched_first(conv, [_returned("D1:1", USER), _returned("D1:4", ASSISTANT)]) == [
        "D1:1", "D1:5",  # each round's matched turns, rounds in rank order
        "D1:2", "D1:3", "D1:4"]  # then the rest of those rounds' turns, in round and turn order


def test_a_caption_unit_credits_the_turn_that_shared_the_photo():
    """Bob's photo (a unit of role image) matched alone credits D1:3, the turn that shared it, not his
    other line in the span, D1:2; his text span matched credits both his turns, the photo's with it."""
    conv = _conversation(["D1:3"])
    assert _matched_first(conv, [_returned("D1:1", PHOTO)]) == ["D1:3", "D1:1", "D1:2"]
    assert _matched_first(conv, [_returned("D1:1", ASSISTANT)]) == ["D1:2", "D1:3", "D1:1"]
    assert _matched_first(conv, [_returned("D1:1", PHOTO, USER)]) == ["D1:1", "D1:3", "D1:2"]  # turn order within a round
