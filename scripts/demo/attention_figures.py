"""The demo's attention figures: every translation model's attention on the test split.

Uses ``scripts/analysis/analyze_attention.py``: the table numbers are means over every
attention row of every attention module; the per-layer plots and the heat map compare the
softmax Transformer with the ReLUFormer.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

from scripts.common.run_record import Run
from scripts.common.translation_data import SRC, TGT
from scripts.recipes.lib.prepare_text import read_lines


def heatmap_sentence(prep: Path, low: int = 6, high: int = 14) -> int:
    """Index of the first test sentence of a readable length for the heat map."""
    src = read_lines(prep / "sentences" / f"test.{SRC}")
    tgt = read_lines(prep / "sentences" / f"test.{TGT}")
    for i, (s, t) in enumerate(zip(src, tgt)):
        if low <= len(s.split()) <= high and low <= len(t.split()) <= high:
            return i
    return 0



def analyse_attention(runs: List[Run], data_bin: Path, out: Path, sentence: int,
                      max_sentences: int, threads: int) -> List[Path]:
    """Entropy and zero share of every model's attention on the test split, and the figures.

    Uses ``scripts/analysis/analyze_attention.py``: the table numbers are means over every
    attention row of every attention module; the per-layer plots and the heat map compare the
    softmax Transformer with the ReLUFormer.
    """
    import torch

    from scripts.analysis import analyze_attention as aa

    torch.set_num_threads(threads)
    paths = {run.key: str(out / "work" / run.key / "checkpoint_last.pt") for run in runs}
    args = aa.parse_args([str(data_bin), "--path", *paths.values(), "--out", str(out),
                          "--gen-subset", "test", "--max-sentences", str(max_sentences),
                          "--sentence", str(sentence)])
    analyses = {}
    for run in runs:
        analysis = aa.analyze(paths[run.key], run.label, args)
        means = analysis.attention_means()
        run.entropy, run.zeros = means["entropy"], means["zeros"]
        analyses[run.key] = analysis
    shown = [analyses[k] for k in ("softmax", "relu") if k in analyses]
    args.path = [paths[k] for k in ("softmax", "relu") if k in analyses]
    return aa.write_outputs(shown, args)
