"""``vmem-bench``: V-Mem against the stock LlamaIndex retrievers, in one command and one run.

    vmem-bench memgallery ../shared/data/memgallery/dialog/*.json --out results.json --report report.md
    vmem-bench locomo ../shared/data/locomo/locomo_dev.json
    vmem-bench compare a.json b.json --metric judge
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path
from typing import List, Optional

from . import report
from .data import BenchConversation, load_locomo, load_memgallery

logger = logging.getLogger("vmem_bench")
DEFAULT_SYSTEMS = "vmem,stock-dense,stock-bm25,stock-fusion,stock-multimodal"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vmem-bench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("memgallery", "locomo"):
        b = sub.add_parser(name, help=f"run the {name} benchmark")
        b.add_argument("paths", nargs="+", type=Path)
        b.add_argument("--k", type=_positive, default=10)
        b.add_argument("--config", default="anchors",
                       help="vmem rungs to run: comma list of vanilla,routing,rounds,anchors or 'ladder' (anchors is 'vmem')")
        b.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"comma list (default {DEFAULT_SYSTEMS})")
        b.add_argument("--image-root", type=Path, help="where the images live when not next to the JSON")
        b.add_argument("--llm", help="anchors and answers: openai:MODEL, openai-like:MODEL@BASE_URL or package.module:Class")
        b.add_argument("--llm-kwargs", help='JSON arguments for the LLM, e.g. \'{"model": "qwen2.5vl:7b"}\'')
        b.add_argument("--qa", action="store_true", help="also answer and judge every question (needs --llm)")
        b.add_argument("--judge-prompt", type=Path, help="Mem-Gallery judge prompt file (llm_judge.txt)")
        b.add_argument("--limit", type=_positive, help="first N questions per conversation (quick runs)")
        b.add_argument("--delivery", choices=("text", "pixels"), default="text",
                       help="how vmem's context is delivered (pixels: labelled images counted per question)")
        b.add_argument("--out", type=Path, default=Path("results.json"))
        b.add_argument("--report", type=Path, default=Path("report.md"))
        b.add_argument("--no-progress", action="store_true")
    c = sub.add_parser("compare", help="paired bootstrap CI and sign-flip p-value between two results files")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--system", default="vmem")
    c.add_argument("--system-b", help="system in b (default: same as --system)")
    c.add_argument("--metric", default="hit", help="per-question metric: hit, recall, precision, judge, f1, "
                   "context_evidence_recall, context_evidence_recall_any_part, context_evidence_recall_rounds")
    c.add_argument("--resamples", type=_positive, default=10_000)
    return p


def load_llm(spec: Optional[str], kwargs: Optional[str] = None):
    """Any LlamaIndex LLM: ``openai:MODEL``, ``openai-like:MODEL@BASE_URL`` (llama-index-llms-openai,
    -openai-like), or a class by import path, ``package.module:Class``, built with ``kwargs`` (JSON)."""
    if not spec:
        return None
    try:
        options = json.loads(kwargs) if kwargs else {}
    except json.JSONDecodeError as e:
        raise SystemExit(f"--llm-kwargs is not JSON: {e}") from None
    kind, _, rest = spec.partition(":")
    if kind == "openai":
        return _llm_class("llama_index.llms.openai", "OpenAI")(**{"model": rest, "temperature": 0, **options})
    if kind == "openai-like":
        model, _, base = rest.partition("@")
        return _llm_class("llama_index.llms.openai_like", "OpenAILike")(
            **{"model": model, "api_base": base, "is_chat_model": True, "temperature": 0, **options})
    if "." in kind and rest:
        return _llm_class(kind, rest)(**options)
    raise SystemExit(f"unknown --llm {spec!r}: use openai:MODEL, openai-like:MODEL@BASE_URL or package.module:Class")


def _llm_class(module: str, name: str) -> type:
    from llama_index.core.llms import LLM

    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as e:
        raise SystemExit(f"--llm {module}:{name}: {e} (install the package that provides it)") from None
    if not (isinstance(found, type) and issubclass(found, LLM)):
        raise SystemExit(f"--llm {module}:{name} is not a LlamaIndex LLM class")
    return found


def main(argv: Optional[List[str]] = None, llm=None) -> int:
    """Entry point; ``llm`` lets tests pass a scripted LLM instead of ``--llm``."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.command == "compare":
        from .compare import compare

        print(json.dumps(compare(_read_json(args.a), _read_json(args.b), args.system, args.system_b or args.system,
                                 args.metric, args.resamples), indent=2))
        return 0
    from .harness import run_benchmark

    llm = llm or load_llm(args.llm, args.llm_kwargs)
    _prepare_run(args, llm)
    conversations = _load(args)
    if args.limit:
        for c in conversations:
            c.questions = c.questions[: args.limit]
    results = run_benchmark(args.command, conversations, k=args.k, systems=args.systems, rungs=args.config,
                            llm=llm, qa=args.qa, judge_prompt=args.judge_prompt, show_progress=not args.no_progress,
                            delivery=args.delivery)
    args.out.write_text(json.dumps(results, indent=2))
    report.write(results, args.report)
    print(report.markdown(results))
    return 0


def _prepare_run(args: argparse.Namespace, llm) -> None:
    """Refuse, or make ready, everything that would otherwise fail only after the run, when its
    work is lost: the LLM and judge prompt QA needs, and the output folders."""
    from .harness import names

    if args.qa and llm is None:
        raise SystemExit("--qa needs an LLM (--llm)")
    if args.qa and "vmem" not in names(args.systems):
        raise SystemExit("--qa answers from contexts filled to vmem's size for each question: include vmem in --systems "
                         "(without it a stock context would be its whole retrieved pool)")
    if args.llm_kwargs is not None and args.llm is None:
        raise SystemExit("--llm-kwargs are arguments for --llm, which is not given")
    if args.qa and args.command == "memgallery" and args.judge_prompt is None:
        raise SystemExit("--qa on memgallery needs its judge prompt (--judge-prompt .../prompts/llm_judge.txt)")
    if args.judge_prompt is not None and not args.judge_prompt.is_file():
        raise SystemExit(f"--judge-prompt {args.judge_prompt}: no such file")
    chart = report.chart_path(args.report)
    targets = {"--out": args.out, "--report": args.report, "--report's chart": chart}
    for flag, target in targets.items():
        if target.is_dir():
            raise SystemExit(f"{flag} {target}: is a folder; give a file path")
    if len({t.resolve() for t in targets.values()}) < len(targets):
        raise SystemExit(f"--out {args.out}, --report {args.report} and its chart {chart} must be three different files: "
                         "one would overwrite another")
    for target in targets.values():
        target.parent.mkdir(parents=True, exist_ok=True)


def _load(args: argparse.Namespace) -> List[BenchConversation]:
    """Each file once, in the order given; a file that is not this benchmark's is named."""
    paths = list(dict.fromkeys(p.resolve() for p in args.paths))
    conversations = []
    for path in paths:
        try:
            if args.command == "memgallery":
                conversations.append(load_memgallery(path, args.image_root))
            else:
                conversations += load_locomo(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise SystemExit(f"{path}: not a readable {args.command} file ({type(e).__name__}: {e})") from None
    if not conversations:
        raise SystemExit(f"no conversations in {', '.join(map(str, paths))}")
    return conversations


def _read_json(path: Path) -> dict:
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: not a readable results file ({type(e).__name__}: {e})") from None
    if not isinstance(results, dict) or "benchmark" not in results:
        raise SystemExit(f"{path}: not a vmem-bench results file (no 'benchmark' in it)")
    return results


if __name__ == "__main__":
    sys.exit(main())
