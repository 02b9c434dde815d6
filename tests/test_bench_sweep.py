"""benchmarks/config_sweep.py on the test fixtures: a row per value, scored and built on the tuning split alone."""

import importlib.util
from pathlib import Path

import pytest
from conftest import BENCH_DATA as DATA

from llama_index_vmem.bench.data import load_memgallery
from llama_index_vmem.encoders import BUILD_DEFAULTS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "config_sweep.py"
DIALOGS = sorted((DATA / "memgallery" / "dialog").glob("*.json"))


@pytest.fixture
def config_sweep(monkeypatch):
    """The script as a module, its ``VMemBuild`` recording the conversations each build holds and how it
    encodes them."""
    spec = importlib.util.spec_from_file_location("config_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.built = []

    class Recording(module.VMemBuild):
        def build(self, conv):
            module.built.append((dict(self.options), conv.name))
            return super().build(conv)

    monkeypatch.setattr(module, "VMemBuild", Recording)
    return module


def _rows(lines):
    """The table's header and rows, by cells."""
    assert lines[2].startswith("|---")
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in [lines[1], *lines[3:]]]


def test_a_sweep_scores_and_builds_the_tuning_split_alone(config_sweep):
    """One Mem-Gallery fixture dialogue held out: never built, never scored; a config field is swept on one
    build, a build option on a build per value."""
    tuning, held_out = DIALOGS[0], DIALOGS[1]
    questions = [q for q in load_memgallery(tuning).questions if q.gold]
    categories = sorted({q.category for q in questions})
    lines = config_sweep.sweep("memgallery", [DATA / "memgallery" / "dialog"], "follow_up_weight", [0, 0.1],
                               [held_out.stem], show_progress=False)
    assert lines[0] == f"tuning split of memgallery: {tuning.stem} ({len(questions)} questions with evidence)"
    header, *rows = _rows(lines)
    assert header == ["follow_up_weight", "R@10 / Hit@10", *(f"{c} R ({sum(q.category == c for q in questions)})" for c in categories)]
    assert [row[0] for row in rows] == ["0", "0.1"] and all(len(row) == len(header) for row in rows)
    assert config_sweep.built == [({}, tuning.stem)]

    config_sweep.built.clear()
    option = "dated_units"
    lines = config_sweep.sweep("locomo", [DATA / "locomo" / "locomo_dev.json"], option, [True, False], ["synth-2"],
                               show_progress=False)
    assert [row[0] for row in _rows(lines)[1:]] == ["true", "false"]
    assert config_sweep.built == [({option: True}, "synth-1"), ({option: False}, "synth-1")]
    assert "synth-2" not in "\n".join(lines)


def test_a_sweep_names_what_it_can_sweep_and_scores_one_value_held_out(config_sweep):
    """Refused before any data is read or model loaded: an unknown field (the message lists every build
    option), and several values on the held-out split, which only checks the value the tuning split chose."""
    with pytest.raises(SystemExit, match="choose a VMemConfig field .*follow_up_weight.*or a build option") as refused:
        config_sweep.sweep("locomo", [Path("nowhere.json")], "no_such_field", [1], ["conv-42"])
    assert all(name in str(refused.value) for name in BUILD_DEFAULTS)
    with pytest.raises(SystemExit, match="held-out split scores the one value chosen"):
        config_sweep.sweep("locomo", [Path("nowhere.json")], "follow_up_weight", [0, 0.1], ["conv-42"], split="held-out")
    assert config_sweep.built == []
