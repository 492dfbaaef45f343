"""On a CUDA device: fused ReLU attention (Triton, FlexAttention, tiled) against SDPA flash.

The attention core only (q, k, v of shape (B, H, n, D) given), forward + backward, at each
length n, side by side in interleaved rounds:

    sdpa                 torch's scaled_dot_product_attention (flash / memory-efficient)
    sdpa_dropout         the same with attention dropout --dropout
    relu_triton          relu_former's Triton kernel, U only (no statistics)
    relu_triton_stats    the same with the regularisers' statistics S, T, P (same pass)
    relu_triton_dropout  U with dropout --dropout
    relu_triton_stats_dropout   statistics and dropout: a regularised training step
    relu_flex            the FlexAttention path, U only
    relu_flex_stats      the same with the statistics (three more passes; flex.py)
    relu_tiled           the tiled torch kernel (the path with dropout when triton is absent),
                         only up to --tiled-max-length (it is launch-bound on a GPU)

Reports each case's time ratio to sdpa (dropout cases to sdpa_dropout; target <= 1, and
relu_triton faster than sdpa) and peak memory (torch.cuda.max_memory_allocated during one
step, beyond what was allocated before). Without a CUDA device it says so (in its table too)
and exits 0 without measuring (the CPU benchmark is bench_attention.py).

    python -m scripts.benchmarks.bench_attention_gpu --out bench/out
    python -m scripts.benchmarks.bench_attention_gpu --quick      # n = 1024, 2048
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from scripts.benchmarks.benchmarking import (
    MIB,
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
)
from scripts.common.plotting import markdown_table

REPO_ROOT = Path(__file__).resolve().parents[2]
# gpu_check's report from the last lent GPU, committed by hand with the figures it printed
LAST_GPU_REPORT = REPO_ROOT / "docs" / "benchmarks" / "gpu_check.md"

CASES = ("sdpa", "sdpa_dropout", "relu_triton", "relu_triton_stats", "relu_triton_dropout",
         "relu_triton_stats_dropout", "relu_flex", "relu_flex_stats", "relu_tiled")
FULL_LENGTHS = (1024, 2048, 4096, 8192, 16384)
QUICK_LENGTHS = (1024, 2048)
# the time each case is compared with, and the ratio it should stay under
BASELINE = {case: "sdpa_dropout" if "dropout" in case else "sdpa" for case in CASES}
TARGET = {"relu_triton": "< 1", "relu_triton_stats": "<= 1", "relu_triton_dropout": "< 1",
          "relu_triton_stats_dropout": "<= 1"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = BenchmarkParser(__doc__, quick_help=f"lengths {QUICK_LENGTHS}")
    parser.add_quick_argument("--lengths", list(FULL_LENGTHS), list(QUICK_LENGTHS),
                              "sequence lengths", type=int, nargs="+")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (default 8)")
    parser.add_argument("--heads", type=int, default=8, help="heads (default 8)")
    parser.add_argument("--head-dim", type=int, default=64, help="head size (default 64)")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"),
                        default="bfloat16", help="input dtype (default bfloat16)")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds (default 10)")
    parser.add_argument("--dropout", type=float, default=0.1,
                        help="attention dropout of the dropout cases (default 0.1, the paper's)")
    parser.add_argument("--tiled-max-length", type=int, default=4096,
                        help="longest n the tiled kernel is timed at (default 4096)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES),
                        help="cases to time (default all; sdpa and sdpa_dropout always run)")
    parser.add_threads_and_out("folder for bench_attention_gpu.md",
                               "torch intra-op CPU threads for the host side (default 1)")
    args = parser.parse_args(argv)
    if min(args.lengths + [args.batch, args.heads, args.head_dim, args.rounds]) < 1:
        parser.error("lengths, --batch, --heads, --head-dim and --rounds must be positive")
    return args


def make_step(case: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              grad: torch.Tensor, dropout_p: float) -> Callable[[], None]:
    from relu_former.relu_attention.kernels.flex import flex_relu_sums
    from relu_former.relu_attention.kernels.tiled import tiled_relu_sums
    from relu_former.relu_attention.kernels.triton_kernel import triton_relu_sums

    stats = case.endswith("_stats") or "_stats_" in case
    p = dropout_p if "dropout" in case else 0.0

    def step() -> None:
        for x in (q, k, v):
            x.grad = None
        if case.startswith("sdpa"):
            loss = (F.scaled_dot_product_attention(q, k, v, dropout_p=p) * grad).sum()
        else:
            if case == "relu_tiled":
                sums = tiled_relu_sums(q, k, v, need_sums=False)
            elif case.startswith("relu_triton"):
                sums = triton_relu_sums(q, k, v, need_sums=stats, dropout_p=p)
            else:
                sums = flex_relu_sums(q, k, v, need_sums=stats)
            loss = (sums.u * grad).sum()
            if sums.row_sum is not None:
                loss = loss + sums.row_sum.sum() + sums.xlogx.sum()
        loss.backward()
        torch.cuda.synchronize()

    return step


def peak_bytes(step: Callable[[], None]) -> float:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    return float(torch.cuda.max_memory_allocated() - before)


def cases_at(args: argparse.Namespace, n: int) -> list[str]:
    chosen = set(args.cases) | {"sdpa", "sdpa_dropout"}
    return [c for c in CASES if c in chosen and not (c == "relu_tiled"
                                                      and n > args.tiled_max_length)]


def measure(args: argparse.Namespace) -> dict[int, dict[str, tuple[float, float]]]:
    dtype = getattr(torch, args.dtype)
    results = {}
    for n in args.lengths:
        torch.manual_seed(0)
        shape = (args.batch, args.heads, n, args.head_dim)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(shape, device="cuda", dtype=dtype)
        steps = {case: make_step(case, q, k, v, grad, args.dropout)
                 for case in cases_at(args, n)}
        seconds = interleaved_median_seconds(steps, rounds=args.rounds, warmup=2)
        results[n] = {case: (seconds[case], peak_bytes(step)) for case, step in steps.items()}
        print(f"n={n}: " + ", ".join(f"{c} {1e3 * t:.2f} ms / {m / MIB:.0f} MiB"
                                     for c, (t, m) in results[n].items()),
              file=sys.stderr, flush=True)
    return results


def ratio_rows(results: dict[int, dict[str, tuple[float, float]]]) -> list[list[object]]:
    """[case / baseline, n, time ratio, memory ratio, target, met] for every timed case."""
    rows = []
    for n, cases in results.items():
        for case, (seconds, memory) in cases.items():
            if case.startswith("sdpa"):
                continue
            base_time, base_memory = cases[BASELINE[case]]
            ratio = seconds / base_time
            target = TARGET.get(case, "-")
            met = "-"
            if target != "-":
                met = "yes" if (ratio < 1 if target == "< 1" else ratio <= 1) else "NO"
            rows.append([f"{case} / {BASELINE[case]}", n, ratio, memory / base_memory,
                         target, met])
    return rows


def report(args: argparse.Namespace, results, device_name: str) -> str:
    timed = [c for c in CASES if any(c in cases for cases in results.values())]
    times = [[n] + [1e3 * cases[c][0] if c in cases else "-" for c in timed]
             for n, cases in results.items()]
    memory = [[n] + [cases[c][1] / MIB if c in cases else "-" for c in timed]
              for n, cases in results.items()]
    return "\n".join([
        f"# bench_attention_gpu: attention core, forward+backward, on {device_name}\n",
        f"torch {torch.__version__}, {args.dtype}, batch {args.batch}, {args.heads} heads, "
        f"head size {args.head_dim}, dropout {args.dropout}, median of {args.rounds} "
        "interleaved rounds\n",
        markdown_table(["ratio", "n", "time", "peak memory", "time target", "met"],
                       ratio_rows(results)),
        "## Time (ms)\n",
        markdown_table(["n"] + timed, times),
        "## Peak memory (MiB)\n",
        markdown_table(["n"] + timed, memory),
    ])


def no_cuda_text(last: Path = LAST_GPU_REPORT) -> str:
    """What the page says without a CUDA device: nothing measured here, and the last GPU
    report committed (gpu_check's, made on a lent machine), one heading level down so it
    nests under this script's title."""
    text = ("# bench_attention_gpu\n\nNo CUDA device here: nothing measured on this machine "
            "(run `python -m scripts.benchmarks.gpu_check` on a GPU; the CPU benchmark is "
            "bench_attention.py).")
    if not last.exists():
        return text + " No GPU measurement is committed yet.\n"
    nested = re.sub(r"^(#+) ", r"#\1 ", last.read_text(), flags=re.MULTILINE)
    name = last.relative_to(REPO_ROOT) if last.is_relative_to(REPO_ROOT) else last
    return (f"{text} The last GPU measurement, committed as {name}:"
            f"\n\n{nested}")


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if torch.cuda.is_available():
        text = report(args, measure(args), torch.cuda.get_device_name())
    else:
        text = no_cuda_text()
    finish_report(args, "bench_attention_gpu", text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
