"""Benchmark loaders on small files written by the tests, and on the shipped data's shape."""

import json

import pytest
from PIL import Image

from llama_index_vmem.bench.data import CAPTION, MIXED, PIXELS, load_locomo, load_memgallery, parse_evidence
from llama_index_vmem.bench.metrics import count_tokens


def _memgallery(tmp_path, with_pixels):
    (tmp_path / "image" / "T").mkdir(parents=True)
    if with_pixels:
        Image.new("RGB", (8, 8), "red").save(tmp_path / "image" / "T" / "D1_IMG_001.png")
        Image.new("RGB", (8, 8), "blue").save(tmp_path / "image" / "T" / "QA_IMG_001.png")
    data = {
        "character_profile": {"name": "Ana"},
        "multi_session_dialogues": [{"session_id": "D1", "date": "2024-06-17", "dialogues": [
            {"round": "D1:1", "user": "hi", "assistant": "hello"},
            {"round": "D1:2", "user": "look", "assistant": "nice", "image_id": ["D1:IMG_001"],
             "input_image": ["../image/T/D1_IMG_001.png"], "image_caption": ["a red square"]},
        ]}],
        "human-annotated QAs": [
            {"point": "VS", "question": "Which image is red?", "answer": "D1:IMG_001", "clue": ["D1:2"]},
            {"point": "TTL", "question": "What is this?", "answer": "red", "clue": ["D1:2"],
             "question_image": "../image/T/QA_IMG_001.png", "image_caption": "a blue square"},
            {"point": "AR", "question": "Did I mention cats?", "answer": "Not mentioned.", "clue": []},
        ],
    }
    (tmp_path / "dialog").mkdir()
    path = tmp_path / "dialog" / "T.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("with_pixels, mode", [(True, PIXELS), (False, CAPTION)])
def test_memgallery_loader(tmp_path, with_pixels, mode):
    conv = load_memgallery(_memgallery(tmp_path, with_pixels))
    assert conv.image_mode == mode
    assert [r.key for r in conv.rounds] == ["D1:1", "D1:2"]
    image = conv.rounds[1].images[0]
    assert image.image_id == "D1:IMG_001" and image.caption == "a red square"
    assert (image.path is not None) is with_pixels
    q = conv.questions[1]
    assert q.category == "TTL" and q.gold == ["D1:2"] and q.image_caption == "a blue square"
    assert (q.image_path is not None) is with_pixels
    assert conv.rounds[1].as_round_dict()["images"][0].get("path") == (str(image.path) if with_pixels else None)
    # evidence is the round here: a context holding its user line and picture holds those parts of it
    r = conv.rounds[1]
    tokens = {span: count_tokens(text) for span, text in [("user", r.user), ("assistant", r.assistant), ("pic", "a red square")]}
    assert conv.delivered([("D1:2", "user"), ("D1:2", "D1:IMG_001")]) == pytest.approx(
        {"D1:2": (tokens["user"] + tokens["pic"]) / sum(tokens.values())})
    assert conv.delivered([("D1:2", "user"), ("D1:2", "assistant"), ("D1:2", "D1:IMG_001")]) == {"D1:2": 1.0}
    assert conv.delivered([("D1:2", "user"), ("D1:2", None), ("D1:9", None)]) == {"D1:2": 1.0}  # the whole round; no such round
    with pytest.raises(ValueError, match="round D1:2 has no span D1:IMG_9"):  # a unit the scorer cannot place
        conv.delivered([("D1:2", "D1:IMG_9")])


def test_memgallery_image_root(tmp_path):
    path = _memgallery(tmp_path, True)
    moved = tmp_path / "elsewhere"
    (tmp_path / "image").rename(moved)
    assert load_memgallery(path).image_mode == CAPTION
    assert load_memgallery(path, image_root=moved).image_mode == PIXELS


def test_a_missing_image_file_runs_that_image_as_its_caption_and_says_so(tmp_path, caplog):
    """One file missing: the rest keep their pixels, and the missing one is named, not a failed load."""
    path = _memgallery(tmp_path, True)
    data = json.loads(path.read_text())
    data["multi_session_dialogues"][0]["dialogues"][0].update(
        image_id=["D1:IMG_009"], input_image=["../image/T/gone.png"], image_caption=["a lost photo"])
    path.write_text(json.dumps(data))
    conv = load_memgallery(path)
    assert conv.image_mode == MIXED
    assert conv.image_modes == {PIXELS: ["D1:IMG_001", "T#1:question"], CAPTION: ["D1:IMG_009"]}
    assert conv.rounds[0].images[0].path is None and conv.rounds[0].images[0].caption == "a lost photo"
    assert "D1:IMG_009" in caplog.text


def test_memgallery_per_image_fields_are_read_as_the_harness_reads_them(tmp_path, caplog):
    """A short caption list leaves an image captionless, not dropped; a clue given as one string is one id."""
    path = _memgallery(tmp_path, True)
    data = json.loads(path.read_text())
    data["multi_session_dialogues"][0]["dialogues"][1].update(
        image_id=["D1:IMG_001", "D1:IMG_002", "D1:IMG_003"], input_image=["../image/T/D1_IMG_001.png", "../image/T/D1_IMG_001.png"],
        image_caption=["a red square"])
    data["human-annotated QAs"][0]["clue"] = "D1:2"
    path.write_text(json.dumps(data))
    conv = load_memgallery(path)
    images = conv.rounds[1].images
    assert [(i.image_id, i.caption, i.path is not None) for i in images] == [("D1:IMG_001", "a red square", True),
                                                                             ("D1:IMG_002", "", True)]
    assert "D1:IMG_003 has neither a file nor a caption" in caplog.text
    assert conv.questions[0].gold == ["D1:2"] and conv.malformed_evidence == 1


def test_locomo_rounds_group_speaker_a_with_following_b_turns(tmp_path):
    sample = {"sample_id": "conv-x", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Bob", "dia_id": "D1:1", "text": "hey"},
            {"speaker": "Ann", "dia_id": "D1:2", "text": "hi Bob"},
            {"speaker": "Bob", "dia_id": "D1:3", "text": "look", "blip_caption": "a photo of a dog"},
            {"speaker": "Bob", "dia_id": "D1:4", "text": "cute right"},
            {"speaker": "Ann", "dia_id": "D1:5", "text": "very"},
            {"speaker": "Ann", "dia_id": "D1:6", "text": "and mine?"},
        ]},
        "qa": [
            {"question": "q1", "answer": "a", "evidence": ["D1:3"], "category": 4},
            {"question": "q2", "answer": 2022, "evidence": ["D1:2; D1:4", "D:1:5", "D"], "category": 1},
            {"question": "q3", "adversarial_answer": "x", "evidence": ["D1:2"], "category": 5},
        ]}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    [conv] = load_locomo(path)
    assert [r.turn_ids for r in conv.rounds] == [["D1:1"], ["D1:2", "D1:3", "D1:4"], ["D1:5"], ["D1:6"]]  # each of Ann's turns opens a round
    assert conv.rounds[1].user == "Ann: hi Bob" and conv.rounds[1].assistant == "Bob: look\nBob: cute right"
    assert conv.rounds[1].images[0].caption == "a photo of a dog" and conv.rounds[1].images[0].role == "assistant"
    assert conv.rounds[1].timestamp == "1:56 pm on 8 May, 2023"
    assert [q.category for q in conv.questions] == ["single-hop", "multi-hop"]  # adversarial excluded
    [(reason, category)] = conv.not_asked  # and counted, with why, for the report
    assert category == "adversarial" and conv.not_asked[reason, category] == 1 and "nothing to retrieve" in reason
    assert conv.questions[1].gold == ["D1:2", "D1:4", "D1:5"] and conv.questions[1].answer == "2022"
    assert conv.malformed_evidence == 3
    assert conv.turn_ids(["D1:2", "D1:5"]) == ["D1:2", "D1:3", "D1:4", "D1:5"]
    # a span carries its own turns only: a context holding Ann's line does not hold Bob's replies,
    # and Bob's photo without his line holds the photo's share of that turn
    line, photo = count_tokens("Bob: look"), count_tokens("a photo of a dog")
    assert conv.delivered([("D1:2", "user"), ("D1:2", "D1:3:IMG"), ("D1:1", "assistant")]) == pytest.approx(
        {"D1:2": 1.0, "D1:3": photo / (line + photo), "D1:1": 1.0})
    assert conv.delivered([("D1:2", "assistant"), ("D1:5", None)]) == pytest.approx(
        {"D1:3": line / (line + photo), "D1:4": 1.0, "D1:5": 1.0})


def test_an_id_two_rounds_claim_keeps_its_best_share():
    from llama_index_vmem.bench.data import BenchConversation, BenchRound

    rounds = [BenchRound("D1:1", "D1", "", "a long user line about the trains to Leeds and York", "ok", [], ["D1:1"]),
              BenchRound("D1:1b", "D1", "", "more", "a reply of some length about the trains", [], ["D1:1"])]  # a repeated id
    conv = BenchConversation("c", "memgallery", rounds, [])
    assert conv.delivered([("D1:1", "assistant"), ("D1:1b", None)]) == {"D1:1": 1.0}  # a part did not overwrite the whole
    first, second = (rounds[0].evidence_shares({"user"})["D1:1"], rounds[1].evidence_shares({"assistant"})["D1:1"])
    assert first != second
    for spans in ([("D1:1", "user"), ("D1:1b", "assistant")], [("D1:1b", "assistant"), ("D1:1", "user")]):
        assert conv.delivered(spans) == {"D1:1": max(first, second)}


def test_a_memgallery_image_without_an_id_of_its_own_is_refused_when_read(tmp_path):
    """V-Mem names a blank id and stores an int as text, so the scorer could not place that picture's unit."""
    for ids in (["D1:IMG_001", "D1:IMG_001"], [""], [None], [7]):
        data = {"multi_session_dialogues": [{"session_id": "D1", "date": "2024-06-17", "dialogues": [
            {"round": "D1:1", "user": "look", "assistant": "nice", "image_id": ids, "image_caption": ["a dog"] * len(ids)}]}]}
        path = tmp_path / "d.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=r"round D1:1: image \d needs an image_id of its own"):
            load_memgallery(path)


def test_parse_evidence():
    assert parse_evidence(["D8:6; D9:17", "D", "D:11:26", "D2:3"]) == (["D8:6", "D9:17", "D11:26", "D2:3"], 3)
    assert parse_evidence("D1:4") == (["D1:4"], 1)  # one id given bare: read whole, counted as malformed
    assert parse_evidence(None) == ([], 0) and parse_evidence([]) == ([], 0)


def test_locomo_evidence_given_bare_or_null_is_read_as_memgallery_clues_are(tmp_path):
    turns = [{"speaker": "Ann", "dia_id": "D1:1", "text": "hi"}, {"speaker": "Bob", "dia_id": "D1:2", "text": "hey"}]
    sample = {"sample_id": "c", "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", "session_1": turns},
              "qa": [{"question": "q1", "answer": "a", "evidence": "D1:2", "category": 1},
                     {"question": "q2", "answer": "b", "evidence": None, "category": 1}]}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    [conv] = load_locomo(path)
    assert [q.gold for q in conv.questions] == [["D1:2"], []] and conv.malformed_evidence == 1


def test_image_modes_describe_the_questions_that_run(tmp_path):
    """A run cut to its first questions reports the images of those, not of every question loaded."""
    path = _memgallery(tmp_path, True)
    data = json.loads(path.read_text())
    data["human-annotated QAs"][1]["question_image"] = "../image/T/gone.png"
    path.write_text(json.dumps(data))
    conv = load_memgallery(path)
    assert conv.image_mode == MIXED
    conv.questions = conv.questions[:1]
    assert conv.image_mode == PIXELS and conv.image_modes[CAPTION] == []
