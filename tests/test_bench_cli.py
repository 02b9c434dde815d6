"""vmem-bench end to end on the test fixtures (a slice of two real Mem-Gallery dialogues, a synthetic
LoCoMo-format file; see tests/data/README.md), with a scripted LLM for anchors, answers and the judge."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BENCH_DATA as DATA

from llama_index_vmem.bench import cli

SYSTEM_KEYS = {"precision@k", "recall@k", "hit@k", "asked", "scored", "context_evidence_recall", "context_tokens_mean"}
COST_KEYS = {"build_seconds", "build_llm_tokens", "query_ms_p50", "query_ms_p95", "peak_rss_mb"}
DIALOGS = sorted((DATA / "memgallery" / "dialog").glob("*.json"))
JUDGE_PROMPT = DATA / "memgallery" / "prompts" / "llm_judge.txt"
LOCOMO = DATA / "locomo" / "locomo_dev.json"  # synthetic, in LoCoMo's format and layout


@pytest.fixture(scope="module")
def memgallery_run(tmp_path_factory):
    from conftest import ScriptedLLM

    out = tmp_path_factory.mktemp("bench")
    llm = ScriptedLLM({"ONE image": "a robot arm in a factory", "You can SEE": '{"keywords": ["robot"]}',
                       "impartial judge": '{"score": 0.75, "reasoning": "close"}'}, default="D1:IMG_002")
    dialogs = DIALOGS[:2]
    argv = ["memgallery", *map(str, dialogs), "--limit", "12", "--systems", "vmem,stock-dense,stock-bm25,stock-fusion",
            "--config", "ladder", "--qa", "--judge-prompt", str(JUDGE_PROMPT),
            "--out", str(out / "results.json"), "--report", str(out / "report.md"), "--no-progress"]
    assert cli.main(argv, llm=llm) == 0
    return out, json.loads((out / "results.json").read_text()), llm


@pytest.mark.slow
def test_results_json_has_the_specified_shape(memgallery_run):
    out, results, _ = memgallery_run
    assert results["benchmark"] == "memgallery" and results["k"] == 10 and results["image_mode"] == "caption"
    systems = ["vmem", "vmem-vanilla", "vmem-routing", "vmem-rounds", "stock-dense", "stock-bm25", "stock-fusion"]
    for name in systems:
        overall = results[name]["overall"]
        assert SYSTEM_KEYS | COST_KEYS <= set(overall), name
        assert 0 < overall["scored"] <= overall["asked"] == results["questions"]["asked"] <= 24
        for block in results[name]["per_category"].values():
            assert SYSTEM_KEYS <= set(block)
    assert results["vmem"]["overall"]["build_llm_tokens"] == 0
    # stock-fusion fuses the vectors stock-dense built: its cost is its own plus those
    assert results["stock-fusion"]["overall"]["build_seconds"] > results["stock-dense"]["overall"]["build_seconds"]
    # an LLM wrote anchors: latency is reported without them and with them; stock systems have none to wait for
    vmem = results["vmem"]["overall"]
    assert vmem["query_ms_with_anchors_p95"] >= vmem["query_ms_p95"] > 0
    assert "query_ms_with_anchors_p50" not in results["stock-dense"]["overall"]
    assert "query_ms_with_anchors_p50" not in results["vmem-rounds"]["overall"]  # the rung without anchors
    assert results["vmem_config"]["aggregation_enabled"] is False  # the paper runs Mem-Gallery without it
    assert results["skipped_systems"] == {}
    report = (out / "report.md").read_text()
    assert report.count("| vmem |") >= 2 and "## context_evidence_recall_rounds per category" in report
    assert (out / "report.png").stat().st_size > 1000


@pytest.mark.slow
def test_stock_contexts_are_filled_to_vmems_token_count(memgallery_run):
    _, results, _ = memgallery_run
    vmem = {r["qid"]: r["context_tokens"] for r in results["vmem"]["per_question"]}
    stock = {r["qid"]: r["context_tokens"] for r in results["stock-dense"]["per_question"]}
    # a stock context is whole units, the nearest count to vmem's size: no systematic excess either way
    assert abs(sum(stock.values()) - sum(vmem.values())) <= 0.03 * sum(vmem.values())
    assert all(abs(stock[q] - vmem[q]) <= 0.1 * vmem[q] for q in vmem)


def test_a_context_fill_counts_the_joined_context_and_stops_nearest_the_budget():
    from llama_index_vmem.bench.systems import count_tokens, fill_to_budget
    from llama_index_vmem.delivery import BLOCK_SEPARATOR

    items = [("D1:1", "alpha. " * 20), ("D1:1", "beta. " * 10), ("D1:2", "gamma. " * 30), ("D1:3", "delta. " * 4)]
    joined = lambda n: BLOCK_SEPARATOR.join(t for _, t in items[:n])  # noqa: E731
    two, three = count_tokens(joined(2)), count_tokens(joined(3))
    assert fill_to_budget(items, two) == (joined(2), ["D1:1", "D1:1"])
    middle = (two + three) / 2
    assert fill_to_budget(items, int(middle) + 1)[1] == ["D1:1", "D1:1", "D1:2"]  # nearer with gamma than without
    assert fill_to_budget(items, int(middle) - 1)[1] == ["D1:1", "D1:1"]  # nearer without it, and it stops there
    assert fill_to_budget(items, 0) == ("", [])
    assert fill_to_budget(items, None) == (joined(4), ["D1:1", "D1:1", "D1:2", "D1:3"])
    assert fill_to_budget(items, 10**6)[1] == ["D1:1", "D1:1", "D1:2", "D1:3"]


@pytest.mark.parametrize("name, first", [
    ("stock-bm25", "[8 May, 2023] Ann: I adopted a greyhound named Pixel last spring."),  # a turn node, dated in its text
    ("stock-bm25-units", "timestamp: 8 May, 2023\n\nAnn: I adopted a greyhound named Pixel last spring."),  # metadata, as LlamaIndex renders it
])
def test_a_stock_context_holding_one_span_of_a_locomo_round_delivers_only_that_spans_turns(tmp_path, name, first):
    """Speaker A's line alone in the context does not deliver speaker B's reply from the same round."""
    from llama_index_vmem.bench.data import load_locomo
    from llama_index_vmem.bench.systems import StockSystem, count_tokens

    turns = [("Ann", "D1:1", "I adopted a greyhound named Pixel last spring."), ("Bob", "D1:2", "Lovely, mine is a tabby cat."),
             ("Ann", "D1:3", "We went hiking at Mount Tam on Sunday."), ("Bob", "D1:4", "I stayed home and painted.")]
    sample = {"sample_id": "c", "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "8 May, 2023",
                                                 "session_1": [{"speaker": s, "dia_id": d, "text": t} for s, d, t in turns]},
              "qa": [{"question": "What is the name of the greyhound Ann adopted?", "answer": "Pixel",
                      "evidence": ["D1:1", "D1:2"], "category": 4}]}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    [conv] = load_locomo(path)
    stock = StockSystem(name, None, None)
    stock.build(conv)
    outcome = stock.query(conv, conv.questions[0], count_tokens(first))
    assert outcome.ranking[0] == "D1:1" and outcome.context == first
    assert outcome.delivered == {"D1:1": 1.0}  # D1:2 shares the round but not the context


def test_stock_units_reach_the_context_dated_but_are_searched_by_their_text_alone(tmp_path):
    """A ``-units`` stock unit (V-Mem's units, the extra variant) states when it was said, as V-Mem's
    block header does; its date stays out of what the embedding and BM25 see. A natural turn node
    carries its date in its text, searched and delivered, as a LlamaIndex user writes it."""
    from llama_index.core.schema import MetadataMode

    from llama_index_vmem.bench.data import load_locomo
    from llama_index_vmem.bench.systems import StockSystem, turn_nodes, unit_nodes

    sessions = {"session_1_date_time": "8 May, 2023", "session_2_date_time": "3 June, 2023",
                "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound named Pixel."},
                              {"speaker": "Bob", "dia_id": "D1:2", "text": "What a lovely pet."}],
                "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "We went hiking on Sunday."},
                              {"speaker": "Bob", "dia_id": "D2:2", "text": "I stayed home."}]}
    sample = {"sample_id": "c", "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", **sessions},
              "qa": [{"question": "Which greyhound did Ann adopt?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4}]}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    [conv] = load_locomo(path)
    assert [n.get_content(MetadataMode.EMBED) for n in unit_nodes(conv)] == [
        "Ann: I adopted a greyhound named Pixel.", "Bob: What a lovely pet.", "Ann: We went hiking on Sunday.", "Bob: I stayed home."]
    assert [n.get_content(MetadataMode.EMBED) for n in turn_nodes(conv)] == [
        "[8 May, 2023] Ann: I adopted a greyhound named Pixel.", "[8 May, 2023] Bob: What a lovely pet.",
        "[3 June, 2023] Ann: We went hiking on Sunday.", "[3 June, 2023] Bob: I stayed home."]
    stock = StockSystem("stock-bm25-units", None, None)
    stock.build(conv)
    outcome = stock.query(conv, conv.questions[0], None)
    assert outcome.ranking[0] == "D1:1"
    assert outcome.context.startswith("timestamp: 8 May, 2023\n\nAnn: I adopted a greyhound named Pixel.")
    assert "timestamp: 3 June, 2023\n\nAnn: We went hiking on Sunday." in outcome.context


def test_a_stock_memgallery_unit_is_searched_by_the_dated_text_vmem_searches_its_unit_by():
    """On Mem-Gallery a stock unit is searched, dense and BM25, by its text after its round's date, as
    V-Mem's unit is (``schema.encoding_text``): a date in the question reaches stock too. It is
    delivered dated once, and credited for its own span's share of the round."""
    from llama_index.core.schema import MetadataMode

    from llama_index_vmem import schema
    from llama_index_vmem.bench.data import BenchConversation, BenchImage, BenchQuestion, BenchRound
    from llama_index_vmem.bench.systems import StockSystem, count_tokens, unit_nodes
    from llama_index_vmem.node_parser import RoundNodeParser, round_input_from_dict

    rounds = [BenchRound("D1:1", "D1", "2024-06-17", "I bought a bike.", "Enjoy the rides!", [], ["D1:1"]),
              BenchRound("D2:1", "D2", "2024-07-30", "I bought a bike.", "Nice, a red one!",
                         [BenchImage("D2:IMG_001", "a red bicycle by a wall")], ["D2:1"])]
    q = BenchQuestion("c#0", "What did I buy on 2024-07-30?", "TR", ["D2:1"], "a bike")
    conv = BenchConversation("c", "memgallery", rounds, [q])
    r = rounds[1]
    [parsed] = RoundNodeParser(memory_id="m").parse_rounds([round_input_from_dict("r", r.as_round_dict())])
    vmem = {u.metadata.get(schema.IMAGE_ID) or u.metadata[schema.ROLE]: schema.encoding_text(u, dated=True) for u in parsed.units}
    stock = {n.metadata["span"]: n.get_content(MetadataMode.EMBED) for n in unit_nodes(conv, dated=True)
             if n.metadata[schema.ROUND_KEY] == r.key}
    assert stock.keys() == vmem.keys() == {"user", "assistant", "D2:IMG_001"}
    assert all(text.startswith("[2024-07-30] ") for text in [*stock.values(), *vmem.values()])
    assert stock["D2:IMG_001"] == vmem["D2:IMG_001"] == "[2024-07-30] a red bicycle by a wall"
    assert stock["user"] == "[2024-07-30] I bought a bike."  # V-Mem's unit folds in its side's captions; stock's is the line

    system = StockSystem("stock-bm25", None, None)
    system.build(conv)
    first = "[2024-07-30] I bought a bike."
    outcome = system.query(conv, q, count_tokens(first))
    assert outcome.ranking[0] == "D2:1", "the date in the question found the round of that date"
    assert outcome.context == first  # dated once, in the text, not again as metadata
    assert outcome.delivered == pytest.approx(
        {"D2:1": count_tokens(r.user) / sum(count_tokens(t) for t in r.spans.values())})


@pytest.mark.slow
def test_qa_answers_with_the_answer_prompt_and_judges_with_the_benchmark_prompt(memgallery_run):
    from llama_index_vmem.bench.data import load_memgallery

    _, results, llm = memgallery_run
    judged = [p for p in llm.prompts if "impartial judge" in p]
    assert judged and "{{question}}" not in judged[0] and "Assistant Answer: D1:IMG_002" in judged[0]
    assert any(p.startswith("You are answering a question using a person’s conversation history.") for p in llm.prompts)
    assert results["vmem"]["overall"]["judge"] == 1.0  # 0.75 collapses to 1
    assert {"f1", "bleu1", "em"} <= set(results["vmem"]["overall"])
    answered = [p for p in llm.prompts if p.startswith("You are answering")]
    noted = [p for p in answered if "[ATTACHED IMAGE] The user’s attached image shows:" in p]
    asked_with_image = {q.qid for path in DIALOGS[:2] for q in load_memgallery(path).questions if q.image_caption or q.image_path}
    with_image = [q for q in results["vmem"]["per_question"] if q["qid"] in asked_with_image]
    systems = [name for name, block in results.items() if isinstance(block, dict) and "per_question" in block]
    from llama_index_vmem.bench.systems import RUNGS

    assert len(systems) == len(RUNGS) + 3, "every rung of the ladder and three stock systems"
    assert with_image and len(noted) == len(with_image) * len(systems), "each system answers a question asked with an image with its note"


@pytest.mark.slow
def test_every_qa_score_is_kept_per_question_and_per_category(memgallery_run, capsys):
    out, results, _ = memgallery_run
    assert {"judge", "f1", "bleu1", "em", "answer"} <= set(results["stock-bm25"]["per_question"][0])
    assert cli.main(["compare", str(out / "results.json"), str(out / "results.json"), "--system", "vmem",
                     "--system-b", "stock-bm25", "--metric", "bleu1", "--resamples", "100"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] > 0
    report = (out / "report.md").read_text()
    assert "## judge per category" in report and "## precision@k per category" in report


@pytest.mark.slow
def test_compare_gives_ci_and_p_value(memgallery_run, capsys):
    out, _, _ = memgallery_run
    assert cli.main(["compare", str(out / "results.json"), str(out / "results.json"), "--system", "vmem",
                     "--system-b", "stock-bm25", "--metric", "hit", "--resamples", "500"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["n"] > 0 and len(verdict["ci95"]) == 2 and 0 < verdict["p_value"] <= 1
    assert verdict["ci95"][0] <= verdict["difference"] <= verdict["ci95"][1]


@pytest.mark.slow
def test_compare_refuses_results_at_another_k(memgallery_run, tmp_path):
    out, results, _ = memgallery_run
    other = tmp_path / "k5.json"
    other.write_text(json.dumps(dict(results, k=5)))
    with pytest.raises(SystemExit, match="differ in k"):
        cli.main(["compare", str(out / "results.json"), str(other), "--metric", "hit", "--resamples", "10"])


@pytest.mark.slow
def test_compare_refuses_results_scored_by_another_metrics_version(memgallery_run, tmp_path):
    """A file written before context recall credited parts (no ``metrics_version``) counted a part
    of a round whole: pairing it with a new file would compare two definitions under one name."""
    out, results, _ = memgallery_run
    assert results["metrics_version"] == 2
    old = tmp_path / "v1.json"
    old.write_text(json.dumps({k: v for k, v in results.items() if k != "metrics_version"}))
    new = str(out / "results.json")
    with pytest.raises(SystemExit, match=r"differ in metrics_version \(2 vs 1\): not comparable on context_evidence_recall"):
        cli.main(["compare", new, str(old), "--metric", "context_evidence_recall", "--resamples", "10"])
    for metric in ("hit", "judge", "context_evidence_recall_rounds"):  # metrics the version did not change still pair
        assert cli.main(["compare", new, str(old), "--metric", metric, "--resamples", "10"]) == 0


def test_an_unknown_system_is_refused_before_any_worker_starts():
    import multiprocessing

    from llama_index_vmem.bench.harness import make_systems

    with pytest.raises(SystemExit, match="bogus"):
        make_systems([], ["stock-dense", "bogus"], ["anchors"], None)
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_vmem_returns_at_least_k_rounds_when_k_is_above_the_papers_12(tmp_path):
    from llama_index_vmem.bench.data import load_locomo

    k = 15
    conversations = load_locomo(LOCOMO)
    assert min(len(c.rounds) for c in conversations) > k, "the fixture must hold more rounds than k"
    round_of = {(c.name, t): r.key for c in conversations for r in c.rounds for t in r.turn_ids}
    out = tmp_path / "r.json"
    argv = ["locomo", str(LOCOMO), "--limit", "2", "--k", str(k), "--systems", "vmem,stock-bm25",
            "--out", str(out), "--report", str(tmp_path / "r.md"), "--no-progress"]
    assert cli.main(argv) == 0
    results = json.loads(out.read_text())
    assert results["vmem_config"]["k"] == k
    rows = results["vmem"]["per_question"]
    assert len(rows) == 2 * len(conversations)
    for row in rows:  # the ranking is of turn ids: count the rounds they come from
        conversation = row["qid"].split("#")[0]
        assert len({round_of[conversation, t] for t in row["retrieved"]}) >= k, row["qid"]


@pytest.mark.slow
def test_locomo_runs_over_turn_ids(tmp_path):
    from llama_index_vmem.bench.data import load_locomo

    out = tmp_path / "r.json"
    argv = ["locomo", str(LOCOMO), "--limit", "8", "--systems", "vmem,stock-bm25",
            "--out", str(out), "--report", str(tmp_path / "r.md"), "--no-progress"]
    assert cli.main(argv) == 0
    results = json.loads(out.read_text())
    assert results["benchmark"] == "locomo" and results["malformed_evidence_ids"] > 0
    row = results["vmem"]["per_question"][0]
    assert all(":" in t and t.startswith("D") for t in row["retrieved"])
    turns = min(len(c.turn_ids([r.key for r in c.rounds])) for c in load_locomo(LOCOMO))
    assert turns >= 30 and results["vmem"]["overall"]["hit@k"] > 0.5, "well above chance: 10 of 30 turns or more"
    assert "adversarial" not in results["vmem"]["per_category"]
    assert results["vmem_config"]["aggregation_enabled"] is True


def _photo_dialogue(tmp_path, photos):
    """A Mem-Gallery-format dialogue with real photos (image mode 'pixels'): a TTL question asked
    with a photo, and a VS question."""
    images = tmp_path / "image" / "T"
    images.mkdir(parents=True)
    names = ["coffee", "rocket", "chelsea", "horse"]
    for i, name in enumerate(names, start=1):
        (images / f"D1_IMG_00{i}.png").write_bytes(photos[name].read_bytes())
    (images / "QA_IMG_001.png").write_bytes(photos["rocket"].read_bytes())
    rounds = [{"round": f"D1:{i}", "user": f"Sharing my {name} photo.", "assistant": "Nice.", "image_id": [f"D1:IMG_00{i}"],
               "input_image": [f"../image/T/D1_IMG_00{i}.png"], "image_caption": [f"a photo of a {name}"]}
              for i, name in enumerate(names, start=1)]
    qas = [{"point": "TTL", "question": "What did I call the thing in this picture?", "answer": "rocket", "clue": ["D1:2"],
            "question_image": "../image/T/QA_IMG_001.png", "image_caption": "a rocket"},
           {"point": "VS", "question": "Which photo shows a horse?", "answer": "D1:IMG_004", "clue": ["D1:4"]}]
    (tmp_path / "dialog").mkdir()
    path = tmp_path / "dialog" / "T.json"
    path.write_text(json.dumps({"multi_session_dialogues": [{"session_id": "D1", "date": "2024-06-17", "dialogues": rounds}],
                                "human-annotated QAs": qas}))
    return path


@pytest.mark.slow
def test_pixels_mode_runs_stock_multimodal_and_counts_delivered_images(tmp_path, photos):
    """Image mode 'pixels': vmem delivers labelled images."""
    path = _photo_dialogue(tmp_path, photos)
    out = tmp_path / "r.json"
    argv = ["memgallery", str(path), "--systems", "vmem,stock-multimodal", "--delivery", "pixels", "--out", str(out),
            "--report", str(tmp_path / "r.md"), "--no-progress"]
    assert cli.main(argv) == 0
    results = json.loads(out.read_text())
    assert results["image_mode"] == "pixels" and results["delivery"] == "pixels"
    assert results["vmem"]["overall"]["delivered_images_mean"] > 0
    assert results["vmem"]["per_category"]["TTL"]["hit@k"] == 1.0  # the query photo matches the stored one
    assert results["stock-multimodal"]["overall"]["scored"] == 2


@pytest.mark.slow
def test_qa_in_pixels_mode_answers_from_the_delivered_pixels(tmp_path, photos):
    """vmem's answer is one message of the answer prompt's text around its delivered content, the
    labelled images among it (as VMemQueryEngine sends it); a text-only stock context is a prompt."""
    from conftest import ScriptedLLM
    from llama_index.core.base.llms.types import ImageBlock

    class Viewer(ScriptedLLM):
        """Looks at each image when it is sent: the files must still be there."""

        seen: list = []

        def chat(self, messages, **kwargs):
            self.seen.append([b.resolve_image().read(8) for b in messages[0].blocks if isinstance(b, ImageBlock)])
            return super().chat(messages, **kwargs)

    path = _photo_dialogue(tmp_path, photos)
    llm = Viewer({"impartial judge": '{"score": 1.0, "reasoning": "ok"}'}, default="rocket")
    argv = ["memgallery", str(path), "--systems", "vmem,stock-bm25", "--delivery", "pixels", "--qa", "--judge-prompt",
            str(JUDGE_PROMPT), "--out", str(tmp_path / "r.json"),
            "--report", str(tmp_path / "r.md"), "--no-progress"]
    assert cli.main(argv, llm=llm) == 0
    results = json.loads((tmp_path / "r.json").read_text())
    answered = [(chat[0], seen) for chat, seen in zip(llm.chats, llm.seen) if (chat[0].content or "").startswith("You are answering")]
    delivered = [q["delivered_images"] for q in results["vmem"]["per_question"]]
    assert len(answered) == 2 and all(delivered)
    for (message, seen), images in zip(answered, delivered):
        assert len(seen) == images and all(head == b"\x89PNG\r\n\x1a\n" for head in seen)
    ttl = answered[0][0].blocks
    assert "[ATTACHED IMAGE] The user’s attached image shows: a rocket" in ttl[-1].text
    assert "QUESTION: What did I call the thing in this picture?" in ttl[-1].text
    assert sum(p.startswith("You are answering") for p in llm.prompts) == 4  # and stock-bm25 answered both from text


def test_stock_context_at_round_granularity_fills_whole_rounds_to_the_budget():
    from llama_index_vmem.bench.data import BenchConversation, BenchRound
    from llama_index_vmem.bench.systems import StockSystem, count_tokens

    rounds = [BenchRound(f"D1:{i}", "D1", "2024-06-17", "word " * 10 * i, "ok") for i in range(1, 5)]
    conv = BenchConversation("c", "memgallery", rounds, [])
    size = {r.key: count_tokens(f"timestamp: 2024-06-17\n\n{r.text}") for r in rounds}  # dated, as stock units are
    budget = size["D1:3"] + size["D1:1"]
    stock = StockSystem("stock-bm25", None, None)
    assert stock.fill_rounds(conv, ["D1:3", "D1:1", "D1:4", "D1:2"], budget) == ["D1:3", "D1:1"]
    assert stock.fill_rounds(conv, ["D1:2"], None) == ["D1:2"]


def test_a_stock_text_retriever_searches_with_the_question_images_caption_pixels_or_not(photos):
    """As the Mem-Gallery harness does for text memories: the caption joins the question whenever there is one."""
    from llama_index_vmem.bench.data import BenchConversation, BenchImage, BenchQuestion, BenchRound
    from llama_index_vmem.bench.systems import StockSystem

    rounds = [BenchRound("D1:1", "D1", "", "My espresso machine arrived.", "Enjoy!", [BenchImage("D1:IMG_001", "a cup of coffee")]),
              BenchRound("D1:2", "D1", "", "Which train do I take tomorrow?", "The 8:15 to Leeds.")]
    conv = BenchConversation("c", "memgallery", rounds, [])
    stock = StockSystem("stock-bm25", None, None)
    stock.build(conv)
    for image_path in (None, photos["coffee"]):
        q = BenchQuestion("c#0", "Do you remember this?", "TTL", ["D1:1"], "espresso", image_path, "a cup of coffee with crema")
        assert stock.query(conv, q, None).ranking[0] == "D1:1", f"image_path={image_path}"


def test_a_bench_round_reads_exactly_as_vmem_delivers_it():
    """The equal-granularity view fills stock contexts with rounds rendered as V-Mem's round nodes."""
    from llama_index_vmem.bench.data import BenchImage, BenchRound
    from llama_index_vmem.node_parser import RoundNodeParser, round_input_from_dict

    r = BenchRound("D2:3", "D2", "2024-06-17", "Look at my cake!", "Lovely frosting.",
                   [BenchImage("D2:IMG_001", "a chocolate cake"), BenchImage("D2:IMG_002", "a fork", role="assistant")])
    [parsed] = RoundNodeParser(memory_id="m").parse_rounds([round_input_from_dict("r", r.as_round_dict())])
    assert r.text == parsed.round_node.text
    assert r.text == ("User: Look at my cake!\n[Image D2:IMG_001] a chocolate cake\n"
                      "Assistant: Lovely frosting.\n[Image D2:IMG_002] a fork")


@pytest.mark.slow
def test_results_report_context_recall_three_ways(memgallery_run):
    out, results, _ = memgallery_run
    for name in ("vmem", "stock-dense"):
        value = results[name]["overall"]["context_evidence_recall_rounds"]
        assert value is not None and 0.0 <= value <= 1.0
    vmem, dense = results["vmem"]["overall"], results["stock-dense"]["overall"]
    # vmem delivers whole rounds: all three agree; stock units can hold part of a round
    assert vmem["context_evidence_recall_rounds"] == vmem["context_evidence_recall_any_part"] == vmem["context_evidence_recall"]
    assert dense["context_evidence_recall_any_part"] >= dense["context_evidence_recall"]
    assert "context_evidence_recall_any_part" in results["stock-dense"]["per_question"][0]
    assert "## context_evidence_recall_any_part per category" in (out / "report.md").read_text()


def test_a_stock_context_holding_part_of_a_gold_round_recalls_that_part_of_it():
    """A user line without the reply that answers it is not the round's evidence delivered: context
    recall counts the line's share of the round's tokens; the any-part figure counts the round whole."""
    from llama_index_vmem.bench.data import BenchConversation, BenchQuestion, BenchRound
    from llama_index_vmem.bench.run import run, score
    from llama_index_vmem.bench.systems import BenchSystem, QueryOutcome, StockSystem, count_tokens

    user, reply = "Which train do I take to Leeds tomorrow?", "The 8:15 from platform 4, change at York for the 9:40."
    q = BenchQuestion("c#0", "Which train to Leeds?", "FR", ["D1:1"], "the 8:15")
    conv = BenchConversation("c", "memgallery", [BenchRound("D1:1", "D1", "", user, reply, [], ["D1:1"])], [q])

    class OneUnitBudget(BenchSystem):
        name = "vmem"

        def build(self, conv):
            return 1

        def query(self, conv, q, token_budget):
            return QueryOutcome(["D1:1"], {"D1:1": 1.0}, f"User: {user}", 1.0)

    runs = run([conv], [OneUnitBudget(), StockSystem("stock-bm25", None, None)], budget_system="vmem", show_progress=False)
    [row] = runs["stock-bm25"].rows
    assert "Leeds tomorrow" in row["context"] and "8:15" not in row["context"]  # one unit fits: the user line
    share = count_tokens(user) / (count_tokens(user) + count_tokens(reply))
    assert row["context_evidence_recall"] == pytest.approx(share) and 0.3 < share < 0.6
    assert row["context_evidence_recall_any_part"] == 1.0
    overall = score(runs["stock-bm25"], 10)["overall"]
    assert overall["context_evidence_recall"] == pytest.approx(share) and overall["context_evidence_recall_any_part"] == 1.0


@pytest.mark.slow
def test_builds_interleave_by_conversation_after_every_encoder_is_warm(tmp_path):
    from llama_index_vmem.bench.data import BenchConversation, BenchQuestion, BenchRound
    from llama_index_vmem.bench.run import run
    from llama_index_vmem.bench.systems import BenchSystem, QueryOutcome

    events = []

    class Recording(BenchSystem):
        def __init__(self, name):
            self.name = name

        def warm_up(self):
            events.append((self.name, "warm_up"))

        def build(self, conv):
            events.append((self.name, "build", conv.name))
            return 1

        def query(self, conv, q, token_budget):
            events.append((self.name, "query", conv.name))
            return QueryOutcome(["D1:1"], {"D1:1": 1.0}, "context", 1.0)

    convs = [BenchConversation(name, "memgallery", [BenchRound("D1:1", "D1", "", "hi", "hello", [], ["D1:1"])],
                               [BenchQuestion(f"{name}#0", "q?", "FR", ["D1:1"], "a")]) for name in "ab"]
    runs = run(convs, [Recording("stock-dense"), Recording("vmem")], budget_system="vmem", show_progress=False)
    assert events == [("vmem", "warm_up"), ("stock-dense", "warm_up"),
                      ("vmem", "build", "a"), ("stock-dense", "build", "a"),
                      ("vmem", "build", "b"), ("stock-dense", "build", "b"),
                      ("vmem", "query", "a"), ("vmem", "query", "b"),
                      ("stock-dense", "query", "a"), ("stock-dense", "query", "b")]
    assert runs["stock-dense"].units == 2 and runs["vmem"].build_seconds >= 0.0


@pytest.mark.slow
@pytest.mark.parametrize("window", [1, 0])
def test_every_system_credits_exactly_the_evidence_text_in_its_context(minilm, window):
    """Each delivered round counts for the share of its text (in tokens) that is in the context:
    whole rounds for vmem, with a picture borrowed from a round left out (``neighbor_window=0``);
    units for the unit-level rungs, whose text units fold in their side's captions; units for stock.
    And a round whose longest piece of text is in the context is credited."""
    from llama_index_vmem.bench.data import load_memgallery
    from llama_index_vmem.bench.harness import BENCHMARK_CONFIGS
    from llama_index_vmem.bench.systems import RUNGS, StockSystem, VMemBuild, VMemSystem, count_tokens

    conv = load_memgallery(DIALOGS[0])
    conv.questions = conv.questions[:20]
    build = VMemBuild(minilm, None, config=BENCHMARK_CONFIGS["memgallery"].override(neighbor_window=window))
    stock = StockSystem("stock-bm25", minilm, None)
    partial = borrowed = 0
    try:
        build.build(conv)
        stock.build(conv)
        for system in [VMemSystem(rung, build, rung) for rung in RUNGS if not RUNGS[rung].build] + [stock]:
            for q in conv.questions:
                outcome = system.query(conv, q, 800)
                assert outcome.delivered, (system.name, q.qid)
                for r in conv.rounds:
                    there = [count_tokens(t) if t.strip() in outcome.context else 0 for t in r.spans.values()]
                    expected = sum(there) / sum(count_tokens(t) for t in r.spans.values())
                    assert outcome.delivered.get(r.key, 0.0) == pytest.approx(expected, abs=1e-9), (system.name, q.qid, r.key)
                    partial += 0 < expected < 1
                    borrowed += system.name == "anchors" and r.key not in outcome.delivered_as_rounds and expected > 0
    finally:
        build.close()
    assert partial  # the rule was put to the test: some contexts held part of a round
    assert borrowed or window  # and with no neighbours, a borrowed picture


def test_stock_multimodal_merges_text_and_image_hits_keeping_each_nodes_first_place():
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from llama_index_vmem.bench.systems import StockSystem

    hit = {name: NodeWithScore(node=TextNode(id_=name, text=name), score=1.0) for name in "ABC"}

    class Retriever:
        def text_retrieve(self, bundle):
            return [hit["A"], hit["B"]]

        def image_to_image_retrieve(self, image_path):
            return [hit["C"], hit["A"]]

    merged = StockSystem("stock-multimodal", None, None)._hits(Retriever(), QueryBundle("q", image_path="q.png"))
    assert [h.node.node_id for h in merged] == ["A", "C", "B"], "alternating text and image ranks; A keeps its first place"


def test_any_llamaindex_llm_class_can_be_named_with_its_arguments():
    from llama_index.core.llms import MockLLM

    llm = cli.load_llm("llama_index.core.llms.mock:MockLLM", '{"max_tokens": 7}')
    assert isinstance(llm, MockLLM) and llm.max_tokens == 7
    assert cli.load_llm(None) is None


@pytest.mark.parametrize("spec, kwargs, says", [
    ("json.decoder:JSONDecoder", None, "is not a LlamaIndex LLM class"),
    ("llama_index.llms.no_such_provider:Model", None, "install the package"),
    ("llama_index.core.llms.mock:MockLLM", "{max_tokens: 7", "--llm-kwargs is not JSON"),
    ("claude", None, "unknown --llm 'claude'"),
])
def test_an_llm_that_cannot_be_built_is_refused_by_name(spec, kwargs, says):
    with pytest.raises(SystemExit, match=says):
        cli.load_llm(spec, kwargs)


@pytest.mark.slow
def test_compare_names_an_unknown_system_or_metric(memgallery_run):
    out, _, _ = memgallery_run
    path = str(out / "results.json")
    with pytest.raises(SystemExit, match="no system 'nosuch'.*stock-bm25"):
        cli.main(["compare", path, path, "--system", "nosuch"])
    with pytest.raises(SystemExit, match="unknown metric 'nosuch'.*context_evidence_recall"):
        cli.main(["compare", path, path, "--metric", "nosuch"])
    with pytest.raises(SystemExit, match="not a readable results file"):
        cli.main(["compare", path, str(out / "missing.json")])
    with pytest.raises(SystemExit, match=f"{LOCOMO.name}: not a vmem-bench results file"):  # a data file, not results
        cli.main(["compare", path, str(LOCOMO)])


@pytest.mark.parametrize("flag", [["--k", "0"], ["--k", "-1"], ["--limit", "0"]])
def test_k_and_limit_must_be_positive(flag, capsys):
    with pytest.raises(SystemExit):
        cli.main(["memgallery", "x.json", *flag])
    assert "must be at least 1" in capsys.readouterr().err


def test_what_would_fail_after_the_run_is_refused_before_it(tmp_path):
    from llama_index.core.llms import MockLLM

    dialog = str(DIALOGS[0])
    with pytest.raises(SystemExit, match="needs its judge prompt"):
        cli.main(["memgallery", dialog, "--qa"], llm=MockLLM())
    with pytest.raises(SystemExit, match="no such file"):
        cli.main(["memgallery", dialog, "--qa", "--judge-prompt", str(tmp_path / "nope.txt")], llm=MockLLM())
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SystemExit, match="bad.json: not a readable memgallery file"):
        cli.main(["memgallery", str(tmp_path / "bad.json")])
    with pytest.raises(SystemExit, match="not a readable locomo file"):
        cli.main(["locomo", dialog])
    with pytest.raises(SystemExit, match="include vmem in --systems"):
        cli.main(["memgallery", dialog, "--systems", "stock-bm25", "--qa", "--judge-prompt",
                  str(JUDGE_PROMPT)], llm=MockLLM())
    with pytest.raises(SystemExit, match="--llm-kwargs are arguments for --llm, which is not given"):
        cli.main(["memgallery", dialog, "--llm-kwargs", '{"model": "gpt-4o"}'])
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(SystemExit, match="no conversations in .*empty.json"):
        cli.main(["locomo", str(tmp_path / "empty.json")])
    with pytest.raises(SystemExit, match=f"--out {tmp_path}: is a folder"):
        cli.main(["memgallery", dialog, "--out", str(tmp_path)])
    for out, report in (("r.json", "r.json"), ("r.png", "r.md")):  # the report's chart is r.png
        with pytest.raises(SystemExit, match="must be three different files"):
            cli.main(["memgallery", dialog, "--out", str(tmp_path / out), "--report", str(tmp_path / report)])
    data = json.loads(Path(dialog).read_text())
    data["human-annotated QAs"][1]["question"] = " "
    (tmp_path / "blank.json").write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="blank.json: not a readable memgallery file .*question blank#1 has no question text"):
        cli.main(["memgallery", str(tmp_path / "blank.json")])


@pytest.mark.slow
def test_an_image_file_that_is_no_image_stops_the_run_naming_it(tmp_path, photos):
    """A missing file runs as its caption; a file that is there but is not an image is the data's fault."""
    path = _photo_dialogue(tmp_path, photos)
    (tmp_path / "image" / "T" / "D1_IMG_003.png").write_bytes(b"not an image")
    with pytest.raises(SystemExit, match="^conversation T: round D1:3 image D1:IMG_003: not an image"):
        cli.main(["memgallery", str(path), "--systems", "vmem,stock-bm25", "--out", str(tmp_path / "r.json"),
                  "--report", str(tmp_path / "r.md"), "--no-progress"])


def test_two_conversations_of_one_name_are_refused_not_merged_into_one_memory():
    from llama_index_vmem.bench.data import BenchConversation, BenchRound
    from llama_index_vmem.bench.harness import run_benchmark

    convs = [BenchConversation("conv-26", "locomo", [BenchRound("D1:1", "D1", "", f"hi {i}", "hello", [], ["D1:1"])], [])
             for i in range(2)]
    with pytest.raises(SystemExit, match="given twice under one name: conv-26"):
        run_benchmark("locomo", convs, k=10, systems="stock-bm25", show_progress=False)


def test_every_rung_is_named_in_the_help_and_queries_a_memory_built_its_way(minilm):
    from llama_index_vmem.bench.cli import _parser
    from llama_index_vmem.bench.systems import RUNGS, VMemBuild, VMemSystem

    run_help = _parser()._subparsers._group_actions[0].choices["locomo"].format_help()
    unwrapped = re.sub(r"-\s+", "-", " ".join(run_help.split()))  # argparse may wrap a line after a hyphen
    assert all(name in unwrapped for name in RUNGS)
    build = VMemBuild(minilm, None)
    try:
        assert VMemSystem("vmem", build, "anchors").overrides["anchors"] is True
        with pytest.raises(ValueError, match="undated.*dated_units"):
            VMemSystem("vmem-undated", build, "undated")
    finally:
        build.close()


def test_names_are_trimmed_and_given_once():
    from llama_index_vmem.bench.harness import names, rung_names

    assert names(" vmem, stock-bm25 ,vmem,, ") == names(["vmem", " stock-bm25", "vmem"]) == ["vmem", "stock-bm25"]
    assert rung_names("rounds, vanilla") == rung_names(["rounds", "vanilla", "rounds"]) == ["rounds", "vanilla"]


@pytest.mark.slow
def test_a_run_without_vmem_scores_no_context_and_writes_into_new_folders(tmp_path, capsys):
    """A folder stands for its .json files; a file named again, in the folder or by itself, is read once.
    The report goes to its file and only a summary line to the terminal."""
    folder, dialog = DATA / "memgallery" / "dialog", str(DIALOGS[0])
    out, report = tmp_path / "new" / "r.json", tmp_path / "other" / "r.md"
    argv = ["memgallery", dialog, str(folder), dialog, "--limit", "3", "--systems", "stock-bm25", "--out", str(out),
            "--report", str(report), "--no-progress"]
    assert cli.main(argv) == 0
    results = json.loads(out.read_text())
    assert len(DIALOGS) > 1 and results["conversations"] == [p.stem for p in DIALOGS], "each file once, in the order given"
    assert results["context_budget_from"] is None
    assert results["stock-bm25"]["overall"]["context_evidence_recall"] is None and results["stock-bm25"]["overall"]["scored"] > 0
    assert "no context is scored" in report.read_text() and report.with_suffix(".png").exists()
    printed = capsys.readouterr().out
    assert "## Retrieval and context" in report.read_text() and "##" not in printed, "the report is not printed"
    assert printed.count("\n") == 1 and str(report) in printed and str(out) in printed
    assert re.search(r"hit@10 stock-bm25 \d\.\d{3}", printed)


def test_nothing_to_run_is_refused_by_reason():
    dialog = str(DIALOGS[0])
    with pytest.raises(SystemExit, match="nothing to run: stock-multimodal skipped, no image has pixels"):
        cli.main(["memgallery", dialog, "--limit", "1", "--systems", "stock-multimodal", "--no-progress"])
    with pytest.raises(SystemExit, match="--config '': choose rungs"):
        cli.main(["memgallery", dialog, "--config", ",", "--no-progress"])
    with pytest.raises(SystemExit, match="--config 'routing,ladders': choose rungs"):
        cli.main(["memgallery", dialog, "--config", "routing, ladders,routing", "--no-progress"])


def _actions(parser, path=("vmem-bench",)):
    """Every argument and option of the parser and its subcommands, with the command it belongs to."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield path, action
            for name, sub in action.choices.items():
                yield from _actions(sub, (*path, name))
        else:
            yield path, action


def test_every_argument_option_and_subcommand_has_help():
    import argparse

    parser = cli._parser()
    actions = list(_actions(parser))
    named = {(path[-1], a.dest) for path, a in actions}
    assert {("memgallery", "paths"), ("locomo", "paths"), ("memgallery", "k"), ("memgallery", "out"),
            ("memgallery", "report"), ("compare", "a"), ("compare", "b")} <= named
    for path, action in actions:
        assert action.help and action.help.strip() and action.help is not argparse.SUPPRESS, (path, action.dest)
        assert "`" not in action.help, (path, action.dest)
        if isinstance(action, argparse._SubParsersAction):  # each subcommand's line in the command list
            assert {a.dest for a in action._choices_actions} == set(action.choices)
            assert all(a.help and "`" not in a.help for a in action._choices_actions)
    for name in ("k", "out", "report"):
        help_ = next(a.help for path, a in actions if path[-1] == "memgallery" and a.dest == name)
        assert len(help_) > 60, f"--{name} says what it is, not only its default: {help_!r}"
    helps = [parser.format_help()] + [sub.format_help() for sub in parser._subparsers._group_actions[0].choices.values()]
    for text in helps:  # every page renders (a stray % would raise) and has no literal backticks
        assert "`" not in text and "%" not in text.replace("95%", "")


def test_the_cli_answers_help_without_loading_llamaindex_or_torch():
    """vmem-bench --help must be instant: its module loads only the standard library."""
    code = ("import sys\nfrom llama_index_vmem.bench import cli\ncli._parser().format_help()\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'llama_index', 'transformers', 'numpy', "
            "'qdrant_edge', 'qdrant_client', 'matplotlib'}))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize("benchmark", ["memgallery", "locomo"])
def test_missing_data_stops_the_run_saying_where_to_get_it(benchmark, tmp_path):
    needs = {"memgallery": ["Mem-Gallery", "Bei et al. 2026", "github.com/YuanchenBei/Mem-Gallery", "MIT",
                            "dialog/*.json", "prompts/llm_judge.txt"],
             "locomo": ["Evaluating Very Long-Term Conversational Memory of LLM Agents", "Maharana et al. 2024",
                        "https://github.com/snap-research/locomo", "CC BY-NC 4.0"]}[benchmark]
    (tmp_path / "empty").mkdir()
    for missing, says in ((tmp_path / "nowhere" / "data.json", "no such file or folder"),
                          (tmp_path / "empty", "a folder with no .json files in it")):
        with pytest.raises(SystemExit) as stopped:
            cli.main([benchmark, str(missing), "--out", str(tmp_path / "out" / "r.json"), "--report", str(tmp_path / "out" / "r.md")])
        message = " ".join(str(stopped.value.code).split())  # unwrapped
        assert message.startswith(f"{missing}: {says}") and all(n in message for n in needs), message
    assert not (tmp_path / "out").exists(), "nothing is written before the data is found"


def test_a_folder_stands_for_its_json_files_in_name_order(tmp_path):
    mg = DATA / "memgallery"
    assert cli.data_files("memgallery", [mg / "dialog"]) == DIALOGS  # fixtures' paths are already resolved
    assert cli.data_files("memgallery", [mg]) == DIALOGS, "the data folder stands for its dialog subfolder"
    assert cli.data_files("memgallery", [DIALOGS[1], mg / "dialog"]) == [DIALOGS[1], DIALOGS[0]], "each file once"
    (tmp_path / "b.json").write_text("[]")
    (tmp_path / "a.json").write_text("[]")
    (tmp_path / "notes.txt").write_text("not data")
    assert cli.data_files("locomo", [tmp_path]) == [tmp_path.resolve() / "a.json", tmp_path.resolve() / "b.json"]
    assert cli.data_files("locomo", [LOCOMO.parent]) == [LOCOMO]


def test_vmem_is_told_the_speakers_the_data_names_and_the_no_speakers_rung_is_not(minilm):
    """LoCoMo names both speakers, Mem-Gallery its user: V-Mem is told them, as an app knows who is talking."""
    from llama_index_vmem.bench.data import load_locomo, load_memgallery
    from llama_index_vmem.bench.systems import RUNGS, VMemBuild

    locomo = load_locomo(DATA / "locomo" / "locomo_dev.json")[0]
    gallery = load_memgallery(DIALOGS[0])
    assert all(locomo.speakers) and gallery.speakers[0] and gallery.speakers[1] == ""
    build = VMemBuild(minilm, None)
    try:
        for conv in (locomo, gallery):
            build.build(conv)
            config = build.retrievers[conv.name].config
            assert (config.user_name, config.assistant_name) == conv.speakers
            assert config.override(**RUNGS["no-speakers"].config).user_name == ""
    finally:
        build.close()
