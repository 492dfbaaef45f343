"""The demo's training curves: one panel per task, each legend below its panel.

Translation and summarization use different vocabularies (a joint BPE, a SentencePiece
model) on different data, so their cross-entropies share no scale: each task gets its own
panel and its own y axis. The legends sit under the axes, where they cannot cover a curve.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence, Tuple

from scripts.common.plotting import pyplot, save_figure

Curve = Tuple[Sequence[float], Sequence[float]]


def task_loss_panels(path: str | os.PathLike, panels: Mapping[str, Mapping[str, Curve]],
                     title: str, xlabel: str = "update",
                     ylabel: str = "training nll (bits per token)",
                     references: Mapping[str, Tuple[str, float]] | None = None) -> Path:
    """Write a PNG with one panel per ``task -> {label: (updates, losses)}``.

    Panels without curves are left out. ``references`` maps a task to ``(label, value)``, a
    dashed horizontal line in that panel (e.g. the summaries' unigram entropy). Raises
    ``ValueError`` if no panel has a curve.
    """
    shown = {task: curves for task, curves in panels.items() if curves}
    if not shown:
        raise ValueError("no training curves to plot")
    plt = pyplot()
    fig, axes = plt.subplots(1, len(shown), figsize=(5.2 * len(shown), 4.6), squeeze=False)
    for ax, (task, curves) in zip(axes[0], shown.items()):
        for label, (xs, ys) in curves.items():
            ax.plot(list(xs), list(ys), marker=".", label=label)
        reference = (references or {}).get(task)
        if reference is not None:
            ax.axhline(reference[1], color="grey", linestyle="--", linewidth=1,
                       label=reference[0])
        ax.set_title(task, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        # below the axes, one entry a line: long labels neither cover curves nor overlap
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16),
                  ncol=1, frameon=False)
    fig.suptitle(title)
    return save_figure(fig, path)
