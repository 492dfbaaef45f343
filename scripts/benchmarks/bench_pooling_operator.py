"""Time, peak memory and nCCS of soft top-k pooling operators (the Pyramidion paper's Figures 5-6).

Cases, all measured side by side in one run on the same inputs (vectors uniform in [-1, 1],
scores uniform in [0, 1], as the published benchmark):

    ours        successive_halving_topk, sorted before every round (the published algorithm)
    no_sort     the same with the sorting step removed (pairs by position)
    sort_once   sorted before the first round only
    loop        successive_halving_topk_loop: one example and one round at a time, both
                members of every pair gathered (the published code's approach)
    goyal       iterative_soft_topk (Goyal et al. 2018), alpha = 1 as published; skipped
                where n * k > --goyal-max-work (its cost grows as n * k)

Time is the forward pass, median of interleaved rounds after a warm-up round
(benchmarking.py), with torch's thread count fixed (--threads, printed). nCCS is the
mean over examples of: for each true top-k vector, the best cosine with the operator's outputs.
"sort share" is 1 - time(no_sort) / time(ours). Peak memory is the most tensor memory alive at
once while the step runs, beyond the inputs that existed before (a dispatch-mode count, see
benchmarking.py: it is what a GPU allocator's max_memory_allocated would say and does
not see scratch buffers inside one operator), for a forward pass without autograd and for a
forward + backward pass (gradients to the vectors and scores).

    python -m scripts.benchmarks.bench_pooling_operator --quick --out bench/out   # about a minute
    python -m scripts.benchmarks.bench_pooling_operator --out bench/out           # several minutes
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef

import relu_former.pyramidion.successive_halving as operator_module
from relu_former.pyramidion.successive_halving import PooledSequence, successive_halving_topk
from scripts.benchmarks.benchmarking import (
    MIB,
    BenchmarkParser,
    PeakTensorMemory,
    finish_report,
    interleaved_median_seconds,
    log,
    torch_setup,
)
from scripts.benchmarks.topk_baselines import iterative_soft_topk, successive_halving_topk_loop
from scripts.benchmarks.topk_similarity import ncc_similarity
from scripts.common.plotting import line_plot, markdown_table

Operator = Callable[[torch.Tensor, torch.Tensor, int], PooledSequence]
OPERATORS: Dict[str, Operator] = {
    "ours": successive_halving_topk,
    "no_sort": lambda v, s, k: successive_halving_topk(v, s, k, sort=False),
    "sort_once": lambda v, s, k: successive_halving_topk(v, s, k, resort=False),
    "loop": successive_halving_topk_loop,
    "goyal": iterative_soft_topk,
}
FULL_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
FULL_KS = (2, 8, 32, 128, 512, 2048)
QUICK_LENGTHS = (512, 1024, 2048)
QUICK_KS = (2, 32, 256)
TARGET = (8192, 512)  # n, k of the speed and quality targets (batch 16, d = 32)


def parse_args(argv=None) -> argparse.Namespace:
    parser = BenchmarkParser(
        __doc__,
        quick_help=f"n in {QUICK_LENGTHS}, k in {QUICK_KS}, fewer rounds, the memory and "
        "large-batch cases at n = 2048 (about a minute)",
    )
    parser.add_quick_argument(
        "--lengths", list(FULL_LENGTHS), list(QUICK_LENGTHS), "input lengths n", type=int, nargs="+"
    )
    parser.add_quick_argument(
        "--ks",
        list(FULL_KS),
        list(QUICK_KS),
        "pooled lengths k; pairs with k >= n are skipped",
        type=int,
        nargs="+",
    )
    parser.add_argument("--batch", type=int, default=16, help="examples per call (default 16)")
    parser.add_argument("--dim", type=int, default=32, help="vector size d (default 32)")
    parser.add_argument(
        "--big-batch",
        type=int,
        default=256,
        help="batch of the case where the per-example loop dominates (default 256)",
    )
    parser.add_argument(
        "--big-batch-shape",
        type=int,
        nargs=2,
        default=(512, 32),
        metavar=("N", "K"),
        help="n and k of that case (default 512 32)",
    )
    parser.add_argument(
        "--memory-shape",
        type=int,
        nargs=2,
        default=None,
        metavar=("N", "K"),
        help=f"n and k of the peak-memory case (default {TARGET[0]} {TARGET[1]}; "
        "--quick: 2048 128)",
    )
    parser.add_argument(
        "--goyal-max-work",
        type=int,
        default=TARGET[0] * TARGET[1],
        help="skip Goyal's operator where n * k exceeds this (default 8192 * 512)",
    )
    parser.add_quick_argument("--rounds", 5, 3, "timed rounds per case", type=int)
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_threads_and_out(
        "folder for bench_pooling_operator.md and the PNG plots",
        "torch intra-op threads, fixed for every case (default 1)",
    )
    args = parser.parse_args(argv)
    if args.memory_shape is None:
        args.memory_shape = (2048, 128) if args.quick else TARGET
    for name in ("lengths", "ks"):
        if any(v < 1 for v in getattr(args, name)):
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    for name in ("batch", "dim", "big_batch", "rounds", "threads"):
        value = getattr(args, name)
        if value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    return args


def make_inputs(batch: int, length: int, dim: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    values = torch.rand(batch, length, dim, generator=gen) * 2 - 1
    scores = torch.rand(batch, length, generator=gen)
    return values, scores


class NewTensorMemory(PeakTensorMemory):
    """PeakTensorMemory that does not count storages alive before it started (the inputs),
    even when a view of them passes through an operator."""

    def __init__(self, existing: Sequence[torch.Tensor]) -> None:
        super().__init__()
        for tensor in existing:
            ref = StorageWeakRef(tensor.untyped_storage())
            self._live[ref.cdata] = (ref, 0)


def peak_mib(step: Callable[[], object], existing: Sequence[torch.Tensor]) -> float:
    with NewTensorMemory(existing) as mem:
        step()
    return mem.peak_bytes / MIB


def forward_step(op: Operator, values, scores, k):
    def run():
        with torch.no_grad():
            op(values, scores, k)

    return run


def training_step(op: Operator, values, scores, k):
    def run():
        v = values.detach().requires_grad_(True)
        s = scores.detach().requires_grad_(True)
        out = op(v, s, k)
        (out.values.sum() + out.scores.sum()).backward()

    return run


def measure_grid(args) -> List[dict]:
    rows = []
    pairs = [(n, k) for n in args.lengths for k in args.ks if k < n]
    for index, (n, k) in enumerate(pairs, 1):
        values, scores = make_inputs(args.batch, n, args.dim, args.seed + n + k)
        names = [name for name in OPERATORS if name != "goyal" or n * k <= args.goyal_max_work]
        row = {"n": n, "k": k}
        for name in names:
            with torch.no_grad():
                pooled = OPERATORS[name](values, scores, k)
            row[f"nccs_{name}"] = ncc_similarity(pooled.values, values, scores, k).item()
        # The loop and Goyal's operator are slow at large sizes: fewer rounds keeps the grid to
        # minutes; every case still gets the same number of rounds, interleaved.
        times = interleaved_median_seconds(
            {name: forward_step(OPERATORS[name], values, scores, k) for name in names},
            rounds=args.rounds,
        )
        row.update({f"time_{name}": t for name, t in times.items()})
        rows.append(row)
        goyal = f", goyal {times['goyal'] * 1e3:.1f} ms" if "goyal" in times else ""
        log(
            f"[{index}/{len(pairs)}] n={n} k={k}: ours {times['ours'] * 1e3:.1f} ms, "
            f"loop {times['loop'] * 1e3:.1f} ms{goyal}, nCCS ours {row['nccs_ours']:.3f}"
        )
    return rows


def measure_big_batch(args) -> dict:
    n, k = args.big_batch_shape
    values, scores = make_inputs(args.big_batch, n, args.dim, args.seed)
    log(f"batch {args.big_batch}, n={n}, k={k}: ours vs loop")
    times = interleaved_median_seconds(
        {name: forward_step(OPERATORS[name], values, scores, k) for name in ("ours", "loop")},
        rounds=args.rounds,
    )
    return {"batch": args.big_batch, "n": n, "k": k, **{f"time_{m}": t for m, t in times.items()}}


def measure_memory(args) -> List[dict]:
    n, k = args.memory_shape
    values, scores = make_inputs(args.batch, n, args.dim, args.seed)
    rows = []
    for name in ("ours", "no_sort", "sort_once", "loop"):
        log(f"peak memory and forward+backward time, n={n} k={k}: {name}")
        op = OPERATORS[name]
        rows.append(
            {
                "case": name,
                "forward_mib": peak_mib(forward_step(op, values, scores, k), [values, scores]),
                "train_mib": peak_mib(training_step(op, values, scores, k), [values, scores]),
            }
        )
    times = interleaved_median_seconds(
        {row["case"]: training_step(OPERATORS[row["case"]], values, scores, k) for row in rows},
        rounds=args.rounds,
    )
    for row in rows:
        row["train_time"] = times[row["case"]]
    return rows


def measure_sort_parts(args) -> dict:
    """What the sorting step costs in the forward pass at the memory shape (n = 8192, k = 512
    by default): ``ours`` and ``no_sort``, and in the same interleaved rounds ``ours`` with its
    ranking calls timed (the sorts alone, every round). The rest of ours - no_sort is reading
    the scores and vectors in rank order rather than in position order."""
    n, k = args.memory_shape
    values, scores = make_inputs(args.batch, n, args.dim, args.seed)
    original = operator_module._rank
    spent: List[float] = []

    def timed_rank(*rank_args, **rank_kwargs):
        start = time.perf_counter()
        result = original(*rank_args, **rank_kwargs)
        spent[-1] += time.perf_counter() - start
        return result

    def instrumented():
        spent.append(0.0)
        operator_module._rank = timed_rank
        try:
            with torch.no_grad():
                successive_halving_topk(values, scores, k)
        finally:
            operator_module._rank = original

    log(f"sorting step, n={n} k={k}: ours, no_sort, ours with its ranking calls timed")
    times = interleaved_median_seconds(
        {"ours": forward_step(OPERATORS["ours"], values, scores, k),
         "no_sort": forward_step(OPERATORS["no_sort"], values, scores, k),
         "instrumented": instrumented},
        rounds=4 * args.rounds + 1, warmup=1,  # a few ms each: more rounds, steadier medians
    )
    return {"n": n, "k": k, "ours": times["ours"], "no_sort": times["no_sort"],
            "rank": statistics.median(spent[1:])}


def sort_parts_section(parts: dict) -> str:
    ours, no_sort, rank = parts["ours"], parts["no_sort"], parts["rank"]
    rest = ours - no_sort - rank
    rows = [
        ["ours (sorted before every round)", ours * 1e3, "100%"],
        ["no_sort", no_sort * 1e3, f"{100 * no_sort / ours:.1f}%"],
        ["difference (the sort share)", (ours - no_sort) * 1e3,
         f"{100 * (1 - no_sort / ours):.1f}%"],
        ["of which the ranking calls (sorts of the scores)", rank * 1e3,
         f"{100 * rank / ours:.1f}%"],
        ["of which reading scores and vectors in rank order, not position order", rest * 1e3,
         f"{100 * rest / ours:.1f}%"],
    ]
    return "\n".join([
        f"\n## The sorting step, n = {parts['n']}, k = {parts['k']}: forward time, one thread\n",
        markdown_table(["part", "ms", "share of ours"], rows),
    ])


def find(rows: List[dict], n: int, k: int):
    return next((row for row in rows if row["n"] == n and row["k"] == k), None)


def target_checks(args, grid, big, memory, sort_parts: dict) -> List[list]:
    """[target, measured, PASS/FAIL] for each target that this run measured."""
    checks = []

    def check(name, value, ok, fmt="{:.3g}"):
        checks.append([name, fmt.format(value), "PASS" if ok else "FAIL"])

    point = find(grid, *TARGET) if args.batch == 16 and args.dim == 32 else None
    if point is not None:
        if "time_goyal" in point:
            ratio = point["time_goyal"] / point["time_ours"]
            check("n=8192 k=512: Goyal time / ours >= 20", ratio, ratio >= 20)
        check("n=8192 k=512: nCCS ours >= 0.97", point["nccs_ours"], point["nccs_ours"] >= 0.97)
        ratio = point["time_loop"] / point["time_ours"]
        check("n=8192 k=512: loop time / ours >= 1", ratio, ratio >= 1)
        share = 1 - point["time_no_sort"] / point["time_ours"]
        check("n=8192 k=512: sort share < 15% (forward)", 100 * share, share < 0.15, "{:.1f}%")
    if (sort_parts["n"], sort_parts["k"]) == TARGET and args.batch == 16 and args.dim == 32:
        share = sort_parts["rank"] / sort_parts["ours"]
        check("n=8192 k=512: ranking calls' share < 15% (forward)", 100 * share, share < 0.15,
              "{:.1f}%")
    if (big["batch"], big["n"], big["k"]) == (256, 512, 32):
        ratio = big["time_loop"] / big["time_ours"]
        check("batch 256 n=512 k=32: loop time / ours >= 4", ratio, ratio >= 4)
    mem = {row["case"]: row for row in memory}
    n, k = args.memory_shape
    if (n, k) == TARGET:
        share = 1 - mem["no_sort"]["train_time"] / mem["ours"]["train_time"]
        check(
            f"n={n} k={k}: sort share < 15% (forward+backward)",
            100 * share,
            share < 0.15,
            "{:.1f}%",
        )
    for key, label in (("train_mib", "forward+backward"), ("forward_mib", "forward")):
        ratio = mem["ours"][key] / mem["loop"][key]
        check(f"n={n} k={k}: peak memory ours / loop < 1 ({label})", ratio, ratio < 1)
    return checks


def grid_table(rows: List[dict]) -> str:
    headers = [
        "n",
        "k",
        "ours ms",
        "no_sort ms",
        "sort share",
        "sort_once ms",
        "loop ms",
        "goyal ms",
        "loop / ours",
        "goyal / ours",
        "nCCS ours",
        "nCCS no_sort",
        "nCCS sort_once",
        "nCCS loop",
        "nCCS goyal",
    ]
    body = []
    for r in rows:
        goyal = "time_goyal" in r
        body.append(
            [
                r["n"],
                r["k"],
                r["time_ours"] * 1e3,
                r["time_no_sort"] * 1e3,
                f"{100 * (1 - r['time_no_sort'] / r['time_ours']):.0f}%",
                r["time_sort_once"] * 1e3,
                r["time_loop"] * 1e3,
                r["time_goyal"] * 1e3 if goyal else "skipped",
                r["time_loop"] / r["time_ours"],
                r["time_goyal"] / r["time_ours"] if goyal else "-",
                r["nccs_ours"],
                r["nccs_no_sort"],
                r["nccs_sort_once"],
                r["nccs_loop"],
                r["nccs_goyal"] if goyal else "-",
            ]
        )
    return markdown_table(headers, body)


def write_plots(out: Path, rows: List[dict]) -> List[str]:
    """Time and nCCS against n (at the largest k measured for most n) and against k (at the
    largest n), the layout of the paper's Figures 5 and 6."""
    names = []
    ks = sorted({r["k"] for r in rows})
    ns = sorted({r["n"] for r in rows})
    k_fixed = max(ks, key=lambda k: (sum(1 for r in rows if r["k"] == k), k))
    n_fixed = max(ns)
    labels = ("ours", "no_sort", "sort_once", "loop", "goyal")
    for metric, ylabel, logy in (("time", "forward time (s)", True), ("nccs", "nCCS", False)):
        for axis, fixed, key in (("n", k_fixed, "k"), ("k", n_fixed, "n")):
            sel = sorted((r for r in rows if r[key] == fixed), key=lambda r: r[axis])
            series = {}
            for label in labels:
                pts = [(r[axis], r[f"{metric}_{label}"]) for r in sel if f"{metric}_{label}" in r]
                if pts:
                    series[label] = ([p[0] for p in pts], [p[1] for p in pts])
            if not series:
                continue
            name = f"bench_pooling_operator_{metric}_vs_{axis}.png"
            line_plot(
                out / name,
                series,
                title=f"{metric} vs {axis} ({key} = {fixed})",
                xlabel=axis,
                ylabel=ylabel,
                logx=True,
                logy=logy,
            )
            names.append(name)
    return names


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    log(
        f"{torch_setup()}, batch {args.batch}, "
        f"d {args.dim}, {args.rounds} timed rounds"
    )
    grid = measure_grid(args)
    big = measure_big_batch(args)
    memory = measure_memory(args)
    sort_parts = measure_sort_parts(args)
    checks = target_checks(args, grid, big, memory, sort_parts)

    n_mem, k_mem = args.memory_shape
    report = [
        "# Soft top-k pooling operators: time, memory, nCCS\n",
        f"{torch_setup()} (torch.set_num_threads), "
        f"CPU; batch {args.batch}, d = {args.dim}; forward time, median of {args.rounds} "
        "interleaved rounds after a warm-up round. Goyal's operator skipped where "
        f"n * k > {args.goyal_max_work}. sort share = 1 - no_sort / ours.\n",
        "## Time and nCCS\n",
        grid_table(grid),
        f"\n## Batch {big['batch']}, n = {big['n']}, k = {big['k']} (the loop's worst case)\n",
        markdown_table(
            ["ours ms", "loop ms", "loop / ours"],
            [[big["time_ours"] * 1e3, big["time_loop"] * 1e3, big["time_loop"] / big["time_ours"]]],
        ),
        f"\n## Peak tensor memory and training time, n = {n_mem}, k = {k_mem}, batch "
        f"{args.batch}\n",
        "Tensor memory alive at once beyond the inputs (16 MiB of vectors at n = 8192), "
        "counted by a dispatch mode; forward without autograd, and forward + backward.\n",
        markdown_table(
            ["case", "forward MiB", "forward+backward MiB", "forward+backward ms"],
            [[r["case"], r["forward_mib"], r["train_mib"], r["train_time"] * 1e3] for r in memory],
        ),
        sort_parts_section(sort_parts),
        "\n## Targets measured in this run\n",
        markdown_table(["target", "measured", "result"], checks) if checks else "(none)\n",
    ]
    plots = [] if args.out is None else write_plots(args.out, grid)
    links = "\n\n" + "\n".join(f"![{p}]({p})" for p in plots) + "\n"
    path = finish_report(args, "bench_pooling_operator", "\n".join(report), links)
    if path is not None:
        log(f"wrote {path} and {len(plots)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
