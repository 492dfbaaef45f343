"""A run's work folder (``OUT/work``): progress lines, data built once, trainings reused with
``--resume``. It is the program's own, marked by a stamp file: a fresh run empties a stamped
folder and refuses one holding files but no stamp (:func:`empty_own_folder`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List

from scripts.common.atomic_files import write_text_atomic
from scripts.common.fairseq_train import train
from scripts.common.parallel_runs import in_parallel
from scripts.common.run_record import Budget, Run, trained_before


@dataclass
class WorkFolder:
    """Where a comparison works, whether it reuses what is there, how it says progress."""

    work: Path
    resume: bool
    tag: str  # the progress lines' prefix, e.g. "demo"
    started: float = field(default_factory=time.time)

    def say(self, message: str) -> None:
        print(f"[{self.tag} {time.time() - self.started:6.0f}s] {message}", flush=True)

    def bin(self, data: str) -> Path:
        """The fairseq data bin called ``data``."""
        return self.work / "bin" / data

    def data_step(self, name: str, step: str, what: str, how: str,
                  build: Callable[[], str]) -> str:
        """Run ``build`` (it returns the data's description) once: with ``--resume``, the
        description an earlier run saved as ``WORK/NAME.txt`` stands for the data."""
        path = self.work / f"{name}.txt"
        corpus = path.read_text().strip() if self.resume and path.is_file() else None
        if corpus:
            self.say(f"{step} reusing the {what} in {self.work}: {corpus}")
            return corpus
        self.say(f"{step} {what}: {how}")
        corpus = build()
        write_text_atomic(path, corpus + "\n")
        return corpus

    def train_all(self, runs: List[Run], budget_of: Callable[[Run], Budget],
                  args: argparse.Namespace, jobs: int, step: str,
                  after: Callable[[Run, int], None] | None = None) -> None:
        """Train every run not already trained (``--resume``), ``jobs`` at a time; ``after``
        (e.g. decoding) runs in the same job right after each run is trained or reused."""
        for run in runs:
            run.budget_updates = budget_of(run).max_update
        done = {run.key for run in runs if self.resume and trained_before(run, self.work)}
        if done:
            self.say("  reusing the trained " + ", ".join(sorted(done)) + " (--resume)")
        todo = [run for run in runs if run.key not in done]
        if todo:
            self.say(f"{step} training {len(todo)} models: "
                     + ", ".join(r.label for r in todo))

        def one(run: Run, position: int) -> None:
            if run.key not in done:
                train(run, budget_of(run), self.bin(run.data), self.work, args, position)
            if after is not None:
                after(run, position)

        in_parallel(one, runs if after is not None else todo, jobs)


OWNER_STAMP = ".written-by-relu-former"


def _stamp(work: Path) -> None:
    write_text_atomic(work / OWNER_STAMP, "OUT/work of a relu-former script: the next fresh "
                                          "run empties this folder\n")


def empty_own_folder(work: Path) -> None:
    """Make ``work`` an empty folder stamped as the program's own, deleting what an earlier
    run wrote there; exit naming the folder if it holds anything but is not stamped."""
    if work.exists() and not (work / OWNER_STAMP).is_file() \
            and (not work.is_dir() or any(work.iterdir())):
        raise SystemExit(f"--out: {work} holds files this program did not write (it has no "
                         f"{OWNER_STAMP}), and a fresh run empties OUT/work: move them away "
                         "or give another --out")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    _stamp(work)


def _recorded_settings(path: Path) -> dict | None:
    """The settings a run recorded in ``path``, or None when it holds none."""
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def open_work_folder(work: Path, settings: Dict[str, str], resume: bool) -> bool:
    """Keep ``work`` for ``--resume`` if it was made with ``settings`` (else a one-line
    exit), or empty it; returns whether it is resumed."""
    stamp = work / "settings.json"
    recorded = _recorded_settings(stamp)
    if recorded is not None and recorded.keys() == settings.keys():
        _stamp(work)  # this program's folder, written before it stamped its folders
    resume = resume and recorded is not None
    if resume and recorded != settings:
        raise SystemExit(f"--resume: {work} was made with {json.dumps(recorded)}, not "
                         f"{json.dumps(settings)}; drop --resume to start afresh")
    if not resume:
        empty_own_folder(work)
    write_text_atomic(stamp, json.dumps(settings))
    return resume
