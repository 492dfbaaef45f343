"""Each row's learning rate, chosen on seed 1 from a grid (tables with an ``lr_grid``): the
rate of the best valid loss, every seed of the row (and of the rows starting from it) training
at it; a grid whose best is at an edge is widened x2 on that side (:func:`widened`), within
``lr_limits``.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Sequence, Set

from scripts.reproduce.cell_plan import Cell, make_cell, parent_of, selected_rows
from scripts.reproduce.kinds import stopping_loss
from scripts.reproduce.log_figures import NLL, short_name
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.spec import TableSpec


def choose_rates(spec: TableSpec, options: RunOptions, data: Dict,
                 lookup: Callable[[List[Cell]], None], handle: Callable[[List[Cell]], None],
                 ) -> tuple[Dict[str, float], Dict[str, List[List[float]]], Set[str]]:
    """Each trained row's rate (the best so far), its grid ``[[rate, best valid loss], ...]``
    and the rows whose grid has finished."""
    settings = spec.settings(options.scale)
    if "lr_grid" not in settings:
        return {}, {}, set()
    metric = stopping_loss(spec)
    rows = [row for row in selected_rows(spec, options.rows, settings)
            if row.same_as is None and parent_of(row, settings) is None]
    grids = {row.key: sorted(settings["lr_grid"]) for row in rows}
    # without limits of its own a grid widens by at most four doublings either way, so a row
    # whose every rate diverges stops widening
    grid = settings["lr_grid"]
    limits = settings.get("lr_limits", (min(grid) / 16, max(grid) * 16))
    rates: Dict[str, float] = {}
    points: Dict[str, List[List[float]]] = {}
    chosen: Set[str] = set()
    while rows:
        cells = {row.key: [make_cell(spec, options, data, row, 1, lr, None, search=True)
                           for lr in grids[row.key]] for row in rows}
        found = [cell for row_cells in cells.values() for cell in row_cells]
        lookup(found)
        options.say(f"{spec.name}: rate grids, {len(found)} cells at seed 1")
        handle(found)
        widening = []
        for row in rows:
            nll = {cell.lr: best_nll(cell, metric) for cell in cells[row.key]
                   if cell.result is not None}
            points[row.key] = [[lr, value if math.isfinite(value) else None]
                               for lr, value in sorted(nll.items())]
            if len(nll) < len(grids[row.key]):
                rates[row.key] = min(nll, key=nll.get) if nll else settings["lr"]
                continue
            more = widened(grids[row.key], nll, limits)
            if more is None:
                rates[row.key] = min(grids[row.key], key=nll.get)
                chosen.add(row.key)
            else:
                grids[row.key] = sorted([*grids[row.key], more])
                widening.append(row)
        rows = widening
    return rates, points, chosen


def best_nll(cell: Cell, metric: str = NLL) -> float:
    """The best valid ``metric`` of a finished cell (infinite for one that diverged)."""
    figures = cell.result["figures"] if cell.result else {}
    value = float(figures.get(f"valid_{short_name(metric)}", math.nan))
    return math.inf if figures.get("diverged") or not math.isfinite(value) else value


def widened(grid: List[float], nll: Dict[float, float], limits: Sequence[float]) -> float | None:
    """Half the lowest rate or twice the highest where the best is there, within
    ``limits``; else None."""
    best = min(grid, key=lambda lr: nll[lr])
    if best == grid[0] and best / 2 >= limits[0] * (1 - 1e-9):
        return best / 2
    if best == grid[-1] and best * 2 <= limits[1] * (1 + 1e-9):
        return best * 2
    return None
