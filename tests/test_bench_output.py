"""What vmem-bench tells its user: the install command when its extra is missing, nothing but its
progress and summary on the terminal, every name in words, and the questions asked, scored and not."""

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import BENCH_DATA as DATA

from llama_index_vmem.bench import cli, legend
from llama_index_vmem.bench.systems import BenchSystem, QueryOutcome

ROOT = Path(__file__).resolve().parents[1]
DIALOGS = sorted((DATA / "memgallery" / "dialog").glob("*.json"))


def _cli(argv: list, block: str = "", **env: str) -> subprocess.CompletedProcess:
    """``vmem-bench ARGV`` in a fresh interpreter, with module ``block`` made unimportable as if
    its package were not installed."""
    code = (f"import sys\nif {block!r}: sys.modules[{block!r}] = None\n"
            "from llama_index_vmem.bench import cli\nsys.exit(cli.main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=600)


@pytest.mark.parametrize("module", list(cli.BENCH_EXTRA))
def test_a_missing_bench_package_stops_the_run_at_once_naming_the_install_command(module, tmp_path):
    """Before the data is even looked for, and before anything is written."""
    out = tmp_path / "out"
    done = _cli(["memgallery", str(tmp_path / "no-such-data"), "--out", str(out / "r.json"),
                 "--report", str(out / "r.md")], block=module)
    assert done.returncode == 1 and done.stdout == ""
    message = done.stderr
    assert f"{module} (from {cli.BENCH_EXTRA[module]})" in message
    assert 'pip install "llama-index-vmem[bench]"' in message and 'pip install -e ".[bench]"' in message
    assert "no such file" not in message and "Traceback" not in message
    assert not out.exists()


def test_compare_needs_no_bench_package(tmp_path):
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"benchmark": "memgallery", "k": 10, "vmem": {"per_question": [
        {"qid": f"c#{i}", "category": "FR", "gold": ["D1:1"], "retrieved": ["D1:1"]} for i in range(3)]}}))
    done = _cli(["compare", str(results), str(results), "--resamples", "10"], block="Stemmer")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n"] == 3


def test_the_bench_extra_installs_every_package_a_run_checks_for():
    """Each checked package is in pyproject's ``bench`` extra, or a requirement of one that is."""
    line = re.search(r"^bench = (\[.*\])$", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    listed = {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in json.loads(line)}
    pulled = {re.split(r"[<>=!~\[; (]", req, maxsplit=1)[0].lower()
              for dist in listed for req in metadata.requires(dist) or [] if "extra ==" not in req}
    for module, dist in cli.BENCH_EXTRA.items():
        assert dist.lower() in listed | pulled, f"{module} comes from {dist}, which the bench extra does not install"
    assert "pystemmer" in listed, "the stock BM25 systems import Stemmer themselves"


def _noise(stderr: str) -> list:
    """What stderr holds besides the run's own progress bars (tqdm redraws a bar with carriage returns)."""
    lines = [line.strip() for line in re.split(r"[\r\n]", stderr) if line.strip()]
    return [line for line in lines if not line.startswith(("Building memories:", "Asking vmem:", "Asking stock-dense:"))]


@pytest.mark.slow
@pytest.mark.parametrize("progress", [False, True])
def test_a_run_prints_its_progress_and_summary_and_nothing_else(progress, tmp_path):
    """No model-loading log line or weights bar, from this process or a worker's."""
    argv = ["memgallery", str(DIALOGS[0]), "--limit", "2", "--systems", "vmem,stock-dense",
            "--out", str(tmp_path / "r.json"), "--report", str(tmp_path / "r.md")]
    done = _cli(argv + ([] if progress else ["--no-progress"]), OMP_WAIT_POLICY="PASSIVE", HF_HUB_OFFLINE="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and done.stdout.startswith("memgallery: 2 questions asked")
    assert _noise(done.stderr) == []
    assert ("Asking stock-dense:" in done.stderr) is progress
    if not progress:
        assert done.stderr == ""


def test_a_stock_worker_loads_its_encoder_without_a_weights_bar(capfd):
    from transformers.utils import logging as hf_logging

    from llama_index_vmem.bench.harness import stock_system
    from llama_index_vmem.encoders import default_text_embedding

    hf_logging.enable_progress_bar()  # as in a fresh worker process
    capfd.readouterr()
    system = stock_system("stock-dense", default_text_embedding().model_name)
    assert system.embed_model is not None
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled(), "the user's setting is left as it was"


def test_every_system_rung_and_category_has_words():
    from llama_index_vmem.bench.data import LOCOMO_CATEGORIES
    from llama_index_vmem.bench.systems import RUNGS, STOCK_SYSTEMS

    assert list(legend.RUNGS) == list(RUNGS)
    assert list(legend.STOCK_SYSTEMS) == list(STOCK_SYSTEMS)
    assert set(legend.LOCOMO_CATEGORIES) == set(LOCOMO_CATEGORIES.values())
    points = {qa["point"] for path in sorted((DATA / "memgallery" / "dialog").glob("*.json"))
              for qa in json.loads(path.read_text())["human-annotated QAs"]}
    assert points <= set(legend.MEMGALLERY_CATEGORIES)
    assert set(legend.MEMGALLERY_CATEGORIES) == {"AR", "CD", "FR", "KR", "MR", "TR", "TTL", "VR", "VS"}
    for name in ["vmem", *(f"vmem-{rung}" for rung in RUNGS if rung != "anchors"), *STOCK_SYSTEMS]:
        assert legend.system_description(name) != name
    assert "20" in legend.RUNGS["pool20"] and "0.75" in legend.RUNGS["bm25-b0.75"]


def _helps() -> list:
    parser = cli._parser()
    return [parser.format_help(), *(sub.format_help() for sub in parser._subparsers._group_actions[0].choices.values())]


#: Words that tell of the project's history rather than of what the user sees.
HISTORY = re.compile(r"\bbefore[- ](issue|v?\d)|\b(issue|used to|no longer|formerly|less dated|compared with before)\b", re.I)


def test_the_help_names_every_variant_system_and_category_in_words_without_history():
    helps = _helps()
    for text in helps:
        assert not HISTORY.search(text), HISTORY.search(text)
    memgallery_help = " ".join(helps[1].split())
    for code, (name, _) in legend.MEMGALLERY_CATEGORIES.items():
        assert f"{code} {name}:" in memgallery_help
    assert "pool20 the full system with a candidate pool of 20 units per signal instead of 12" in memgallery_help
    for system in legend.STOCK_SYSTEMS:
        assert f" {system} " in memgallery_help


def _conversations():
    """Two tiny conversations: a question with evidence and one without (answer refusal) in each,
    and a third question cut by ``limit_questions``."""
    from llama_index_vmem.bench.data import BenchConversation, BenchQuestion, BenchRound

    convs = []
    for name in "ab":
        rounds = [BenchRound("D1:1", "D1", "2024-06-17", "My cat is called Mochi.", "Lovely name!", [], ["D1:1"])]
        questions = [BenchQuestion(f"{name}#0", "What is my cat called?", "FR", ["D1:1"], "Mochi"),
                     BenchQuestion(f"{name}#1", "Which car do I drive?", "AR", [], "Not mentioned."),
                     BenchQuestion(f"{name}#2", "When did I name my cat?", "TR", ["D1:1"], "2024-06-17")]
        conv = BenchConversation(name, "memgallery", rounds, questions)
        conv.limit_questions(2)
        convs.append(conv)
    return convs


class Fixed(BenchSystem):
    """A system that always returns the one round: enough to count what is scored."""

    def __init__(self, name: str) -> None:
        self.name = name

    def build(self, conv):
        return 1

    def query(self, conv, q, token_budget):
        return QueryOutcome(["D1:1"], {"D1:1": 1.0}, "User: My cat is called Mochi.", 1.0)


@pytest.fixture(scope="module")
def counted():
    from llama_index_vmem.bench.run import results_json, run

    convs = _conversations()
    runs = run(convs, [Fixed("vmem"), Fixed("stock-bm25")], budget_system="vmem", show_progress=False)
    return results_json("memgallery", 10, convs, runs, {"context_budget_from": "vmem"})


def test_the_results_count_questions_asked_scored_and_not_with_why(counted):
    q = counted["questions"]
    assert (q["asked"], q["scored"], q["context_scored"]) == (4, 2, 2)
    assert q["not_scored"] == {legend.NOT_SCORED_NO_EVIDENCE: {"AR": 2}}
    assert q["not_asked"] == {legend.NOT_ASKED_LIMIT.format(limit=2): {"TR": 2}}
    assert q["per_category"] == {"AR": {"asked": 2, "scored": 0, "not_asked": 0},
                                 "FR": {"asked": 2, "scored": 2, "not_asked": 0},
                                 "TR": {"asked": 0, "scored": 0, "not_asked": 2}}
    for name in ("vmem", "stock-bm25"):
        overall, per_category = counted[name]["overall"], counted[name]["per_category"]
        assert (overall["asked"], overall["scored"]) == (4, 2) and len(counted[name]["per_question"]) == 4
        assert per_category["AR"]["asked"] == 2 and per_category["AR"]["scored"] == 0
        assert per_category["AR"]["hit@k"] is None and per_category["AR"]["context_tokens_mean"] > 0


def test_compare_says_what_its_n_counts(counted, tmp_path):
    from llama_index_vmem.bench.compare import compare

    verdict = compare(counted, counted, "vmem", "stock-bm25", "hit", resamples=10)
    assert verdict["n"] == 2
    assert verdict["questions"] == {"asked_in_both": 4, "scored": 2, "not_scored": {legend.NOT_SCORED_NO_EVIDENCE: 2},
                                    "only_in_a": 0, "only_in_b": 0}


def test_the_report_explains_every_count_and_name_without_history(counted):
    from llama_index_vmem.bench.report import markdown

    text = markdown(counted)
    assert not HISTORY.search(text), HISTORY.search(text)
    assert "* Asked of every system: 4." in text and "* Scored for ranking and context: 2." in text
    assert f"* Not scored: 2, {legend.NOT_SCORED_NO_EVIDENCE} (AR 2)." in text
    assert "* In the data but not asked: 2, only the first 2 questions of each conversation are asked, by --limit 2 (TR 2)." in text
    assert "| AR (answer refusal) | something the conversation never mentions; the right answer is to say so | 2 | 2 | 0 |" in text
    assert "| vmem | V-Mem, the full system:" in text and "| stock-bm25 | LlamaIndex's BM25Retriever" in text
    hit = text.split("## hit@k per category")[1].split("##")[0]
    assert "| category | scored | vmem | stock-bm25 |" in hit and "| FR (factual retrieval) | 2 |" in hit and "AR" not in hit
    tokens = text.split("## context_tokens_mean per category")[1].split("##")[0]
    assert "| category | asked | vmem | stock-bm25 |" in tokens and "| AR (answer refusal) | 2 |" in tokens
    assert "TR" not in tokens, "a category with no question asked has no row"
    assert "* hit@k: " in text and "* context_evidence_recall: " in text
