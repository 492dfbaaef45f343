"""The command-line stanza that the demo and the ablations share.

Report folder, catalogs, the CPU share of the parallel runs, the wall-clock scale of every
budget (the ablations; the demo has update budgets only), the seed: the same flags, with the
same meaning, in both scripts.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from scripts.common.repo_paths import REPO_ROOT
from scripts.common.translation_data import SRC


def add_run_args(parser: argparse.ArgumentParser, out: str, out_files: str, unit: str,
                 jobs_help: str, time_caps: bool = True) -> None:
    """Add the shared flags; ``out`` is the default report folder (below the repository),
    ``out_files`` what it holds, ``unit`` what is trained ("model", "variant").

    Without ``time_caps`` (the demo: every model trains its whole update budget) there is no
    ``--budget-scale`` and ``--threads`` defaults to one thread per job, so that the figures
    are the same on a machine of any number of cores.
    """
    parser.add_argument("--out", type=Path, default=REPO_ROOT / out,
                        help=f"report folder ({out_files}; work files in OUT/work; "
                             f"default: {out})")
    parser.add_argument("--locale-dir", type=Path, default=Path("/usr/share/locale"),
                        help="where the gettext catalogs are: <dir>/<lang>/LC_MESSAGES/*.mo "
                             "(default: %(default)s)")
    parser.add_argument("--lang", default=SRC,
                        help="catalog language used as the source side, into English "
                             "(default: de)")
    if time_caps:
        parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                            help="CPU threads in all, shared by the --jobs processes "
                                 "(default: all cores)")
    else:
        # the thread count changes the order of a sum and so the last bits of every figure
        parser.add_argument("--threads", type=int, default=None,
                            help="CPU threads in all, shared by the --jobs processes "
                                 "(default: one per job, whatever the machine's cores, so "
                                 "that a seed gives the same figures everywhere)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help=jobs_help)
    if time_caps:
        parser.add_argument("--budget-scale", type=float, default=1.0,
                            help=f"multiply every {unit}'s wall-clock training cap (default 1)")
    else:
        parser.set_defaults(budget_scale=1.0)
    parser.add_argument("--seed", type=int, default=1, help="training seed (default 1)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def check_run_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``parser.error`` for the flags of :func:`add_run_args` out of range; fills in the
    default ``--threads`` of one per job."""
    if args.threads is None:
        args.threads = args.jobs
    if args.threads < 1 or args.jobs < 1:
        parser.error("--threads and --jobs must be at least 1")
    if args.budget_scale <= 0:
        parser.error(f"--budget-scale must be positive, got {args.budget_scale}")
