"""How many threads torch may use to encode one question.

A question is a batch of one. Split over every core, torch's threads wait for each other at each
layer; on a machine where other work holds the cores, each wait costs a time slice, and a 20 ms
question took half a second. On one thread it waits for nobody, at a small cost on an idle machine
(``benchmarks/busy_machine.py`` measures both). Ingestion's large batches keep every thread.

Torch keeps the count per thread (OpenMP), so the calling thread's count is set for the encoding and
put back after; the app's other threads keep theirs. Set ``QUERY_THREADS = None`` to leave torch's
setting alone.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator, Optional

#: Torch threads for encoding one question (text or picture); None leaves torch's count as it is.
QUERY_THREADS: Optional[int] = 1


@contextmanager
def query_threads() -> Iterator[None]:
    """Torch's threads in the calling thread bounded to ``QUERY_THREADS`` inside the block. An encoder
    that does not run on torch (torch not loaded) is left alone: importing torch would cost seconds."""
    torch = sys.modules.get("torch")
    limit = QUERY_THREADS
    before = torch.get_num_threads() if torch is not None else 0
    if torch is None or limit is None or before <= limit:
        yield
        return
    torch.set_num_threads(limit)
    try:
        yield
    finally:
        torch.set_num_threads(before)
