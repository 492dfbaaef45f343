"""``python -m scripts.reproduce TABLE``: one paper table, every row at every seed, cached
cell by cell, written to ``docs/reproduction.md``.

    python -m scripts.reproduce --list
    python -m scripts.reproduce relu_former_table6 --seeds 5 --jobs 2
    python -m scripts.reproduce relu_former_table6 --scale paper --dry-run   # the commands
    python -m scripts.reproduce relu_former_table4 --device cuda --jobs 8   # a GPU a cell
    python -m scripts.reproduce relu_former_table4 --scale paper --executor slurm \
        --partition gpu --time-minutes 2880                    # a Slurm job per cell

Each cell runs as a job (submitit), seed by seed, once the cell it starts from has finished.
A stopped call (--budget-minutes, Ctrl-C, SIGTERM, a failure) resumes where it stopped when
run again; finished cells are read from WORK/cells or from their records beside the report.
docs/reproduction.md ("How the tables are built") says more.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import shutil
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from scripts.common.child_processes import stop_children, stopped_by
from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce.cell_jobs import read_resources
from scripts.reproduce.cell_plan import selected_rows
from scripts.reproduce.cell_steps import BudgetSpent, CellFailed
from scripts.reproduce.claims import NOT_RUN, SEEDS_CAP, STALE, seeds_wanted
from scripts.reproduce.report import (
    section,
    summary_section,
    verdicts,
    write_section,
    write_verdicts,
)
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.runner import run_table
from scripts.reproduce.spec import TableSpec
from scripts.reproduce.tables import TABLES

# the first lines of a report written to a new file (--out elsewhere); the repository's
# docs/reproduction.md keeps its own header, which describes the protocol in full
DOC_HEADER = """# Reproduction tables

Each section below is one table or figure of the three papers, rebuilt by one command,
`python -m scripts.reproduce NAME`. Numbers are as measured, never tuned away; a section whose
table has not been run says so and shows only the paper's figures. How rows are trained and
claims tested (rate grid, plateau or one budget, refusals, paired or Welch tests with Holm's
correction over every claim of a table) is described at the top of the project's
docs/reproduction.md.
"""


def verdicts_store(doc: Path) -> Path:
    return doc.parent / "reproduction" / "verdicts.json"


def note_replaced(doc: Path, name: str, entry: dict) -> dict:
    """Claim -> the verdict it replaces (also ``replaces`` in ``entry``'s claims): the last
    report's where it differs, else the one that one replaced (*not run* and *stale* are no
    verdicts on the models)."""
    store = verdicts_store(doc)
    old = json.loads(store.read_text()).get(name, {}) if store.is_file() else {}
    before = {claim["claim"]: claim for claim in old.get("claims", [])}
    for claim in entry["claims"]:
        was = before.get(claim["claim"], {})
        verdict = was.get("verdict", NOT_RUN)
        waiting = verdict == NOT_RUN or verdict.startswith(STALE)
        replaced = was.get("replaces") if waiting or verdict == claim["verdict"] else verdict
        if replaced and replaced != claim["verdict"]:
            claim["replaces"] = replaced
    return {claim["claim"]: claim["replaces"] for claim in entry["claims"]
            if claim.get("replaces")}


# options that say how one call runs, not what the table is: the report's command leaves them
# out, so that it is the command that trains the table (flag -> how many values it takes)
CALL_ONLY = {"--collect-only": 0, "--no-report": 0, "--budget-minutes": 1, "--max-new-cells": 1,
             "--device": 1, "--executor": 1, "--partition": 1, "--time-minutes": 1,
             "--gpus-per-job": 1, "--cpus-per-job": 1, "--mem-gb": 1, "--slurm-config": 1,
             "--add-seeds": 0}


def reproducing_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` without the options of :data:`CALL_ONLY` (``--flag value`` or ``--flag=value``)."""
    kept, skip = [], 0
    for token in argv:
        if skip:
            skip -= 1
        elif token.split("=", 1)[0] in CALL_ONLY:
            skip = 0 if "=" in token else CALL_ONLY[token]
        else:
            kept.append(token)
    return kept


def parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def with_settings(spec: TableSpec, scale: str, values: dict) -> TableSpec:
    """``spec`` with ``values`` over its settings at ``scale``."""
    field = "paper_settings" if scale == "paper" else ("tiny" if scale == "tiny" else "toy")
    return replace(spec, **{field: {**getattr(spec, field), **values}})


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.reproduce", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("table", nargs="?", choices=sorted(TABLES), metavar="TABLE",
                        help=f"which table: {', '.join(TABLES)}")
    parser.add_argument("--list", action="store_true", help="list the tables and exit")
    parser.add_argument("--scale", choices=["toy", "paper", "tiny"], default="toy",
                        help="toy: offline corpora, minutes per cell (default); paper: the "
                             "recipes' data and the papers' settings; tiny: for tests")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per row (default 3)")
    parser.add_argument("--rows", nargs="+", metavar="ROW", default=None,
                        help="only these rows (and the rows they start from)")
    parser.add_argument("--set", action="append", default=[], metavar="[TABLE:]KEY=VALUE",
                        help="override a setting of the scale (VALUE as JSON, else text), "
                             "e.g. --set max_update=400; TABLE: one of a table this one's "
                             "rows start from")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "reproduce_out",
                        help="cells, data, checkpoints, job logs (default: reproduce_out)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "reproduction.md",
                        help="the report (default: docs/reproduction.md); plots and records "
                             "beside it in reproduction/")
    parser.add_argument("--executor", choices=["local", "slurm"], default="local",
                        help="local: this machine (default); slurm: one Slurm job per cell, "
                             "--work shared by the nodes")
    parser.add_argument("--jobs", type=int, default=1,
                        help="local: cells at once, each in a process of its own (default "
                             "1: one after the other in this process)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads of each cell's processes (default 1)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where fairseq trains and decodes (default cpu; cuda: each "
                             "local job sees one GPU); cell keys are the same on either")
    slurm = parser.add_argument_group("each Slurm job's resources (--executor slurm)")
    slurm.add_argument("--partition", default=None, help="default: the cluster's")
    slurm.add_argument("--time-minutes", type=int, default=None,
                       help="time limit (default 1440); a job reaching it is requeued and "
                            "resumes from its last checkpoint")
    slurm.add_argument("--gpus-per-job", type=int, default=None,
                       help="default: 1 with --device cuda or --scale paper, else 0")
    slurm.add_argument("--cpus-per-job", type=int, default=None, help="default: --threads")
    slurm.add_argument("--mem-gb", type=float, default=None, help="default: the partition's")
    slurm.add_argument("--slurm-config", type=Path, default=None, metavar="FILE",
                       help="JSON with any of partition, time_minutes, gpus_per_job, "
                            "cpus_per_job, mem_gb, setup (shell lines run before each job); "
                            "the flags override it")
    parser.add_argument("--dry-run", action="store_true",
                        help="print every cell's commands and job; train nothing")
    parser.add_argument("--collect-only", action="store_true",
                        help="run nothing; build the table from the cells' logs")
    parser.add_argument("--budget-minutes", type=float, default=None, metavar="N",
                        help="stop after N minutes; the same command continues from the last "
                             "checkpoints (exit 1, the finished cells reported)")
    parser.add_argument("--max-new-cells", type=int, default=None,
                        help="stop after this many new cells")
    parser.add_argument("--no-report", action="store_true", help="do not write the report")
    parser.add_argument("--add-seeds", action="store_true",
                        help="then give each claim not resolved the seeds 80%% power needs, "
                             "up to 10 a row, and judge again")
    args = parser.parse_args(argv)
    if args.list:
        return args
    if args.table is None:
        parser.error("TABLE is required (see --list)")
    for flag, least in (("seeds", 1), ("jobs", 1), ("threads", 1), ("gpus_per_job", 0),
                        ("cpus_per_job", 1), ("time_minutes", 1)):
        if getattr(args, flag) is not None and getattr(args, flag) < least:
            parser.error(f"--{flag.replace('_', '-')} must be at least {least}")
    if args.executor == "slurm" and not (args.dry_run or args.collect_only) and (
            shutil.which("sbatch") is None):
        parser.exit(2, "python -m scripts.reproduce: --executor slurm, but there is no sbatch "
                       "here: run it on a Slurm login node, or see the jobs with --dry-run\n")
    if args.budget_minutes is not None and not args.budget_minutes >= 0:
        parser.error("--budget-minutes must be 0 or more")
    if args.device == "cuda" and not (args.dry_run or args.collect_only):
        import torch

        if not torch.cuda.is_available():  # one line, before any data is built
            parser.exit(2, "python -m scripts.reproduce: --device cuda, but torch sees no "
                           "CUDA device here: run it on a machine with a GPU, or leave out "
                           "--device to train on the CPU\n")
    spec = TABLES[args.table]
    args.overrides = {}  # table -> {key: value}
    for item in args.set:
        setting, sep, value = item.partition("=")
        table, _, key = setting.rpartition(":")
        table = table or args.table
        if table not in TABLES:
            parser.error(f"--set {item!r}: no table {table!r}; tables: {', '.join(TABLES)}")
        known = TABLES[table].settings(args.scale)
        if not sep or key not in known:
            parser.error(f"--set {item!r}: expected [TABLE:]KEY=VALUE with KEY one of "
                         f"{', '.join(sorted(known))}")
        args.overrides.setdefault(table, {})[key] = parse_value(value)
    # a hidden row is only a starting point: named where no shown row starts from it at this
    # scale, it would train a model nothing reads
    starts = {row.key for row in selected_rows(spec, None, spec.settings(args.scale))}
    for key in args.rows or []:
        if key not in {row.key for row in spec.rows}:
            parser.error(f"--rows: {args.table} has no row {key!r}; rows: "
                         f"{', '.join(row.key for row in spec.rows)}")
        if spec.row(key).hidden and key not in starts:
            parser.error(f"--rows: {key!r} is only a starting point, of no row at scale "
                         f"{args.scale}: name the rows that start from it, or another scale")
    return args


def add_seeds(spec: TableSpec, options: RunOptions, cells: List, data: Dict
              ) -> Tuple[List, Dict, int]:
    """Seeds from power (``--add-seeds``): the rows of the claims not resolved whose 80%-power
    need is within :data:`~scripts.reproduce.claims.SEEDS_CAP` get those seeds, until no claim
    within reach asks for more; the cells, data and seeds reached."""
    seeds = options.seeds
    while wanted := seeds_wanted(spec, cells, data):
        more = max(wanted.values())
        if more <= seeds and all(len([c for c in cells if c.row.key == row
                                      and c.result is not None]) >= more for row in wanted):
            break  # planned and run already: a seed that failed to finish is not retried here
        options.say(f"{spec.name}: {', '.join(sorted(wanted))} to {more} seeds (claims not "
                    f"resolved whose 80%-power need is within the cap of {SEEDS_CAP})")
        run_table(spec, replace(options, rows=sorted(wanted), seeds=more))
        seeds = max(seeds, more)
        cells, data = run_table(spec, replace(options, seeds=seeds, collect_only=True))
    return cells, data, seeds


def stopped_by_hand(finished: Sequence[str], say) -> int | None:
    """After a stop by hand (:func:`stop_on_signals`): one line, and the exit status (128 +
    the signal's number); None when the call was not stopped."""
    reason = stopped_by()
    if reason is None:
        return None
    say(f"python -m scripts.reproduce: stopped by {reason}: {len(finished)} "
        f"cell{'' if len(finished) == 1 else 's'} finished in this call, the running "
        "trainings stopped: rerun the same command to resume them from their last checkpoints")
    return 128 + signal.Signals[reason] if reason in signal.Signals.__members__ else 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # fairseq's logging, set up in this process by the data steps, would show every lock taken
    logging.getLogger("filelock").setLevel(logging.WARNING)
    args = parse_args(argv)
    if args.list:
        for name, spec in TABLES.items():
            print(f"{name:32s} {spec.paper}: {spec.title}")
        return 0
    tables = {name: with_settings(TABLES[name], args.scale, values)
              for name, values in args.overrides.items()}
    tables = {**TABLES, **tables}
    spec = tables[args.table]

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    deadline = None if args.budget_minutes is None else (
        time.time() + 60 * args.budget_minutes)
    # each finished cell is also kept beside the report, so that a table is completed over
    # sessions and machines (the checkpoints stay in --work)
    records = args.out.parent / "reproduction" / "cells" / args.scale
    options = RunOptions(scale=args.scale, seeds=args.seeds, work=args.work, jobs=args.jobs,
                         deadline=deadline, records=records,
                         threads=args.threads, dry_run=args.dry_run, device=args.device,
                         collect_only=args.collect_only, max_new_cells=args.max_new_cells,
                         rows=args.rows, say=print if args.dry_run else say, tables=tables,
                         executor=args.executor, resources=read_resources(args))
    if args.dry_run and args.device == "cuda":
        print("# --device cuda: the commands below leave out --cpu (fairseq trains and decodes "
              "on the GPU); the cells' keys are the CPU's")
    started = time.monotonic()
    status = 0
    seeds = args.seeds
    try:
        cells, data = run_table(spec, options)
        if args.add_seeds and not (args.dry_run or args.collect_only):
            cells, data, seeds = add_seeds(spec, options, cells, data)  # seeds from power
    except BaseException as error:
        stopped = stopped_by_hand(options.finished, say)  # whatever the stop made it raise
        if stopped is not None:
            return stopped
        if not isinstance(error, (CellFailed, BudgetSpent)):
            raise
        say(f"stopped: {error}")
        status = 1
        options.dry_run, options.collect_only, options.max_new_cells = False, True, None
        cells, data = run_table(spec, options)  # what finished, for the report
    if args.dry_run or args.no_report:
        return stopped_by_hand(options.finished, say) or status
    command = "python -m scripts.reproduce " + shlex.join(reproducing_argv(argv))
    entry = verdicts(spec, cells, data, args.scale, seeds)
    replaced = note_replaced(args.out, spec.name, entry)
    text = section(spec, cells, data, args.scale, seeds, command,
                   plot_dir=args.out.parent / "reproduction", previous=replaced or None)
    write_section(args.out, spec.name, text, DOC_HEADER)
    # the rows and verdicts kept beside the report, and the closing summary of every table's
    found = write_verdicts(verdicts_store(args.out), spec.name, entry)
    write_section(args.out, "summary", summary_section(found, list(TABLES.values())), DOC_HEADER)
    say(f"{spec.name}: report in {args.out} ({time.monotonic() - started:.0f} s)")
    return stopped_by_hand(options.finished, say) or status


def stop_on_signals() -> None:
    """SIGINT and SIGTERM stop the call as a spent budget does (:func:`main` returns 128 +
    the signal's number); a second kills at once; a signal ignored at start stays ignored."""
    handled = [number for number in (signal.SIGINT, signal.SIGTERM)
               if signal.getsignal(number) is not signal.SIG_IGN]

    def handle(signum: int, _frame) -> None:
        for number in handled:
            signal.signal(number, signal.SIG_DFL)
        stop_children(signal.Signals(signum).name)

    for number in handled:
        signal.signal(number, handle)


if __name__ == "__main__":
    stop_on_signals()  # only here: importing this module changes no signal handling
    sys.exit(main())
