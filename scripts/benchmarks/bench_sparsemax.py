"""Sparsemax and 1.5-entmax attention: a partial sort (top-k) against a full sort of each row.

Both mappings set w_ij = max(z_ij - tau_i, 0) (entmax: squared, halved) with a threshold tau_i
found from the largest scores of row i; only the support (the keys with w_ij > 0) matters, and
attention supports are mostly far shorter than the row. ``normalized_attention(...,
partial_sort=K)`` sorts only the K largest scores (``torch.topk``) and the entmax package
redoes with twice as many the rows whose support fills them: the result is the same bit for
bit. This script measures what that buys, side by side in one run on the same tensors, and
is what chose ``PARTIAL_SORT`` in relu_former/relu_attention/activations.py (sparsemax only):

    full_sort      partial_sort=None: every row sorted (the entmax package's default)
    partial_sort   partial_sort=K (--partial-sort, default 64)
    softmax        the same attention with softmax weights (materialised, as the entmax
                   mappings are), for scale

Each case is one attention call, forward and backward (q, k, v: batch x heads x n x 16, no
mask). The support depends on how sharp the scores are, so the queries are scaled to give
scores of several standard deviations (--score-stds); each row of the report gives the mean
and largest support, the time of each case and the ratio full_sort / partial_sort, and checks
that the two outputs and gradients are equal. Time is the median of interleaved rounds after
a warm-up round (benchmarking.py).

    python -m scripts.benchmarks.bench_sparsemax --quick --out bench/out   # seconds
    python -m scripts.benchmarks.bench_sparsemax --out bench/out           # 2-3 minutes
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from relu_former.relu_attention.activations import normalized_attention
from scripts.benchmarks.benchmarking import (
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
    log,
    torch_setup,
)
from scripts.common.plotting import markdown_table

HEAD_DIM = 16


def parse_args(argv=None) -> argparse.Namespace:
    parser = BenchmarkParser(__doc__, quick_help="n = 128 and 512, batch 1, few rounds (seconds)")
    parser.add_quick_argument("--lengths", [128, 512, 1024], [128, 512],
                              "sequence lengths n (keys = queries)", type=int, nargs="+")
    parser.add_argument("--activations", nargs="+", default=["sparsemax", "entmax15"],
                        choices=["sparsemax", "entmax15"], help="mappings to measure")
    parser.add_argument("--score-stds", type=float, nargs="+", default=[0.1, 0.5, 2.0],
                        help="standard deviations of the scores q.k/sqrt(d) (default 0.1 0.5 2)")
    parser.add_argument("--partial-sort", type=int, default=64,
                        help="K of the partial_sort case (default 64)")
    parser.add_quick_argument("--batch", 4, 1, "sequences per call", type=int)
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_quick_argument("--rounds", 5, 3, "timed rounds per case", type=int)
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_threads_and_out("folder for bench_sparsemax.md")
    args = parser.parse_args(argv)
    for name in ("lengths", "score_stds"):
        if any(v <= 0 for v in getattr(args, name)):
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("partial_sort", "batch", "heads", "rounds", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, "
                         f"got {getattr(args, name)}")
    return args


def attention_step(activation: str, partial_sort: int | None, q, k, v, grad):
    def step():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        result = normalized_attention(*leaves, activation, need_weights=True,
                                      partial_sort=partial_sort)
        result.out.backward(grad)
        return result.out, result.weights, [t.grad for t in leaves]

    return step


def measure_row(args, activation: str, n: int, std: float) -> list:
    gen = torch.Generator().manual_seed(args.seed)
    shape = (args.batch, args.heads, n, HEAD_DIM)
    # q.k / sqrt(d) with unit normal q, k has standard deviation 1: scale q to get ``std``
    q, k, v, grad = (torch.randn(shape, generator=gen) for _ in range(4))
    q = q * std
    steps = {name: attention_step(activation, sort, q, k, v, grad)
             for name, sort in (("full_sort", None), ("partial_sort", args.partial_sort))}
    steps["softmax"] = attention_step("softmax", None, q, k, v, grad)
    (out_a, weights, grads_a), (out_b, _, grads_b) = steps["full_sort"](), steps["partial_sort"]()
    equal = torch.equal(out_a, out_b) and all(map(torch.equal, grads_a, grads_b))
    support = (weights > 0).sum(-1).float()
    seconds = interleaved_median_seconds(steps, rounds=args.rounds)
    log(f"{activation} n={n} std={std}: " + ", ".join(
        f"{name} {1e3 * s:.1f} ms" for name, s in seconds.items()))
    return [activation, n, std, support.mean().item(), int(support.max().item()),
            1e3 * seconds["full_sort"], 1e3 * seconds["partial_sort"], 1e3 * seconds["softmax"],
            seconds["full_sort"] / seconds["partial_sort"], "yes" if equal else "NO"]


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    log(f"bench_sparsemax: {torch_setup()}, partial sort of {args.partial_sort}")
    rows = [measure_row(args, activation, n, std) for activation in args.activations
            for n in args.lengths for std in args.score_stds]
    text = "\n".join([
        "# bench_sparsemax: partial against full sort in sparsemax / 1.5-entmax attention\n",
        f"{torch_setup()}; batch {args.batch} x {args.heads} heads x n x {HEAD_DIM}, forward + "
        f"backward; partial sort of the {args.partial_sort} largest scores; median of "
        f"{args.rounds} interleaved rounds\n",
        markdown_table(["activation", "n", "score std", "mean support", "max support",
                        "full_sort ms", "partial_sort ms", "softmax ms",
                        "full / partial", "identical"], rows),
    ])
    finish_report(args, "bench_sparsemax", text)
    return 0 if all(row[-1] == "yes" for row in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
