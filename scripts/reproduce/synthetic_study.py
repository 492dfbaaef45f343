"""What the synthetic studies share (:mod:`~scripts.reproduce.synthetic_memory`,
:mod:`~scripts.reproduce.synthetic_scorer`): each row's rate chosen on seed 1 from :data:`GRID`
(widened while the best is at an edge), the plateau stop (:class:`Plateau`), the cell cache
under ``OUT/cells`` (a rerun resumes), the claims (:func:`scripts.reproduce.claims.judge`) and
the JSON and markdown they write.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

from scripts.common.atomic_files import write_text_atomic
from scripts.common.plotting import markdown_table
from scripts.reproduce.cell_cache import CellCache, settings_key
from scripts.reproduce.cell_plan import Cell
from scripts.reproduce.claims import NoModel, judge
from scripts.reproduce.rate_search import widened
from scripts.reproduce.report import claims_table, plain, result_table, spreads
from scripts.reproduce.spec import Row, TableSpec

GRID = (1.25e-3, 2.5e-3, 5e-3, 1e-2)
LR_LIMITS = (1e-4, 4e-2)
# what a seed's JSON record keeps of its cell's result
SEED_FIELDS = ("stopped", "still_improving", "updates", "curve", "cpu_seconds", "figures")


class Plateau:
    """The stop rule: 'plateau' after ``patience`` steps without a gain (the score up by
    ``need``, or, short of ``full``, the loss down by ``loss_gain`` of the last gain's loss, or
    of ``loss_scale`` where given), else 'cap' at ``max_steps``."""

    def __init__(self, limits: Dict[str, Any], need: float, full: float,
                 loss_scale: float | None = None) -> None:
        self.limits, self.need, self.full = limits, need, full
        self.loss_scale = loss_scale
        self.best, self.best_loss, self.best_step = -math.inf, math.inf, 0

    def update(self, step: int, score: float, loss: float) -> str | None:
        """Record the figures of ``step``; the stop reason, or None to go on."""
        gain = self.limits["loss_gain"]
        lower = (self.best_loss * (1.0 - gain) if self.loss_scale is None
                 else self.best_loss - gain * self.loss_scale)
        if score >= self.best + self.need or (score < self.full and loss < lower):
            self.best, self.best_loss, self.best_step = max(self.best, score), loss, step
        if step - self.best_step >= self.limits["patience"]:
            return "plateau"
        return "cap" if step >= self.limits["max_steps"] else None


def cell_result(curve: List[List[float]], step: int, stop: str, start: float,
                figures: Dict[str, float]) -> Dict[str, Any]:
    """A trained cell's result: ``stop`` (``diverged`` is a cap with NaN figures), ``step``,
    ``curve``, the CPU seconds since ``start`` and ``figures``."""
    diverged = stop == "diverged"
    return {"stopped": "cap" if diverged else stop, "still_improving": stop == "cap",
            "updates": step, "curve": curve, "cpu_seconds": time.process_time() - start,
            "figures": {**figures, "diverged": diverged}}


class Study:
    """The cells of ``table`` in one run, trained on demand, each cached as it finishes:
    ``settings`` is its key, ``train`` makes its result from them; the table's metrics are
    said after it."""

    def __init__(self, table: TableSpec, args: argparse.Namespace,
                 settings: Callable[[Row, int, float], Dict[str, Any]],
                 train: Callable[[Dict[str, Any]], Dict[str, Any]],
                 task: Any = None, limits: Dict[str, Any] | None = None) -> None:
        self.table, self.name, self.args = table, table.name, args
        self.task, self.limits = task, limits or {}
        self.settings, self.train = settings, train
        self.cache = CellCache(Path(args.out) / "cells")
        self.seen: List[Cell] = []   # every cell looked up, the rate grids' included
        self.trained = 0

    def cell(self, row: Row, seed: int, lr: float) -> Cell:
        settings = self.settings(row, seed, lr)
        key = settings_key(settings)
        folder = self.cache.folder(self.name, row.key, seed, f"{lr:g}-{key}")
        stored = self.cache.get(folder, key)
        if stored is None:
            stored = self.cache.put(folder, key, {**self.train(settings), "settings": settings})
            self.trained += 1
            figures = ", ".join(f"{metric.label} {stored['figures'][metric.key]:.{metric.digits}f}"
                                for metric in self.table.metrics)
            print(f"{row.label}, seed {seed}, lr {lr:g}: {figures}, {stored['stopped']} at "
                  f"step {stored['updates']} ({stored['cpu_seconds']:.1f} CPU s)")
        self.seen.append(Cell(row, seed, key, folder, lr=lr, result=stored))
        return self.seen[-1]

    def row_cells(self, row: Row) -> List[Cell]:
        """Seed 1 over the widened grid, then the other seeds at the rate of lowest loss."""
        grid, found = sorted(self.args.lr_grid), {}
        while True:
            for lr in grid:
                if lr not in found:
                    found[lr] = self.cell(row, 1, lr)
            loss = {lr: final_loss(cell) for lr, cell in found.items()}
            more = widened(grid, loss, LR_LIMITS)
            if more is None:
                break
            grid = sorted([*grid, more])
        chosen = min(grid, key=loss.get)
        points = [[lr, plain(loss[lr])] for lr in grid]
        cells = [found[chosen]] + [self.cell(row, seed, chosen)
                                   for seed in range(2, self.args.seeds + 1)]
        for cell in cells:
            cell.lr_grid = points
        return cells


def final_loss(cell: Cell) -> float:
    figures = cell.result["figures"]
    return math.inf if figures["diverged"] else float(figures["loss"])


def learning_table(cells: Sequence[Cell], rows: Sequence[Row]) -> str:
    """Per row: its rate, seed 1's final loss over the grid, how its seeds stopped and after
    how many steps."""
    lines = []
    for row in rows:
        done = [cell for cell in cells if cell.row.key == row.key]
        stops = [cell.result["stopped"] for cell in done]
        grid = ", ".join(f"{lr:g}: " + ("diverged" if loss is None else f"{loss:.4g}")
                         for lr, loss in done[0].lr_grid)
        lines.append([row.label, f"{done[0].lr:g}", grid,
                      ", ".join(f"{stops.count(s)} {s}" for s in sorted(set(stops))),
                      ", ".join(str(cell.result["updates"]) for cell in done)])
    return markdown_table(["row", "rate", "rate grid (seed 1's final loss)", "stopped",
                           "steps (seeds 1..)"], lines)


def results(study: Study, cells: Sequence[Cell], references: Dict[str, List[NoModel]],
            task: Dict[str, Any], intro: str) -> Dict[str, Any]:
    """What a study writes: its ``task``, limits, rows and judged claims, and the markdown
    (``intro``, then the tables)."""
    table = study.table
    judged = judge(table, cells, {"no_model": references})
    return {"task": task, "limits": study.limits, "seeds": study.args.seeds,
            "rows": row_records(cells, table.rows), "claims": judged,
            # every cell looked up, the rate grids' included
            "cpu_minutes": sum(cell.result["cpu_seconds"] for cell in study.seen) / 60,
            "markdown": "\n".join([intro, result_table(table, spreads(table, cells)),
                                   learning_table(cells, table.rows),
                                   claims_table(table, judged)])}


def row_records(cells: Sequence[Cell], rows: Sequence[Row]) -> Dict[str, Dict[str, Any]]:
    """The JSON of each row: its label, rate, rate grid and per seed its record."""
    return {row.key: {"label": row.label,
                      "lr": next(c.lr for c in cells if c.row.key == row.key),
                      "lr_grid": next(c.lr_grid for c in cells if c.row.key == row.key),
                      "seeds": [{"seed": c.seed, **{k: c.result[k] for k in SEED_FIELDS}}
                                for c in cells if c.row.key == row.key]}
            for row in rows}


def add_protocol_arguments(parser: argparse.ArgumentParser, max_steps: int, patience: int,
                           loss_gain: float, every: int, step: str = "full-batch step"
                           ) -> None:
    """The options every study has: ``--out``, ``--seeds``, ``--lr-grid``, ``--max-steps``,
    ``--patience``, ``--loss-gain`` and ``--every`` (a study adds its own ``--min-gain``)."""
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="folder for the results and the finished cells (a rerun "
                             "resumes from them)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per row (default 3)")
    parser.add_argument("--lr-grid", type=float, nargs="+", default=list(GRID), metavar="LR",
                        help="seed 1's rates per row, widened x2 while the best is at an edge "
                             f"(within {LR_LIMITS[0]:g}-{LR_LIMITS[1]:g}; default "
                             f"{' '.join(f'{lr:g}' for lr in GRID)})")
    parser.add_argument("--max-steps", type=int, default=max_steps,
                        help=f"the cap on {step}s (default {max_steps})")
    parser.add_argument("--patience", type=int, default=patience,
                        help=f"steps without a gain before a plateau (default {patience})")
    parser.add_argument("--loss-gain", type=float, default=loss_gain, metavar="FRACTION",
                        help="a relative fall of the loss that also counts as a gain while "
                             f"the score is short of full (default {loss_gain:g})")
    parser.add_argument("--every", type=int, default=every,
                        help=f"steps between curve points (default {every})")


def check_positive(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   flags: Sequence[str]) -> None:
    """Refuse, through ``parser``, a whole-number option below 1 or a rate not above 0."""
    for flag in flags:
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')}: give a positive whole number")
    if min(args.lr_grid) <= 0:
        parser.error("--lr-grid: give positive rates")


def run_study(study: Study, report: Callable[[Study, List[Cell]], Dict[str, Any]]) -> int:
    """Train (or read back) every row's cells; write what ``report`` makes of them as
    ``OUT/NAME.json`` and ``OUT/NAME.md`` (its ``markdown``) atomically, and print the table
    and a closing line; the exit status."""
    found = report(study, [cell for row in study.table.rows for cell in study.row_cells(row)])
    out, name = Path(study.args.out), study.name
    found["cells_trained_now"] = study.trained
    markdown = found.pop("markdown")
    write_text_atomic(out / f"{name}.json", json.dumps(plain(found), indent=1) + "\n")
    write_text_atomic(out / f"{name}.md", markdown)
    print(markdown)
    print(f"{len(study.seen)} cells ({study.trained} trained now), "
          f"{found['cpu_minutes']:.2f} CPU minutes in all; {out / (name + '.json')}")
    return 0
