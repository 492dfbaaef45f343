"""The options of one call of ``python -m scripts.reproduce``: what it plans (scale, seeds,
rows, work folder: :mod:`~scripts.reproduce.cell_plan`) and how it runs them (executor,
jobs, threads, dry run, budgets, records: :mod:`~scripts.reproduce.runner`,
:mod:`~scripts.reproduce.cell_jobs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Mapping, Sequence

from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce.spec import TableSpec


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
    deadline: float | None = None  # time.time() at which the call stops (a budget)
    records: Path | None = None  # finished cells kept in the repository (cell_cache.CellRecords)
    # "cuda": fairseq trains and decodes on the GPU (its commands without --cpu:
    # kinds.on_device); in no cell's key, so a cell is the same on either device
    device: str = "cpu"
    # the tables a "TABLE:ROW" parent names, with any settings changed for this call
    # (default: every table as defined)
    tables: Mapping[str, TableSpec] | None = None
    # where the cells' jobs run: "local" (this machine) or "slurm"; what each Slurm job asks
    # for (a cell_jobs.Resources)
    executor: str = "local"
    resources: Any = None
    # filled as the call runs: the folders of the cells it finished (every table's)
    finished: List[str] = field(default_factory=list)
