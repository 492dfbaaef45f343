"""A cell's steps: run one (:func:`run_step`), print them (:func:`print_dry_run`), and the
CPU figures of its training (:func:`add_cpu_figures`). A failing step raises
:class:`CellFailed` (or :class:`Diverged` on a NaN loss); one running at the deadline or at a
stop by hand is stopped (:class:`BudgetSpent`, :class:`StoppedByHand`).
"""

from __future__ import annotations

import re
import resource
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict

from scripts.common.atomic_files import write_text_atomic
from scripts.common.child_processes import child_env, stopped_by, stream
from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce.cell_plan import Cell
from scripts.reproduce.kinds import Step
from scripts.reproduce.stop_rule import finished


class CellFailed(RuntimeError):
    """A step of a cell exited non-zero; the message names the cell and its log."""


_DIVERGED = re.compile(r"FloatingPointError|\bnan\b|\binf\b|overflow|Minimum loss scale",
                       re.I)


class Diverged(Exception):
    """A training step stopped on a NaN or infinite loss; its message is the log's line."""


class BudgetSpent(RuntimeError):
    """``max_new_cells`` cells ran, or the time budget is spent: the next call continues."""


class StoppedByHand(BudgetSpent):
    """The call was stopped by hand (SIGINT, SIGTERM), as a spent budget stops it."""


def check_not_stopped() -> None:
    """Raise :class:`StoppedByHand` once the call has been stopped by hand."""
    if stopped_by() is not None:
        raise StoppedByHand(f"stopped by {stopped_by()}")


TIME_SPENT = "the time budget (--budget-minutes) is spent; the same command continues"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_step(step: Step, folder: Path, threads: int, deadline: float | None = None) -> float:
    """Run one step; returns the CPU seconds it used. A finished training is not run again;
    a cut one resumes from its ``checkpoint_last.pt``, its CPU seconds counted over both."""
    check_not_stopped()
    if step.call is not None:
        # this thread's time and its children's
        before = time.thread_time() + children_cpu()
        step.call()
        return time.thread_time() + children_cpu() - before
    log = folder / step.log
    spent = folder / f"{step.log}.cpu"  # a training's CPU seconds so far, over resumptions
    resumed = step.trains and log.is_file() and (folder / "checkpoint_last.pt").is_file()
    before = float(spent.read_text()) if resumed and spent.is_file() else 0.0
    if resumed and finished(log.read_text(encoding="utf-8", errors="replace")):
        return before
    # the child's own CPU time (wait4), right even when several cells run at once
    code, cpu = stream(step.argv, log, lambda _: None, {**child_env(threads), **step.env},
                       append=resumed, deadline=deadline)
    cpu += before
    if step.trains:
        write_text_atomic(spent, f"{cpu:.2f}\n")
    if not code:
        return cpu
    check_not_stopped()
    if deadline is not None and time.time() >= deadline:
        raise BudgetSpent(TIME_SPENT)
    text = log.read_text(encoding="utf-8", errors="replace")
    reason = next((line for line in reversed(text.splitlines()) if _DIVERGED.search(line)),
                  None) if step.trains else None
    if reason is not None:
        raise Diverged(reason.strip()[-200:])
    raise CellFailed(f"{folder.name}: `{step.describe()}` exited {code}; log {log}:\n"
                     f"{text[-1500:]}")


def add_cpu_figures(figures: Dict, cpu: Dict[str, float]) -> None:
    """The training's CPU seconds, in all and per update, into ``figures``."""
    train = cpu.get("train.log")
    if train:
        figures["train_cpu_seconds"] = round(train, 2)
        updates = figures.get("updates") or 0
        if updates == updates and updates > 0:  # not NaN
            figures["train_cpu_per_update"] = round(train / updates, 4)


def dry_run_header(cell: Cell, name: str | None = None) -> str:
    """``# ROW, seed N -> FOLDER  (lr X)``; a rate not chosen yet is said to be one for now."""
    head = f"# {name or cell.row.key}, seed {cell.seed} -> {cell.folder}"
    finished = len(cell.lr_grid or [])  # the grid's finished cells
    if cell.lr is None:
        return head
    if cell.search:
        return f"{head}  (lr {cell.lr:g}, a rate of the grid: not decoded)"
    if cell.rate_chosen:
        return f"{head}  (lr {cell.lr:g})"
    if not finished:
        return (f"{head}  (lr {cell.lr:g} for now: no cell of the rate grid has finished; the "
                "grid chooses the rate)")
    return (f"{head}  (lr {cell.lr:g} for now: the best of {finished} finished "
            f"cell{'s' if finished > 1 else ''} of the rate grid; chosen when the grid has "
            "finished)")


def print_dry_run(cell: Cell, say: Callable[[str], None], name: str | None = None) -> None:
    say(dry_run_header(cell, name))
    for step in cell.steps:
        say(step.describe())
        if step.dry_run is not None:
            printed = subprocess.run(step.dry_run, capture_output=True, text=True,
                                     cwd=REPO_ROOT, env={**child_env(1), **step.env})
            text = (printed.stdout or printed.stderr).strip()
            say("\n".join(f"    {line}" for line in text.splitlines()))
