"""Several fairseq runs at a time on a shared CPU, and the line that says how loaded it was.

Small models use one core poorly, so two single-threaded runs side by side finish about
twice as fast as two two-threaded runs one after the other; the demo and the ablations train
and decode ``--jobs`` runs at once, each with ``--threads / --jobs`` threads.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Dict, Sequence

from scripts.common.run_record import Run


def threads_per_job(args: argparse.Namespace) -> int:
    """Each of the ``args.jobs`` runs' share of ``args.threads`` (at least one)."""
    return max(1, args.threads // args.jobs)


def in_parallel(step: Callable[[Run, int], None], runs: Sequence[Run], jobs: int) -> None:
    """Run ``step(run, position)`` for every run, ``jobs`` at a time; re-raise the first error.

    A run with a ``parent`` starts once its parent is done; ``position`` (0 to jobs - 1) is
    the line of its progress bar.
    """
    if not runs:
        return
    futures: Dict[str, Future] = {}

    def after_parent(run: Run, position: int) -> None:
        # parents are submitted first, so they are running or done: no deadlock
        if run.parent is not None and run.parent.key in futures:
            futures[run.parent.key].result()
        step(run, position)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for i, run in enumerate(runs):
            futures[run.key] = pool.submit(after_parent, run, i % jobs)
        for future in futures.values():
            future.result()


def machine_line() -> str:
    """Cores and load average, for a report: the load the figures were measured under."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPU cores, load average {load} (1/5/15 min) at the end"
