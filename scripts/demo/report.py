"""The demo's report: the translation and summarization tables, the loss plot, ``report.md``.

Every number comes from a :class:`~scripts.common.run_record.Run` the demo trained and
decoded; a figure not measured reads "-".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Sequence

from scripts.common.atomic_files import write_text_atomic
from scripts.common.plotting import markdown_table
from scripts.common.run_record import Run
from scripts.demo.loss_plots import task_loss_panels
from scripts.demo.reference_rows import LATE_DROP, References, late_drop, updates_cell
from scripts.demo.summarization import SummaryReferences

TABLE_HEADERS = ["model", "params", "updates", "train s", "words/s", "valid nll", "BLEU",
                 "tok BLEU", "attn entropy", "attn zeros"]
SUMMARY_HEADERS = ["model", "params", "updates", "train s", "train CPU s", "valid nll",
                   "ROUGE-1", "ROUGE-2", "ROUGE-L", "train speed", "decode s", "decode speed"]


def _dashes(row: list) -> list:
    # not measured reads better as "-" than nan
    return ["-" if isinstance(v, float) and math.isnan(v) else v for v in row]


def _median(values: Sequence[float]) -> float:
    return sorted(values)[len(values) // 2] if values else math.nan


def table_rows(runs: Sequence[Run]) -> List[list]:
    """The translation table's model rows."""
    return [_dashes([run.label, run.params if run.params is not None else "-",
                     updates_cell(run.updates, run.finished), run.train_seconds,
                     _median(run.wps), run.valid_nll, run.bleu, run.tok_bleu, run.entropy,
                     run.zeros])
            for run in runs if run.data == "sentences"]


def translation_table(runs: Sequence[Run], references: References | None) -> List[list]:
    """The models' rows, then the copy and trivial reference rows."""
    rows = table_rows(runs)
    return rows + (references.rows(TABLE_HEADERS) if references and rows else [])


# The translation comparisons: run keys, each pair in one sentence.
TRANSLATION_PAIRS = (("softmax", "relu"), ("finetune_ce", "finetune_sparse"))


def translation_findings(runs: Sequence[Run], references: References | None) -> List[str]:
    """The unigram entropy against the softmax Transformer, then one sentence per comparison
    (softmax against ReLUFormer; the two continuations): whether both learned, and why even
    then they do not compare the methods (:meth:`References.comparison`)."""
    translation = [run for run in runs if run.data == "sentences"]
    if references is None or not translation:
        return []
    models = {run.key: {**dict(zip(TABLE_HEADERS, row)), "label": run.label,
                        LATE_DROP: late_drop(run.losses)}
              for run, row in zip(translation, table_rows(translation))}
    lines = [references.entropy_line(next(iter(models.values())))]
    lines += [references.comparison(models[a], models[b]) for a, b in TRANSLATION_PAIRS
              if a in models and b in models]
    return lines


def summary_rows(runs: Sequence[Run]) -> List[list]:
    """The summarization table; speeds are relative to the first (vanilla) row.

    Training speed: CPU seconds per update of the vanilla run over this run's. Decoding
    speed: fairseq-generate's own time for the test split, vanilla over this run.
    """
    runs = [run for run in runs if run.data == "summaries"]
    if not runs:
        return []
    base = runs[0]

    def per_update(run: Run) -> float:
        return run.train_cpu / run.updates if run.updates else math.nan

    def ratio(numerator: float, denominator: float) -> float:
        # fairseq prints times to 0.1 s: a tiny decode may read 0.0, on either side (a ratio
        # of 0 or infinity would be an artefact of the rounding, not a speed)
        return numerator / denominator if numerator > 0 and denominator > 0 else math.nan

    rows = []
    for run in runs:
        rows.append(_dashes([
            run.label, run.params if run.params is not None else "-",
            updates_cell(run.updates, run.finished),
            run.train_seconds, run.train_cpu, run.valid_nll,
            run.rouge.get("rouge1", math.nan), run.rouge.get("rouge2", math.nan),
            run.rouge.get("rougeL", math.nan), ratio(per_update(base), per_update(run)),
            run.decode_seconds, ratio(base.decode_seconds, run.decode_seconds)]))
    return rows


def loss_plot(runs: Sequence[Run], path: Path,
              references: SummaryReferences | None = None,
              translation: References | None = None) -> Path:
    """Every run's training nll against its updates, one panel per task (their vocabularies
    differ), each task's unigram entropy dashed in its panel."""
    def curves(data: str) -> Dict[str, tuple]:
        return {run.label: ([u for u, _ in run.losses], [v for _, v in run.losses])
                for run in runs if run.losses and run.data == data}

    dashed = {}
    if translation is not None:
        dashed["Translation"] = ("unigram entropy of the targets", translation.entropy_bits)
    if references is not None:
        dashed["Summarization"] = ("unigram entropy of the summaries", references.entropy_bits)
    return task_loss_panels(path, {"Translation": curves("sentences"),
                                   "Summarization": curves("summaries")},
                            "Training cross-entropy (full softmax)", references=dashed)


def summary_table(runs: Sequence[Run], references: SummaryReferences | None) -> List[list]:
    """The models' rows, then the trivial and lead reference rows."""
    rows = summary_rows(runs)
    return rows + (references.rows(SUMMARY_HEADERS) if references and rows else [])


def summary_findings(runs: Sequence[Run], references: SummaryReferences | None) -> List[str]:
    """What the summary table shows against its reference rows, in sentences."""
    if references is None:
        return []
    summaries = [run for run in runs if run.data == "summaries"]
    models = [{**dict(zip(SUMMARY_HEADERS, row)), "label": row[0],
               LATE_DROP: late_drop(run.losses)}
              for run, row in zip(summaries, summary_rows(runs))]
    return references.findings(models)



def _bullets(lines: List[str]) -> List[str]:
    """The findings as one markdown list (nothing for none)."""
    return ["\n".join(f"- {line}" for line in lines) + "\n"] if lines else []


def _report_section(title: str, corpus: str, size: str, table: str, columns: str) -> List[str]:
    """One task's part of the report: what it trained on, at what size, the table, its columns."""
    return [f"## {title}\n", f"Corpus: {corpus}.  ", f"{size}.\n", table, columns]


def write_report(out: Path, runs: Sequence[Run], context: Dict[str, object],
                 figures: Sequence[Path]) -> Path:
    """``OUT/report.md``: machine, one section per task, notes, the figures that exist."""
    notes = [f"- {run.label}: {run.note}" for run in runs if run.note]
    images = {p.name: p for p in figures}
    parts = [
        "# relu-former demo report\n",
        f"Machine: {context['machine']}. Total wall time {context['wall']}.\n",
    ]
    translation = translation_table(runs, context.get("translation_references"))
    if translation:
        parts += _report_section(
            "Translation", context["corpus"], f"Size `{context['scale']}`: {context['model']}",
            markdown_table(TABLE_HEADERS, translation, digits=3),
            "Columns: `train s` is fairseq's own training time (no start-up); `words/s` the median "
            "of its per-interval target words per second; `valid nll` the full-softmax "
            "cross-entropy on valid (bits); `BLEU` sacreBLEU on detokenised, case-insensitive test "
            "output; `tok BLEU` fairseq's BLEU on the tokenised text (the paper's kind); attention "
            "entropy (nats) and share of exactly-zero weights are means over every attention row "
            "of every layer and head on the test split "
            "(`scripts/analysis/analyze_attention.py`). The models trained from scratch get the "
            "same update budget and train all of it (a model a safety cap stopped reads "
            "\"not finished\" and no comparison uses it); the "
            "last two continue the softmax Transformer's last checkpoint, each for the same "
            "number of updates, with a fresh Adam and a constant learning rate (the one the "
            "softmax run ended at). The reference rows read no model "
            "(`scripts/demo/translation_references.py`), scored with the same sacreBLEU: the "
            "copy output is the source sentence itself, the trivial output the same for every "
            "sentence (the most frequent target words); the trivial row's `valid nll` is the "
            "targets' unigram entropy, on the BPE tokens the models' valid nll is measured on. "
            "A model has learned when its valid nll is at least 2 bits below it and its BLEU "
            "above both reference rows.\n")
        parts += _bullets(translation_findings(runs, context.get("translation_references")))
    if context.get("summary_corpus"):
        parts += _report_section(
            "Long-input summarization", context["summary_corpus"],
            f"Size: {context['summary_model']}",
            markdown_table(SUMMARY_HEADERS,
                           summary_table(runs, context.get("summary_references")), digits=3),
            "Columns: ROUGE-1/2/L are F1 x 100 (rouge-score, Porter stemmer) of the decoded "
            "summaries against the pages' own NAME descriptions "
            "(`scripts/recipes/lib/score.py`, the recipes' scorer); `train CPU s` the CPU "
            "time of the whole fairseq-train process; `train speed` the vanilla encoder's "
            "CPU seconds per update divided by this model's (above 1: faster); `decode s` "
            "fairseq-generate's own time for the test split and `decode speed` the vanilla "
            "encoder's time divided by this model's. The models decode at the same time, "
            "so that the machine's load affects each alike (training speed is CPU time, "
            "which load hardly changes). The "
            "reference rows read no model: the trivial output is the same for every page (the "
            "most frequent words of the training summaries; its `valid nll` is the summaries' "
            "unigram entropy, what a model of word frequencies alone gets), the lead output "
            "a page's first words.\n")
        parts += _bullets(summary_findings(runs, context.get("summary_references")))
    if notes:
        parts.append("\n".join(notes) + "\n")
    captions = [
        ("demo_loss.png", "Training curves of every run"),
        ("analyze_attention_heatmap.png",
         "Cross-attention of one test sentence, softmax vs ReLU (last layer, mean of heads)"),
        ("analyze_attention_entropy.png", "Attention entropy per layer"),
        ("analyze_attention_zeros.png", "Share of zero attention weights per layer"),
    ]
    for name, caption in captions:
        if name in images:
            parts.append(f"## {caption}\n\n![{caption}]({name})\n")
    if "analyze_attention.md" in images:
        parts.append("Per-layer and per-head figures: [analyze_attention.md]"
                     "(analyze_attention.md).\n")
    if context.get("try_it"):
        parts.append(str(context["try_it"]))
    return write_text_atomic(out / "report.md", "\n".join(parts))
