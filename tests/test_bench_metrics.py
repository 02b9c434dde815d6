"""Benchmark metrics against hand-computed cases, including the Mem-Gallery harness's edge cases."""

import pytest

from llama_index_vmem.bench.metrics import (
    bleu1, collapse_judge_score, evidence_recall, exact_match, f1, locomo_f1, paired_bootstrap, percentile,
    retrieval_metrics, sign_flip_p, summarize,
)


def test_retrieval_metrics_hand_computed():
    m = retrieval_metrics(["D1:1", "D1:2", "D1:3", "D1:4"], ["D1:2", "D1:9"], k=3)
    assert m == {"precision": 1 / 3, "recall": 1 / 2, "hit": 1.0}


def test_duplicates_are_removed_before_the_cut():
    # The harness dedupes ids when it records them, then cuts at K.
    assert retrieval_metrics(["A", "A", "B", "C"], ["C"], k=3) == {"precision": 1 / 3, "recall": 1.0, "hit": 1.0}


def test_precision_is_over_what_was_returned_when_fewer_than_k():
    assert retrieval_metrics(["A", "B"], ["B"], k=10)["precision"] == 0.5


def test_harness_edge_cases():
    assert retrieval_metrics([], [], k=5) == {"precision": 0.0, "recall": 0.0, "hit": 0.0}
    assert retrieval_metrics([], ["A"], k=5) == {"precision": 0.0, "recall": 0.0, "hit": 0.0}
    assert retrieval_metrics(["A"], [], k=5) == {"precision": 0.0, "recall": 0.0, "hit": 0.0}
    assert retrieval_metrics([1, 2], ["2"], k=5)["hit"] == 1.0  # ids compared as strings


def test_summarize_skips_empty_gold_and_counts_n():
    rows = [
        {"category": "VS", "retrieved": ["A", "B"], "gold": ["A"]},
        {"category": "VS", "retrieved": ["C"], "gold": ["A", "B"]},
        {"category": "AR", "retrieved": ["A"], "gold": []},
    ]
    table = summarize(rows, k=2)
    assert table["__overall__"] == {"precision@2": 0.25, "recall@2": 0.5, "hit@2": 0.5, "n": 2}
    assert "AR" not in table


def test_evidence_recall_and_percentile():
    assert evidence_recall({"D1:1": 1.0, "D1:2": 1.0}, ["D1:2", "D1:3"]) == 0.5
    assert evidence_recall({"D1:2": 0.25}, ["D1:2", "D1:3", "D1:2"]) == 0.125  # a part counts for its part; gold deduplicated
    assert evidence_recall({"D1:1": 1.0}, []) == 0.0
    assert percentile([10, 20, 30, 40], 50) == 25
    assert percentile([5], 95) == 5 and percentile([], 50) == 0.0


def test_lexical_metrics():
    assert f1("The cats ran", "cat running") == 0.5  # stems: cat ran | cat run
    assert exact_match("D1:IMG_002.", "d1:img_002") == 1.0  # ids keep their underscore
    assert exact_match("3.14", "3 14") == 0.0  # decimals are protected
    assert bleu1("Elon Musk", "Elon Musk") == pytest.approx(1.0)
    assert bleu1("", "x") == 0.0
    # multi-hop: each comma-separated reference part takes its best predicted part
    assert locomo_f1("Paris, London", "London, Berlin", "multi-hop") == 0.5
    assert locomo_f1("hiking", "hiking; maybe camping", "open-domain") == 1.0


def test_judge_scores_collapse_to_three_levels():
    assert [collapse_judge_score(s) for s in (0, 0.25, 0.5, 0.75, 1)] == [0.0, 0.5, 0.5, 1.0, 1.0]


def test_significance():
    mean, lo, hi = paired_bootstrap([1, 1, 1], [0, 0, 0], resamples=200)
    assert (mean, lo, hi) == (1.0, 1.0, 1.0)
    assert sign_flip_p([1, 0, 1], [1, 0, 1], resamples=200) == 1.0
    assert sign_flip_p([1] * 12, [0] * 12, resamples=2000) < 0.01
    with pytest.raises(ValueError):
        paired_bootstrap([], [])


@pytest.mark.parametrize("reply, score", [
    ('{"score": 0.75, "reasoning": "close"}', 1.0), ("I would give it a score: 0.5.", 0.5), ('"score": 0,', 0.0),
    ('{"score": null}', 0.0), ("no score at all", 0.0), ('{"score": .5, "reasoning": "partly"}', 0.5),
    ("Score: .75", 1.0),
])
def test_a_judge_reply_is_read_or_scored_zero_never_an_error(reply, score):
    from llama_index_vmem.bench.qa import parse_memgallery_judge

    assert parse_memgallery_judge(reply) == score


def test_splits_score_each_split_of_the_conversations_apart():
    """Hand-computed: conv-1 (tuned) finds its one gold turn, conv-2 (held out) half of its two."""
    import runpy
    from pathlib import Path

    splits = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "splits.py"))
    rows = [{"qid": "conv-1#0", "category": "temporal", "retrieved": ["D1:1", "D1:2"], "gold": ["D1:2"]},
            {"qid": "conv-2#0", "category": "multi-hop", "retrieved": ["D1:1", "D1:3"], "gold": ["D1:3", "D2:1"]},
            {"qid": "conv-2#1", "category": "temporal", "retrieved": ["D1:1"], "gold": []}]
    lines = splits["table"]({"k": 10, "vmem": {"per_question": rows}}, ["conv-2"])
    assert lines[0] == "| system | split (questions) | R@K / Hit@K | multi-hop R (n) | temporal R (n) |"
    assert lines[2:] == ["| vmem | tuned (1) | 1.000 / 1.000 | - | 1.000 (1) |",
                         "| vmem | held out (1) | 0.500 / 1.000 | 0.500 (1) | - |",
                         "| vmem | all (2) | 0.750 / 1.000 | 0.500 (1) | 1.000 (1) |"]
