"""Runs the cells of one table: every shown and hidden row at every seed, through the cache.

Order: a table with an ``lr_grid`` first trains seed 1 of each row at every rate of the grid
(widened while the best is at an edge) and keeps the rate of the best valid nll for the row;
then rows without a parent (every seed), then the rows that start from them, ...; the cells
at a chosen rate may train longer than the grid (``plateau_max_epoch``), seed 1's from its
grid cell's checkpoints (:mod:`~scripts.reproduce.continuation`); up to
``jobs`` cells run at once, each process with ``threads`` threads, and a cell starts as soon
as its own parent has finished. A finished cell's figures are stored at once
(:class:`~scripts.reproduce.cell_cache.CellCache`) and, with ``records``, kept beside the
report (:class:`~scripts.reproduce.cell_records.CellRecords`); one already stored under the
same key, here or in the records, is not run again, so a killed run resumes where it
stopped, on this machine or another. ``max_new_cells`` stops after that many new cells and
``deadline`` at a time (a running training is stopped, and continues from its last
checkpoint next time); a failing step stops the run with the cell and its log named, after
the cells already finished are stored. A work folder runs one call of a table at a time.

A row may start from a row of another table (``parent="TABLE:ROW"``): its starting point is
that table's own cell (the same seed, that row's chosen rate, that table's settings, data,
key, cache folder and record), planned by a :class:`TableRun` of that table in the same call
(which chooses the row's rate on its grid first if it has not been chosen) and, where a
row starting from it runs and the cell is neither here nor recorded (or recorded without its
checkpoints here), trained by that run as that table trains it. The call holds that table's
folder lock too (taken after its own), and both tables' data must share one dictionary.

A row may also be another table's model itself (``same_as="TABLE:ROW"``, the same flags):
its cells are that table's cells, planned, and trained where needed, exactly as a parent
from that table is (the same key, folder and record), and this table adds only what it
measures on their decoded models (the kind's ``measurements``, e.g. attention figures), in a
cell of its own: its folder and record are this table's, its key holds the other cell's, and
its result is the other cell's (figures, rate, curve, why it stopped) with the measured
figures added. Nothing is written into the other table's folders.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import re
import resource
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Sequence

from scripts.common.atomic_files import write_text_atomic
from scripts.common.child_processes import child_env, stream
from scripts.common.folder_lock import folder_lock
from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce import continuation
from scripts.reproduce.cell_cache import CellCache, settings_key
from scripts.reproduce.cell_records import CellRecords
from scripts.reproduce.kinds import Step, kind_module, stopping_loss
from scripts.reproduce.log_figures import NLL, short_name, training_record
from scripts.reproduce.report import commit
from scripts.reproduce.spec import Row, TableSpec, split_parent
from scripts.reproduce.tables import TABLES


class CellFailed(RuntimeError):
    """A step of a cell exited non-zero; the message names the cell and its log."""


class DictionaryMismatch(SystemExit):
    """A row starts from another table's model whose data has another dictionary; the one-line
    message names both dictionary files."""


_DIVERGED = re.compile(r"FloatingPointError|\bnan\b|\binf\b|overflow|Minimum loss scale",
                       re.I)


_TRAINED = "done training in"  # fairseq-train's last line


class Diverged(Exception):
    """A training step stopped on a NaN or infinite loss; ``reason`` is the log's line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BudgetSpent(RuntimeError):
    """``max_new_cells`` cells were run, or the time budget is spent (a running training
    was stopped, to continue from its last checkpoint); the rest is left for the next call."""


TIME_SPENT = "the time budget (--budget-minutes) is spent; the same command continues"


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
    search: bool = False  # a grid cell: trained, decoded only if its rate is chosen
    trained: Dict | None = None  # the grid cell's result this cell continues (it decodes)
    from_record: bool = False  # its result is the repository's record (no checkpoint here)
    # the run of the table whose cell it is (its spec, settings, data, records), where that
    # is not the run that handles it: another table's row that a row starts from
    owner: TableRun | None = None


@dataclass
class RunOptions:
    scale: str = "toy"
    seeds: int = 3
    work: Path = REPO_ROOT / "reproduce_out"
    jobs: int = 1
    threads: int = 1
    dry_run: bool = False
    collect_only: bool = False
    max_new_cells: int | None = None
    rows: Sequence[str] | None = None   # only these shown rows (and their parents)
    say: Callable[[str], None] = print
    deadline: float | None = None  # time.monotonic() at which the call stops (a budget)
    records: Path | None = None  # finished cells kept in the repository (cell_records.py)
    # the tables a "TABLE:ROW" parent names, with any settings changed for this call
    # (default: every table as defined)
    tables: Mapping[str, TableSpec] | None = None


def depth(spec: TableSpec, row: Row) -> int:
    """How many rows of ``spec`` lie between ``row`` and its first ancestor (0 for a row
    trained from scratch or from another table's row)."""
    if row.parent is None or split_parent(row.parent)[0] is not None:
        return 0
    return 1 + depth(spec, spec.row(row.parent))


def cell_depth(cell: Cell) -> int:
    return 0 if cell.parent is None else 1 + cell_depth(cell.parent)


def selected_rows(spec: TableSpec, only: Sequence[str] | None,
                  settings: Dict | None = None) -> List[Row]:
    """The rows to run, in table order: all, or ``only`` and the rows of this table they
    start from (another table's are :func:`foreign_parents`); rows at a ``length`` the
    scale's ``lengths`` leaves out are skipped, and with ``use_parents`` false (a paper that
    trains every row from scratch) so are the hidden starting points."""
    settings = settings or {}
    rows = list(spec.rows)
    if "lengths" in settings:
        rows = [row for row in rows
                if "length" not in row.point or row.point["length"] in settings["lengths"]]
    if not settings.get("use_parents", True):
        rows = [row for row in rows if not row.hidden]
    if not only:
        return rows
    wanted = set()
    for key in only:
        row = spec.row(key)
        while row is not None:
            wanted.add(row.key)
            own = row.parent is not None and split_parent(row.parent)[0] is None
            row = spec.row(row.parent) if own else None
    return [row for row in rows if row.key in wanted]


def foreign_parents(rows: Sequence[Row], settings: Dict) -> Dict[str, List[str]]:
    """Per other table, its rows that ``rows`` start from (none where the scale trains every
    row from scratch, ``use_parents`` false) or are (``same_as``, at every scale), in order."""
    found: Dict[str, List[str]] = {}
    use_parents = settings.get("use_parents", True)
    for row in rows:
        for other in (row.parent if use_parents else None, row.same_as):
            table, key = split_parent(other) if other else (None, "")
            if table is not None and key not in found.setdefault(table, []):
                found[table].append(key)
    return found


# what a same_as cell's result takes over from the other table's cell: how its model learnt
LEARNT = ("lr", "curve", "updates", "stopped", "still_improving")

# how a row's rate is chosen and how long its chosen cells may train, not what a grid cell
# trains: left out of the cells' keys (a grid cell's key is the same as before the cap of
# the chosen cells existed)
SEARCH_KEYS = ("lr_grid", "lr_limits", "plateau_max_epoch")


def at_rate(settings: Dict, lr: float | None, search: bool = False) -> Dict:
    """The settings a cell trains with: the table's, at its row's rate ``lr`` when the table
    chooses one per row (``lr_grid``); a cell at the chosen rate (not a ``search`` cell of the
    grid) at most ``plateau_max_epoch`` epochs where the table sets a larger one."""
    if lr is None:
        return settings
    found = {**{k: v for k, v in settings.items() if k not in SEARCH_KEYS}, "lr": lr}
    if not search and settings.get("plateau_max_epoch", 0) > settings.get("max_epoch", 0):
        found["max_epoch"] = settings["plateau_max_epoch"]
    return found


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


def plan(spec: TableSpec, options: RunOptions, data: Dict,
         rates: Dict[str, float] | None = None,
         parents: Mapping[tuple[str, int], Cell] | None = None) -> List[Cell]:
    """Every cell of the table, a row's at its chosen rate (``rates``; a row that starts from
    another trains at that one's); a row that starts from another table's row ``"T:R"``
    starts from ``parents["T:R", seed]``, that table's cell, and a row that is that model
    (``same_as``) measures that cell, whose flags it must have."""
    settings = spec.settings(options.scale)
    cells: Dict[tuple, Cell] = {}
    use_parents = settings.get("use_parents", True)
    for row in sorted(selected_rows(spec, options.rows, settings),
                      key=lambda r: depth(spec, r)):
        for seed in range(1, options.seeds + 1):
            parent = None
            if row.same_as:
                parent = (parents or {})[row.same_as, seed]
                if parent.row.flags != row.flags:
                    raise ValueError(f"{spec.name}:{row.key} is the same model as "
                                     f"{row.same_as}, but its flags {row.flags} are not "
                                     f"{parent.row.flags}")
            elif row.parent and use_parents:
                foreign = split_parent(row.parent)[0] is not None
                parent = (parents or {})[row.parent, seed] if foreign else cells[row.parent,
                                                                                  seed]
            lr = parent.lr if parent is not None else (rates or {}).get(row.key)
            cells[row.key, seed] = make_cell(spec, options, data, row, seed, lr, parent)
    return list(cells.values())


def best_nll(cell: Cell, metric: str = NLL) -> float:
    """The best valid loss of a finished cell (infinite for one that diverged): its valid
    nll, or the figure of the loss its kind stops on (``metric``; a classifier's
    ``valid_loss``)."""
    figures = cell.result["figures"] if cell.result else {}
    value = float(figures.get(f"valid_{short_name(metric)}", math.nan))
    return math.inf if figures.get("diverged") or not math.isfinite(value) else value


def widened(grid: List[float], nll: Dict[float, float], limits: Sequence[float]) -> float | None:
    """The rate to add to ``grid`` when its best (lowest ``nll``) is at an edge: half the
    lowest or twice the highest, if that stays within ``limits``; None when the best is
    inside, or the next rate would pass a limit."""
    best = min(grid, key=lambda lr: nll[lr])
    if best == grid[0] and best / 2 >= limits[0] * (1 - 1e-9):
        return best / 2
    if best == grid[-1] and best * 2 <= limits[1] * (1 + 1e-9):
        return best * 2
    return None


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_step(step: Step, folder: Path, threads: int, deadline: float | None = None) -> float:
    """Run one step; returns the CPU seconds its process (or, in-process, this thread) used.

    A training step whose log says it finished is not run again (a cell stopped while
    decoding); one stopped half-way continues from the ``checkpoint_last.pt`` it saved
    (fairseq-train's own resumption), after the log it had written. A subprocess still
    running at ``deadline`` is stopped (:class:`BudgetSpent`)."""
    if step.call is not None:
        # this thread's time plus that of the processes the call waited for (exact with
        # --jobs 1; with several cells at once their children's times mix)
        before = time.thread_time() + children_cpu()
        step.call()
        return time.thread_time() + children_cpu() - before
    log = folder / step.log
    spent = folder / f"{step.log}.cpu"  # a training's CPU seconds so far, over resumptions
    resumed = step.trains and log.is_file() and (folder / "checkpoint_last.pt").is_file()
    before = float(spent.read_text()) if resumed and spent.is_file() else 0.0
    if resumed and _TRAINED in log.read_text(encoding="utf-8", errors="replace"):
        return before
    # the child's own CPU time (wait4), right even when several cells run at once
    code, cpu = stream(step.argv, log, lambda _: None, {**child_env(threads), **step.env},
                       append=resumed, deadline=deadline)
    cpu += before
    if step.trains:
        write_text_atomic(spent, f"{cpu:.2f}\n")
    if code and deadline is not None and time.monotonic() >= deadline:
        raise BudgetSpent(TIME_SPENT)
    if code:
        text = log.read_text(encoding="utf-8", errors="replace")
        tail = text[-1500:]
        if step.trains:
            reason = next((line for line in reversed(text.splitlines())
                           if _DIVERGED.search(line)), None)
            if reason is not None:
                raise Diverged(reason.strip()[-200:])
        raise CellFailed(f"{folder.name}: `{step.describe()}` exited {code}; log {log}:\n"
                         f"{tail}")
    return cpu


def add_cpu_figures(figures: Dict, cpu: Dict[str, float]) -> None:
    """The training step's CPU seconds, in all and per update (a cost that, unlike wall
    time, hardly depends on the machine's load), into ``figures``."""
    train = cpu.get("train.log")
    if train:
        figures["train_cpu_seconds"] = round(train, 2)
        updates = figures.get("updates") or 0
        if updates == updates and updates > 0:  # not NaN
            figures["train_cpu_per_update"] = round(train / updates, 4)


def training(folder: Path, settings: Dict, metric: str = NLL) -> Dict:
    """A finished cell's learning rate and, from its fairseq-train log, its validation curve
    (of the loss ``metric`` it stops on), its updates and why it stopped
    (:func:`~scripts.reproduce.log_figures.training_record`)."""
    found = {"lr": settings["lr"]} if "lr" in settings else {}
    log = folder / "train.log"
    if log.is_file():
        found.update(training_record(log, settings.get("patience"), metric))
    return found


def dry_run_header(cell: Cell, name: str | None = None) -> str:
    rate = "" if cell.lr is None else (
        f"  (lr {cell.lr:g}{', a rate of the grid: not decoded' if cell.search else ''})")
    return f"# {name or cell.row.key}, seed {cell.seed} -> {cell.folder}{rate}"


def print_dry_run(cell: Cell, say: Callable[[str], None], name: str | None = None) -> None:
    say(dry_run_header(cell, name))
    for step in cell.steps:
        say(step.describe())
        if step.dry_run is not None:
            printed = subprocess.run(step.dry_run, capture_output=True, text=True,
                                     cwd=REPO_ROOT, env={**child_env(1), **step.env})
            text = (printed.stdout or printed.stderr).strip()
            say("\n".join(f"    {line}" for line in text.splitlines()))


def table_lock(work: Path, name: str) -> contextlib.AbstractContextManager:
    """The lock that lets one call at a time run table ``name`` in ``work``."""
    return folder_lock(work / "locks" / f"{name}.lock", f"{work} ({name})")


class TableRun:
    """The cells of one table in one call: looked up in the cache, run (or printed, or
    collected from logs). The call's first table is the ``root``: ``max_new_cells``, the
    commit and the stop after an error are counted over every phase and every table of the
    call, and it holds (``locks``) the locks of the other tables its rows start from."""

    def __init__(self, spec: TableSpec, options: RunOptions,
                 root: TableRun | None = None) -> None:
        self.spec, self.options = spec, options
        self.root = root or self
        self.kind = kind_module(spec.kind)
        # the validation loss its cells stop on and choose their rates by (kinds/__init__.py)
        self.metric = stopping_loss(spec)
        self.settings = spec.settings(options.scale)
        self.data = self.kind.prepare(spec, options.scale, self.settings, options.work,
                                      options.say)
        self.cache = CellCache(options.work)
        self.records = CellRecords(options.records) if options.records else None
        self.started = 0
        self.commit_id = ""
        self.printed: set = set()  # keys of the cells a dry run printed
        # set after an error or an interrupt: no cell, and no step of a running cell, starts
        self.stopped = root.stopped if root else threading.Event()
        self.locks = root.locks if root else contextlib.ExitStack()

    def name_of(self, cell: Cell) -> str:
        """The cell's row as the call names it: ``TABLE:ROW`` for another table's."""
        return cell.row.key if self is self.root else f"{self.spec.name}:{cell.row.key}"

    def other(self, name: str, rows: List[str]) -> TableRun:
        """A run of table ``name`` for its ``rows`` that this table's rows start from, in this
        call: that table's lock held until the call ends, its data built (or found), its
        dictionary checked against this table's (:class:`DictionaryMismatch`)."""
        options = self.options
        self.locks.enter_context(table_lock(options.work, name))
        other = TableRun((options.tables or TABLES)[name], replace(options, rows=rows),
                         root=self.root)
        mine, theirs = (getattr(run.kind, "dictionary", lambda _: None)(run.data)
                        for run in (self, other))
        if mine is not None and theirs is not None and mine.read_bytes() != theirs.read_bytes():
            raise DictionaryMismatch(f"{self.spec.name} starts from {name}'s models, but its "
                                     f"dictionary {mine} differs from theirs, {theirs}")
        return other

    def plan_cells(self) -> List[Cell]:
        """Every cell of the selected rows, looked up: each row's rate chosen first (its grid
        run, printed or collected), then the cells of other tables that rows start from
        (planned by those tables' runs; printed or collected with them, run only when a row
        that starts from them runs), then this table's."""
        rates, grids = self.choose_rates()
        parents: Dict[tuple[str, int], Cell] = {}
        rows = selected_rows(self.spec, self.options.rows, self.settings)
        for name, keys in foreign_parents(rows, self.settings).items():
            other = self.other(name, keys)
            theirs = other.plan_cells()
            if self.options.dry_run or self.options.collect_only:
                other.handle(theirs)
            parents.update({(f"{name}:{cell.row.key}", cell.seed): cell for cell in theirs
                            if cell.row.key in keys})
        cells = plan(self.spec, self.options, self.data, rates, parents)
        for cell in cells:  # parents first: a row that starts from another shows its grid
            cell.owner = self
            cell.lr_grid = cell.parent.lr_grid if cell.parent else grids.get(cell.row.key)
        self.lookup(cells)
        return cells

    def settings_of(self, cell: Cell) -> Dict:
        return at_rate(self.settings, cell.lr, cell.search)

    def row_of(self, cell: Cell) -> Row:
        # a grid cell is trained like a starting point: not decoded
        return replace(cell.row, hidden=True) if cell.search else cell.row

    def make_steps(self, cell: Cell) -> None:
        if cell.row.same_as is not None:  # the other table's model: only measured here
            cell.steps = self.measure_steps(cell)
            return
        # built just before the cell runs: a continuation reads its parent's figures
        cell.steps = self.kind.steps(self.spec, self.row_of(cell), cell.seed,
                                     self.options.scale, self.settings_of(cell), self.data,
                                     cell.folder, cell.parent.folder if cell.parent else None)

    def record_path(self, cell: Cell) -> Path:
        # a chosen cell with another cap than its grid cell is another record
        cap = self.settings_of(cell).get("max_epoch")
        longer = cap if cap != self.settings.get("max_epoch") else None
        return self.records.path(self.spec.name, cell.row.key, cell.seed, cell.lr, longer)

    def screening_cell(self, cell: Cell) -> tuple[Cell, Dict] | None:
        """The grid cell (same row, seed and rate, the grid's cap) that the chosen cell
        ``cell`` can start from (:mod:`~scripts.reproduce.continuation`), with its result;
        None when ``cell`` is not a longer-capped chosen cell or that one is not here (a
        fresh clone has its record, not its checkpoints)."""
        if cell.search or cell.lr is None or cell.parent is not None:
            return None
        grid = make_cell(self.spec, self.options, self.data, cell.row, cell.seed, cell.lr, None,
                         search=True)
        if grid.key == cell.key:  # the same cell (no longer cap): decoded as it is
            return None
        found = self.cache.get(grid.folder, grid.key)
        if found is None and self.records is not None:
            found = self.records.get(self.record_path(grid), grid.key)
        return (grid, found) if continuation.can_continue(grid.folder, found) else None

    def start_from_screening(self, cell: Cell) -> Dict | None:
        """Seed ``cell``'s folder from its grid cell unless it has a checkpoint of its own
        (it was seeded, or trained, before); what it continues, if anything."""
        if not (cell.folder / "checkpoint_last.pt").is_file():
            found = self.screening_cell(cell)
            if found is not None:
                grid, result = found
                continuation.seed(grid.folder, grid.key, result, cell.folder)
                self.options.say(f"  {cell.row.key} seed {cell.seed} continues "
                                 f"{grid.folder.name} (stopped at its {result['stopped']})")
        return continuation.earlier_of(cell.folder)

    def finished(self, cell: Cell, result: Dict) -> Dict:
        """``result`` with, for a cell that continues a grid cell, the whole training's
        curve and figures."""
        earlier = continuation.earlier_of(cell.folder)
        if earlier is None:
            return result
        return continuation.merged(earlier, result, self.settings_of(cell).get("patience"),
                                   self.metric)

    def store(self, cell: Cell, result: Dict) -> None:
        cell.result = self.cache.put(cell.folder, cell.key, result)
        if self.records is not None:
            self.records.put(self.record_path(cell), cell.result)

    def lookup(self, cells: Sequence[Cell]) -> None:
        """Each cell's stored result, from the work folder or else the records; a grid cell's
        (not decoded) stands only for a grid cell."""
        for cell in cells:
            found = self.cache.get(cell.folder, cell.key)
            cell.from_record = found is None and self.records is not None
            if cell.from_record:
                found = self.records.get(self.record_path(cell), cell.key)
            cell.result = None if found and found.get("search") and not cell.search else found
            # a grid cell trained here is decoded from its checkpoint, one recorded elsewhere
            # trained again
            cell.trained = found if found and cell.result is None and not cell.from_record \
                else None

    def starting_points(self, todo: List[Cell]) -> List[Cell]:
        """``todo`` and the cells they start from that must run first: recorded cells whose
        checkpoints are not here (trained again), and another table's cells not run yet."""
        todo = list(todo)
        listed = {id(cell) for cell in todo}
        for cell in todo:  # grows while it is walked: a parent's parent too
            parent = cell.parent
            if parent is None or id(parent) in listed:
                continue
            if parent.result is not None and parent.from_record and not parent.folder.is_dir():
                parent.result = None
            if parent.result is None:
                todo.append(parent)
                listed.add(id(parent))
        return todo

    def handle(self, cells: Sequence[Cell]) -> None:
        """Print, collect from logs or run the cells that have no result."""
        todo = [cell for cell in cells if cell.result is None]
        if self.options.dry_run:  # the commands of every cell still to run, each cell once
            for cell in cells:
                if (cell.key, cell.search) not in self.printed:
                    self.printed.add((cell.key, cell.search))
                    if cell.result is not None:  # finished (here or recorded): not run again
                        where = "" if cell.folder.is_dir() else (
                            " (recorded; its checkpoints are not in this work folder)")
                        self.options.say(f"{dry_run_header(cell, self.name_of(cell))}: "
                                         f"cached{where}")
                        continue
                    self.make_steps(cell)
                    print_dry_run(cell, self.options.say, self.name_of(cell))
                    if cell.parent is not None and cell.parent.result is None:
                        self.options.say("    (the model it measures has not trained yet)"
                                         if cell.row.same_as else
                                         "    (its parent has not trained yet: the rate and "
                                         "checkpoint it starts from follow from how the "
                                         "parent's training ends, not from this line)")
                    found = self.screening_cell(cell)
                    if found is not None:
                        self.options.say(f"    (continues {found[0].folder.name}, stopped at "
                                         f"its {found[1]['stopped']})")
        elif self.options.collect_only:
            for cell in todo:
                self.collect(cell)
        elif todo:
            self.run(self.starting_points(todo))

    def collect(self, cell: Cell) -> None:
        if not cell.folder.is_dir():
            return
        try:
            figures = self.figures(cell)
        except (FileNotFoundError, KeyError, ValueError) as error:
            # a killed or still running cell: its logs are not complete
            self.options.say(f"  {cell.folder.name}: no complete logs ({error})")
            return
        self.store(cell, self.finished(cell, {
            "figures": figures, "seconds": None, "search": cell.search, **self.learnt(cell)}))

    def measure_steps(self, cell: Cell) -> List[Step]:
        """A ``same_as`` cell's steps: this table's measurements of the model the other
        table's cell decodes (none where the kind measures nothing)."""
        measure = getattr(self.kind, "measurements", None)
        if measure is None:
            return []
        source, owner = cell.parent, cell.parent.owner
        checkpoint = owner.kind.decoded_checkpoint(owner.settings_of(source), source.folder)
        return measure(self.spec, cell.row, self.options.scale, self.settings_of(cell),
                       owner.data, checkpoint, cell.folder)

    def figures(self, cell: Cell) -> Dict:
        """The figures of a cell whose steps have run, read from its folder; a ``same_as``
        cell's are the other table's cell's with this table's measurements added."""
        if cell.row.same_as is None:
            return self.kind.collect(self.spec, self.row_of(cell), cell.folder)
        if cell.parent.result is None:
            raise FileNotFoundError(f"{cell.parent.folder.name} has not finished")
        found = getattr(self.kind, "measured", lambda _: {})(cell.folder)
        if not found and self.measure_steps(cell):
            raise FileNotFoundError(f"nothing measured in {cell.folder} yet")
        return {**cell.parent.result["figures"], **found}

    def learnt(self, cell: Cell) -> Dict:
        """How the cell's model learnt: its rate, validation curve, updates and why it
        stopped, from its training log, or (``same_as``) as the other table's cell
        recorded it, with that cell's table and folder."""
        if cell.row.same_as is None:
            return training(cell.folder, self.settings_of(cell), self.metric)
        source = cell.parent
        return {**{key: source.result[key] for key in LEARNT if key in source.result},
                "same_as": f"{source.owner.spec.name}/{source.folder.name}"}

    def run_cell(self, cell: Cell) -> None:
        options, root = self.options, self.root
        if options.max_new_cells is not None and root.started >= options.max_new_cells:
            raise BudgetSpent(f"stopped after {options.max_new_cells} new cells")
        if options.deadline is not None and time.monotonic() >= options.deadline:
            raise BudgetSpent(TIME_SPENT)
        root.started += 1
        if cell.parent is not None and cell.parent.result is None:
            raise CellFailed(f"{cell.folder.name}: its parent {cell.parent.folder.name} has "
                             "no result")
        cell.folder.mkdir(parents=True, exist_ok=True)
        earlier = self.start_from_screening(cell)
        # a chosen grid cell's time includes its training's, a continuation's the grid cell's
        before = cell.trained or (earlier or {}).get("result") or {}
        begin = time.monotonic() - (before.get("seconds") or 0.0)
        rate = f" at lr {cell.lr:g}" if cell.lr is not None else ""
        name = self.name_of(cell)
        options.say(f"  run {name} seed {cell.seed}{rate}")
        cpu: Dict[str, float] = {}
        diverged = cell.parent is not None and cell.parent.result["figures"].get("diverged")
        if diverged and cell.row.same_as is not None:  # that model diverged: nothing to measure
            figures = dict(cell.parent.result["figures"])
        elif diverged:
            figures = {"diverged": 1.0, "reason": "its starting point diverged"}
        else:
            self.make_steps(cell)
            done = set()
            if cell.trained is not None:  # a chosen grid cell: its training steps ran
                done = {step.log for step in self.kind.steps(
                    self.spec, replace(cell.row, hidden=True), cell.seed, options.scale,
                    self.settings_of(cell), self.data, cell.folder, None)}
            try:
                for step in cell.steps:
                    if self.stopped.is_set():
                        raise CellFailed(f"{cell.folder.name}: stopped before {step.log}")
                    cpu[step.log] = (cell.trained.get("cpu_seconds") or 0.0) / len(done) if (
                        step.log in done) else run_step(step, cell.folder, options.threads,
                                                        options.deadline)
                figures = self.figures(cell)
            except Diverged as stopped:
                options.say(f"  {cell.row.key} seed {cell.seed} diverged: {stopped.reason}")
                figures = {"diverged": 1.0, "reason": stopped.reason}
        if earlier is not None and "train.log" in cpu:
            cpu["train.log"] += continuation.train_cpu(earlier)
        add_cpu_figures(figures, cpu)
        self.store(cell, self.finished(cell, {
            "figures": figures, "seconds": round(time.monotonic() - begin, 1),
            "cpu_seconds": round(sum(cpu.values()), 1), "search": cell.search,
            "row": cell.row.key, "seed": cell.seed, "machine": platform.node(),
            "commit": root.commit_id, "load_average": [round(v, 1) for v in os.getloadavg()],
            "finished_at": round(time.time(), 1), **self.learnt(cell)}))
        options.say(f"  done {name} seed {cell.seed}{rate} in "
                    f"{cell.result['seconds']} s")

    def run(self, todo: Sequence[Cell]) -> None:
        """Run ``todo``, ``jobs`` at a time. A cell starts as soon as its parent has
        finished, not after its parent's whole wave: parents are submitted first and the pool
        starts cells in order, so a child waits only for a parent that is already running.
        Another table's cell is run by that table's run (its ``owner``). After an error no
        new cell starts."""
        root = self.root
        root.commit_id = root.commit_id or commit()  # the code the cells of this call run
        submitted: Dict[int, Future] = {}
        stopped = self.stopped

        def after_parent(cell: Cell) -> None:
            if cell.parent is not None and id(cell.parent) in submitted:
                submitted[id(cell.parent)].exception()  # waits; its error is raised by its own
            if stopped.is_set():
                return
            try:
                (cell.owner or self).run_cell(cell)
            except BaseException:
                stopped.set()
                raise

        ordered = sorted(todo, key=cell_depth)
        with ThreadPoolExecutor(max_workers=max(1, self.options.jobs)) as pool:
            try:
                for cell in ordered:
                    submitted[id(cell)] = pool.submit(after_parent, cell)
                for cell in ordered:
                    submitted[id(cell)].result()
            except BaseException:
                # Ctrl-C reaches this thread only: without the flag the pool's exit would
                # wait for every queued cell (a step's process got the interrupt too, but a
                # worker between two steps would go on to the next ones)
                stopped.set()
                pool.shutdown(wait=True, cancel_futures=True)
                raise

    def choose_rates(self) -> tuple[Dict[str, float], Dict[str, List[List[float]]]]:
        """Each trained row's rate, the best valid nll (or the kind's validation loss:
        :func:`best_nll`) of seed 1 over the settings' ``lr_grid``, widened while the best is
        at an edge (:func:`widened`); and each row's grid, ``[[rate, best valid nll], ...]``
        (None for a diverged cell). A row whose grid has not finished (a dry run, or
        collecting logs) gets its best rate so far."""
        settings = self.settings
        if "lr_grid" not in settings:
            return {}, {}
        use_parents = settings.get("use_parents", True)
        rows = [row for row in selected_rows(self.spec, self.options.rows, settings)
                if row.same_as is None and (row.parent is None or not use_parents)]
        grids = {row.key: sorted(settings["lr_grid"]) for row in rows}
        limits = settings.get("lr_limits", (0.0, math.inf))
        rates: Dict[str, float] = {}
        points: Dict[str, List[List[float]]] = {}
        while rows:
            cells = {row.key: [make_cell(self.spec, self.options, self.data, row, 1, lr, None,
                                         search=True)
                               for lr in grids[row.key]] for row in rows}
            found = [cell for row_cells in cells.values() for cell in row_cells]
            self.lookup(found)
            self.options.say(f"{self.spec.name}: rate grids, {len(found)} cells at seed 1")
            self.handle(found)
            widening = []
            for row in rows:
                nll = {cell.lr: best_nll(cell, self.metric) for cell in cells[row.key]
                       if cell.result is not None}
                points[row.key] = [[lr, value if math.isfinite(value) else None]
                                   for lr, value in sorted(nll.items())]
                if len(nll) < len(grids[row.key]):
                    rates[row.key] = min(nll, key=nll.get) if nll else settings["lr"]
                    continue
                more = widened(grids[row.key], nll, limits)
                if more is None:
                    rates[row.key] = min(grids[row.key], key=nll.get)
                else:
                    grids[row.key] = sorted([*grids[row.key], more])
                    widening.append(row)
            rows = widening
        return rates, points


def run_table(spec: TableSpec, options: RunOptions) -> tuple[List[Cell], Dict]:
    """Run (or, with ``dry_run``, print; with ``collect_only``, only read) every cell; a
    table with an ``lr_grid`` first chooses each trained row's rate on seed 1. One run of a
    table at a time in a work folder: a second is refused (:class:`FolderInUse`), and so is
    a call whose rows start from a table that another call is running. The cells returned
    are this table's (not the other tables' cells its rows start from)."""
    with table_lock(options.work, spec.name):
        table = TableRun(spec, options)
        with table.locks:  # the other tables' locks, taken as their rows are planned
            cells = table.plan_cells()
            if not (options.dry_run or options.collect_only):
                todo = [cell for cell in cells if cell.result is None]
                first = len(table.starting_points(todo)) - len(todo)
                options.say(f"{spec.name}: {len(cells) - len(todo)} of {len(cells)} cells "
                            f"cached, {len(todo)} to run" + (
                                f" after {first} they start from" if first else ""))
            table.handle(cells)
    return cells, table.data
