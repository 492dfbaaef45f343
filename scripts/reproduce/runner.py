"""Runs the cells of one table (its shown rows and the hidden ones they start from, every
seed) through the cache; docs/reproduction.md "How the tables are built" says what a user sees.

Order: the rate grids (:mod:`~scripts.reproduce.rate_search`), then the cells, parents first,
each as a job (:mod:`~scripts.reproduce.cell_jobs`). A cell stored under its key, here or in
the records, is not run again, except one that is stale (its parent's result, trained again,
finished after it: run again from the parent's current model, the old folder kept as
``<folder>.stale-<n>``).
A row may start from, or be (``same_as``), another table's row: that table's run in the same
call plans and trains it, under that table's lock, and both must share one dictionary.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Sequence

from scripts.common.atomic_files import write_text_atomic
from scripts.common.child_processes import stopped_by
from scripts.common.cpu_path import cpu_path
from scripts.common.folder_lock import folder_lock
from scripts.reproduce.budget import BUDGET, budget_of, with_budget
from scripts.reproduce.cell_cache import CellCache, CellRecords
from scripts.reproduce.cell_jobs import job_words, run_cells, submission_order
from scripts.reproduce.cell_plan import Cell, at_rate, foreign_parents, plan, selected_rows
from scripts.reproduce.cell_steps import (
    CellFailed,
    Diverged,
    add_cpu_figures,
    check_not_stopped,
    dry_run_header,
    print_dry_run,
    run_step,
)
from scripts.reproduce.kinds import Step, kind_module, on_device, stopping_loss
from scripts.reproduce.log_figures import training_record
from scripts.reproduce.rate_search import choose_rates
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.spec import Row, TableSpec, stale_words
from scripts.reproduce.tables import TABLES


class DictionaryMismatch(SystemExit):
    """A row starts from another table's model whose data has another dictionary; the one-line
    message names both dictionary files."""


# what a same_as cell's result takes over from the other table's cell: how its model learnt
LEARNT = ("lr", "patience", "curve", "updates", "stopped", "still_improving")
# a cut cell's wall seconds over the calls so far: its record's ``seconds`` are the whole cell's
WALL_SO_FAR = "seconds.so_far"


def table_lock(options: RunOptions, name: str) -> contextlib.AbstractContextManager:
    """One call at a time runs (or collects) table ``name`` in a work folder; a dry run,
    which writes nothing, takes no lock."""
    if options.dry_run:
        return contextlib.nullcontext()
    return folder_lock(options.work / "locks" / f"{name}.lock", f"{options.work} ({name})")


class TableRun:
    """The cells of one table in one call. The call's first table is the ``root``: it counts
    ``max_new_cells`` over every table and holds the other tables' ``locks``."""

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
        self.locks = root.locks if root else contextlib.ExitStack()

    def __getstate__(self) -> Dict:
        # what a job in another process needs: not the locks, which this call holds
        return {**self.__dict__, "locks": None}

    def name_of(self, cell: Cell) -> str:
        """The cell's row as the call names it: ``TABLE:ROW`` for another table's."""
        return cell.row.key if self is self.root else f"{self.spec.name}:{cell.row.key}"

    def other(self, name: str, rows: List[str]) -> TableRun:
        """A run of table ``name`` for the ``rows`` this table's rows start from: its lock
        held, its data built, its dictionary this table's (:class:`DictionaryMismatch`)."""
        options = self.options
        self.locks.enter_context(table_lock(options, name))
        # its models as its records hold them, not at this table's budget (budget.py)
        other = TableRun(with_budget((options.tables or TABLES)[name]),
                         replace(options, rows=rows), root=self.root)
        mine, theirs = (getattr(run.kind, "dictionary", lambda _: None)(run.data)
                        for run in (self, other))
        if mine is not None and theirs is not None and mine.read_bytes() != theirs.read_bytes():
            raise DictionaryMismatch(f"{self.spec.name} starts from {name}'s models, but its "
                                     f"dictionary {mine} differs from theirs, {theirs}")
        return other

    def plan_cells(self) -> List[Cell]:
        """Every cell of the selected rows, looked up: the rates chosen first, then the
        other tables' cells the rows start from, then this table's."""
        rates, grids, chosen = choose_rates(self.spec, self.options, self.data,
                                            self.lookup, self.handle)
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
            cell.rate_chosen = cell.parent.rate_chosen if cell.parent else (
                cell.row.key in chosen)
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
        # built just before the cell runs: a child reads its parent's figures
        steps = self.kind.steps(self.spec, self.row_of(cell), cell.seed, self.options.scale,
                                self.settings_of(cell), self.data, cell.folder,
                                cell.parent.folder if cell.parent else None)
        cell.steps = on_device(steps, self.options.device)
        if any("--cpu" in (step.argv or ()) for step in steps):
            cell.device = self.options.device

    def record_path(self, cell: Cell) -> Path:
        # a chosen cell with another cap than its grid cell is another record, and so is a
        # cell at its table's budget (budget.py)
        settings = self.settings_of(cell)
        budget = budget_of(settings)
        cap = settings.get("max_epoch")
        longer = cap if cap != self.settings.get("max_epoch") and budget is None else None
        return self.records.path(self.spec.name, cell.row.key, cell.seed, cell.lr, longer,
                                 budget)

    def store(self, cell: Cell, result: Dict) -> None:
        """Keep ``result`` here and in the records (a recorded cell trained again replaces
        its record: the cells that started from the old model are then stale)."""
        cell.result = self.cache.put(cell.folder, cell.key, result)
        if self.records is not None:
            self.records.put(self.record_path(cell), cell.result)

    def lookup(self, cells: Sequence[Cell]) -> None:
        """Each cell's stored result, from the work folder or else the records, and
        whether it is stale."""
        for cell in cells:
            found = self.cache.get(cell.folder, cell.key)
            cell.from_record = found is None and self.records is not None
            if cell.from_record:
                found = self.records.get(self.record_path(cell), cell.key)
            # a grid cell of this key is this cell undecoded: run, its finished training
            # is not run again (run_step)
            cell.result = None if found and found.get("search") and not cell.search else found
            cell.stale = self.stale(cell)
            if cell.stale is not None and not (self.options.dry_run
                                               or self.options.collect_only):
                cell.result = None  # run again, from its parent's current model

    def stale(self, cell: Cell) -> str | None:
        """The name of the cell ``cell`` starts from (or measures) where that one finished
        after ``cell`` did (``finished_at``, where both have one); else None."""
        parent = cell.parent
        if cell.result is None or parent is None:
            return None
        mine = cell.result.get("finished_at")
        theirs = (parent.result or {}).get("finished_at")
        if mine is None or theirs is None or theirs <= mine:
            return None
        table = (parent.owner or self).spec.name
        return parent.row.key if table == self.spec.name else f"{table}:{parent.row.key}"

    def set_aside(self, cell: Cell) -> None:
        """Keep the stale ``cell``'s old folder as ``<folder>.stale-<n>``, so that it starts
        anew from its parent's current model, and say so."""
        aside = ""
        if cell.folder.is_dir():
            n = 1
            while (old := cell.folder.with_name(f"{cell.folder.name}.stale-{n}")).exists():
                n += 1
            cell.folder.rename(old)
            aside = f"; its old folder {cell.folder} is kept as {old}"
        self.options.say(f"  {self.name_of(cell)} seed {cell.seed} runs again: "
                         f"it {stale_words(cell.row, cell.stale)}{aside}")
        cell.stale = None  # what it stores now is of its parent's current model

    def starting_points(self, todo: List[Cell]) -> List[Cell]:
        """``todo`` and the cells they start from that must run first."""
        todo = list(todo)
        listed = {id(cell) for cell in todo}
        for cell in todo:  # grows while it is walked: a parent's parent too
            parent = cell.parent
            if parent is None or id(parent) in listed:
                continue
            # a recorded one is trained here (from its last checkpoint, if any)
            if parent.result is not None and parent.from_record:
                parent.result = None
            if parent.result is None:
                todo.append(parent)
                listed.add(id(parent))
        return todo

    def handle(self, cells: Sequence[Cell]) -> None:
        """Print, collect from logs or run the cells that have no result."""
        todo = [cell for cell in cells if cell.result is None]
        if self.options.dry_run:  # every cell, once, in the order its job would start
            for cell in submission_order(cells):
                if (cell.key, cell.search) not in self.printed:
                    self.printed.add((cell.key, cell.search))
                    self.print_cell(cell)
        elif self.options.collect_only:
            for cell in todo:
                self.collect(cell)
        elif todo:  # as jobs (cell_jobs.py)
            run_cells(self, self.starting_points(todo), stopped_by)

    def print_cell(self, cell: Cell) -> None:
        """A dry run's lines for ``cell``: cached, or the commands and the job it would run."""
        say, name = self.options.say, self.name_of(cell)
        if cell.result is not None and cell.stale is None:  # finished: not run again
            where = "" if not cell.from_record else (
                " (recorded; not finished in this work folder: trained again first where a "
                "row run here starts from it)")
            say(f"{dry_run_header(cell, name)}: cached{where}")
            return
        self.make_steps(cell)
        print_dry_run(cell, say, name)
        say(f"    (one job: {job_words(self.options)})")
        if cell.stale is not None:
            say(f"    (cached, but it would run again: it {stale_words(cell.row, cell.stale)}; "
                "its old folder is kept aside)")
        if cell.parent is not None and (cell.parent.result is None or cell.parent.from_record):
            say("    (the model it measures has not trained yet)" if cell.row.same_as else
                "    (its parent has not trained yet: the rate and checkpoint it starts from "
                "follow from how the parent's training ends, not from this line)")

    def collect(self, cell: Cell) -> None:
        if not cell.folder.is_dir():
            return
        try:
            figures = self.figures(cell)
        except (FileNotFoundError, KeyError, ValueError) as error:
            # a killed or still running cell: its logs are not complete
            self.options.say(f"  {cell.folder.name}: no complete logs ({error})")
            return
        self.store(cell, {"figures": figures, "seconds": None, "search": cell.search,
                          **self.learnt(cell)})

    def measure_steps(self, cell: Cell) -> List[Step]:
        """A ``same_as`` cell's steps: this table's measurements of the other's model."""
        source, owner = cell.parent, cell.parent.owner
        checkpoint = owner.kind.decoded_checkpoint(owner.settings_of(source), source.folder)
        return self.kind.measurements(self.spec, cell.row, self.options.scale,
                                      self.settings_of(cell), owner.data, checkpoint, cell.folder)

    def figures(self, cell: Cell) -> Dict:
        """The figures of a cell whose steps have run (a ``same_as`` cell's: the other
        cell's with this table's measurements)."""
        if cell.row.same_as is None:
            return self.kind.collect(self.spec, self.row_of(cell), cell.folder)
        if cell.parent.result is None:
            raise FileNotFoundError(f"{cell.parent.folder.name} has not finished")
        found = self.kind.measured(cell.folder)
        if not found and self.measure_steps(cell):
            raise FileNotFoundError(f"nothing measured in {cell.folder} yet")
        return {**cell.parent.result["figures"], **found}

    def learnt(self, cell: Cell) -> Dict:
        """How the cell's model learnt: its rate, patience and budget, and its log's curve,
        updates and stop; or the other table's cell's."""
        if cell.row.same_as is None:
            settings, log = self.settings_of(cell), cell.folder / "train.log"
            found = {key: settings[key] for key in ("lr", "patience", BUDGET) if key in settings}
            if log.is_file():
                found.update(training_record(log, settings.get("patience"), self.metric))
            return found
        source = cell.parent
        return {**{key: source.result[key] for key in LEARNT if key in source.result},
                "same_as": f"{source.owner.spec.name}/{source.folder.name}"}

    def run_cell(self, cell: Cell) -> None:
        options, root = self.options, self.root
        check_not_stopped()
        if cell.parent is not None and cell.parent.result is None:
            raise CellFailed(f"{cell.folder.name}: its parent {cell.parent.folder.name} has "
                             "no result")
        if cell.stale is not None:
            self.set_aside(cell)
        cell.folder.mkdir(parents=True, exist_ok=True)
        # a cell cut in an earlier call (budget, stop by hand, failure) goes on from there
        spent = cell.folder / WALL_SO_FAR
        started = time.monotonic()
        begin = started - (float(spent.read_text()) if spent.is_file() else 0.0)
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
            try:
                for step in cell.steps:
                    cpu[step.log] = run_step(step, cell.folder, options.threads,
                                             options.deadline)
                figures = self.figures(cell)
            except Diverged as stopped:
                options.say(f"  {cell.row.key} seed {cell.seed} diverged: {stopped}")
                figures = {"diverged": 1.0, "reason": str(stopped)}
            except BaseException:
                write_text_atomic(spent, f"{time.monotonic() - begin:.1f}\n")
                raise
        add_cpu_figures(figures, cpu)
        self.store(cell, {
            "figures": figures, "seconds": round(time.monotonic() - begin, 1),
            "cpu_seconds": round(sum(cpu.values()), 1), "search": cell.search,
            "row": cell.row.key, "seed": cell.seed, "machine": platform.node(),
            "cpu": cpu_path(),
            "commit": root.commit_id, "load_average": [round(v, 1) for v in os.getloadavg()],
            **({"device": cell.device} if cell.device else {}),
            # its timed steps ran with no other cell beside them: one cell at a time here,
            # or on Slurm, in a job with CPUs of its own
            **({"timed_alone": True} if (options.executor == "slurm" or options.jobs == 1)
               and any(step.timed for step in cell.steps or ()) else {}),
            "finished_at": round(time.time(), 1), **self.learnt(cell)})
        spent.unlink(missing_ok=True)  # stored: a later run of it starts its own count
        # this call's time (the record's counts every call's)
        options.say(f"  done {name} seed {cell.seed}{rate} in "
                    f"{round(time.monotonic() - started, 1)} s")


def run_table(spec: TableSpec, options: RunOptions) -> tuple[List[Cell], Dict]:
    """Run (or print, or only read) every cell of the table, under its folder lock
    (:class:`FolderInUse`); returns this table's cells and its data."""
    with table_lock(options, spec.name):
        table = TableRun(spec, options)
        with table.locks:  # the other tables' locks, taken as their rows are planned
            cells = table.plan_cells()
            if not (options.dry_run or options.collect_only):
                todo = [cell for cell in cells if cell.result is None]
                first = len(table.starting_points(todo)) - len(todo)
                stale = sum(cell.stale is not None for cell in todo)
                options.say(f"{spec.name}: {len(cells) - len(todo)} of {len(cells)} cells "
                            f"cached, {len(todo)} to run" + (
                                f" after {first} they start from" if first else "") + (
                                f" ({stale} to run again: their parent was trained on after "
                                "they finished)" if stale else ""))
            table.handle(cells)
    return cells, table.data
