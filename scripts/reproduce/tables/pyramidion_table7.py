"""Pyramidion Table 7: pooling configurations against the vanilla (full attention) and
blockwise encoders, with their cost."""

from __future__ import annotations

import scripts.reproduce.tables.toy_settings as toy
from scripts.reproduce.spec import Comparison, Deviation, Metric, Row

# Schedules are written for 4 encoder layers and any input length L (256 at toy scale): the
# kind resolves the placeholders L, L/2, L/4 (see scripts/reproduce/kinds/summarization.py).
ROWS = (
    Row("vanilla", "vanilla (full attention, no pooling)",
        ("--attention-block-size", "0", "--pooling-schedule", "none"),
        paper={"rouge1": "baseline", "train_cpu_per_update": "3x Pyramidion"},
        recipe_model="transformer"),
    Row("blockwise", "blockwise (blocks of L/4, no pooling)",
        ("--attention-block-size", "L/4", "--pooling-schedule", "none"),
        paper={"rouge1": "46.85 (arXiv)"}, recipe_model="blockwise"),
    Row("transpooler", "Transpooler (blocks of L/4, pool L -> L/4 after the encoder)",
        ("--attention-block-size", "L/4", "--pooling-schedule", "last:L/4"),
        recipe_model="transpooler"),
    Row("pyramidion", "Pyramidion (blocks of L/4, L -> L/2 -> L/4 after layers 2 and 3)",
        ("--attention-block-size", "L/4", "--pooling-schedule", "2:L/2,3:L/4"),
        paper={"rouge1": "+1.2 over vanilla; 47.15 deep (arXiv)",
               "train_cpu_per_update": "1/3 of vanilla",
               "decode_cpu_seconds": "1/2.4 of vanilla"},
        recipe_model="pyramidion"),
)

SPEC = toy.arxiv_summary_table(
    name="pyramidion_table7",
    title="pooling configurations against vanilla and blockwise, with cost",
    paper="Pyramidion, Table 7",
    claim="A Pyramidion (blocks of 512, 8192 -> 4096 -> 2048) gains 1.2 ROUGE over the "
          "full-attention vanilla encoder at the same input length while training 3x and "
          "decoding 2.4x faster; DeepPyramidion beats blockwise (47.15 vs 46.85 ROUGE-1).",
    metrics=(*toy.ROUGE,
             Metric("train_cpu_per_update", "train CPU s/update", False, 3, learned=False),
             toy.DECODE_CPU, toy.DECODE_SECONDS),
    rows=ROWS,
    comparisons=(
        Comparison("pyramidion", "vanilla", "rouge1", "Pyramidion keeps (beats) vanilla ROUGE"),
        Comparison("pyramidion", "blockwise", "rouge1", "Pyramidion beats blockwise"),
        Comparison("pyramidion", "vanilla", "train_cpu_per_update",
                   "Pyramidion trains cheaper than vanilla"),
        Comparison("pyramidion", "vanilla", "decode_cpu_seconds",
                   "Pyramidion decodes faster than vanilla"),
    ),
    plot=("metric:train_cpu_per_update", "rouge1"),  # ROUGE against cost
    deviations=(
        toy.MANPAGES,
        Deviation("length", "8192 -> 4096 -> 2048, blocks of 512",
                  "256 -> 128 -> 64, blocks of 64", "the paper's ratios at 1/32 the length"),
        toy.SUMMARY_MODEL, toy.SUMMARY_BUDGET,
        Deviation("cost", "GPU training and decoding time", "CPU seconds per update, "
                  "decoding CPU seconds on one thread",
                  "no GPU; CPU time hardly depends on the machine's load, wall time does"),
    ),
    notes=toy.table_notes("pyramidion_table7"),
)
