"""report.md (tables) and a per-category bar chart PNG from results.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

from . import legend
from .metrics import CONTEXT_METRICS, QA_METRICS

TITLES = {"memgallery": "Mem-Gallery", "locomo": "LoCoMo"}
QUALITY = ("hit@k", "recall@k", "precision@k", "hit@k_whole_rounds", "recall@k_whole_rounds", *CONTEXT_METRICS, "context_tokens_mean", "delivered_images_mean")
COST = ("build_seconds", "units_per_second", "build_llm_tokens", "query_ms_p50", "query_ms_p95",
        "query_ms_with_anchors_p50", "query_ms_with_anchors_p95", "peak_rss_mb")
#: Per-category tables over the questions scored (ranking and context), and over every question asked.
PER_CATEGORY_SCORED = ("hit@k", "recall@k", "precision@k", "hit@k_whole_rounds", "recall@k_whole_rounds", *CONTEXT_METRICS)
PER_CATEGORY_ASKED = ("context_tokens_mean", *QA_METRICS)
INTRO = (
    "Each system built a memory of each conversation, was asked the conversation's questions, and is scored on what it "
    "returned: its top K = {k} evidence ids (the rounds or turns the benchmark names as holding the answer), and the "
    "context it would give the answering model. Scores run from 0 to 1, higher is better, each a mean over the "
    "questions scored (see Questions); costs are in seconds, milliseconds and megabytes."
)
IMAGE_MODES = {
    "pixels": "every picture ran with its pixels (and its caption)",
    "caption": "every picture ran as its caption alone (the data has no image files)",
    "mixed": "some pictures ran with pixels, others as their caption alone (listed below)",
}
CONTEXT_LEGEND = (
    "context_evidence_recall: the share of gold evidence whose text is in the context each system would deliver, "
    "an evidence id counting for the share of its raw text (in tokens) in the context: a Mem-Gallery round whose user "
    "line is there without its reply or picture counts for the user line's share of the round, a LoCoMo turn for its "
    "line or its photo's caption alone. "
    "A stock context is its own nodes in rank order, each dated with its round's timestamp in its text, '[date] text', "
    "as it was searched (the -units variants: as LlamaIndex renders metadata for an LLM, not searched), filled to "
    "vmem's token count for that question. "
    "context_evidence_recall_any_part: the same with an evidence id counted whole when any part of its text is there. "
    "context_evidence_recall_rounds: stock contexts of whole rounds instead, rendered as vmem renders a round "
    "(equal granularity)."
)
RANKING_LEGEND = (
    "Ranked ids: a stock system is scored on the ids of the nodes it returns: on LoCoMo stock-dense, stock-bm25 and "
    "stock-fusion index one node per turn, '[session date] Speaker: text [shares a photo: caption]', as a LlamaIndex "
    "user would; the -units variants index V-Mem's units, searched by their text alone, and are scored by their rounds. "
    "vmem returns rounds: its ids are each returned round's matched turns (those whose units a signal's candidates "
    "held, metadata['vmem']['pool_units']) in rank order, then the rest of those rounds' turns. *_whole_rounds, for "
    "every system that ranks finer than rounds: the rounds of its ranking, each expanded whole in turn order. On "
    "Mem-Gallery (evidence = rounds) the two are the same."
)
NO_CONTEXT_LEGEND = "No vmem system ran, so no context is scored: stock contexts are filled to vmem's token count."
COST_LEGEND = (
    "query_ms: everything a system does to rank (for vmem: search, fusion and neighbour blocks); "
    "query_ms_with_anchors (with an LLM): plus the time the LLM took to write anchors. "
    "build_seconds: stock-fusion fuses a vector index built on stock-dense's vectors (the same units and weights) "
    "where both run, so its time is its own plus stock-dense's: what building it alone costs. "
    "peak_rss_mb: the peak resident memory of the process that built and queried the system: its libraries, encoders "
    "and the benchmark data as well as its memories. Each stock system runs in a process of its own; the vmem rungs "
    "share the calling process."
)


def system_names(results: Dict[str, Any]) -> List[str]:
    return [k for k, v in results.items() if isinstance(v, dict) and "overall" in v]


def _table(header: List[str], rows: List[List[Any]]) -> str:
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else "–" if v is None else str(v)  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _by_category(counts: Dict[str, int]) -> str:
    return ", ".join(f"{c} {n}" for c, n in counts.items())


def questions_section(results: Dict[str, Any]) -> List[str]:
    """How many questions were asked, scored and not, and why: what every mean below is over."""
    q, benchmark = results["questions"], results["benchmark"]
    context = "ranking and context" if q["context_scored"] else "ranking (context is not scored: no vmem system ran)"
    lines = [f"* Asked of every system: {q['asked']}.", f"* Scored for {context}: {q['scored']}."]
    for reason, counts in q["not_scored"].items():
        lines.append(f"* Not scored: {sum(counts.values())}, {reason} ({_by_category(counts)}).")
    if "answered" in q:
        lines.append(f"* Answered and judged: {q['answered']}, every question asked.")
    for reason, counts in q["not_asked"].items():
        lines.append(f"* In the data but not asked: {sum(counts.values())}, {reason} ({_by_category(counts)}).")
    rows = [[legend.category_name(benchmark, c), _asks(benchmark, c), b["not_asked"] + b["asked"], b["asked"], b["scored"]]
            for c, b in q["per_category"].items()]
    return ["## Questions", "", *lines, "",
            _table(["category", "what it asks", "in the data", "asked", "scored"], rows), ""]


def _asks(benchmark: str, code: str) -> str:
    if benchmark == "memgallery":
        return legend.MEMGALLERY_CATEGORIES.get(code, ("", ""))[1]
    return legend.LOCOMO_CATEGORIES.get(code, "")


def systems_section(results: Dict[str, Any]) -> List[str]:
    rows = [[name, legend.system_description(name)] for name in system_names(results)]
    skipped = [f"{name} did not run: {why}." for name, why in results.get("skipped_systems", {}).items()]
    return ["## Systems", "", _table(["system", "what it is"], rows), "", *skipped, *([""] if skipped else [])]


def _metric_legend(metrics: Sequence[str]) -> str:
    return "\n".join(f"* {m}: {legend.METRICS[m]}" for m in metrics if m in legend.METRICS)


def markdown(results: Dict[str, Any], chart: str = "") -> str:
    names = system_names(results)
    k, benchmark = results["k"], results["benchmark"]
    conversations = results.get("conversations", [])
    parts = [f"# vmem-bench: {TITLES.get(benchmark, benchmark)}", "", INTRO.format(k=k), "",
             f"Conversations: {len(conversations)} ({', '.join(conversations)}). Pictures: "
             f"{IMAGE_MODES.get(results['image_mode'], results['image_mode'])}. Evidence ids written malformed in the "
             f"data, read as far as they go: {results.get('malformed_evidence_ids', 0)}.", ""]
    if results.get("caption_only_images"):
        parts += ["Images whose file was not found, so they ran as captions: "
                  + "; ".join(f"{conv}: {', '.join(ids)}" for conv, ids in results["caption_only_images"].items()), ""]
    parts += questions_section(results) + systems_section(results)

    def present(keys: Sequence[str]) -> List[str]:
        return [m for m in keys if any(results[n]["overall"].get(m) is not None for n in names)]

    def overall(keys: Sequence[str]) -> str:
        return _table(["system", *keys], [[n, *[results[n]["overall"].get(m) for m in keys]] for n in names])

    quality = present(QUALITY)
    context_legend = CONTEXT_LEGEND if results.get("context_budget_from") else NO_CONTEXT_LEGEND
    parts += ["## Retrieval and context (overall)", "", overall(quality), "", _metric_legend(quality), "",
              RANKING_LEGEND, "", context_legend, "", "## Cost", "", overall(present(COST)), "", COST_LEGEND, ""]
    qa = present(QA_METRICS)
    if qa:
        parts += ["## End-to-end QA", "", overall(qa), "", _metric_legend(qa), ""]
    parts += per_category_tables(results, names)
    if chart:
        parts += [f"![hit@k per category]({chart})", ""]
    return "\n".join(parts)


def per_category_tables(results: Dict[str, Any], names: List[str]) -> List[str]:
    """One table per metric: categories with a question scored for it, and each one's count."""
    benchmark, counts = results["benchmark"], results["questions"]["per_category"]
    parts: List[str] = []
    for metric in (*PER_CATEGORY_SCORED, *PER_CATEGORY_ASKED):
        column = "scored" if metric in PER_CATEGORY_SCORED else "asked"
        blocks = {n: results[n]["per_category"] for n in names}
        if not any(block.get(metric) is not None for per in blocks.values() for block in per.values()):
            continue  # not measured in this run (QA without --qa, context without vmem)
        rows = [[legend.category_name(benchmark, c), counts[c][column], *[blocks[n].get(c, {}).get(metric) for n in names]]
                for c in counts if counts[c][column]]
        parts += [f"## {metric} per category", "", _table(["category", column, *names], rows), ""]
    return parts


def bar_chart(results: Dict[str, Any], path: Path, metric: str = "hit@k") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = system_names(results)
    categories = sorted({c for n in names for c, block in results[n]["per_category"].items() if block.get("scored")})  # scored only
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(6, len(categories) * 1.2), 4))
    for i, name in enumerate(names):
        values = [results[name]["per_category"].get(c, {}).get(metric) or 0.0 for c in categories]
        ax.bar([x + i * width for x in range(len(categories))], values, width, label=name)
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(categories))], categories)
    ax.set_ylabel(metric)
    ax.set_ylim(0, 1)
    ax.set_title(f"{TITLES.get(results['benchmark'], results['benchmark'])}: {metric} per category (K={results['k']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_path(report_path: Path) -> Path:
    """Where ``write`` puts the report's per-category chart: next to it, as a PNG."""
    return report_path.with_suffix(".png")


def write(results: Dict[str, Any], report_path: Path) -> None:
    chart = chart_path(report_path)
    bar_chart(results, chart)
    report_path.write_text(markdown(results, chart.name))
