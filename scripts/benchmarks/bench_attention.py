"""Forward+backward time and peak memory of one attention layer, for every activation.

One self-attention layer (batch 1, no mask, training mode unless said, dropout 0) is run forward and
backward at each sequence length n. Cases, all measured in the same run:

    fairseq_sdpa   fairseq's stock MultiheadAttention (its fast path calls PyTorch's fused
                   scaled_dot_product_attention: flash attention on the CPU)
    softmax        our ActivationMultiheadAttention, softmax
    relu           ours, ReLU attention with the fused kernel (the default); in training mode
                   it also computes the per-row statistics of the regularisers (row sums,
                   entropies), as in training
    relu_nostats   the same in evaluation mode (no statistics; dropout is 0 anyway), which
                   isolates the cost of the activation from the regularisers' bookkeeping
    relu_dense     the dense reference path (--attention-backend reference)
    relu_chunked   the key-chunked reference path (--attention-backend reference with
                   --attention-key-chunk-size, --chunk-size here)
    relu_matmuls   what limits the fused kernel: the same layer (projections included) with the
                   attention core reduced to the fused kernel's matrix products on the same
                   tiles (2 forward, 5 backward) and nothing else -- no ReLU, mask or
                   statistics. relu / relu_matmuls is the kernel's own overhead;
                   relu_matmuls / fairseq_sdpa is how fast these products run through torch
                   against the fused softmax kernel's internal ones.
    sparsemax, entmax15, rela   ours, the paper's baselines

Time is the median of interleaved rounds after a warm-up round (benchmarking.py);
peak memory is the most tensor memory alive at once during one forward+backward, counted
by a dispatch mode (what a GPU allocator's max_memory_allocated would say; see
benchmarking.py for what it does not see). The ratio table states the targets
of docs/relu_former.md ("Fused ReLU attention"): fused ReLU / fused softmax SDPA time <= 1 at
every n, peak memory <= 1.2 at n = 4096.

    python -m scripts.benchmarks.bench_attention --quick --out bench/out      # about a minute
    python -m scripts.benchmarks.bench_attention --out bench/out              # n = 128 ... 4096
    python -m scripts.benchmarks.bench_attention --lengths 1024 2048 4096 \
        --cases fairseq_sdpa relu relu_nostats relu_matmuls                 # the targets only
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Callable

import torch

from scripts.benchmarks.benchmarking import (
    MIB,
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
    log,
    peak_memory_bytes,
    torch_setup,
)
from scripts.common.plotting import line_plot, markdown_table

CASES = ("fairseq_sdpa", "softmax", "relu", "relu_nostats", "relu_dense", "relu_chunked",
         "relu_matmuls", "sparsemax", "entmax15", "rela")
FULL_LENGTHS = (128, 256, 512, 1024, 2048, 4096)
QUICK_LENGTHS = (128, 256, 512)


def parse_args(argv=None) -> argparse.Namespace:
    parser = BenchmarkParser(__doc__, quick_help=f"small lengths {QUICK_LENGTHS} and few rounds "
                                                 "(about a minute)")
    parser.add_quick_argument("--lengths", list(FULL_LENGTHS), list(QUICK_LENGTHS),
                              "sequence lengths to measure", type=int, nargs="+")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES,
                        help="which attention variants to measure (default: all)")
    parser.add_argument("--embed-dim", type=int, default=512,
                        help="model width (default 512, as transformer_iwslt_de_en)")
    parser.add_argument("--heads", type=int, default=4,
                        help="attention heads (default 4, as transformer_iwslt_de_en)")
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (default 1)")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="key chunk of relu_chunked (default 512; --quick: largest n / 4)")
    parser.add_quick_argument("--rounds", 5, 3,
                              "timed rounds at n = 1024; shorter n get proportionally more "
                              "(up to 8x), longer n fewer (at least 3)", type=int)
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_threads_and_out("folder for bench_attention.md and the PNG plots",
                               "torch intra-op threads, fixed for every case (default 1)")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.lengths):
        parser.error(f"--lengths must be positive, got {args.lengths}")
    if args.embed_dim % args.heads:
        parser.error(f"--embed-dim {args.embed_dim} is not divisible by --heads {args.heads}")
    if args.chunk_size is None:
        args.chunk_size = max(1, max(args.lengths) // 4) if args.quick else 512
    if args.chunk_size < 1:
        parser.error(f"--chunk-size must be positive, got {args.chunk_size}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def build_layer(case: str, embed_dim: int, heads: int, chunk_size: int) -> torch.nn.Module:
    """The attention layer of one case, with dropout 0 (see the module docstring)."""
    if case == "fairseq_sdpa":
        from fairseq.modules import MultiheadAttention

        layer = MultiheadAttention(embed_dim, heads, dropout=0.0, self_attention=True)
    else:
        from relu_former.relu_attention.attention import ActivationMultiheadAttention

        activation = "relu" if case.startswith("relu") else case
        layer = ActivationMultiheadAttention(
            embed_dim, heads, dropout=0.0, self_attention=True, activation=activation,
            attention_key_chunk_size=chunk_size if case == "relu_chunked" else 0,
            attention_backend=("reference" if case in ("relu_dense", "relu_chunked")
                               else "auto"),
        )
        # statistics only on request: the training cases ask, as the regularised criterion does
        layer.need_statistics = case != "relu_nostats"
    return layer.train(case != "relu_nostats")


class TileMatmuls(torch.autograd.Function):
    """The fused kernel's matrix products alone, on its tiles: U = s v with s = q k^T forward;
    s recomputed, dv = s^T g, gs = g v^T, dq = gs k, dk = gs^T q backward. No ReLU, masks or
    statistics: the floor of the fused kernel's time."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        u = torch.zeros_like(q)
        for rows, keys in TileMatmuls.tiles(q, k):
            u[rows].baddbmm_(torch.bmm(q[rows], k[keys].transpose(1, 2)), v[keys])
        return u

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for rows, keys in TileMatmuls.tiles(q, k):
            s = torch.bmm(q[rows], k[keys].transpose(1, 2))
            dv[keys].baddbmm_(s.transpose(1, 2), grad[rows])
            grad_s = torch.bmm(grad[rows], v[keys].transpose(1, 2))
            dq[rows].baddbmm_(grad_s, k[keys])
            dk[keys].baddbmm_(grad_s.transpose(1, 2), q[rows])
        return dq, dk, dv

    @staticmethod
    def tiles(q: torch.Tensor, k: torch.Tensor):
        from relu_former.relu_attention.kernels.tiled import tile_shape

        bq, bk = tile_shape(q.size(0), q.size(1), k.size(1))
        for q0 in range(0, q.size(1), bq):
            for k0 in range(0, k.size(1), bk):
                yield (slice(None), slice(q0, q0 + bq)), (slice(None), slice(k0, k0 + bk))


def matmuls_step(layer: torch.nn.Module, x: torch.Tensor,
                 grad: torch.Tensor) -> Callable[[], None]:
    """relu_matmuls: the layer's projections around ``TileMatmuls`` (see the docstring)."""
    n, batch, width = x.shape
    heads = layer.num_heads

    def split(t: torch.Tensor) -> torch.Tensor:  # (T, B, E) -> (B*H, T, D)
        return t.reshape(n, batch * heads, -1).transpose(0, 1)

    def step() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        q = split(layer.q_proj(x) * layer.scaling)
        u = TileMatmuls.apply(q, split(layer.k_proj(x)), split(layer.v_proj(x)))
        out = layer.out_proj(u.transpose(0, 1).reshape(n, batch, width))
        out.backward(grad)

    return step


def make_step(layer: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> Callable[[], None]:
    """One forward+backward of ``layer`` as encoder self-attention on ``x`` (T x B x C)."""

    def step() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        out, _ = layer(query=x, key=x, value=x, key_padding_mask=None, need_weights=False)
        out.backward(grad)

    return step


def measure(args: argparse.Namespace) -> dict[int, dict[str, tuple[float, float]]]:
    """``{n: {case: (seconds, peak bytes)}}`` for every length and case."""
    results: dict[int, dict[str, tuple[float, float]]] = {}
    for n in args.lengths:
        torch.manual_seed(args.seed)
        x = torch.randn(n, args.batch, args.embed_dim, requires_grad=True)
        grad = torch.randn(n, args.batch, args.embed_dim)
        steps = {
            case: (matmuls_step if case == "relu_matmuls" else make_step)(
                build_layer(case, args.embed_dim, args.heads, args.chunk_size), x, grad)
            for case in args.cases
        }
        # short lengths are cheap and noisy: more rounds; beyond 1024, no fewer than 3
        if n <= 1024:
            rounds = args.rounds * min(8, 1024 // n)
        else:
            rounds = max(min(3, args.rounds), args.rounds * 1024 // n)
        log(f"n={n}: timing {len(steps)} cases, {rounds} interleaved rounds")
        seconds = interleaved_median_seconds(
            steps, rounds=rounds, warmup=1, progress=lambda s, n=n: log(f"  n={n} {s}")
        )
        results[n] = {}
        for case, step in steps.items():
            results[n][case] = (seconds[case], float(peak_memory_bytes(step)))
        log("  " + ", ".join(f"{c} {1e3 * t:.1f} ms / {m / MIB:.0f} MiB"
                             for c, (t, m) in results[n].items()))
        del steps
    return results


def ratio_rows(results: dict[int, dict[str, tuple[float, float]]],
               target_n: int = 4096) -> list[list]:
    """Rows ``[ratio, n, value, target, met]``; a ratio whose cases were not run is skipped."""
    # (label, numerator, denominator, 0 = time / 1 = memory, target test, target text, only n)
    specs = [
        ("relu / fairseq_sdpa, time", "relu", "fairseq_sdpa", 0, lambda r: r <= 1.0, "<= 1",
         None),
        ("relu / fairseq_sdpa, peak memory", "relu", "fairseq_sdpa", 1, lambda r: r <= 1.2,
         f"<= 1.2 at n={target_n}", target_n),
        ("relu_nostats / fairseq_sdpa, time", "relu_nostats", "fairseq_sdpa", 0, None, "-",
         None),
        ("relu_matmuls / fairseq_sdpa, time", "relu_matmuls", "fairseq_sdpa", 0, None, "-",
         None),
        ("relu / relu_matmuls, time", "relu", "relu_matmuls", 0, None, "-", None),
        ("relu / relu_dense, time", "relu", "relu_dense", 0, None, "-", None),
        ("relu / relu_dense, peak memory", "relu", "relu_dense", 1, None, "-", None),
        ("relu / softmax (ours), time", "relu", "softmax", 0, lambda r: r <= 1.0, "<= 1", None),
        ("relu_nostats / softmax (ours), time", "relu_nostats", "softmax", 0,
         lambda r: r <= 1.0, "<= 1", None),
        ("sparsemax / relu, time", "sparsemax", "relu", 0, lambda r: r >= 3.0, ">= 3", None),
        ("entmax15 / relu, time", "entmax15", "relu", 0, lambda r: r >= 3.0, ">= 3", None),
        ("rela / relu, time", "rela", "relu", 0, None, "-", None),
        ("relu_chunked / relu_dense, peak memory", "relu_chunked", "relu_dense", 1,
         lambda r: r <= 0.25, f"<= 0.25 at n={target_n}", target_n),
        ("relu_chunked / relu_dense, time", "relu_chunked", "relu_dense", 0,
         lambda r: r <= 1.2, f"<= 1.2 at n={target_n}", target_n),
        ("softmax (ours) / fairseq_sdpa, time", "softmax", "fairseq_sdpa", 0, None, "-", None),
    ]
    rows = []
    for label, top, bottom, which, test, target, only_n in specs:
        for n, cases in results.items():
            if top not in cases or bottom not in cases:
                continue
            denominator = cases[bottom][which]
            value = cases[top][which] / denominator if denominator > 0 else math.nan
            applies = test is not None and (only_n is None or n == only_n)
            met = ("yes" if test(value) else "NO") if applies else "-"
            rows.append([label, n, value, target if applies else "-", met])
    return rows


def report(args: argparse.Namespace, results: dict[int, dict[str, tuple[float, float]]]) -> str:
    cases = [c for c in CASES if c in args.cases]
    lengths = list(results)
    settings = (
        f"{torch_setup()}, width "
        f"{args.embed_dim}, {args.heads} heads, batch {args.batch}, key chunk "
        f"{args.chunk_size}; median of interleaved rounds after 1 warm-up ({args.rounds} at "
        "n = 1024, up to 8x more below, at least 3 above)"
    )
    time_rows = [[n] + [1e3 * results[n][c][0] for c in cases] for n in lengths]
    memory_rows = [[n] + [results[n][c][1] / MIB for c in cases] for n in lengths]
    text = [
        "# bench_attention: one attention layer, forward+backward\n",
        settings + "\n",
        "## Ratios (measured side by side in this run)\n",
        markdown_table(["ratio", "n", "value", "target", "met"], ratio_rows(results)),
        "## Time (ms, median)\n",
        markdown_table(["n"] + cases, time_rows),
        "## Peak tensor memory (MiB, forward+backward)\n",
        markdown_table(["n"] + cases, memory_rows),
    ]
    return "\n".join(text)


def plots(out: Path, args: argparse.Namespace, results) -> list[Path]:
    cases = [c for c in CASES if c in args.cases]
    lengths = list(results)
    title = f"one attention layer, width {args.embed_dim}, {args.heads} heads"
    return [
        line_plot(out / "bench_attention_time.png",
                  {c: (lengths, [1e3 * results[n][c][0] for n in lengths]) for c in cases},
                  f"forward+backward time, {title}", "sequence length n", "ms",
                  logx=True, logy=True),
        line_plot(out / "bench_attention_memory.png",
                  {c: (lengths, [results[n][c][1] / MIB for n in lengths]) for c in cases},
                  f"peak tensor memory, {title}", "sequence length n", "MiB",
                  logx=True, logy=True),
    ]


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    log(f"bench_attention: {torch_setup()}, lengths {args.lengths}, cases {args.cases}")
    results = measure(args)
    text = report(args, results)
    page = finish_report(args, "bench_attention", text)
    if page is not None:
        log("wrote " + ", ".join(map(str, [page, *plots(args.out, args, results)])))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
