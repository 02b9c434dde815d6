"""vmem-bench: Mem-Gallery and LoCoMo, V-Mem side by side with the stock LlamaIndex retrievers.

``data`` loads the benchmarks, ``systems`` wraps every retriever behind one interface, ``run``
measures, ``metrics`` scores (the benchmarks' own definitions), ``qa`` answers and judges,
``report`` writes report.md, ``cli`` is the ``vmem-bench`` command.
"""
