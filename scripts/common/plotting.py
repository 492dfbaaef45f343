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


def pyplot():
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
        pyplot().close(fig)
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
    plt = pyplot()
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
