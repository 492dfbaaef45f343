"""Run every benchmark script of the plugin and collect their results into one page.

Each ``scripts/benchmarks/bench_*.py`` is run as ``python -m scripts.benchmarks.bench_X --out
OUT --threads N [--quick]``, one after the other, with its output kept in ``OUT/bench_X.log``.
By convention each writes ``OUT/bench_X.md`` (its tables) and ``OUT/bench_X*.png`` (its plots)
and sets torch's thread count from ``--threads``; ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``
are set to the same N. The page, ``docs/benchmarks.md`` by default, starts with how it was made
(command, commit, date, machine, torch, threads) and a summary (status and time of every
script), then has one section per script with its tables and plots; the plots are copied
beside the page (``docs/benchmarks/``) so that the page and its pictures are committed
together. A script that fails, times out or writes no table is reported as such; the others
still run.

    python -m scripts.benchmarks.run_all --quick     # what `make bench BENCH_ARGS=--quick` runs
    python -m scripts.benchmarks.run_all             # full sizes (what `make bench` runs)
    python -m scripts.benchmarks.run_all --only bench_attention bench_pyramidion --quick
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence

from scripts.common.atomic_files import copy_atomic, write_text_atomic
from scripts.common.cpu_path import cpu_model
from scripts.common.plotting import markdown_table
from scripts.common.repo_paths import git_commit

SCRIPTS = Path(__file__).resolve().parent
REPO_ROOT = SCRIPTS.parents[1]


@dataclass
class Outcome:
    """What one benchmark script did."""

    name: str
    status: str = "not run"  # ok | failed (exit N) | timed out | no table written | ...
    seconds: float = 0.0
    table: Path | None = None
    plots: List[Path] = field(default_factory=list)
    log: Path | None = None
    tail: str = ""


def find_scripts(folder: Path) -> List[Path]:
    """The benchmark scripts: ``bench_*.py`` in ``folder``, this collector excluded."""
    return sorted(p for p in Path(folder).glob("bench_*.py") if p.name != Path(__file__).name)


def run_script(script: Path, out: Path, quick: bool, timeout: float, threads: int,
               extra: Sequence[str] = ()) -> Outcome:
    """Run one script with ``--out out`` and report what it produced."""
    outcome = Outcome(script.stem, log=out / f"{script.stem}.log")
    table = out / f"{script.stem}.md"
    before = table.stat().st_mtime if table.exists() else None
    # The project's scripts are modules of the ``scripts`` package; others run as plain files.
    inside = script.resolve().parent == SCRIPTS
    target = ["-m", f"scripts.benchmarks.{script.stem}"] if inside else [str(script)]
    command = [sys.executable, *target, "--out", str(out), "--threads", str(threads)]
    command += (["--quick"] if quick else []) + list(extra)
    # --threads sets torch's intra-op pool in each script; the variables cover the libraries
    # below it (OpenMP, MKL), which read them at start-up.
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    started = time.time()
    try:
        proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)
        log_text, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as error:
        log_text = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                           for part in (error.stdout or "", error.stderr or ""))
        code = None
    outcome.seconds = time.time() - started
    write_text_atomic(outcome.log, log_text)
    outcome.tail = "\n".join(log_text.strip().splitlines()[-15:])
    fresh = table.exists() and (before is None or table.stat().st_mtime > before)
    if code is None:
        outcome.status = f"timed out after {timeout:.0f} s"
    elif code != 0:
        outcome.status = f"failed (exit {code})"
    elif not fresh:
        outcome.status = f"no table written ({table.name} missing or not updated)"
    else:
        outcome.status = "ok"
    if fresh:
        outcome.table = table
    outcome.plots = sorted(p for p in out.glob(f"{script.stem}*.png")
                           if p.stat().st_mtime >= started - 1)
    return outcome


_LOCAL_LINK = re.compile(r"(!?\[[^\]]*\]\()(?![a-z]+://|/|#)([^)\s]+)(\))")


def relink(markdown: str, prefix: str) -> str:
    """Point a script's relative links (its PNGs) at where they are seen from the report."""
    return _LOCAL_LINK.sub(lambda m: f"{m.group(1)}{prefix}/{m.group(2)}{m.group(3)}",
                           markdown)


def demote_headings(markdown: str) -> str:
    """Two levels down, so each script's own title sits under its ``##`` report section."""
    return re.sub(r"^(#{1,4}) ", r"##\1 ", markdown, flags=re.M)


def machine() -> str:
    """CPU model, core count and operating system, e.g. for comparing two pages."""
    return f"{cpu_model()}, {os.cpu_count()} CPU cores, {platform.system()} {platform.release()}"


def torch_version() -> str:
    try:
        import torch
    except ImportError:
        return "not installed"
    return torch.__version__


def command_line(argv: Sequence[str] | None) -> str:
    """How this page was made, as a user would type it."""
    words = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python -m scripts.benchmarks.run_all", *map(shlex.quote, words)])


def render_report(outcomes: Sequence[Outcome], out: Path, report: Path, quick: bool,
                  threads: int, command: str = "python -m scripts.benchmarks.run_all") -> str:
    """The page: how it was made, a summary, then each script's tables and plots.

    Plots are copied into the folder named after the page (``docs/benchmarks/`` for
    ``docs/benchmarks.md``) and linked from there; other links (logs) point into ``out``.
    """
    assets = report.parent / report.stem
    assets_prefix = report.stem
    out_prefix = os.path.relpath(out, report.parent).replace(os.sep, "/")
    rows = [[o.name, o.status, f"{o.seconds:.0f}", len(o.plots)] for o in outcomes]
    parts = [
        "# relu-former benchmarks\n",
        "Written by `make bench` (`python -m scripts.benchmarks.run_all`); do not edit by "
        "hand, run it again.\n",
        markdown_table(["setting", "value"], [
            ["command", f"`{command}`"],
            ["commit", git_commit()],
            ["date", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())],
            ["machine", machine()],
            ["load average at the end", ", ".join(f"{x:.1f}" for x in os.getloadavg())],
            ["python, torch", f"{platform.python_version()}, {torch_version()}"],
            ["threads", f"{threads} (each script's --threads, OMP_NUM_THREADS, "
                        "MKL_NUM_THREADS)"],
            ["sizes", "--quick (small)" if quick else "full"],
        ]),
        markdown_table(["script", "status", "seconds", "plots"], rows),
    ]
    # The page is rewritten whole, so plots of an earlier run that it no longer shows go.
    for stale in assets.glob("bench_*.png") if assets.is_dir() else ():
        stale.unlink()
    for o in outcomes:
        parts.append(f"## {o.name}\n")
        if o.status != "ok":
            parts.append(f"**{o.status}**; log: [{o.name}.log]({out_prefix}/{o.name}.log)\n")
            if o.tail:
                parts.append("```\n" + o.tail + "\n```\n")
        for plot in o.plots:
            copy_atomic(plot, assets / plot.name)
        text = ""
        if o.table is not None:
            text = relink(demote_headings(o.table.read_text()), assets_prefix)
            parts.append(text.rstrip() + "\n")
        for plot in o.plots:
            if f"{assets_prefix}/{plot.name}" not in text:
                parts.append(f"![{plot.stem}]({assets_prefix}/{plot.name})\n")
    return "\n".join(parts)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--quick", action="store_true",
                        help="pass --quick to every script (small sizes, about a minute each)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out",
                        help="folder the scripts write their tables, plots and logs to "
                             "(default: bench/out, not committed)")
    parser.add_argument("--report", type=Path, default=REPO_ROOT / "docs" / "benchmarks.md",
                        help="the page collecting them (default: docs/benchmarks.md; its "
                             "plots go to docs/benchmarks/)")
    parser.add_argument("--scripts-dir", type=Path, default=SCRIPTS,
                        help="where the bench_*.py scripts are (default: scripts/benchmarks/)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME",
                        help="run only these scripts (names without .py)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds one script may run before it is stopped (default 3600)")
    parser.add_argument("--script-args", action="append", default=[], metavar="NAME=ARGS",
                        help="more flags for one script, e.g. --script-args "
                             "'bench_attention=--lengths 1024 2048 4096' (repeatable); they "
                             "come last, after --quick, so they override its sizes")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of every script: passed as its --threads and as "
                             "OMP_NUM_THREADS/MKL_NUM_THREADS (default 1, the scripts' own "
                             "default, steadiest on a shared machine)")
    args = parser.parse_args(argv)
    if args.timeout <= 0 or args.threads < 1:
        parser.error("--timeout must be positive and --threads at least 1")
    args.extra = {}
    for item in args.script_args:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--script-args {item!r}: expected NAME=ARGS, e.g. "
                         "'bench_attention=--lengths 1024'")
        args.extra.setdefault(name, []).extend(shlex.split(value))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    scripts = find_scripts(args.scripts_dir)
    outcomes: List[Outcome] = []
    if args.only:
        known = {p.stem: p for p in scripts}
        for name in args.only:
            if name not in known:  # reported in the report, the others still run
                outcomes.append(Outcome(name, status="missing (no such script in "
                                                     f"{args.scripts_dir})"))
        scripts = [known[name] for name in args.only if name in known]
    if not scripts and not outcomes:
        print(f"error: no bench_*.py scripts in {args.scripts_dir}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for index, script in enumerate(scripts, start=1):
        print(f"[{index}/{len(scripts)}] {script.name} ...", flush=True)
        outcome = run_script(script, args.out, args.quick, args.timeout, args.threads,
                             args.extra.get(script.stem, ()))
        print(f"[{index}/{len(scripts)}] {script.name}: {outcome.status} "
              f"({outcome.seconds:.0f} s)", flush=True)
        outcomes.append(outcome)
    page = render_report(outcomes, args.out, args.report, args.quick, args.threads,
                         command_line(argv))
    write_text_atomic(args.report, page)
    failed = [o.name for o in outcomes if o.status != "ok"]
    print(f"wrote {args.report}: {len(outcomes) - len(failed)} ok"
          + (f", not ok: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
