"""A table's cells: what a cell is, its key and folder, and which cells a call plans.

A cell is one row at one seed; its key hashes everything it trains with (:func:`make_cell`),
its parent's key included, so a changed setting gives new cells only to what it changes. The
cells are planned parents first (:func:`plan`); a row may start from (``parent="TABLE:ROW"``) or
be (``same_as``) another table's row, whose cell that table plans (:func:`foreign_parents`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

from scripts.reproduce.budget import at_budget
from scripts.reproduce.cell_cache import CellCache, settings_key
from scripts.reproduce.kinds import Step, kind_module
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.spec import Row, TableSpec, split_parent


@dataclass
class Cell:
    """One row at one seed: its settings' key, its folder, and (once run) its figures."""

    row: Row
    seed: int
    key: str
    folder: Path
    parent: Cell | None = None
    result: Dict | None = None
    steps: List[Step] = field(default_factory=list)
    lr: float | None = None  # its learning rate, where the table chooses one per row
    # the row's rate grid, [[rate, seed 1's best valid nll], ...]
    lr_grid: List[List[float]] | None = None
    rate_chosen: bool = False  # its row's grid has finished: ``lr`` is not a best so far
    search: bool = False  # a grid cell: trained, decoded only if its rate is chosen
    from_record: bool = False  # its result is the repository's record (no checkpoint here)
    # the name of its parent where that one finished after it (``finished_at``): stale
    stale: str | None = None
    # where its fairseq commands run, "cpu" or "cuda"; None where it runs none
    device: str | None = None
    # the runner.TableRun of the table whose cell it is
    owner: Any = None


# how a row's rate is chosen, not what a cell trains: left out of the cells' keys
SEARCH_KEYS = ("lr_grid", "lr_limits", "plateau_max_epoch")


def at_rate(settings: Dict, lr: float | None, search: bool = False) -> Dict:
    """The table's settings at the row's rate ``lr``; a chosen (not ``search``) cell may
    train up to ``plateau_max_epoch`` epochs."""
    if lr is None:
        return at_budget(settings, search)
    found = {**{k: v for k, v in settings.items() if k not in SEARCH_KEYS}, "lr": lr}
    if not search and settings.get("plateau_max_epoch", 0) > settings.get("max_epoch", 0):
        found["max_epoch"] = settings["plateau_max_epoch"]
    return at_budget(found, search)  # a table's budget (budget.py): exactly U updates


def make_cell(spec: TableSpec, options: RunOptions, data: Dict, row: Row, seed: int,
              lr: float | None, parent: Cell | None, search: bool = False) -> Cell:
    """One cell with its key (a child's includes its parent's) and its cache folder."""
    kind = kind_module(spec.kind)
    settings = at_rate(spec.settings(options.scale), lr, search)
    described = kind.cell_settings(spec, row, seed, options.scale, settings, data)
    # the key of the cell it starts from, or (same_as) of the cell whose model it measures
    described["same_as" if row.same_as else "parent"] = parent.key if parent else None
    key = settings_key(described)
    folder = CellCache(options.work / "cells" / options.scale).folder(spec.name, row.key, seed,
                                                                     key)
    return Cell(row, seed, key, folder, parent, lr=lr, search=search)


def parent_of(row: Row, settings: Mapping[str, Any]) -> str | None:
    """The row ``row`` starts from at this scale: none with ``use_parents`` false, else the
    scale's ``parents[row]`` or the row's own ``parent``."""
    if not settings.get("use_parents", True):
        return None
    return settings.get("parents", {}).get(row.key, row.parent)


def own_parent(spec: TableSpec, row: Row, settings: Mapping[str, Any]) -> Row | None:
    """The row of ``spec`` that ``row`` starts from at this scale, if any."""
    parent = parent_of(row, settings)
    return spec.row(parent) if parent and split_parent(parent)[0] is None else None


def depth(spec: TableSpec, row: Row, settings: Mapping[str, Any]) -> int:
    """How many rows of ``spec`` ``row`` descends from at this scale."""
    parent = own_parent(spec, row, settings)
    return 0 if parent is None else 1 + depth(spec, parent, settings)


def cell_depth(cell: Cell) -> int:
    return 0 if cell.parent is None else 1 + cell_depth(cell.parent)


def selected_rows(spec: TableSpec, only: Sequence[str] | None,
                  settings: Mapping[str, Any] | None = None) -> List[Row]:
    """The rows to run, in table order: the shown rows (or ``only``) and the rows of this
    table they start from; rows at a ``length`` the scale's ``lengths`` leaves out skipped."""
    settings = settings or {}
    rows = list(spec.rows)
    if "lengths" in settings:
        rows = [row for row in rows
                if "length" not in row.point or row.point["length"] in settings["lengths"]]
    wanted = set()
    for key in only or [row.key for row in rows if not row.hidden]:
        row = spec.row(key)
        while row is not None:
            wanted.add(row.key)
            row = own_parent(spec, row, settings)
    return [row for row in rows if row.key in wanted]


def foreign_parents(rows: Sequence[Row], settings: Mapping[str, Any]) -> Dict[str, List[str]]:
    """Per other table, its rows that ``rows`` start from or are (``same_as``)."""
    found: Dict[str, List[str]] = {}
    for row in rows:
        for other in (parent_of(row, settings), row.same_as):
            table, key = split_parent(other) if other else (None, "")
            if table is not None and key not in found.setdefault(table, []):
                found[table].append(key)
    return found


def plan(spec: TableSpec, options: RunOptions, data: Dict,
         rates: Dict[str, float] | None = None,
         parents: Mapping[tuple[str, int], Cell] | None = None) -> List[Cell]:
    """Every cell of the table, parents first, at its row's rate (``rates``, or its
    parent's); another table's cells are ``parents["T:R", seed]``."""
    settings = spec.settings(options.scale)
    cells: Dict[tuple, Cell] = {}
    for row in sorted(selected_rows(spec, options.rows, settings),
                      key=lambda r: depth(spec, r, settings)):
        start = parent_of(row, settings)
        for seed in range(1, options.seeds + 1):
            parent = None
            if row.same_as:
                parent = (parents or {})[row.same_as, seed]
                if parent.row.flags != row.flags:
                    raise ValueError(f"{spec.name}:{row.key} is the same model as "
                                     f"{row.same_as}, but its flags {row.flags} are not "
                                     f"{parent.row.flags}")
            elif start:
                foreign = split_parent(start)[0] is not None
                parent = (parents or {})[start, seed] if foreign else cells[start, seed]
            lr = parent.lr if parent is not None else (rates or {}).get(row.key)
            cells[row.key, seed] = make_cell(spec, options, data, row, seed, lr, parent)
    return list(cells.values())
