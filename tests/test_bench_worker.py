"""vmem-bench's worker processes: a stock system behaves the same in one, and its memory is its own."""

import functools
import json

import pytest

from llama_index_vmem.bench.run import PeakRSS
from llama_index_vmem.bench.systems import BenchSystem, QueryOutcome, StockSystem, turn_nodes, unit_nodes
from llama_index_vmem.bench.worker import WorkerSystem

pytestmark = pytest.mark.slow  # spawns a worker process per system: run in CI with -m slow

HOG_MB = 400


class Hog(BenchSystem):
    """Holds ``HOG_MB`` of resident memory per conversation built; fails on request."""

    name = "hog"

    def __init__(self) -> None:
        self.held = []

    def build(self, conv):
        self.held.append(bytearray(HOG_MB * 2**20))  # zero-filled pages are written, so resident
        return 1

    def query(self, conv, q, token_budget):
        if q.question == "fail":
            raise ValueError(f"no answer to {q.qid}")
        return QueryOutcome([conv.rounds[0].key], {}, "context", 1.0)


class StuckOnClose(Hog):
    def close(self):
        raise OSError("store is locked")


class HangsOnClose(Hog):
    def close(self):
        import time

        time.sleep(600)


def _no_system():
    raise OSError("weights not found")


@pytest.fixture()
def locomo_conv(tmp_path):
    from llama_index_vmem.bench.data import load_locomo

    turns = [("Ann", "D1:1", "I adopted a greyhound named Pixel last spring."), ("Bob", "D1:2", "Lovely, mine is a tabby cat."),
             ("Ann", "D1:3", "We went hiking at Mount Tam on Sunday."), ("Bob", "D1:4", "I stayed home and painted.")]
    sample = {"sample_id": "c", "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "8 May, 2023",
                                                 "session_1": [{"speaker": s, "dia_id": d, "text": t} for s, d, t in turns]},
              "qa": [{"question": "Where did Ann go hiking?", "answer": "Mount Tam", "evidence": ["D1:3"], "category": 4},
                     {"question": "fail", "answer": "", "evidence": ["D1:1"], "category": 4}]}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    [conv] = load_locomo(path)
    return conv


def test_a_stock_system_in_a_worker_answers_as_it_does_in_process(locomo_conv):
    here = StockSystem("stock-bm25", None, None)
    there = WorkerSystem("stock-bm25", functools.partial(StockSystem, "stock-bm25", None, None))
    try:
        there.warm_up()
        assert there.build(locomo_conv) == here.build(locomo_conv) == 4
        q = locomo_conv.questions[0]
        remote, local = there.query(locomo_conv, q, 40), here.query(locomo_conv, q, 40)
        assert (remote.ranking, remote.delivered, remote.context) == (local.ranking, local.delivered, local.context)
        assert remote.ranking[0] == "D1:3"
        assert there.build_seconds(measured=123.0) < 123.0  # the worker's own time, not the caller's
    finally:
        there.close()
    assert not there._process.is_alive()


def test_a_workers_peak_rss_is_its_memory_not_the_callers(locomo_conv):
    worker = WorkerSystem("hog", Hog)
    try:
        before = worker.peak_rss_mb()
        with PeakRSS() as caller:
            worker.build(locomo_conv)
            worker.build(locomo_conv)
            after = worker.peak_rss_mb()
    finally:
        worker.close()
    assert after - before >= 0.95 * 2 * HOG_MB
    assert caller.peak_mb - PeakRSS.current_mb() < HOG_MB / 4  # the caller never held the hog's memory


def test_an_error_in_a_worker_names_the_system_and_call_and_the_worker_goes_on(locomo_conv):
    worker = WorkerSystem("hog", Hog)
    try:
        worker.build(locomo_conv)
        with pytest.raises(RuntimeError, match=r"(?s)hog failed in its worker process during query.*no answer to c#1"):
            worker.query(locomo_conv, locomo_conv.questions[1], None)
        assert worker.query(locomo_conv, locomo_conv.questions[0], None).ranking == ["D1:1"]
    finally:
        worker.close()


def test_a_system_that_cannot_be_made_says_why_on_the_first_call():
    worker = WorkerSystem("stock-dense", _no_system)
    try:
        with pytest.raises(RuntimeError, match=r"(?s)stock-dense failed in its worker process during warm_up.*weights not found"):
            worker.warm_up()
    finally:
        worker.close()
    assert not worker._process.is_alive()


def test_a_system_that_fails_to_close_is_logged_and_its_worker_still_ends(caplog):
    worker = WorkerSystem("stuck", StuckOnClose)
    worker.warm_up()
    worker.close()  # no raise: a close in a ``finally`` must not hide why the run stopped
    assert not worker._process.is_alive()
    assert "stuck failed in its worker process during close" in caplog.text and "store is locked" in caplog.text


def test_a_worker_stuck_in_its_close_is_stopped_not_waited_on(caplog, monkeypatch):
    from llama_index_vmem.bench import worker as worker_module

    monkeypatch.setattr(worker_module, "CLOSE_TIMEOUT_S", 1.0)
    worker = WorkerSystem("hangs", HangsOnClose)
    worker.warm_up()
    worker.close()
    assert not worker._process.is_alive()
    assert "hangs: its worker process did not answer close within 1 s" in caplog.text


def _embedded_texts(run):
    """The texts LlamaIndex's embedding events report encoded while ``run()`` runs."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    class Embedded(BaseEventHandler):
        texts: list = []

        def handle(self, event, **kwargs):
            if event.class_name() == "EmbeddingEndEvent":
                self.texts.extend(event.chunks)

    seen = Embedded()
    get_dispatcher().add_event_handler(seen)
    try:
        run()
    finally:
        get_dispatcher().event_handlers.remove(seen)
    return seen.texts


@pytest.mark.parametrize("suffix, make_nodes, first_node", [("", turn_nodes, "D1:1/D1:1/0"), ("-units", unit_nodes, "D1:1/user")])
def test_stock_fusion_on_stock_dense_vectors_encodes_nothing_again_and_ranks_as_alone(locomo_conv, minilm, suffix, make_nodes,
                                                                                     first_node):
    """On LoCoMo the stock systems index one node per turn; their ``-units`` variants V-Mem's units."""
    dense, alone, reusing = (StockSystem(name + suffix, minilm, None) for name in ("stock-dense", "stock-fusion", "stock-fusion"))
    assert len(_embedded_texts(lambda: dense.build(locomo_conv))) == 4
    alone.build(locomo_conv)
    vectors = dense.vectors(locomo_conv.name)
    assert sorted(vectors) == sorted(n.node_id for n in make_nodes(locomo_conv)) and len(vectors[first_node]) == 384
    assert _embedded_texts(lambda: reusing.build(locomo_conv, vectors)) == []
    q = locomo_conv.questions[0]
    ours, theirs = reusing.query(locomo_conv, q, 40), alone.query(locomo_conv, q, 40)
    assert (ours.ranking, ours.context) == (theirs.ranking, theirs.context) and ours.ranking[0] == "D1:3"
    assert (ours.ranked_ids or [None])[0] == ("D1:3" if suffix == "" else None), "turn nodes are scored by their turns"


def test_a_worker_on_another_workers_vectors_reports_both_build_times(locomo_conv):
    from llama_index_vmem.bench.harness import stock_system
    from llama_index_vmem.encoders import default_text_embedding

    model = default_text_embedding().model_name
    dense = WorkerSystem("stock-dense", functools.partial(stock_system, "stock-dense", model))
    fusion = WorkerSystem("stock-fusion", functools.partial(stock_system, "stock-fusion", model), vectors_from=dense)
    here = StockSystem("stock-fusion", default_text_embedding(), None)
    try:
        assert dense.build(locomo_conv) == fusion.build(locomo_conv) == here.build(locomo_conv) == 4
        own = fusion._build_seconds
        assert 0 < own and fusion.build_seconds(0.0) == pytest.approx(own + dense.build_seconds(0.0))
        q = locomo_conv.questions[0]
        assert fusion.query(locomo_conv, q, 40).ranking == here.query(locomo_conv, q, 40).ranking
    finally:
        fusion.close()
        dense.close()
