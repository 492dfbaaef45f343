"""Training loss per update, softmax vs sparse-softmax, on the same data and seed (Figure 1).

Trains the same model twice with ``fairseq-train``, identical in everything (data, seed,
batches, optimiser, label smoothing) but the criterion:

    softmax         --criterion label_smoothed_cross_entropy
    sparse-softmax  --criterion sparse_softmax_cross_entropy --sparse-softmax-k K

and plots, per update, (left) each run's training loss, the objective it minimises, as the
paper's Figure 1 does, and (right) the full-softmax nll of the same batches, a quantity both
criteria log and that is comparable between them. The Markdown report adds the losses at a
few updates and a roughness figure: the mean absolute change of the loss from one update to
the next (lower is smoother).

    python -m scripts.analysis.plot_loss_curves DATA_BIN --out bench/out            # your data
    python -m scripts.analysis.plot_loss_curves --toy --max-update 60 --out /tmp/lc  # toy data

DATA_BIN is any translation data binarized by ``fairseq-preprocess`` (e.g. the gettext
corpus: ``python -m scripts.common.gettext_corpus --out corpus`` then ``fairseq-preprocess
--source-lang de --target-lang en --trainpref corpus/train --validpref corpus/valid
--destdir DATA_BIN --joined-dictionary``). ``--toy`` generates a small copy-and-reverse task.
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from scripts.analysis.toy_corpus import write_toy_parallel_corpus
from scripts.common.atomic_files import write_text_atomic
from scripts.common.fairseq_cli import fairseq_command
from scripts.common.fairseq_log import json_log_records
from scripts.common.plotting import markdown_table, save_figure

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_MODEL = ("--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 64 "
              "--decoder-embed-dim 64 --encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128 "
              "--encoder-attention-heads 2 --decoder-attention-heads 2")


def log(message: str) -> None:
    """Progress on stderr, so that stdout holds only the results."""
    print(message, file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="?", type=Path, default=None,
                        help="fairseq-preprocess output folder (omit with --toy)")
    parser.add_argument("--toy", action="store_true",
                        help="generate and binarize a small copy-and-reverse task instead")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for plot_loss_curves.png and plot_loss_curves.md")
    parser.add_argument("--sparse-softmax-k", "--sparse-k", type=int, default=20,
                        help="k of the sparse-softmax run (default 20)")
    parser.add_argument("--label-smoothing", type=float, default=0.1,
                        help="label smoothing of both runs (default 0.1, the paper's)")
    parser.add_argument("--arch", default="transformer",
                        help="--arch of both runs (default transformer)")
    parser.add_argument("--model-args", default=TINY_MODEL,
                        help="model-size flags of both runs (default: a 2+2-layer width-64 "
                             "transformer)")
    parser.add_argument("--max-update", type=int, default=300,
                        help="updates per run (default 300)")
    parser.add_argument("--max-tokens", type=int, default=2000,
                        help="tokens per batch (default 2000)")
    parser.add_argument("--lr", type=float, default=0.002, help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=1, help="seed of both runs (default 1)")
    parser.add_argument("--extra", default="",
                        help="further fairseq-train flags for both runs, as one string")
    args = parser.parse_args(argv)
    if (args.data is None) == (not args.toy):
        parser.error("give either DATA_BIN or --toy")
    if args.data is not None and not any(args.data.glob("dict.*.txt")):
        parser.error(f"{args.data} has no dict.*.txt: is it fairseq-preprocess output?")
    if args.sparse_softmax_k < 1 or args.max_update < 1:
        parser.error("--sparse-softmax-k and --max-update must be >= 1")
    return args


def make_toy_data(folder: Path, seed: int) -> Path:
    """A copy-and-reverse task (source w<i> -> target v<i>, reversed) with 60 word types."""
    raw = write_toy_parallel_corpus(folder / "raw", {"train": 3000, "valid": 100}, vocab=60,
                                    max_len=12, seed=seed)
    data = folder / "bin"
    subprocess.run([
        fairseq_command("fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en",
        "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
        "--destdir", str(data), "--joined-dictionary", "--workers", "1",
    ], check=True, capture_output=True)
    return data


def train(data: Path, save_dir: Path, criterion: Sequence[str], args) -> List[dict]:
    """Run fairseq-train and return its per-update ``train_inner`` records."""
    command = [
        fairseq_command("fairseq-train"), str(data), "--user-dir",
        str(REPO_ROOT / "relu_former"), "--arch", args.arch, *shlex.split(args.model_args),
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", str(args.lr),
        "--max-tokens", str(args.max_tokens), "--max-update", str(args.max_update),
        "--seed", str(args.seed), "--label-smoothing", str(args.label_smoothing),
        "--dropout", "0.1", "--cpu", "--num-workers", "0", "--log-format", "json",
        "--log-interval", "1", "--no-progress-bar", "--save-dir", str(save_dir),
        "--no-save", "--disable-validation", *criterion, *shlex.split(args.extra),
    ]
    log("running: " + " ".join(shlex.quote(c) for c in command))
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"fairseq-train failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    records = json_log_records((proc.stdout + proc.stderr).splitlines(), "train_inner")
    if not records:
        raise SystemExit("fairseq-train printed no train_inner records")
    log(f"  {len(records)} updates logged, last loss {records[-1]['loss']}")
    return records


def curve(records: List[dict], key: str) -> Tuple[List[int], List[float]]:
    return ([int(r["num_updates"]) for r in records], [float(r[key]) for r in records])


def roughness(values: Sequence[float]) -> float:
    """Mean absolute change from one update to the next."""
    steps = [abs(b - a) for a, b in zip(values, values[1:])]
    return sum(steps) / len(steps) if steps else float("nan")


def plot(path: Path, runs: Dict[str, List[dict]], sparse_softmax_k: int) -> Path:
    """Two panels, lines without markers (hundreds of updates): own loss, full-softmax nll."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, title in zip(axes, ("loss", "nll_loss"),
                              ("training loss (each criterion's own)", "full-softmax nll")):
        for name, records in runs.items():
            ax.plot(*curve(records, key), label=name, linewidth=1)
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("update")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("bits per token")
    axes[0].legend(fontsize="small")
    fig.suptitle(f"softmax vs sparse-softmax (k = {sparse_softmax_k}), same data and seed")
    return save_figure(fig, path)


def report(runs: Dict[str, List[dict]], args) -> str:
    marks = sorted({max(1, args.max_update // 10), args.max_update // 2, args.max_update})
    rows = []
    for name, records in runs.items():
        by_update = {int(r["num_updates"]): r for r in records}
        for key in ("loss", "nll_loss"):
            row = [name, key]
            row += [float(by_update[m][key]) if m in by_update else "-" for m in marks]
            row.append(roughness(curve(records, key)[1]))
            rows.append(row)
    return "\n".join([
        "# plot_loss_curves: softmax vs sparse-softmax training loss per update\n",
        f"arch {args.arch} ({args.model_args}), {args.max_update} updates, max tokens "
        f"{args.max_tokens}, Adam lr {args.lr}, seed {args.seed}, label smoothing "
        f"{args.label_smoothing}, sparse-softmax k = {args.sparse_softmax_k}. Losses in bits "
        "(fairseq's base 2); loss = each criterion's own objective, nll_loss = full-softmax "
        "nll of the same batches.\n",
        markdown_table(["run", "figure"] + [f"update {m}" for m in marks] + ["roughness"], rows),
        "![loss curves](plot_loss_curves.png)\n",
    ])


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="loss_curves_") as tmp:
        tmp = Path(tmp)
        data = make_toy_data(tmp, args.seed) if args.toy else args.data
        runs = {
            "softmax": train(data, tmp / "softmax",
                             ["--criterion", "label_smoothed_cross_entropy"], args),
            f"sparse-softmax k={args.sparse_softmax_k}": train(
                data, tmp / "sparse",
                ["--criterion", "sparse_softmax_cross_entropy", "--sparse-softmax-k",
                 str(args.sparse_softmax_k)], args),
        }
    figure = plot(args.out / "plot_loss_curves.png", runs, args.sparse_softmax_k)
    text = report(runs, args)
    table = write_text_atomic(args.out / "plot_loss_curves.md", text)
    print(text)
    log(f"wrote {figure}, {table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
