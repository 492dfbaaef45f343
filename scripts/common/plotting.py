"""Tables and plots shared by the benchmark, analysis and demo scripts, saved atomically;
Matplotlib imported lazily with the Agg backend (headless machines).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from scripts.common.atomic_files import atomic_path


def format_number(value: Any, digits: int = 3) -> str:
    """Format a table cell: floats to ``digits`` significant digits (large ones as integers)."""
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    if abs(value) >= 10**digits:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 3) -> str:
    """A GitHub-flavoured Markdown table; numbers are formatted by :func:`format_number`."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells, the table has {len(headers)}")
        lines.append("| " + " | ".join(format_number(cell, digits) for cell in row) + " |")
    return "\n".join(lines) + "\n"


def _pyplot():
    # fairseq's import leaves the root logger at DEBUG; matplotlib's font search floods it.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG through a temporary name, then close it."""
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format="png")
    finally:
        _pyplot().close(fig)
    return Path(path)


def line_plot(
    path: str | os.PathLike,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    hline: float | None = None,
) -> Path:
    """One line per ``label -> (xs, ys)``, with markers; ``hline`` draws a dashed reference."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), marker="o", label=label)
    if hline is not None:
        ax.axhline(hline, color="grey", linestyle="--", linewidth=1)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return save_figure(fig, path)


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
    plt = _pyplot()

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
    plt = _pyplot()
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
