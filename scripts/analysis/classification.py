"""Many-class text classification, softmax vs sparse-softmax, with the k sweep (Figure 2).

The paper's classification experiments train the same classifier with the softmax
cross-entropy and with sparse-softmax over the k largest class logits, report accuracy and
micro-F1, and plot accuracy against k. This script does that on a real corpus that needs no
download: which program an English message of the machine's GNU gettext catalogs comes from
(:mod:`scripts.analysis.gettext_classes`, 75 classes on the development machine).

Steps: build the corpus, binarize it as fairseq's GLUE preprocessing does
(``fairseq-preprocess --only-source`` for ``input0`` and for ``label``), then train one
small RoBERTa-style encoder per criterion with ``fairseq-train --task sentence_prediction``,
identical in everything but the criterion:

    cross-entropy   --criterion sentence_prediction                      (fairseq's own)
    sparse k        --criterion sparse_softmax_sentence_prediction --sparse-softmax-k k

Each run keeps its best checkpoint by validation accuracy; the test split is then classified
with it and scored: accuracy, micro-F1 (the paper's metrics; with one label and one
prediction per message they are equal) and macro-F1 (the mean of the per-class F1, which
weighs the small classes as much as the large ones).

    python -m scripts.analysis.classification --out bench/classification        # default
    python -m scripts.analysis.classification --max-per-class 400 --max-epoch 20 --out DIR
    python -m scripts.analysis.classification --tiny --locale-dir FIXTURE --out DIR  # tests

writes ``classification.md`` (the tables, the corpus, the commands, wall times),
``classification.json`` and ``classification_k_sweep.png``, each through a temporary name.
Runs go ``--jobs`` at a time (one thread each); the corpus and the binarized data are kept in
``--work`` and reused when their flags have not changed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shlex
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence

from scripts.analysis.gettext_classes import (
    add_corpus_arguments,
    check_corpus_arguments,
    corpus_from_args,
    describe,
)
from scripts.common.atomic_files import write_text_atomic
from scripts.common.plotting import line_plot, markdown_table

REPO_ROOT = Path(__file__).resolve().parents[2]
USER_DIR = REPO_ROOT / "relu_former"
HEAD = "sentence_classification_head"
MODEL_ARGS = ("--encoder-layers 1 --encoder-embed-dim 64 --encoder-ffn-embed-dim 128 "
              "--encoder-attention-heads 2 --dropout 0.1 --attention-dropout 0.1")
TINY_MODEL_ARGS = ("--encoder-layers 1 --encoder-embed-dim 16 --encoder-ffn-embed-dim 32 "
                   "--encoder-attention-heads 2")
_print_lock = threading.Lock()


def log(message: str) -> None:
    with _print_lock:
        print(message, file=sys.stderr, flush=True)


def parse_ks(text: str) -> List[int]:
    """``"1,2,5"`` -> [1, 2, 5]: sorted, distinct, each >= 1 (an argparse type)."""
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError(f"every k must be an integer >= 1, got {text!r}")
    return ks


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for classification.{md,json} and the k-sweep plot")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the corpus, binarized data and checkpoints "
                             "(default: OUT/work)")
    add_corpus_arguments(parser, max_per_class=150)
    parser.add_argument("--ks", type=parse_ks, default=parse_ks("1,2,5,10,20,40"),
                        help="the sparse-softmax k of the sweep, comma separated; k above "
                             "the number of classes is left out (default: 1,2,5,10,20,40)")
    parser.add_argument("--sparse-softmax-k", "--sparse-k", type=int, default=20,
                        help="k of the headline sparse-softmax row, added to the sweep "
                             "(default: 20, the paper's best for ~100 classes)")
    parser.add_argument("--label-smoothing", type=float, default=0.0,
                        help="--label-smoothing of the sparse-softmax runs, in [0, 1) "
                             "(fairseq's sentence_prediction has none; default: 0)")
    parser.add_argument("--model-args", default=MODEL_ARGS,
                        help=f"model-size flags of every run (default: {MODEL_ARGS!r})")
    parser.add_argument("--max-epoch", type=int, default=10, help="epochs per run (default 10)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sentences per batch (default 64)")
    parser.add_argument("--lr", type=float, default=2e-3,
                        help="Adam learning rate (default 2e-3)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every run (default 1)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="trainings run at a time, one thread each (default 2)")
    parser.add_argument("--tiny", action="store_true",
                        help="a seconds-long smoke run (for tests): tiny model, 2 epochs, "
                             "k in {1, 3}, classes of >= 3 messages")
    args = parser.parse_args(argv)
    if args.tiny:
        args.model_args, args.max_epoch, args.ks = TINY_MODEL_ARGS, 2, [1, 3]
        args.sparse_softmax_k = 3
        args.min_per_class, args.max_per_class, args.batch_size = 3, 40, 16
        args.valid_per_mille = args.test_per_mille = 200
    check_corpus_arguments(parser, args)
    if not 0.0 <= args.label_smoothing < 1.0:
        parser.error(f"--label-smoothing must be in [0, 1), got {args.label_smoothing}")
    for flag in ("sparse_softmax_k", "max_epoch", "batch_size", "jobs"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.lr <= 0:
        parser.error(f"--lr must be > 0, got {args.lr}")
    args.work = args.work or args.out / "work"
    return args


def quiet_fairseq() -> None:
    """fairseq's modules log every step at INFO (some to stdout); this script reports itself."""
    for name in ("fairseq", "fairseq_cli"):
        logging.getLogger(name).setLevel(logging.WARNING)


def binarize(raw: Path, data: Path) -> None:
    """``fairseq-preprocess --only-source`` of ``input0`` and of ``label``, as fairseq's GLUE
    preprocessing does, in this process (one fairseq start instead of two)."""
    from fairseq import options
    from fairseq_cli import preprocess

    quiet_fairseq()
    for part in ("input0", "label"):
        log(f"fairseq-preprocess --only-source {part} ...")
        preprocess.main(options.get_preprocessing_parser().parse_args([
            "--only-source", "--trainpref", str(raw / f"train.{part}"),
            "--validpref", str(raw / f"valid.{part}"), "--testpref", str(raw / f"test.{part}"),
            "--destdir", str(data / part), "--workers", "1"]))


def prepare_data(args: argparse.Namespace) -> tuple[Path, dict]:
    """Corpus and binarized data in ``args.work``, rebuilt only when the corpus flags change."""
    corpus_flags = {key: str(getattr(args, key)) for key in (
        "locale_dir", "lang", "max_tokens", "min_per_class", "max_per_class",
        "valid_per_mille", "test_per_mille")}
    raw, data = args.work / "corpus", args.work / "data-bin"
    stamp = args.work / "corpus_flags.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("flags") == corpus_flags:
        info = json.loads(stamp.read_text())
        log(f"reusing the corpus in {raw}: {info['description']}")
        return data, info
    started = time.monotonic()
    log(f"building the corpus from {args.locale_dir} ...")
    splits, stats = corpus_from_args(args, raw, log)
    description = describe(splits, stats)
    log(description)
    binarize(raw, data)
    # fairseq pads a dictionary to a multiple of 8 entries with "madeupword" fillers
    classes = sum(not line.startswith("madeupword")
                  for line in (data / "label" / "dict.txt").read_text().splitlines())
    info = {"flags": corpus_flags, "description": description, "classes": classes,
            "sizes": {name: len(examples) for name, examples in splits.items()},
            "seconds": round(time.monotonic() - started, 1)}
    write_text_atomic(stamp, json.dumps(info, indent=1))
    log(f"binarized into {data} ({classes} classes, {info['seconds']} s)")
    return data, info


@dataclass
class Run:
    """One training: its name, criterion flags and, once done, its figures."""

    name: str
    k: int | None  # None: fairseq's softmax cross-entropy
    criterion: List[str]
    valid_accuracy: List[float] = field(default_factory=list)
    seconds: float = 0.0
    test: Dict[str, float] = field(default_factory=dict)
    command: str = ""

    def save_dir(self, work: Path) -> Path:
        return work / "checkpoints" / self.name.replace(" ", "_").replace("=", "")


def make_runs(args: argparse.Namespace, classes: int) -> List[Run]:
    runs = [Run("cross-entropy", None, ["--criterion", "sentence_prediction"])]
    ks = sorted({k for k in [*args.ks, args.sparse_softmax_k] if k <= classes})
    dropped = sorted({k for k in [*args.ks, args.sparse_softmax_k] if k > classes})
    if dropped:
        log(f"leaving out k = {dropped}: above the number of classes ({classes})")
    for k in ks:
        runs.append(Run(f"sparse k={k}", k, [
            "--criterion", "sparse_softmax_sentence_prediction", "--sparse-softmax-k", str(k),
            "--label-smoothing", str(args.label_smoothing)]))
    return runs


def stopping_flags(args: argparse.Namespace) -> List[str]:
    """This script's budget and choice of model: ``--max-epoch`` epochs, validated at each
    epoch's end, the best checkpoint by valid accuracy, saved alone (no optimizer state)."""
    return ["--max-epoch", str(args.max_epoch), "--best-checkpoint-metric", "accuracy",
            "--maximize-best-checkpoint-metric", "--no-epoch-checkpoints",
            "--no-last-checkpoints", "--no-save-optimizer-state"]


def train_args(run: Run, data: Path, save_dir: Path, classes: int, args: argparse.Namespace,
               stopping: Sequence[str] | None = None) -> List[str]:
    """fairseq-train's arguments for ``run``; ``stopping``: when to stop and which checkpoints
    to keep (default :func:`stopping_flags`; the reproduction tables train to a plateau)."""
    return [
        str(data), "--user-dir", str(USER_DIR),
        "--task", "sentence_prediction", "--num-classes", str(classes), "--init-token", "0",
        "--max-positions", str(args.max_tokens + 2), "--arch", "roberta",
        *shlex.split(args.model_args), *run.criterion,
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", str(args.lr),
        "--batch-size", str(args.batch_size), "--required-batch-size-multiple", "1",
        "--seed", str(args.seed),
        *(stopping_flags(args) if stopping is None else stopping),
        "--save-dir", str(save_dir), "--cpu", "--num-workers", "0", "--log-format", "json",
        "--log-interval", "1000", "--no-progress-bar",
    ]


def train_command(run: Run, data: Path, save_dir: Path, classes: int,
                  args: argparse.Namespace) -> List[str]:
    return [sys.executable, "-m", "fairseq_cli.train",
            *train_args(run, data, save_dir, classes, args)]


def train(run: Run, data: Path, classes: int, args: argparse.Namespace) -> Run:
    """Run fairseq-train, printing each epoch's validation accuracy as it comes."""
    save_dir = run.save_dir(args.work)
    for stale in save_dir.glob("checkpoint*.pt"):
        stale.unlink()  # a finished earlier run would otherwise be resumed, not retrained
    command = train_command(run, data, save_dir, classes, args)
    run.command = shlex.join(command)
    started = time.monotonic()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tail: List[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env) as proc:
        for line in proc.stdout:
            tail = (tail + [line])[-40:]
            if "| valid |" in line and "{" in line:
                record = json.loads(line[line.index("{"):])
                run.valid_accuracy.append(float(record["valid_accuracy"]))
                log(f"[{run.name}] epoch {record['epoch']}/{args.max_epoch}: valid accuracy "
                    f"{run.valid_accuracy[-1]:.1f} ({time.monotonic() - started:.0f} s)")
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-train failed for {run.name} (exit {proc.returncode}): "
                           f"{run.command}\n{''.join(tail)}")
    run.seconds = round(time.monotonic() - started, 1)
    return run


def f1_scores(predictions: Sequence[int], targets: Sequence[int]) -> Dict[str, float]:
    """Accuracy, micro-F1 and macro-F1 (percent) of single-label predictions.

    micro-F1 = 2 TP / (2 TP + FP + FN) over all classes; macro-F1 averages the per-class F1
    over the classes that occur as a target or a prediction.
    """
    if len(predictions) != len(targets) or not targets:
        raise ValueError("predictions and targets must be non-empty and of equal length")
    tp: Dict[int, int] = {}
    fp: Dict[int, int] = {}
    fn: Dict[int, int] = {}
    for pred, gold in zip(predictions, targets):
        if pred == gold:
            tp[gold] = tp.get(gold, 0) + 1
        else:
            fp[pred] = fp.get(pred, 0) + 1
            fn[gold] = fn.get(gold, 0) + 1
    classes = set(tp) | set(fp) | set(fn)
    per_class = [2 * tp.get(c, 0) / (2 * tp.get(c, 0) + fp.get(c, 0) + fn.get(c, 0))
                 for c in classes]
    total_tp, total_fp, total_fn = sum(tp.values()), sum(fp.values()), sum(fn.values())
    return {
        "accuracy": 100.0 * total_tp / len(targets),
        "micro_f1": 100.0 * 2 * total_tp / (2 * total_tp + total_fp + total_fn),
        "macro_f1": 100.0 * sum(per_class) / len(per_class),
    }


def evaluate(checkpoint: Path, data: Path, split: str = "test") -> Dict[str, float]:
    """Classify ``split`` with a checkpoint and score it (see :func:`f1_scores`)."""
    import torch
    from fairseq import checkpoint_utils, utils

    utils.import_user_module(argparse.Namespace(user_dir=str(USER_DIR)))
    quiet_fairseq()
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)})
    model = models[0].eval()
    task.load_dataset(split)
    batches = task.get_batch_iterator(
        dataset=task.dataset(split), max_sentences=256, num_workers=0,
    ).next_epoch_itr(shuffle=False)
    predictions: List[int] = []
    targets: List[int] = []
    with torch.no_grad(), warnings.catch_warnings():
        # fairseq's iterators ask for pinned memory, which a CPU-only torch warns about
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        for sample in batches:
            logits, _ = model(**sample["net_input"], features_only=True,
                              classification_head_name=HEAD)
            predictions += logits.argmax(dim=-1).tolist()
            targets += sample["target"].view(-1).tolist()
    return f1_scores(predictions, targets)


def sweep_plot(path: Path, runs: Sequence[Run], classes: int) -> Path:
    sparse = [run for run in runs if run.k is not None]
    baseline = next(run for run in runs if run.k is None)
    return line_plot(
        path,
        {"sparse-softmax": ([run.k for run in sparse],
                            [run.test["accuracy"] for run in sparse])},
        title=f"test accuracy against k ({classes} classes); dashed: softmax cross-entropy",
        xlabel="k (log scale)", ylabel="test accuracy (%)", logx=True,
        hline=baseline.test["accuracy"],
    )


def cpu_seconds() -> float:
    """CPU time of this process and of the finished trainings: a cost that, unlike the wall
    time, does not depend on how loaded the machine is."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                           resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def report(runs: Sequence[Run], info: dict, args: argparse.Namespace, argv: Sequence[str],
           wall: float, cpu: float) -> str:
    headline = [run for run in runs if run.k in (None, args.sparse_softmax_k)]

    def row(run: Run) -> list:
        figures = [run.test["accuracy"], run.test["micro_f1"], run.test["macro_f1"],
                   max(run.valid_accuracy, default=float("nan"))]
        return [run.name, *(f"{value:.1f}" for value in figures), run.seconds]

    headers = ["criterion", "test accuracy", "test micro-F1", "test macro-F1",
               "best valid accuracy", "train s"]
    command = "python -m scripts.analysis.classification " + shlex.join(argv)
    return "\n".join([
        "# Many-class classification: softmax vs sparse-softmax\n",
        f"Corpus (gettext domains, {args.locale_dir}): {info['description']}.\n",
        f"Model: `--arch roberta {args.model_args}`, {args.max_epoch} epochs of batch "
        f"{args.batch_size}, Adam lr {args.lr}, seed {args.seed}; best checkpoint by valid "
        f"accuracy; sparse-softmax label smoothing {args.label_smoothing}. Figures in percent "
        "on the test split.\n",
        f"## Softmax vs sparse-softmax (k = {args.sparse_softmax_k})\n",
        markdown_table(headers, [row(run) for run in headline], digits=3),
        "## k sweep\n",
        markdown_table(headers, [row(run) for run in runs], digits=3),
        "![test accuracy against k](classification_k_sweep.png)\n",
        f"Command: `{command}`; total wall time {wall:.0f} s, CPU time {cpu:.0f} s ({args.jobs} "
        f"runs at a time, one thread each; corpus and binarization {info['seconds']} s when "
        "built).\n",
        "Each run's training command:\n",
        *[f"- {run.name}: `{run.command}`" for run in runs],
        "",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    started = time.monotonic()
    try:
        data, info = prepare_data(args)
    except FileNotFoundError as error:
        raise SystemExit(f"error: {error}") from None
    classes = info["classes"]
    runs = make_runs(args, classes)
    log(f"{len(runs)} trainings, {args.jobs} at a time: {', '.join(r.name for r in runs)}")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        try:
            list(pool.map(lambda run: train(run, data, classes, args), runs))
        except RuntimeError as error:  # a failed training: its command and log tail
            raise SystemExit(f"error: {error}") from None
    for run in runs:
        run.test = evaluate(run.save_dir(args.work) / "checkpoint_best.pt", data)
        log(f"[{run.name}] test accuracy {run.test['accuracy']:.2f}, micro-F1 "
            f"{run.test['micro_f1']:.2f}, macro-F1 {run.test['macro_f1']:.2f}")
    wall, cpu = time.monotonic() - started, cpu_seconds()
    args.out.mkdir(parents=True, exist_ok=True)
    sweep_plot(args.out / "classification_k_sweep.png", runs, classes)
    write_text_atomic(args.out / "classification.json", json.dumps({
        "corpus": info, "runs": [asdict(run) for run in runs], "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "argv": argv}, indent=1))
    text = report(runs, info, args, argv, wall, cpu)
    write_text_atomic(args.out / "classification.md", text)
    print(text)
    log(f"wrote {args.out / 'classification.md'} ({wall:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
