"""Several fairseq runs at a time on a shared CPU, and the line that says how loaded it was.

Small models use one core poorly, so two single-threaded runs side by side finish about
twice as fast as two two-threaded runs one after the other; the demo and the ablations train
and decode ``--jobs`` runs at once, each with ``--threads / --jobs`` threads.
"""

from __future__ import annotations

import argparse
import os
import threading
from typing import Callable, List, Sequence

from scripts.common.run_record import Run


def threads_per_job(args: argparse.Namespace) -> int:
    """Each of the ``args.jobs`` runs' share of ``args.threads`` (at least one)."""
    return max(1, args.threads // args.jobs)


def in_parallel(step: Callable[[Run, int], None], runs: Sequence[Run], jobs: int) -> None:
    """Run ``step(run, position)`` for every run, ``jobs`` at a time; re-raise the first error.

    A free job takes the first run, in ``runs``' order, that is ready: a run with a
    ``parent`` among ``runs`` is ready once its parent is done (it never holds a job while it
    waits, so the cores stay busy with the runs that can go), and is skipped if its parent
    failed. ``position`` (0 to jobs - 1) is the line of its progress bar.
    """
    keys = {run.key for run in runs}
    pending, done, failed = list(runs), set(), set()
    errors: List[BaseException] = []
    free = list(range(jobs))
    changed = threading.Condition()

    def waiting_on(run: Run) -> str | None:
        parent = run.parent.key if run.parent is not None else None
        return parent if parent in keys and parent not in done else None

    def work(run: Run, position: int) -> None:
        try:
            step(run, position)
        except BaseException as error:  # re-raised in the caller's thread
            with changed:
                errors.append(error)
                failed.add(run.key)
        finally:
            with changed:
                done.add(run.key)
                free.append(position)
                changed.notify_all()

    threads = []
    with changed:
        while pending:
            # runs whose parent failed never start
            pending = [r for r in pending if r.parent is None or r.parent.key not in failed]
            ready = next((r for r in pending if waiting_on(r) is None), None)
            if ready is None or not free:
                if pending:
                    changed.wait()
                continue
            pending.remove(ready)
            thread = threading.Thread(target=work, args=(ready, free.pop(0)), daemon=True)
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def machine_line() -> str:
    """Cores and load average, for a report: the load the figures were measured under."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPU cores, load average {load} (1/5/15 min) at the end"
