"""benchmarks/answer_cases.py: the answer cases found in the top 2, per list, for each value of a setting."""

import importlib.util
from pathlib import Path

import pytest
from answer_cases import CASES

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "answer_cases.py"


@pytest.fixture(scope="module")
def answer_cases():
    spec = importlib.util.spec_from_file_location("answer_cases_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_per_value_counts_the_cases_found_in_each_list(answer_cases, minilm):
    """The sofa's price is told two rounds after the sofa is named: found with answer kinds, not
    without; the kitten's name answers the round just before it, found either way."""
    by_name = {case.name: case for case in CASES}
    lists = {"sofa": [by_name["sofa"]], "kitten": [by_name["kitten"]]}
    lines = answer_cases.sweep("answer_reach", [0, 3], lists, minilm)
    assert lines[0] == "| answer_reach | sofa (1) | kitten (1) | all (2) |"
    assert lines[2:] == ["| 0 | 0 | 1 | 1 |", "| 3 | 1 | 1 | 2 |"]


def test_only_a_config_field_is_swept(answer_cases, minilm):
    with pytest.raises(SystemExit, match="choose a VMemConfig field"):
        answer_cases.sweep("reply_context", [True], {}, minilm)
