"""Forward+backward time and peak memory: sparse-softmax criterion vs label-smoothed CE.

For every vocabulary size V and k, the real criteria run on the same logits (N tokens x V,
float32, a leaf tensor standing in for the output projection) and targets, with label
smoothing 0.1 in both:

    ours       --criterion sparse_softmax_cross_entropy --sparse-softmax-k k, including everything
               it logs (the full-softmax nll, computed without gradient, and the top-k misses)
    baseline   fairseq's --criterion label_smoothed_cross_entropy (log-softmax over V)

Time is the median of interleaved rounds (ours for every k and the baseline in the same
rounds, benchmarking.py), so the ratios are measured side by side under the same
load. Peak memory is the most tensor memory alive at once during one forward+backward,
beyond the logits themselves (the logits' gradient included), counted by a dispatch mode:
what a GPU allocator's max_memory_allocated would report. As a cross-check independent of
that counter, the target case (V = 32000, k = 20) is also run once per criterion in a fresh
subprocess (Linux), reporting how far the process's resident memory peaked during the step
above its resident size just before it (VmHWM, reset through /proc/self/clear_refs).
Our goals at V = 32000, k = 20 (a typical BPE vocabulary and the paper's k): time <= 0.5x and
peak memory <= 0.6x of the baseline.

    python -m scripts.benchmarks.bench_sparse_softmax --quick --out bench/out    # under a minute
    python -m scripts.benchmarks.bench_sparse_softmax --out bench/out  # V 1k..50k, k 5/20/100
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Tuple

import torch
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

from relu_former.criterions.sparse_softmax_cross_entropy import (
    SparseSoftmaxCrossEntropyConfig,
    SparseSoftmaxCrossEntropyCriterion,
)
from scripts.benchmarks.benchmarking import (
    MIB,
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
    log,
    peak_memory_bytes,
    torch_setup,
)
from scripts.benchmarks.criterion_harness import DictionaryTask, LogitsModel
from scripts.common.plotting import line_plot, markdown_table

FULL_VOCABS = (1000, 10000, 32000, 50000)
QUICK_VOCABS = (1000, 32000)
KS = (5, 20, 100)
TARGET = (32000, 20)
TIME_TARGET, MEMORY_TARGET = 0.5, 0.6


def parse_args(argv=None) -> argparse.Namespace:
    parser = BenchmarkParser(__doc__, quick_help=f"V in {QUICK_VOCABS}, 256 tokens, 3 rounds "
                                                 "(under a minute)")
    parser.add_quick_argument("--vocab-sizes", list(FULL_VOCABS), list(QUICK_VOCABS),
                              "vocabulary sizes V", type=int, nargs="+")
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS),
                        help=f"values of --sparse-softmax-k (default {KS})")
    parser.add_quick_argument("--tokens", 1024, 256,
                              "target tokens per batch N, in sentences of 32", type=int)
    parser.add_argument("--label-smoothing", type=float, default=0.1,
                        help="epsilon of both criteria (default 0.1)")
    parser.add_quick_argument("--rounds", 5, 3, "timed interleaved rounds", type=int)
    parser.add_argument("--no-rss", action="store_true",
                        help="skip the fresh-subprocess RSS cross-check of the target case")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_threads_and_out("folder for bench_sparse_softmax.md and the PNG plots",
                               "torch intra-op threads, fixed for every case (default 1)")
    parser.add_argument("--rss-child", choices=("ours", "baseline"), default=None,
                        help=argparse.SUPPRESS)  # internal: one RSS measurement
    args = parser.parse_args(argv)
    for name in ("vocab_sizes", "ks"):
        if any(v < 1 for v in getattr(args, name)):
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.tokens < 32 or args.rounds < 1:
        parser.error("--tokens must be >= 32 and --rounds >= 1")
    bad = [(v, k) for v in args.vocab_sizes for k in args.ks if k > v]
    if bad:
        parser.error(f"--ks larger than the vocabulary: {bad}")
    return args


def build_steps(vocab: int, args: argparse.Namespace) -> Dict[str, Callable[[], None]]:
    """One forward+backward per case; every case gets its own copy of the same logits."""
    torch.manual_seed(args.seed)
    task = DictionaryTask(vocab)
    logits = torch.randn(args.tokens // 32, 32, vocab) * 3
    target = torch.randint(task.target_dictionary.nspecial, vocab, (args.tokens // 32, 32))
    sample = {"net_input": {}, "target": target, "ntokens": target.numel()}
    criteria = {"baseline": LabelSmoothedCrossEntropyCriterion(
        task, sentence_avg=False, label_smoothing=args.label_smoothing)}
    for k in args.ks:
        cfg = SparseSoftmaxCrossEntropyConfig(sentence_avg=False, sparse_softmax_k=k,
                                              label_smoothing=args.label_smoothing)
        criteria[f"k={k}"] = SparseSoftmaxCrossEntropyCriterion(task, cfg)

    def make_step(criterion) -> Callable[[], None]:
        model = LogitsModel(logits.clone())

        def step() -> None:
            model.logits.grad = None
            loss, _, _ = criterion(model, sample)
            loss.backward()

        return step

    return {name: make_step(criterion) for name, criterion in criteria.items()}


def measure(args: argparse.Namespace) -> Dict[int, Dict[str, Tuple[float, float]]]:
    """``{V: {case: (seconds, peak bytes)}}``."""
    results = {}
    for vocab in args.vocab_sizes:
        steps = {name: step for name, step in build_steps(vocab, args).items()
                 if name == "baseline" or int(name[2:]) <= vocab}
        log(f"V={vocab}: timing {len(steps)} cases, {args.rounds} interleaved rounds")
        seconds = interleaved_median_seconds(
            steps, rounds=args.rounds, warmup=1, progress=lambda s, v=vocab: log(f"  V={v} {s}")
        )
        results[vocab] = {name: (seconds[name], float(peak_memory_bytes(step)))
                          for name, step in steps.items()}
        log("  " + ", ".join(f"{c} {1e3 * t:.1f} ms / {m / MIB:.1f} MiB"
                             for c, (t, m) in results[vocab].items()))
        del steps
    return results


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # the kernel reports kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss_child(args: argparse.Namespace) -> int:
    """Run one step of one case in this fresh process; print its peak-RSS growth as JSON.

    A first step on 32 tokens loads the code every operator touches (shared-library pages
    count as resident). Then the kernel's high-water mark of resident memory (VmHWM) is reset
    to the current resident size (writing 5 to /proc/self/clear_refs) and read back after the
    measured step: the growth is the step's peak. (ru_maxrss cannot be used: a child process
    starts with its parent's high-water mark.)
    """
    vocab, k = args.vocab_sizes[0], args.ks[0]
    name = "baseline" if args.rss_child == "baseline" else f"k={k}"
    tokens = args.tokens
    args.tokens = 32
    build_steps(vocab, args)[name]()
    args.tokens = tokens
    step = build_steps(vocab, args)[name]
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    resident = _status_bytes("VmRSS")
    step()
    print(json.dumps({"peak_growth_bytes": max(0, _status_bytes("VmHWM") - resident)}))
    return 0


def rss_cross_check(args: argparse.Namespace) -> Dict[str, float]:
    """Peak-RSS growth of one step of each criterion at the target case, fresh processes."""
    vocab, k = TARGET
    found = {}
    for case in ("ours", "baseline"):
        log(f"RSS cross-check: {case}, V={vocab}, k={k}, fresh process")
        command = [sys.executable, "-m", __spec__.name, "--rss-child", case,
                   "--vocab-sizes", str(vocab),
                   "--ks", str(k), "--tokens", str(args.tokens), "--threads", str(args.threads),
                   "--label-smoothing", str(args.label_smoothing), "--seed", str(args.seed)]
        proc = subprocess.run(command, capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[2],
                              env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
        measured = json.loads(proc.stdout.strip().splitlines()[-1])
        found[case] = float(measured["peak_growth_bytes"])
    return found


def ratio_rows(results) -> list:
    rows = []
    for vocab, cases in results.items():
        base_time, base_memory = cases["baseline"]
        for name, (seconds, memory) in cases.items():
            if name == "baseline":
                continue
            k = int(name[2:])
            time_ratio, memory_ratio = seconds / base_time, memory / base_memory
            met = "-"
            if (vocab, k) == TARGET:
                met = "yes" if time_ratio <= TIME_TARGET and memory_ratio <= MEMORY_TARGET \
                    else "NO"
            rows.append([vocab, k, 1e3 * seconds, 1e3 * base_time, time_ratio,
                         memory / MIB, base_memory / MIB, memory_ratio, met])
    return rows


def report(args: argparse.Namespace, results, rss) -> str:
    settings = (
        f"{torch_setup()}, N = {args.tokens} "
        f"target tokens, float32 logits, label smoothing {args.label_smoothing} in both, "
        f"median of {args.rounds} interleaved rounds after 1 warm-up"
    )
    headers = ["V", "k", "ours ms", "LS-CE ms", "time ratio", "ours MiB", "LS-CE MiB",
               "memory ratio", f"target met (V=32000, k=20: time <= {TIME_TARGET}, "
               f"memory <= {MEMORY_TARGET})"]
    text = [
        "# bench_sparse_softmax: criterion forward+backward vs label_smoothed_cross_entropy\n",
        settings + "\n",
        "Peak memory: tensor memory alive at once during one forward+backward, beyond the "
        "logits (their gradient included).\n",
        markdown_table(headers, ratio_rows(results)),
    ]
    if rss:
        ratio = rss["ours"] / rss["baseline"] if rss["baseline"] > 0 else float("nan")
        text += [
            "## Cross-check: process peak RSS growth, fresh subprocess per criterion\n",
            markdown_table(["V", "k", "ours MiB", "LS-CE MiB", "ratio"],
                           [[TARGET[0], TARGET[1], rss["ours"] / MIB, rss["baseline"] / MIB,
                             ratio]]),
        ]
    return "\n".join(text)


def plots(out: Path, results) -> list:
    vocabs = list(results)
    ks = sorted({int(n[2:]) for cases in results.values() for n in cases if n != "baseline"})

    def series(which: int):
        return {f"k={k}": ([v for v in vocabs if f"k={k}" in results[v]],
                           [results[v][f"k={k}"][which] / results[v]["baseline"][which]
                            for v in vocabs if f"k={k}" in results[v]]) for k in ks}

    return [
        line_plot(out / "bench_sparse_softmax_time.png", series(0),
                  "sparse-softmax criterion / label-smoothed CE: fwd+bwd time", "vocabulary V",
                  "time ratio", logx=True, hline=TIME_TARGET),
        line_plot(out / "bench_sparse_softmax_memory.png", series(1),
                  "sparse-softmax criterion / label-smoothed CE: peak memory", "vocabulary V",
                  "memory ratio", logx=True, hline=MEMORY_TARGET),
    ]


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.rss_child:
        return rss_child(args)
    log(f"bench_sparse_softmax: {torch_setup()}, V {args.vocab_sizes}, k {args.ks}, "
        f"N {args.tokens}")
    results = measure(args)
    run_rss = not args.no_rss and TARGET[0] in args.vocab_sizes and TARGET[1] in args.ks
    rss = rss_cross_check(args) if run_rss else None
    text = report(args, results, rss)
    page = finish_report(args, "bench_sparse_softmax", text)
    if page is not None:
        log("wrote " + ", ".join(map(str, [page, *plots(args.out, results)])))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
