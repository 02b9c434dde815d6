"""``vmem-bench``: V-Mem against the stock LlamaIndex retrievers, in one command and one run.

    vmem-bench memgallery MEMGALLERY/dialog --out results.json --report report.md
    vmem-bench locomo LOCOMO/locomo10.json
    vmem-bench compare a.json b.json --metric judge

Only the standard library is imported at start-up, so ``--help`` answers at once; LlamaIndex, torch
and the encoders load when a command runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional

from . import legend

if TYPE_CHECKING:
    from .data import BenchConversation

logger = logging.getLogger("vmem_bench")
DEFAULT_SYSTEMS = "vmem,stock-dense,stock-bm25,stock-fusion,stock-multimodal"
#: What a benchmark run imports beyond the library's own dependencies, module: the distribution that
#: provides it. The ``bench`` extra installs them all; a run checks for them before any work.
BENCH_EXTRA: Dict[str, str] = {
    "llama_index.retrievers.bm25": "llama-index-retrievers-bm25",
    "bm25s": "bm25s",
    "Stemmer": "PyStemmer",
    "matplotlib": "matplotlib",
}
INSTALL_BENCH = 'pip install "llama-index-vmem[bench]"'
INSTALL_BENCH_CLONE = 'pip install -e ".[bench]"'
COMPARE_METRICS = ("hit, recall, precision (recomputed at the files' K), context_evidence_recall, "
                   "context_evidence_recall_any_part, context_evidence_recall_rounds, and with --qa judge, f1, bleu1, em "
                   "(and LoCoMo's locomo_f1)")

#: Where each benchmark's data comes from, its licence, and the layout the loaders read.
DATA_SOURCES: Dict[str, str] = {
    "memgallery": (
        "Mem-Gallery, the benchmark of Bei et al. 2026, 'Mem-Gallery: Benchmarking Multimodal Long-Term "
        "Conversational Memory for MLLM Agents' (arXiv:2601.03515; repository licence MIT). Get it from "
        "https://github.com/YuanchenBei/Mem-Gallery (its dataset is published at "
        "https://huggingface.co/datasets/Ethan-Bei/Mem-Gallery). Layout: MEMGALLERY/dialog/*.json, one dialogue "
        "with its QAs per file (images, where present, in MEMGALLERY/image/), and MEMGALLERY/prompts/llm_judge.txt, "
        "the judge prompt --qa needs. Give the dialog folder or some of its files."
    ),
    "locomo": (
        "LoCoMo, from 'Evaluating Very Long-Term Conversational Memory of LLM Agents' (Maharana et al. 2024; "
        "CC BY-NC 4.0). Get it from https://github.com/snap-research/locomo (the conversations file in its data "
        "folder, locomo10.json). Layout: a JSON file holding a list of conversations, each with sample_id, "
        "conversation and qa. Give the file, or a folder of such files."
    ),
}


def _wrapped(*paragraphs: str) -> str:
    return "\n\n".join(textwrap.fill(p, width=100) for p in paragraphs)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter  # keeps the examples and paragraphs below as laid out
    examples = ("Examples:\n"
                "  vmem-bench memgallery MEMGALLERY/dialog --out mg.json --report mg.md\n"
                "  vmem-bench locomo LOCOMO/locomo10.json --k 10\n"
                "  vmem-bench compare mg.json other.json --metric hit")
    p = argparse.ArgumentParser(
        prog="vmem-bench", formatter_class=raw,
        description=_wrapped("V-Mem against the stock LlamaIndex retrievers on Mem-Gallery or LoCoMo, in one command "
                             "and one run. Each command has its own help: vmem-bench COMMAND --help."),
        epilog=examples + "\n\n" + _wrapped("The benchmark data is not included:", *DATA_SOURCES.values()))
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="memgallery or locomo (run a benchmark), or compare (two results files)")
    for name, title in (("memgallery", "Mem-Gallery"), ("locomo", "LoCoMo")):
        memgallery = name == "memgallery"
        b = sub.add_parser(
            name, formatter_class=raw, help=f"run the {title} benchmark",
            description=_wrapped(f"Build every system's memory of each {title} conversation, ask its questions and "
                                 "score the rankings (and, with --qa, the answers) by the benchmark's own metrics. "
                                 "Writes the results JSON (--out) and a Markdown report with a chart (--report), "
                                 "and prints one summary line."),
            epilog=_run_epilog(name))
        b.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                       help=f"{title} data: " + ("dialogue files (dialog/*.json) or folders; a folder stands for "
                                                 "the .json files in it (or in its dialog subfolder)" if memgallery else
                                                 "conversation files (such as locomo10.json) or folders; a folder "
                                                 "stands for the .json files in it") + ", in name order; each file is read once")
        b.add_argument("--k", type=_positive, default=10, metavar="K",
                       help="rank cut-off: Precision, Recall and HitRate@K score each system's top K "
                            + ("rounds" if memgallery else "turns") + "; vmem retrieves at least max(K, 12) rounds "
                            "(default: %(default)s)")
        b.add_argument("--config", default="anchors", metavar="RUNGS",
                       help="V-Mem variants to run, a comma list of those named below, or 'ladder' for all of them; "
                            "anchors, the full system, is reported as 'vmem', each other as 'vmem-NAME' "
                            "(default: %(default)s)")
        b.add_argument("--systems", default=DEFAULT_SYSTEMS, metavar="NAMES",
                       help="systems to compare, a comma list of those named below (default: %(default)s)")
        if memgallery:
            b.add_argument("--image-root", type=Path, metavar="DIR",
                           help="folder holding the images when they are not where the JSON's paths point; an image "
                                "whose file is found nowhere runs as its caption")
        b.add_argument("--llm", metavar="SPEC",
                       help="LLM for vmem's anchors and, with --qa, the answers and the judge: openai:MODEL, "
                            "openai-like:MODEL@BASE_URL, or package.module:Class (any LlamaIndex LLM); without one, "
                            "anchors fall back to the raw query")
        b.add_argument("--llm-kwargs", metavar="JSON",
                       help='JSON object of keyword arguments for the --llm class, e.g. \'{"model": "qwen2.5vl:7b"}\'')
        b.add_argument("--qa", action="store_true",
                       help="also answer every question from each system's context and score the answers (LLM "
                            "judge, F1, BLEU-1, exact match); needs --llm" + (" and --judge-prompt" if memgallery else ""))
        if memgallery:
            b.add_argument("--judge-prompt", type=Path, metavar="FILE",
                           help="the benchmark's LLM-judge prompt, MEMGALLERY/prompts/llm_judge.txt (needed by --qa)")
        b.add_argument("--limit", type=_positive, metavar="N",
                       help="ask only the first N questions of each conversation (quick runs)")
        b.add_argument("--delivery", choices=("text", "pixels"), default="text",
                       help="how vmem's context reaches the answering model: text (captions) or pixels (labelled "
                            "images, counted per question) (default: %(default)s)")
        b.add_argument("--out", type=Path, default=Path("results.json"), metavar="FILE",
                       help="where to write the results JSON: each system's overall, per-category and per-question "
                            "scores, costs and settings; vmem-bench compare reads it (default: %(default)s)")
        b.add_argument("--report", type=Path, default=Path("report.md"), metavar="FILE",
                       help="where to write the Markdown report (tables overall and per category), with its "
                            "hit@k-per-category chart beside it as a PNG of the same name; the report is not "
                            "printed, only a summary line (default: %(default)s)")
        b.add_argument("--no-progress", action="store_true",
                       help="print only the summary line: no progress bars (warnings still go to stderr)")
        if not memgallery:  # LoCoMo's photos are captions and its judge is its own grading prompt
            b.set_defaults(image_root=None, judge_prompt=None)
    c = sub.add_parser(
        "compare", formatter_class=raw, help="paired bootstrap CI and sign-flip p-value between two results files",
        description=_wrapped("Is one system better than another on the same questions? Pairs the per-question "
                             "scores of two results files (or of two systems in one) and prints, as JSON, the mean "
                             "difference, its 95% bootstrap confidence interval and a sign-flip p-value. n counts "
                             "the questions both files scored; questions says how many both asked and why the rest "
                             "were not scored."))
    c.add_argument("a", type=Path, metavar="A", help="the first results file (the --out of a vmem-bench run)")
    c.add_argument("b", type=Path, metavar="B", help="the second results file, of the same benchmark and K (may be A)")
    c.add_argument("--system", default="vmem", help="the system to compare, in A (default: %(default)s)")
    c.add_argument("--system-b", metavar="SYSTEM", help="the system in B (default: the same as --system)")
    c.add_argument("--metric", default="hit", help=f"per-question metric: {COMPARE_METRICS} (default: %(default)s)")
    c.add_argument("--resamples", type=_positive, default=10_000, metavar="N",
                   help="bootstrap resamples and sign flips (default: %(default)s)")
    return p


def _listed(title: str, entries: Dict[str, str]) -> str:
    """A titled list, each name with its words wrapped beside it."""
    width = max(map(len, entries)) + 4
    lines = [textwrap.fill(text, width=100, initial_indent=f"  {name:<{width - 2}}", subsequent_indent=" " * width)
             for name, text in entries.items()]
    return "\n".join([textwrap.fill(title, width=100), *lines])


def _run_epilog(benchmark: str) -> str:
    """The names a run's options and report use, in words, then where the data comes from."""
    if benchmark == "memgallery":
        categories = {code: f"{name}: {asks}" for code, (name, asks) in legend.MEMGALLERY_CATEGORIES.items()}
    else:
        categories = dict(legend.LOCOMO_CATEGORIES)
    return "\n\n".join([
        _listed("V-Mem variants (--config). The first four are the V-Mem paper's ablation; each of the next seven "
                "changes one setting of the full system:", legend.RUNGS),
        _listed("Systems (--systems):", {"vmem": "V-Mem, at each --config variant", **legend.STOCK_SYSTEMS}),
        _listed("Question categories in the report:", categories),
        _wrapped("The report counts the questions asked and scored, and says why any were not: a question whose "
                 "data names no evidence has nothing to retrieve and is not scored for ranking or context.",
                 "Data: " + DATA_SOURCES[benchmark]),
    ])


def check_extra() -> None:
    """Stop, naming the install command, when the ``bench`` extra is missing: without it a run
    fails only once a worker process first needs it, after every memory was built."""
    missing = [f"{module} (from {dist})" for module, dist in BENCH_EXTRA.items() if not _importable(module)]
    if missing:
        raise SystemExit(f"vmem-bench needs the packages of the llama-index-vmem 'bench' extra; missing: {', '.join(missing)}."
                         f"\nInstall them with:\n    {INSTALL_BENCH}\nor, in a clone of the repository:\n"
                         f"    {INSTALL_BENCH_CLONE}")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package, or a module blocked in sys.modules
        return False


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
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")  # progress is the bars'
    if args.command == "compare":
        from .compare import compare

        print(json.dumps(compare(_read_json(args.a), _read_json(args.b), args.system, args.system_b or args.system,
                                 args.metric, args.resamples), indent=2))
        return 0
    check_extra()
    files = data_files(args.command, args.paths)  # missing data is named before anything loads or is written
    llm = llm or load_llm(args.llm, args.llm_kwargs)
    _prepare_run(args, llm)
    conversations = _load(args, files)
    if args.limit:
        for c in conversations:
            c.limit_questions(args.limit)
    from . import report
    from .harness import run_benchmark

    results = run_benchmark(args.command, conversations, k=args.k, systems=args.systems, rungs=args.config,
                            llm=llm, qa=args.qa, judge_prompt=args.judge_prompt, show_progress=not args.no_progress,
                            delivery=args.delivery)
    args.out.write_text(json.dumps(results, indent=2))
    report.write(results, args.report)
    print(summary(results, args.out, args.report))
    return 0


def summary(results: Dict, out: Path, report_path: Path) -> str:
    """One line for the terminal: the questions asked and scored, each system's hit@k, and where
    the results and report are (the report itself is in its file, not printed again)."""
    from .report import chart_path, system_names

    scores = ", ".join(f"{name} {_fmt(results[name]['overall'].get('hit@k'))}" for name in system_names(results))
    questions = results["questions"]
    return (f"{results['benchmark']}: {questions['asked']} questions asked, {questions['scored']} scored | "
            f"hit@{results['k']} {scores} | results: {out} | report: {report_path} (chart: {chart_path(report_path)})")


def _fmt(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "-" if value is None else str(value)


def data_files(benchmark: str, paths: List[Path]) -> List[Path]:
    """The data files ``paths`` name, each once, in the order given: a folder stands for the ``.json``
    files in it, in name order (Mem-Gallery: or in its ``dialog`` subfolder). A path that is not
    there, or a folder without data, stops the run with where to get the data."""
    title = {"memgallery": "Mem-Gallery", "locomo": "LoCoMo"}[benchmark]
    where = f"vmem-bench {benchmark} reads the {title} data, which is not included.\n\n" + _wrapped(DATA_SOURCES[benchmark])
    files: List[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json") if p.is_file())
            if not found and benchmark == "memgallery" and (path / "dialog").is_dir():
                found = sorted(p for p in (path / "dialog").glob("*.json") if p.is_file())
            if not found:
                raise SystemExit(f"{path}: a folder with no .json files in it. {where}")
            files += found
        elif path.exists():
            files.append(path)
        else:
            raise SystemExit(f"{path}: no such file or folder. {where}")
    return list(dict.fromkeys(p.resolve() for p in files))


def _prepare_run(args: argparse.Namespace, llm) -> None:
    """Refuse, or make ready, everything that would otherwise fail only after the run, when its
    work is lost: the LLM and judge prompt QA needs, and the output folders."""
    from . import report
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
        raise SystemExit(f"--judge-prompt {args.judge_prompt}: no such file (Mem-Gallery's is prompts/llm_judge.txt)."
                         f"\n\n{DATA_SOURCES['memgallery']}")
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


def _load(args: argparse.Namespace, files: List[Path]) -> List["BenchConversation"]:
    """Each file once, in the order given; a file that is not this benchmark's is named."""
    from .data import load_locomo, load_memgallery

    conversations = []
    for path in files:
        try:
            if args.command == "memgallery":
                conversations.append(load_memgallery(path, args.image_root))
            else:
                conversations += load_locomo(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise SystemExit(f"{path}: not a readable {args.command} file ({type(e).__name__}: {e})") from None
    if not conversations:
        raise SystemExit(f"no conversations in {', '.join(map(str, files))}")
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
