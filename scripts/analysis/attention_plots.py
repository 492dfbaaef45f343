"""The attention analysis's figures: per-layer panels of a figure against the layer, and
attention maps side by side (:mod:`scripts.analysis.analyze_attention`), saved atomically.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from scripts.common.plotting import pyplot, save_figure


def panel_plot(
    path: str | os.PathLike,
    panels: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]],
    title: str,
    xlabel: str,
    ylabel: str,
    scatter: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]] | None = None,
    integer_x: bool = False,
) -> Path:
    """Side-by-side panels sharing the y axis: ``panel -> label -> (xs, ys)`` lines;
    ``scatter`` (same nesting) adds unconnected points in their line's colour (the heads
    around a per-layer mean); ``integer_x`` puts a tick on each x of the data only."""
    plt = pyplot()

    names = list(panels)
    fig, axes = plt.subplots(
        1, len(names), figsize=(3.6 * len(names) + 0.8, 3.6), sharey=True, squeeze=False
    )
    for ax, name in zip(axes[0], names):
        for label, (xs, ys) in panels[name].items():
            (line,) = ax.plot(list(xs), list(ys), marker="o", label=label)
            points = (scatter or {}).get(name, {}).get(label)
            if points is not None:
                ax.scatter(list(points[0]), list(points[1]), s=12, alpha=0.5,
                           color=line.get_color())
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
        if integer_x:
            ticks = sorted({int(x) for xs, _ in panels[name].values() for x in xs})
            ax.set_xticks(ticks)
            if ticks:
                ax.set_xlim(ticks[0] - 0.5, ticks[-1] + 0.5)
    axes[0][0].set_ylabel(ylabel)
    axes[0][0].legend(fontsize="small")
    fig.suptitle(title, y=1.03)
    return save_figure(fig, path)


def heatmaps(
    path: str | os.PathLike,
    maps: Sequence[tuple[str, Any]],
    xlabels: Sequence[str] | None = None,
    ylabels: Sequence[str] | None = None,
    title: str = "",
) -> Path:
    """Matrices (``(panel title, 2-D array)``) side by side, each with its own colour scale
    (softmax rows sum to one, ReLU rows do not: a shared scale would hide one)."""
    plt = pyplot()
    count = len(maps)
    rows = len(maps[0][1]) if count else 1
    cols = len(maps[0][1][0]) if count and rows else 1
    width = max(3.0, 0.32 * cols + 1.5)
    height = max(2.5, 0.32 * rows + 1.2)
    fig, axes = plt.subplots(1, count, figsize=(width * count, height), squeeze=False)
    for ax, (name, matrix) in zip(axes[0], maps):
        image = ax.imshow(matrix, cmap="viridis", aspect="auto", interpolation="nearest")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        ax.set_title(name, fontsize="medium")
        if xlabels is not None:
            ax.set_xticks(range(len(xlabels)))
            ax.set_xticklabels(xlabels, rotation=90, fontsize="small")
        if ylabels is not None:
            ax.set_yticks(range(len(ylabels)))
            ax.set_yticklabels(ylabels, fontsize="small")
    if title:
        fig.suptitle(title, y=1.03)
    return save_figure(fig, path)
