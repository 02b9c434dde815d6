"""A benchmark system in a process of its own, so the peak RSS reported for it is its own.

With every system's memories in one process, each system's peak would be the same number. A
worker is spawned, not forked: torch's OpenMP pool hangs in a child forked after the parent has
encoded anything. The parent drives its workers one call at a time, so builds stay interleaved by
conversation and only one system uses the cores at any moment. A worker may take its dense vectors
from another that computed them for the same units with the same weights (``stock-fusion`` from
``stock-dense``, as a user fuses the vector index they already have): the time it reports is then
its own plus that worker's, the cost of building it alone, without encoding everything twice.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, List, Optional

from .data import BenchConversation, BenchQuestion
from .run import PeakRSS
from .systems import BenchSystem, QueryOutcome

logger = logging.getLogger(__name__)

#: Seconds a worker gets to close its system and exit before it is terminated.
CLOSE_TIMEOUT_S = 30.0


class WorkerSystem(BenchSystem):
    """Proxy to the system ``factory`` makes in a spawned process (``factory`` must pickle); with
    ``vectors_from``, each conversation is built on the vectors that worker built it with."""

    def __init__(self, name: str, factory: Callable[[], BenchSystem], vectors_from: Optional["WorkerSystem"] = None) -> None:
        self.name = name
        self.vectors_from = vectors_from
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, factory), name=f"vmem-bench {name}", daemon=True)
        self._process.start()
        child.close()
        self._build_seconds = 0.0

    def build(self, conv: BenchConversation) -> int:
        vectors = self.vectors_from._call("vectors", conv.name) if self.vectors_from else None
        units, seconds = self._call("build", conv, vectors)
        self._build_seconds += seconds
        return units

    def build_seconds(self, measured: float) -> float:
        """The worker's own build time (the conversation's trip through the pipe is not ingest),
        plus the time the worker whose vectors it took spent building them."""
        return self._build_seconds + (self.vectors_from.build_seconds(0.0) if self.vectors_from else 0.0)

    def query(self, conv: BenchConversation, q: BenchQuestion, token_budget: Optional[int]) -> QueryOutcome:
        return self._call("query", conv.name, q, token_budget)

    def warm_up(self) -> None:
        self._call("warm_up")

    def peak_rss_mb(self) -> Optional[float]:
        return self._call("peak_rss_mb")

    def close(self) -> None:
        if self._process.is_alive():
            try:
                self._call("close", timeout=CLOSE_TIMEOUT_S)
            except RuntimeError as error:  # said, not raised: closing must not hide why a run stopped
                logger.warning("%s", error)
        self._process.join(CLOSE_TIMEOUT_S)
        if self._process.is_alive():  # a worker stuck in its close is stopped, not waited on forever
            self._process.terminate()
            self._process.join()
        self._conn.close()

    def _call(self, method: str, *args: Any, timeout: Optional[float] = None) -> Any:
        try:
            self._conn.send((method, args))
            if timeout is not None and not self._conn.poll(timeout):
                raise RuntimeError(f"{self.name}: its worker process did not answer {method} within {timeout:.0f} s")
            status, value = self._conn.recv()
        except (EOFError, ConnectionError):
            self._process.join(CLOSE_TIMEOUT_S)
            raise RuntimeError(f"{self.name}: its worker process died during {method} "
                               f"(exit code {self._process.exitcode})") from None
        if status == "error":
            raise RuntimeError(f"{self.name} failed in its worker process during {method}:\n{value}")
        return value


def _serve(conn: Connection, factory: Callable[[], BenchSystem]) -> None:
    """The worker's loop: one reply per call, exceptions sent back as their traceback."""
    with PeakRSS() as rss:
        try:
            system = factory()
        except Exception:  # said in reply to the first call, which would otherwise see only a dead pipe
            conn.recv()
            conn.send(("error", traceback.format_exc()))
            return
        conversations: Dict[str, BenchConversation] = {}

        def build(conv: BenchConversation, vectors: Optional[Dict[str, List[float]]]) -> tuple:
            conversations[conv.name] = conv
            start = time.perf_counter()
            units = system.build(conv, vectors) if vectors else system.build(conv)
            return units, time.perf_counter() - start

        calls: Dict[str, Callable[..., Any]] = {
            "build": build,
            "query": lambda name, q, budget: system.query(conversations[name], q, budget),
            "vectors": lambda name: system.vectors(name),
            "warm_up": system.warm_up,
            "peak_rss_mb": lambda: max(rss.peak_mb, rss.current_mb()),
            "close": system.close,
        }
        while True:
            method, args = conn.recv()
            try:
                conn.send(("ok", calls[method](*args)))
            except Exception:
                conn.send(("error", traceback.format_exc()))
            if method == "close":
                return
