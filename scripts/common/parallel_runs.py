"""Several fairseq runs at a time on a shared CPU, and the line that says how loaded it was.

Small models use one core poorly, so two single-threaded runs side by side finish about
twice as fast as two two-threaded runs one after the other; the demo and the ablations train
and decode ``--jobs`` runs at once, each with ``--threads / --jobs`` threads.
"""

from __future__ import annotations

import argparse
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from scripts.common.run_record import Run


def threads_per_job(args: argparse.Namespace) -> int:
    """Each of the ``args.jobs`` runs' share of ``args.threads`` (at least one)."""
    return max(1, args.threads // args.jobs)


def in_parallel(step: Callable[[Run, int], None], runs: Sequence[Run], jobs: int) -> None:
    """Run ``step(run, position)`` for every run, ``jobs`` at a time (a thread pool); re-raise
    the first error after the others ran. A run whose ``parent`` is among ``runs`` runs in its
    parent's job, right after it (not at all if that one failed), so no job waits for another.
    ``position`` (0 to jobs - 1, the pool's thread) is the line of its progress bar.
    """
    keys = {run.key for run in runs}

    def with_children(run: Run) -> None:
        step(run, int(threading.current_thread().name.rsplit("_", 1)[1]))
        for child in runs:
            if child.parent is not None and child.parent.key == run.key:
                with_children(child)

    with ThreadPoolExecutor(jobs, thread_name_prefix="run") as pool:
        futures = [pool.submit(with_children, run) for run in runs
                   if run.parent is None or run.parent.key not in keys]
    errors = [future.exception() for future in futures if future.exception() is not None]
    if errors:
        raise errors[0]


def machine_line() -> str:
    """Cores and load average, for a report: the load the figures were measured under."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPU cores, load average {load} (1/5/15 min) at the end"
