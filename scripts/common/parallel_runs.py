"""Several fairseq runs at a time on a shared CPU, and the line that says how loaded it was.

Small models use one core poorly, so two single-threaded runs side by side finish about
twice as fast as two two-threaded runs one after the other; the demo and the ablations train
and decode ``--jobs`` runs at once, each with ``--threads / --jobs`` threads.
"""

from __future__ import annotations

import argparse
import os
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Callable, List, Sequence

from scripts.common.run_record import Run


def threads_per_job(args: argparse.Namespace) -> int:
    """Each of the ``args.jobs`` runs' share of ``args.threads`` (at least one)."""
    return max(1, args.threads // args.jobs)


def in_parallel(step: Callable[[Run, int], None], runs: Sequence[Run], jobs: int) -> None:
    """Run ``step(run, position)`` for every run, ``jobs`` at a time (a thread pool); re-raise
    the first error after the others ran. A run whose ``parent`` is among ``runs`` is queued
    once its parent is done (it holds no thread while it waits), and skipped if its parent
    failed. ``position`` (0 to jobs - 1, the pool's thread) is the line of its progress bar.
    """
    keys = {run.key for run in runs}
    errors: List[BaseException] = []

    def one(run: Run) -> None:
        step(run, int(threading.current_thread().name.rsplit("_", 1)[1]))

    with ThreadPoolExecutor(jobs, thread_name_prefix="run") as pool:
        running = {pool.submit(one, run): run for run in runs
                   if run.parent is None or run.parent.key not in keys}
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                parent = running.pop(future)
                if future.exception() is not None:
                    errors.append(future.exception())
                    continue
                running.update({pool.submit(one, run): run for run in runs
                                if run.parent is not None and run.parent.key == parent.key})
    if errors:
        raise errors[0]


def machine_line() -> str:
    """Cores and load average, for a report: the load the figures were measured under."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPU cores, load average {load} (1/5/15 min) at the end"
