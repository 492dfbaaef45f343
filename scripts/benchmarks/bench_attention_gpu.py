"""On a CUDA device: fused ReLU attention (FlexAttention path) against fused softmax SDPA.

The attention core only (q, k, v of shape (B, H, n, D) given), forward + backward, at each
length n, side by side in interleaved rounds:

    sdpa            torch's scaled_dot_product_attention (flash / memory-efficient kernels)
    relu_flex       relu_former's FlexAttention path, U and S only (no statistics)
    relu_flex_stats the same with the regularisers' statistics (three more passes; see
                    relu_former/relu_attention/kernels/flex.py)
    relu_tiled      the tiled torch kernel on the device (the path taken with dropout)

Reports the time ratio to sdpa (target <= 1) and peak memory (torch.cuda.max_memory_allocated
during one step, beyond what was allocated before). Without a CUDA device it says so (in its
table too) and exits 0 without measuring (the CPU benchmark is bench_attention.py).

    python -m scripts.benchmarks.bench_attention_gpu --out bench/out
    python -m scripts.benchmarks.bench_attention_gpu --quick      # n = 1024, 2048
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

import torch
import torch.nn.functional as F

from scripts.common.benchmarking import (
    MIB,
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
)
from scripts.common.plotting import markdown_table

CASES = ("sdpa", "relu_flex", "relu_flex_stats", "relu_tiled")
FULL_LENGTHS = (1024, 2048, 4096, 8192)
QUICK_LENGTHS = (1024, 2048)


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
    parser.add_threads_and_out("folder for bench_attention_gpu.md",
                               "torch intra-op CPU threads for the host side (default 1)")
    args = parser.parse_args(argv)
    if min(args.lengths + [args.batch, args.heads, args.head_dim, args.rounds]) < 1:
        parser.error("lengths, --batch, --heads, --head-dim and --rounds must be positive")
    return args


def make_step(case: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              grad: torch.Tensor) -> Callable[[], None]:
    from relu_former.relu_attention.kernels.flex import flex_relu_sums
    from relu_former.relu_attention.kernels.tiled import tiled_relu_sums

    def step() -> None:
        for x in (q, k, v):
            x.grad = None
        if case == "sdpa":
            loss = (F.scaled_dot_product_attention(q, k, v) * grad).sum()
        elif case == "relu_tiled":
            loss = (tiled_relu_sums(q, k, v, need_sums=False).u * grad).sum()
        else:
            sums = flex_relu_sums(q, k, v, need_sums=case == "relu_flex_stats")
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


def measure(args: argparse.Namespace) -> dict[int, dict[str, tuple[float, float]]]:
    dtype = getattr(torch, args.dtype)
    results = {}
    for n in args.lengths:
        torch.manual_seed(0)
        shape = (args.batch, args.heads, n, args.head_dim)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(shape, device="cuda", dtype=dtype)
        steps = {case: make_step(case, q, k, v, grad) for case in CASES}
        seconds = interleaved_median_seconds(steps, rounds=args.rounds, warmup=2)
        results[n] = {case: (seconds[case], peak_bytes(step)) for case, step in steps.items()}
        print(f"n={n}: " + ", ".join(f"{c} {1e3 * t:.2f} ms / {m / MIB:.0f} MiB"
                                     for c, (t, m) in results[n].items()),
              file=sys.stderr, flush=True)
    return results


def report(args: argparse.Namespace, results) -> str:
    rows = []
    for n, cases in results.items():
        base_time, base_memory = cases["sdpa"]
        for case in CASES[1:]:
            ratio = cases[case][0] / base_time
            target = "<= 1" if case == "relu_flex" else "-"
            met = ("yes" if ratio <= 1 else "NO") if case == "relu_flex" else "-"
            rows.append([f"{case} / sdpa", n, ratio, cases[case][1] / base_memory, target, met])
    times = [[n] + [1e3 * cases[c][0] for c in CASES] for n, cases in results.items()]
    return "\n".join([
        "# bench_attention_gpu: attention core, forward+backward, on "
        f"{torch.cuda.get_device_name()}\n",
        f"torch {torch.__version__}, {args.dtype}, batch {args.batch}, {args.heads} heads, "
        f"head size {args.head_dim}, median of {args.rounds} interleaved rounds\n",
        markdown_table(["ratio", "n", "time", "peak memory", "time target", "met"], rows),
        "## Time (ms)\n",
        markdown_table(["n"] + list(CASES), times),
    ])


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if torch.cuda.is_available():
        text = report(args, measure(args))
    else:
        text = ("# bench_attention_gpu\n\nNo CUDA device here: nothing measured (run it where "
                "one is; the CPU benchmark is bench_attention.py).\n")
    finish_report(args, "bench_attention_gpu", text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
