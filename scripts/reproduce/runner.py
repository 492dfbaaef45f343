"""Runs the cells of one table: every shown and hidden row at every seed, through the cache.

Order: rows without a parent first (every seed), then the rows that start from them, ...;
up to ``jobs`` cells run at once, each process with ``threads`` threads, and a cell starts as
soon as its own parent has finished. A
finished cell's figures are stored at once (:class:`~scripts.reproduce.cell_cache.CellCache`);
one already stored under the same key is not run again, so a killed run resumes where it
stopped. ``max_new_cells`` stops after that many new cells (a budget, and the tests' way of
killing a run mid-way); a failing step stops the run with the cell and its log named, after
the cells already finished are stored.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Sequence

from scripts.common.atomic_files import write_text_atomic
from scripts.common.child_processes import child_env, stream
from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce.cell_cache import CellCache, settings_key
from scripts.reproduce.kinds import Step, kind_module
from scripts.reproduce.log_figures import training_record
from scripts.reproduce.report import commit
from scripts.reproduce.spec import Row, TableSpec


class CellFailed(RuntimeError):
    """A step of a cell exited non-zero; the message names the cell and its log."""


_DIVERGED = re.compile(r"FloatingPointError|\bnan\b|\binf\b|overflow|Minimum loss scale",
                       re.I)


_TRAINED = "done training in"  # fairseq-train's last line


class Diverged(Exception):
    """A training step stopped on a NaN or infinite loss; ``reason`` is the log's line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BudgetSpent(RuntimeError):
    """``max_new_cells`` cells were run; the rest are left for the next call."""


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


def depth(spec: TableSpec, row: Row) -> int:
    return 0 if row.parent is None else 1 + depth(spec, spec.row(row.parent))


def cell_depth(cell: Cell) -> int:
    return 0 if cell.parent is None else 1 + cell_depth(cell.parent)


def selected_rows(spec: TableSpec, only: Sequence[str] | None,
                  settings: Dict | None = None) -> List[Row]:
    """The rows to run, in table order: all, or ``only`` and the rows they start from; rows
    at a ``length`` the scale's ``lengths`` leaves out are skipped, and with ``use_parents``
    false (a paper that trains every row from scratch) so are the hidden starting points."""
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
            row = spec.row(row.parent) if row.parent else None
    return [row for row in rows if row.key in wanted]


def plan(spec: TableSpec, options: RunOptions, data: Dict) -> List[Cell]:
    """Every cell with its key; a child's key includes its parent's."""
    kind = kind_module(spec.kind)
    settings = spec.settings(options.scale)
    cache = CellCache(options.work / "cells" / options.scale)
    cells: Dict[tuple, Cell] = {}
    use_parents = settings.get("use_parents", True)
    for row in sorted(selected_rows(spec, options.rows, settings),
                      key=lambda r: depth(spec, r)):
        for seed in range(1, options.seeds + 1):
            parent = cells[row.parent, seed] if row.parent and use_parents else None
            described = kind.cell_settings(spec, row, seed, options.scale, settings, data)
            described["parent"] = parent.key if parent else None
            key = settings_key(described)
            cells[row.key, seed] = Cell(row, seed, key,
                                        cache.folder(spec.name, row.key, seed, key), parent)
    return list(cells.values())


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_step(step: Step, folder: Path, threads: int) -> float:
    """Run one step; returns the CPU seconds its process (or, in-process, this thread) used.

    A training step whose log says it finished is not run again (a cell stopped while
    decoding); one stopped half-way continues from the ``checkpoint_last.pt`` it saved
    (fairseq-train's own resumption), after the log it had written."""
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
                       append=resumed)
    cpu += before
    if step.trains:
        write_text_atomic(spent, f"{cpu:.2f}\n")
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


def training(folder: Path, settings: Dict) -> Dict:
    """A finished cell's learning rate and, from its fairseq-train log, its validation curve,
    its updates and why it stopped (:func:`~scripts.reproduce.log_figures.training_record`)."""
    found = {"lr": settings["lr"]} if "lr" in settings else {}
    log = folder / "train.log"
    if log.is_file():
        found.update(training_record(log, settings.get("patience")))
    return found


def print_dry_run(cell: Cell, say: Callable[[str], None]) -> None:
    say(f"# {cell.row.key}, seed {cell.seed} -> {cell.folder}")
    for step in cell.steps:
        say(step.describe())
        if step.dry_run is not None:
            printed = subprocess.run(step.dry_run, capture_output=True, text=True,
                                     cwd=REPO_ROOT, env={**child_env(1), **step.env})
            text = (printed.stdout or printed.stderr).strip()
            say("\n".join(f"    {line}" for line in text.splitlines()))


def run_table(spec: TableSpec, options: RunOptions) -> tuple[List[Cell], Dict]:
    """Run (or, with ``dry_run``, print; with ``collect_only``, only read) every cell."""
    kind = kind_module(spec.kind)
    settings = spec.settings(options.scale)
    data = kind.prepare(spec, options.scale, settings, options.work, options.say)
    cells = plan(spec, options, data)
    cache = CellCache(options.work)
    def make_steps(cell: Cell) -> None:
        # built just before the cell runs: a continuation reads its parent's figures
        cell.steps = kind.steps(spec, cell.row, cell.seed, options.scale, settings, data,
                                cell.folder, cell.parent.folder if cell.parent else None)

    for cell in cells:
        cell.result = cache.get(cell.folder, cell.key)
    if options.dry_run:
        for cell in cells:
            make_steps(cell)
            print_dry_run(cell, options.say)
        return cells, data
    if options.collect_only:
        for cell in cells:
            if cell.result is not None or not cell.folder.is_dir():
                continue
            try:
                figures = kind.collect(spec, cell.row, cell.folder)
            except (FileNotFoundError, KeyError, ValueError) as error:
                # a killed or still running cell: its logs are not complete
                options.say(f"  {cell.folder.name}: no complete logs ({error})")
                continue
            cell.result = cache.put(cell.folder, cell.key, {
                "figures": figures, "seconds": None, **training(cell.folder, settings)})
        return cells, data
    todo = [cell for cell in cells if cell.result is None]
    options.say(f"{spec.name}: {len(cells) - len(todo)} of {len(cells)} cells cached, "
                f"{len(todo)} to run")
    started = [0]
    commit_id = commit()  # the code the cells of this call run

    def run_cell(cell: Cell) -> None:
        if options.max_new_cells is not None and started[0] >= options.max_new_cells:
            raise BudgetSpent(f"stopped after {options.max_new_cells} new cells")
        started[0] += 1
        if cell.parent is not None and cell.parent.result is None:
            raise CellFailed(f"{cell.folder.name}: its parent {cell.parent.folder.name} has "
                             "no result")
        cell.folder.mkdir(parents=True, exist_ok=True)
        begin = time.monotonic()
        options.say(f"  run {cell.row.key} seed {cell.seed}")
        cpu: Dict[str, float] = {}
        if cell.parent is not None and cell.parent.result["figures"].get("diverged"):
            figures = {"diverged": 1.0, "reason": "its starting point diverged"}
        else:
            make_steps(cell)
            try:
                for step in cell.steps:
                    cpu[step.log] = run_step(step, cell.folder, options.threads)
                figures = kind.collect(spec, cell.row, cell.folder)
            except Diverged as stopped:
                options.say(f"  {cell.row.key} seed {cell.seed} diverged: {stopped.reason}")
                figures = {"diverged": 1.0, "reason": stopped.reason}
        add_cpu_figures(figures, cpu)
        cell.result = cache.put(cell.folder, cell.key, {
            "figures": figures, "seconds": round(time.monotonic() - begin, 1),
            "cpu_seconds": round(sum(cpu.values()), 1),
            "row": cell.row.key, "seed": cell.seed, "machine": platform.node(),
            "commit": commit_id, "load_average": [round(v, 1) for v in os.getloadavg()],
            "finished_at": round(time.time(), 1), **training(cell.folder, settings)})
        options.say(f"  done {cell.row.key} seed {cell.seed} in {cell.result['seconds']} s")

    # A cell starts as soon as its parent has finished, not after its parent's whole wave:
    # parents are submitted first and the pool starts cells in order, so a child waits only
    # for a parent that is already running. After an error no new cell starts.
    submitted: Dict[int, Future] = {}
    stopped = threading.Event()

    def after_parent(cell: Cell) -> None:
        if cell.parent is not None and id(cell.parent) in submitted:
            submitted[id(cell.parent)].exception()  # waits; its error is raised by its future
        if stopped.is_set():
            return
        try:
            run_cell(cell)
        except BaseException:
            stopped.set()
            raise

    ordered = sorted(todo, key=cell_depth)
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        for cell in ordered:
            submitted[id(cell)] = pool.submit(after_parent, cell)
        for cell in ordered:
            submitted[id(cell)].result()
    return cells, data
