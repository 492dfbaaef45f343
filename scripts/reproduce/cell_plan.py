"""A table's cells: what a cell is, its settings and key, and which cells a call plans.

A cell (:class:`Cell`) is one row at one seed. Its key is a hash of everything it trains
with (:func:`make_cell`): the kind's ``cell_settings`` at the row's rate (:func:`at_rate`),
with the key of the cell it starts from, so a changed setting gives new cells only to what it
changes (a child's key changes with its parent's); its cache folder is named by the key.
The settings that say how a row's rate is chosen and how long its chosen cells may train
(:data:`SEARCH_KEYS`) are not in it.

The cells a call plans (:func:`plan`): the selected rows (:func:`selected_rows`), every seed,
rows without a parent first, then the rows that start from them, ... (:func:`depth`), each
at its row's chosen rate (:mod:`~scripts.reproduce.rate_search`; a row that starts from
another trains at that one's). A row may start from a row of another table
(``parent="TABLE:ROW"``): its starting point is that table's own cell (the same seed, that
row's chosen rate, that table's settings, data and key), planned by that table's run
(:func:`foreign_parents` names them) and given to :func:`plan`. A row may also be another
table's model itself (``same_as="TABLE:ROW"``, the same flags): its key holds that table's
cell's key, whose model it measures.

A scale's settings may change where rows start (:func:`parent_of`): ``use_parents`` false
trains every row from scratch (a paper that does), and ``parents`` (row -> parent) names
another starting point at that scale (e.g. a hidden row of the table trained by the
paper-scale recipe, where ``parent`` is another table's toy model). A hidden row is planned
only where a planned row starts from it (:func:`selected_rows`).
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
    # the row's rate grid, [[rate, seed 1's best valid nll], ...] (rows that choose a rate)
    lr_grid: List[List[float]] | None = None
    rate_chosen: bool = False  # its row's grid has finished: ``lr`` is not a best so far
    search: bool = False  # a grid cell: trained, decoded only if its rate is chosen
    trained: Dict | None = None  # the grid cell's result this cell continues (it decodes)
    from_record: bool = False  # its result is the repository's record (no checkpoint here)
    # that record, while the cell is trained again to start another from: it stands if the
    # training reproduces it (cell_records.differs)
    recorded: Dict | None = None
    # the result of a training an earlier rule stopped by its patience while its valid loss
    # still fell (stop_rule), with the ``patience`` it was judged by: not a result, trained
    # on from its last checkpoint
    overruled: Dict | None = None
    # the cell it starts from (or, same_as, measures), as its table names it, where that
    # one's result finished after this cell's (``finished_at``): trained on since, so this
    # cell's result is of a model that started from (or measured) an older one of it
    stale: str | None = None
    # where its fairseq commands run, "cpu" or "cuda" (RunOptions.device; set with its
    # steps), None where it runs none that take --cpu; kept in its record
    device: str | None = None
    # the run of the table whose cell it is (a runner.TableRun: its spec, settings, data,
    # records), where that is not the run that handles it: another table's row that a row
    # starts from
    owner: Any = None


# how a row's rate is chosen and how long its chosen cells may train, not what a grid cell
# trains: left out of the cells' keys (a grid cell's key is the same as before the cap of
# the chosen cells existed)
SEARCH_KEYS = ("lr_grid", "lr_limits", "plateau_max_epoch")


def at_rate(settings: Dict, lr: float | None, search: bool = False) -> Dict:
    """The settings a cell trains with: the table's, at its row's rate ``lr`` when the table
    chooses one per row (``lr_grid``); a cell at the chosen rate (not a ``search`` cell of the
    grid) at most ``plateau_max_epoch`` epochs where the table sets a larger one."""
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
    """The row that ``row`` starts from at the scale of ``settings``: none where that scale
    trains every row from scratch (``use_parents`` false), the one the scale names for it
    (``parents``, row key -> parent) where it names one, else the row's own ``parent``."""
    if not settings.get("use_parents", True):
        return None
    return settings.get("parents", {}).get(row.key, row.parent)


def own_parent(spec: TableSpec, row: Row, settings: Mapping[str, Any]) -> Row | None:
    """The row of ``spec`` that ``row`` starts from at this scale (None for a row trained
    from scratch or from another table's row)."""
    parent = parent_of(row, settings)
    return spec.row(parent) if parent and split_parent(parent)[0] is None else None


def depth(spec: TableSpec, row: Row, settings: Mapping[str, Any]) -> int:
    """How many rows of ``spec`` lie between ``row`` and its first ancestor at this scale (0
    for a row trained from scratch or from another table's row)."""
    parent = own_parent(spec, row, settings)
    return 0 if parent is None else 1 + depth(spec, parent, settings)


def cell_depth(cell: Cell) -> int:
    return 0 if cell.parent is None else 1 + cell_depth(cell.parent)


def selected_rows(spec: TableSpec, only: Sequence[str] | None,
                  settings: Mapping[str, Any] | None = None) -> List[Row]:
    """The rows to run, in table order: the shown rows (or ``only``) and the rows of this
    table they start from at this scale (:func:`parent_of`; another table's are
    :func:`foreign_parents`), so a hidden row is run only as a starting point of a row run at
    this scale; rows at a ``length`` the scale's ``lengths`` leaves out are skipped."""
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
    """Per other table, its rows that ``rows`` start from at this scale (:func:`parent_of`)
    or are (``same_as``, at every scale), in order."""
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
    """Every cell of the table, a row's at its chosen rate (``rates``; a row that starts from
    another trains at that one's); a row that starts from another table's row ``"T:R"``
    starts from ``parents["T:R", seed]``, that table's cell, and a row that is that model
    (``same_as``) measures that cell, whose flags it must have."""
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
