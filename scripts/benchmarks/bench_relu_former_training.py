"""Training words/s of relu_former_iwslt_de_en against fairseq's stock transformer_iwslt_de_en.

Both models are built from the same command-line flags (reduced size by default: this runs on
a CPU) by fairseq's own option parser, task, criterion and ``Trainer``; each timed step is
``Trainer.train_step`` (forward, backward, optimizer step), as in ``fairseq-train``. The two
models see the same synthetic batch and are timed in interleaved rounds (median), once with
sentence-length pairs and once with document-length pairs; words/s counts target tokens, as
fairseq's ``wps``. relu_former trains with its regularised criterion (the regularisers are
part of its training cost); the transformer with label_smoothed_cross_entropy. relu_former
uses the fused ReLU attention kernel (the default); relu_former_reference the dense reference
path (``--attention-backend reference``), which shows what the kernel gains; relu_former_softmax
the plugin's attention code with softmax, which shows the cost of the plugin's layers apart
from the ReLU activation (what limits relu_former where the target is missed).

    python -m scripts.benchmarks.bench_relu_former_training --quick --out bench/out   # seconds
    python -m scripts.benchmarks.bench_relu_former_training --out bench/out
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

from scripts.benchmarks.benchmarking import (
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
    log,
    quiet_fairseq,
    torch_setup,
)
from scripts.benchmarks.fairseq_trainer import trainer_from_argv
from scripts.common.plotting import line_plot, markdown_table

REPO_ROOT = Path(__file__).resolve().parents[2]
USER_DIR = str(REPO_ROOT / "relu_former")

# Each entry: (label, --arch, flags). relu_former_softmax runs the plugin's own attention code
# with softmax: it separates the cost of the ReLU activation from the cost of not using the
# stock module's fused path.
REGULARIZED = ["--criterion", "regularized_label_smoothed_cross_entropy", "--label-smoothing",
               "0.1"]
MODELS = (
    ("transformer", "transformer_iwslt_de_en",
     ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]),
    # ReLU in every attention (self and cross), the paper's all-ReLU reading: the arch's default
    # keeps softmax in cross-attention, which would hide half of the kernel's cost.
    ("relu_former", "relu_former_iwslt_de_en", REGULARIZED + ["--attention-activation", "relu"]),
    ("relu_former_reference", "relu_former_iwslt_de_en",
     REGULARIZED + ["--attention-activation", "relu", "--attention-backend", "reference"]),
    ("relu_former_softmax", "relu_former_iwslt_de_en",
     REGULARIZED + ["--attention-activation", "softmax"]),
)
REDUCED_SIZE = (
    "--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 256 --decoder-embed-dim 256 "
    "--encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 "
    "--encoder-attention-heads 4 --decoder-attention-heads 4"
)
QUICK_SIZE = (
    "--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 64 --decoder-embed-dim 64 "
    "--encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128 "
    "--encoder-attention-heads 2 --decoder-attention-heads 2"
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = BenchmarkParser(__doc__, quick_help="tiny model, small batch, 3 rounds "
                                                 "(a few seconds)")
    parser.add_argument("--model-flags", default=None,
                        help="fairseq size flags given to both archs, one string (default: "
                             f"'{REDUCED_SIZE}'; --quick: '{QUICK_SIZE}'; '' = full size)")
    parser.add_argument("--extra-relu-former-flags", default="",
                        help="more fairseq flags for the relu_former models only, one string, "
                             "e.g. '--attention-backend reference --attention-key-chunk-size 256'")
    parser.add_quick_argument("--vocab", 8000, 500, "joined vocabulary size", type=int)
    parser.add_argument("--sentence-length", type=int, default=32,
                        help="source and target tokens of a sentence pair (default 32)")
    parser.add_argument("--document-length", type=int, default=1024,
                        help="source and target tokens of a document pair (default 1024)")
    parser.add_quick_argument("--batch-tokens", 2048, 1024,
                              "target tokens per batch at both lengths, at least one document",
                              type=int)
    parser.add_quick_argument("--rounds", 5, 3, "timed interleaved rounds after one warm-up",
                              type=int)
    parser.add_threads_and_out("folder for bench_relu_former_training.md and its PNG")
    args = parser.parse_args(argv)
    if args.model_flags is None:
        args.model_flags = QUICK_SIZE if args.quick else REDUCED_SIZE
    for name in ("vocab", "sentence_length", "document_length", "batch_tokens", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.sentence_length < 2 or args.document_length < 2:
        parser.error("--sentence-length and --document-length need at least 2 tokens")
    return args


def write_dictionaries(folder: Path, vocab: int) -> None:
    """dict.de.txt / dict.en.txt with ``vocab`` synthetic words: all the task setup reads."""
    words = "".join(f"w{i} {vocab - i}\n" for i in range(vocab))
    for lang in ("de", "en"):
        (folder / f"dict.{lang}.txt").write_text(words)


def build_trainer(data: Path, arch: str, flags: list[str], max_positions: int):
    """fairseq's Trainer for one model, built exactly as fairseq-train builds it."""
    return trainer_from_argv([
        str(data), "--user-dir", USER_DIR, "--task", "translation", "-s", "de", "-t", "en",
        "--arch", arch, "--cpu", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
        "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000",
        "--max-source-positions", str(max_positions),
        "--max-target-positions", str(max_positions), "--seed", "1", *flags,
    ])


def synthetic_batch(dictionary, length: int, batch_tokens: int, seed: int) -> dict:
    """A batch in LanguagePairDataset's format: pairs of ``length`` tokens, EOS-terminated."""
    pairs = max(1, batch_tokens // length)
    generator = torch.Generator().manual_seed(seed)
    low, high = dictionary.nspecial, len(dictionary)
    eos = dictionary.eos()

    def tokens() -> torch.Tensor:
        body = torch.randint(low, high, (pairs, length - 1), generator=generator)
        return torch.cat([body, torch.full((pairs, 1), eos)], dim=1)

    source, target = tokens(), tokens()
    previous = torch.cat([torch.full((pairs, 1), eos), target[:, :-1]], dim=1)
    return {
        "id": torch.arange(pairs), "nsentences": pairs, "ntokens": target.numel(),
        "net_input": {"src_tokens": source, "src_lengths": torch.full((pairs,), length),
                      "prev_output_tokens": previous},
        "target": target,
    }


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """``{setting: {model: target words per second}}`` for sentence and document lengths."""
    settings = {"sentence": args.sentence_length, "document": args.document_length}
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_relu_former_") as tmp:
        data = Path(tmp)
        write_dictionaries(data, args.vocab)
        max_positions = max(settings.values()) + 8
        trainers = {}
        for label, arch, criterion_flags in MODELS:
            flags = args.model_flags.split() + criterion_flags
            if arch.startswith("relu_former"):
                flags += args.extra_relu_former_flags.split()
            trainers[label] = build_trainer(data, arch, flags, max_positions)
            params = sum(p.numel() for p in trainers[label].model.parameters())
            log(f"built {label} ({arch}): {params / 1e6:.2f} M parameters")
        dictionary = trainers["transformer"].task.target_dictionary
        for setting, length in settings.items():
            sample = synthetic_batch(dictionary, length, args.batch_tokens, seed=length)
            steps = {label: (lambda t=trainer, s=sample: t.train_step([s]))
                     for label, trainer in trainers.items()}
            log(f"{setting} length {length}: {sample['nsentences']} pairs, "
                f"{sample['ntokens']} target tokens per step, {args.rounds} rounds")
            seconds = interleaved_median_seconds(
                steps, rounds=args.rounds, warmup=1,
                progress=lambda s, name=setting: log(f"  {name} {s}"),
            )
            results[setting] = {label: sample["ntokens"] / t for label, t in seconds.items()}
            results[setting]["length"] = length
    return results


def report(args: argparse.Namespace, results: dict[str, dict[str, float]]) -> str:
    settings = (
        f"{torch_setup()}, size flags "
        f"`{args.model_flags or '(full size)'}`, vocabulary {args.vocab}, "
        f"{args.batch_tokens} target tokens per batch, median of {args.rounds} interleaved "
        f"rounds after 1 warm-up; steps are fairseq Trainer.train_step"
    )
    targets = {"sentence": (0.9, ">= 0.9"), "document": (0.95, ">= 0.95")}
    ratio_rows, wps_rows = [], []
    for setting, values in results.items():
        ratio = values["relu_former"] / values["transformer"]
        bound, text = targets[setting]
        met = "-" if bound is None else ("yes" if ratio >= bound else "NO")
        ratio_rows.append([f"relu_former / transformer, words/s ({setting})",
                           int(values["length"]), ratio, text, met])
        for other in ("relu_former_reference", "relu_former_softmax"):
            ratio_rows.append([f"relu_former / {other}, words/s ({setting})",
                               int(values["length"]), values["relu_former"] / values[other],
                               "-", "-"])
        wps_rows.append([setting, int(values["length"])]
                        + [values[label] for label, _, _ in MODELS])
    return "\n".join([
        "# bench_relu_former_training: training throughput\n",
        settings + "\n",
        "## Ratios (measured side by side in this run)\n",
        markdown_table(["ratio", "tokens", "value", "target", "met"], ratio_rows),
        "## Target words/s\n",
        markdown_table(["setting", "tokens"] + [label for label, _, _ in MODELS], wps_rows),
        "transformer = transformer_iwslt_de_en (stock fairseq, fused attention); relu_former = "
        "relu_former_iwslt_de_en (fused ReLU attention); relu_former_reference = the same with "
        "--attention-backend reference (dense); relu_former_softmax = the same with "
        "--attention-activation softmax.\n",
    ])


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    quiet_fairseq()
    log(f"bench_relu_former_training: {torch_setup()}")
    results = measure(args)
    text = report(args, results)
    page = finish_report(args, "bench_relu_former_training", text)
    if page is not None:
        lengths = [int(v["length"]) for v in results.values()]
        plot = line_plot(
            args.out / "bench_relu_former_training.png",
            {label: (lengths, [v[label] for v in results.values()]) for label, _, _ in MODELS},
            "training throughput", "tokens per sentence / document", "target words/s",
            logx=True,
        )
        log(f"wrote {page}, {plot}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
