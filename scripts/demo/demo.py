"""The relu-former demo: real translation and summarization, offline, side by side.

What it does (``make demo`` runs it with the default size), one step at a time:

1. Translation data: a De-En corpus from the GNU gettext catalogs installed on the machine
   (``scripts/demo/gettext_corpus.py``; falls back, saying so, to a generated task when there
   are none), Moses-tokenised, lower-cased, joint BPE (``scripts/recipes/lib/prepare_text.py``,
   the recipes' helpers), ``fairseq-preprocess``.
2. Summarization data: the manual pages installed on the machine, the page as the input and
   its one-line NAME description as the summary (``scripts/demo/manpage_corpus.py``,
   ``scripts/demo/summary_data.py``; a generated task when there are none), SentencePiece,
   inputs of 1,024 tokens.
3. Translation models, with the same size, data and update/time budget, through the real
   ``fairseq-train --user-dir relu_former``: a softmax Transformer, a ReLUFormer (ReLU
   attention + the regularisers), a Transformer trained from scratch with the sparse-softmax
   criterion; then the softmax Transformer continued for the same number of updates once with
   label-smoothed cross-entropy and once with sparse-softmax.
4. Summarization models: a vanilla encoder, a Transpooler and a Pyramidion of one size and
   budget, trained at the same time so that the machine's load slows each alike.
5. Decoding with ``fairseq-generate`` (sparse-softmax models with top-k decoding), sacreBLEU
   for translation, ROUGE-1/2/L for summaries (``scripts/recipes/lib/score.py``, the recipes'
   scorer), training and decoding speed of the pooling models relative to the vanilla one.
6. Attention of every translation model (``scripts/analysis/analyze_attention.py``), plots,
   and ``OUT/report.md`` with both tables.

    python -m scripts.demo.demo                 # default size, < 20 min on 2 idle cores
    python -m scripts.demo.demo --full          # bigger models, longer training
    python -m scripts.demo.demo --tiny          # seconds per model: a smoke test (tests use it)
    python -m scripts.demo.demo --locale-dir /nonexistent --man-dir /nonexistent  # fallbacks
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Sequence

from scripts.common.fairseq_cli import fairseq_command
from scripts.common.fairseq_log import parse_json_log_line
from scripts.common.plotting import markdown_table, write_text_atomic
from scripts.demo.gettext_corpus import Pair, build_corpus, write_corpus
from scripts.demo.loss_plots import task_loss_panels
from scripts.demo.summarization import SummaryReferences
from scripts.demo.summary_data import SOURCE as DOC
from scripts.demo.summary_data import TARGET as SUM
from scripts.demo.summary_data import SummaryScale, build_summary_data
from scripts.demo.try_it import summary_command, translation_command, try_it_section
from scripts.recipes.lib.prepare_text import (
    BpeEncoder,
    learn_bpe,
    moses_detokenize,
    moses_tokenize,
    read_lines,
    write_lines,
)
from scripts.recipes.lib.score import rouge_scores

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC, TGT = "de", "en"
USER_DIR = str(REPO_ROOT / "relu_former")
# The generated fallback must be big enough for BPE and batching to behave like real data.
MIN_GETTEXT_TRAIN_PAIRS = 200
Say = Callable[[str], None]


# ----------------------------------------------------------------------------- sizes

@dataclass(frozen=True)
class Scale:
    """Everything that makes a demo run bigger or smaller."""

    name: str
    max_train: int | None      # training pairs kept (None: all)
    max_test: int              # test sentences decoded
    bpe_merges: int
    layers: int
    dim: int
    ffn: int
    heads: int
    max_tokens: int            # tokens per batch
    max_update: int            # update budget of a translation model ...
    time_budget_s: float       # ... and its wall-clock cap (whichever comes first)
    finetune_update: int       # updates of each continuation of the softmax Transformer
    beam: int
    warmup: int
    lr: float
    analysis_sentences: int
    generated_train: int       # training pairs of the generated fallback task
    summary: SummaryScale
    heldout_per_mille: int = 15  # share of catalog pairs in valid, and again in test
    # the sparse-softmax model trained from scratch (the continuations always run)
    sparse_from_scratch: bool = True


SCALES = {
    # tiny holds out more, so that a fixture catalog of a few hundred pairs has a test set
    "tiny": Scale("tiny", 400, 40, 150, 1, 32, 64, 2, 1200, 20, 60.0, 10, 2, 10, 3e-3, 20, 400,
                  SummaryScale(source_tokens=64, target_tokens=16, vocab=200, layers=2, dim=32,
                               ffn=64, heads=2, max_tokens=512, max_update=10,
                               time_budget_s=60.0, warmup=5, lr=3e-3, max_test=20,
                               min_train_docs=30, heldout_per_mille=150, generated_docs=120),
                  heldout_per_mille=80),
    # The summarization budget buys learning: 512-token pages (5,700 training pages instead of
    # 1,700 at 1,024), SentencePiece 1,000 (fewer, better-trained embeddings), 8 pages per
    # update, 700 updates; the Transpooler and the sparse-softmax model from scratch, which
    # show least, are left to --full so that the default stays within its time (docs/demo.md).
    "default": Scale("default", 30000, 500, 3000, 2, 128, 256, 4, 2048, 800, 400.0, 300, 4,
                     300, 2e-3, 300, 20000,
                     SummaryScale(source_tokens=512, target_tokens=40, vocab=1000, layers=2,
                                  dim=64, ffn=128, heads=4, max_tokens=4096, max_update=700,
                                  time_budget_s=600.0, warmup=80, lr=5e-3, max_test=250,
                                  min_train_docs=200, heldout_per_mille=40,
                                  generated_docs=400, transpooler=False),
                     sparse_from_scratch=False),
    "full": Scale("full", None, 1000, 6000, 3, 256, 1024, 4, 4096, 3000, 1800.0, 1000, 5, 1000,
                  1e-3, 500, 60000,
                  SummaryScale(source_tokens=2048, target_tokens=48, vocab=8000, layers=3,
                               dim=128, ffn=256, heads=4, max_tokens=8192, max_update=1500,
                               time_budget_s=1800.0, warmup=150, lr=1e-3, max_test=200,
                               min_train_docs=200, heldout_per_mille=60,
                               generated_docs=2000)),
}


# ----------------------------------------------------------------------------- the runs

@dataclass
class Run:
    """One model of the comparison: how to train and decode it, and what it measured."""

    key: str
    label: str
    arch: str
    train_flags: List[str]
    data: str = "sentences"  # or "summaries"
    generate_flags: List[str] = field(default_factory=list)
    parent: Run | None = None  # fine-tuned from this run's last checkpoint
    # measured
    losses: List[tuple] = field(default_factory=list)  # (update, training nll in bits)
    wps: List[float] = field(default_factory=list)
    params: int | None = None
    updates: int = 0
    train_seconds: float = math.nan
    train_cpu: float = math.nan       # CPU seconds of the whole fairseq-train process
    valid_nll: float = math.nan
    bleu: float = math.nan
    tok_bleu: float = math.nan
    rouge: Dict[str, float] = field(default_factory=dict)
    decode_seconds: float = math.nan  # fairseq-generate's own time for the test split
    entropy: float = math.nan
    zeros: float = math.nan
    note: str = ""


def registered_names() -> Dict[str, set]:
    """Architectures, criteria and tasks the plugin registers (imports fairseq and the plugin)."""
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    import relu_former.plugin  # noqa: F401

    return {"arch": set(ARCH_MODEL_REGISTRY), "criterion": set(CRITERION_REGISTRY),
            "task": set(TASK_REGISTRY)}


def model_flags(layers: int, dim: int, ffn: int, heads: int) -> List[str]:
    return [
        "--encoder-layers", str(layers), "--decoder-layers", str(layers),
        "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim),
        "--encoder-ffn-embed-dim", str(ffn), "--decoder-ffn-embed-dim", str(ffn),
        "--encoder-attention-heads", str(heads),
        "--decoder-attention-heads", str(heads), "--share-all-embeddings",
    ]


SMOOTHED = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]


def translation_runs(scale: Scale, names: Dict[str, set], args: argparse.Namespace,
                     say: Say = print) -> List[Run]:
    """The translation comparison, with whatever the plugin registers; a missing name is said."""
    runs = []
    if "relu_former_iwslt_de_en" in names["arch"]:
        # The softmax baseline goes through the same attention module as ReLUFormer, so the
        # only difference between the two rows is the activation.
        base = "relu_former_iwslt_de_en"
        softmax = ["--attention-activation", "softmax"]
        runs.append(Run("softmax", "Transformer (softmax)", base, softmax + SMOOTHED))
        relu_criterion = ("regularized_label_smoothed_cross_entropy"
                          if "regularized_label_smoothed_cross_entropy" in names["criterion"]
                          else None)
        if relu_criterion:
            runs.append(Run("relu", "ReLUFormer (regularised)", base, [
                "--attention-activation", "relu", "--criterion", relu_criterion,
                "--label-smoothing", "0.1"]))
        else:
            say("note: criterion regularized_label_smoothed_cross_entropy is not registered; "
                "ReLUFormer runs without its regularisers")
            runs.append(Run("relu", "ReLUFormer (unregularised)", base,
                            ["--attention-activation", "relu"] + SMOOTHED))
    else:
        say("note: arch relu_former_iwslt_de_en is not registered; using fairseq's transformer")
        base, softmax = "transformer", []
        runs.append(Run("softmax", "Transformer (softmax)", base, SMOOTHED))
    if "sparse_softmax_cross_entropy" not in names["criterion"]:
        say("note: criterion sparse_softmax_cross_entropy is not registered; skipping its runs")
        return runs
    sparse = ["--criterion", "sparse_softmax_cross_entropy", "--sparse-k", str(args.sparse_k),
              "--label-smoothing", "0.1"]
    decode, top = [], "full-softmax decoding"
    if "translation_sparse_decoding" in names["task"] and args.sparse_decode_k > 0:
        k = max(args.sparse_decode_k, scale.beam)
        decode = ["--task", "translation_sparse_decoding", "--sparse-softmax-k", str(k)]
        top = f"top-{k} decoding"
    if scale.sparse_from_scratch:
        runs.append(Run("sparse", f"Transformer + sparse-softmax, from scratch ({top})", base,
                        softmax + sparse, generate_flags=decode))
    parent = runs[0]
    n = scale.finetune_update
    runs.append(Run("finetune_ce", f"softmax Transformer +{n} updates label-smoothed CE", base,
                    softmax + SMOOTHED, parent=parent))
    runs.append(Run("finetune_sparse", f"softmax Transformer +{n} updates sparse-softmax ({top})",
                    base, softmax + sparse, generate_flags=decode, parent=parent))
    return runs


def summary_runs(summary: SummaryScale, names: Dict[str, set], say: Say = print) -> List[Run]:
    """A vanilla encoder, a Transpooler (where the scale has it) and a Pyramidion: one
    architecture, pooling apart.

    All are ``pyramidion_base`` with full attention; ``--pooling-schedule none`` is the
    vanilla encoder, ``last:L/4`` pools once after the last layer (Transpooler), ``1:L/2,2:L/4``
    halves the length after each of the first two layers (Pyramidion).
    """
    arch = "pyramidion_base"
    if arch not in names["arch"]:
        say(f"note: {arch} is not registered; skipping the summarization part")
        return []
    length = summary.source_tokens
    half, quarter = length // 2, length // 4
    common = ["--max-source-positions", str(length),
              "--max-target-positions", str(summary.target_tokens + 8),
              "--attention-block-size", "0", *SMOOTHED]
    runs = [Run("sum_vanilla", f"Vanilla encoder ({length} tokens)", arch,
                common + ["--pooling-schedule", "none"], data="summaries")]
    if summary.transpooler:
        runs.append(Run("sum_transpooler", f"Transpooler {length}->{quarter}", arch,
                        common + ["--pooling-schedule", f"last:{quarter}"], data="summaries"))
    runs.append(Run("sum_pyramidion", f"Pyramidion {length}->{half}->{quarter}", arch,
                    common + ["--pooling-schedule", f"1:{half},2:{quarter}"], data="summaries"))
    return runs


# ----------------------------------------------------------------------------- data

def generated_corpus(n_train: int, seed: int = 1) -> Dict[str, List[Pair]]:
    """A learnable stand-in for a language pair, for machines without gettext catalogs.

    Words are made-up syllable strings with a fixed one-to-one lexicon; the target moves the
    source's last word to second place (a verb-final to verb-second reordering), so the model
    must learn both the lexicon and an alignment. Groups of 20 sentences form a 'catalog'.
    """
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zu", "ba", "di", "fe"]

    def word(min_syl: int) -> str:
        return "".join(rng.choice(syllables) for _ in range(rng.randint(min_syl, 3)))

    lexicon = {}
    while len(lexicon) < 400:
        lexicon[word(1)] = word(2)
    source_words = sorted(lexicon)
    sizes = {"train": n_train, "valid": 300, "test": 300}
    splits = {}
    for split, size in sizes.items():
        pairs = []
        for i in range(size):
            words = [rng.choice(source_words) for _ in range(rng.randint(3, 12))]
            target = [lexicon[w] for w in words]
            target.insert(1, target.pop())
            pairs.append(Pair(" ".join(words), " ".join(target), f"{split}{i // 20}"))
        splits[split] = pairs
    return splits


def make_corpus(args: argparse.Namespace, scale: Scale, raw: Path, say=print) -> str:
    """Write raw ``{split}.{de,en,catalog}``; returns a one-line description of the source."""
    try:
        splits = build_corpus(args.locale_dir, args.lang, max_train=scale.max_train,
                              valid_per_mille=scale.heldout_per_mille,
                              test_per_mille=scale.heldout_per_mille)
        n_train = len(splits["train"])
        if n_train < MIN_GETTEXT_TRAIN_PAIRS or not splits["test"] or not splits["valid"]:
            raise FileNotFoundError(
                f"only {n_train} usable training pairs in the '{args.lang}' catalogs under "
                f"{args.locale_dir} (need {MIN_GETTEXT_TRAIN_PAIRS})")
        origin = (f"GNU gettext catalogs ({args.locale_dir}/{args.lang}/LC_MESSAGES/*.mo), "
                  f"{args.lang}->en")
    except FileNotFoundError as error:
        say(f"No usable gettext catalogs: {error}.\n"
            "Falling back to the GENERATED task (a made-up language pair: fixed lexicon plus "
            "one reordering rule). Its BLEU says nothing about real translation.")
        splits = generated_corpus(scale.generated_train)
        origin = "generated task (no gettext catalogs found)"
    splits["test"] = splits["test"][: scale.max_test]
    write_corpus(splits, raw, src=SRC, tgt=TGT)
    sizes = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
    return f"{origin}: {sizes} sentence pairs"


def prepare(raw: Path, prep: Path, merges: int, say: Say = print) -> None:
    """Moses-tokenise + lower-case, learn a joint BPE, apply it."""
    tokenised = {}
    for split in ("train", "valid", "test"):
        for lang in (SRC, TGT):
            lines = read_lines(raw / f"{split}.{lang}")
            tokenised[split, lang] = moses_tokenize(lines, lang, lowercase=True)
            write_lines(prep / f"tok.{split}.{lang}", tokenised[split, lang])
    say(f"  tokenised {sum(len(v) for v in tokenised.values())} lines; learning {merges} "
        "BPE merges")
    codes = learn_bpe([prep / f"tok.train.{SRC}", prep / f"tok.train.{TGT}"],
                      prep / "bpe.codes", merges)
    encoder = BpeEncoder(codes)
    for (split, lang), lines in tokenised.items():
        write_lines(prep / "sentences" / f"{split}.{lang}", encoder.encode_lines(lines))


# ----------------------------------------------------------------------------- fairseq CLI

def child_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # Checkpoints load safely through the plugin's allowlist; never the unsafe switch.
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    return env


def threads_per_job(args: argparse.Namespace) -> int:
    return max(1, args.threads // args.jobs)



def in_parallel(step: Callable[[Run, int], None], runs: Sequence[Run], jobs: int) -> None:
    """Run ``step(run, position)`` for every run, ``jobs`` at a time; re-raise the first error.

    A run with a ``parent`` starts once its parent is done. Small models use one core poorly,
    so two single-threaded runs side by side finish about twice as fast as two two-threaded
    runs one after the other.
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    if not runs:
        return
    futures: Dict[str, Future] = {}

    def after_parent(run: Run, position: int) -> None:
        # parents are submitted first, so they are running or done: no deadlock
        if run.parent is not None and run.parent.key in futures:
            futures[run.parent.key].result()
        step(run, position)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for i, run in enumerate(runs):
            futures[run.key] = pool.submit(after_parent, run, i % jobs)
        for future in futures.values():
            future.result()


def stream(command: Sequence[str], log_path: Path, on_line: Callable[[str], None],
           env: Dict[str, str]) -> tuple[int, float]:
    """Run a command, tee its merged output to ``log_path``, feed each line to ``on_line``.

    Returns the exit status and the CPU seconds (user + system) the process used: unlike
    wall-clock time, the CPU time of a run hardly changes when other processes load the
    machine, so speed ratios computed from it hold on a busy machine too.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log, subprocess.Popen(
            [str(c) for c in command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, cwd=REPO_ROOT) as proc:
        for line in proc.stdout:
            log.write(line)
            on_line(line.rstrip("\n"))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def preprocess(text: Path, dest: Path, env: Dict[str, str], src: str = SRC,
               tgt: str = TGT) -> None:
    command = [fairseq_command("fairseq-preprocess"), "--source-lang", src, "--target-lang", tgt,
               "--trainpref", text / "train", "--validpref", text / "valid",
               "--testpref", text / "test", "--destdir", dest, "--joined-dictionary",
               "--workers", "1"]
    code, _ = stream(command, dest.parent / f"preprocess.{dest.name}.log", lambda _: None, env)
    if code:
        raise SystemExit(f"fairseq-preprocess failed; see {dest.parent}/preprocess.{dest.name}"
                         ".log")


def parse_log_line(line: str, run: Run) -> str | None:
    """Fold one fairseq-train (json log format) line into ``run``; returns its tag if any."""
    match = re.search(r"model params: ([\d,]+)", line)
    if match and run.params is None:
        run.params = int(match.group(1).replace(",", ""))
    match = re.search(r"done training in ([\d.]+) seconds", line)
    if match:
        run.train_seconds = float(match.group(1))
    parsed = parse_json_log_line(line)
    if parsed is None:
        return None
    tag, stats = parsed
    if tag == "train_inner":
        run.updates = int(stats["num_updates"])
        # nll_loss is the full-softmax cross-entropy in every criterion used here (loss also
        # holds regularisers or the sparse loss), so it is the one comparable curve.
        nll = stats["nll_loss"] if "nll_loss" in stats else stats["loss"]
        run.losses.append((run.updates, float(nll)))
        run.wps.append(float(stats["wps"]))
    elif tag == "valid":
        run.valid_nll = float(stats.get("valid_nll_loss", stats.get("valid_loss", math.nan)))
    elif tag == "train":
        run.updates = int(stats.get("train_num_updates", run.updates))
    return tag



def final_learning_rate(lr: float, warmup: int, updates: int) -> float:
    """The learning rate of fairseq's inverse_sqrt schedule (from ~0) after ``updates``."""
    if updates < warmup:
        return lr * max(updates, 1) / warmup
    return lr * math.sqrt(warmup / updates)


def train_command(run: Run, data_bin: Path, work: Path, scale: Scale,
                  args: argparse.Namespace) -> tuple[List, int, float]:
    """The fairseq-train command of one run, its update budget and its wall-clock cap."""
    if run.data == "summaries":
        s = scale.summary
        size, max_tokens, lr, warmup = ((s.layers, s.dim, s.ffn, s.heads), s.max_tokens, s.lr,
                                        s.warmup)
        max_update, budget = s.max_update, s.time_budget_s
    else:
        size, max_tokens, lr, warmup = ((scale.layers, scale.dim, scale.ffn, scale.heads),
                                        scale.max_tokens, scale.lr, scale.warmup)
        max_update, budget = scale.max_update, scale.time_budget_s
    schedule = ["--lr", str(lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates",
                str(warmup), "--warmup-init-lr", "1e-07"]
    start = []
    budget *= args.budget_scale
    stop_after = budget
    if run.parent is not None:
        # A continuation: the parent's weights, a fresh optimizer, and a constant learning
        # rate equal to the one the parent's schedule ended at.
        max_update = scale.finetune_update
        budget = scale.time_budget_s * args.budget_scale * max_update / scale.max_update
        schedule = ["--lr", f"{final_learning_rate(lr, warmup, run.parent.updates):.6g}",
                    "--lr-scheduler", "fixed"]
        start = ["--finetune-from-model", work / run.parent.key / "checkpoint_last.pt"]
        # fairseq's --stop-time-hours counts the training time stored in the checkpoint too
        stop_after = budget + (0 if math.isnan(run.parent.train_seconds)
                               else run.parent.train_seconds)
    command = [
        fairseq_command("fairseq-train"), data_bin, "--user-dir", USER_DIR, "--arch", run.arch,
        *model_flags(*size), "--dropout", "0.1", "--cpu", "--seed", str(args.seed),
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
        *schedule, *start, "--max-tokens", str(max_tokens),
        "--max-update", str(max_update), "--stop-time-hours", f"{stop_after / 3600:.6f}",
        # validate and save once, at the end: every second goes to training
        "--validate-interval", "1000", "--save-interval", "1000", "--no-epoch-checkpoints",
        "--save-dir", work / run.key, "--log-format", "json",
        "--log-interval", str(max(1, min(25, max_update // 20))), "--no-progress-bar",
        "--num-workers", "0",
        # fairseq's batcher drops a whole split smaller than this multiple (8 by default)
        "--required-batch-size-multiple", "1",
        "--skip-invalid-size-inputs-valid-test", *run.train_flags,
    ]
    return command, max_update, budget


def train(run: Run, data_bin: Path, work: Path, scale: Scale, args: argparse.Namespace,
          position: int = 0) -> None:
    """Train one model with ``fairseq-train``, folding its log into ``run``."""
    from tqdm import tqdm

    command, max_update, budget = train_command(run, data_bin, work, scale, args)
    bar = tqdm(total=max_update, desc=f"train {run.key:<15}", unit="upd", leave=True,
               disable=args.quiet, dynamic_ncols=True, mininterval=1.0, position=position)
    started = time.time()

    def on_line(line: str) -> None:
        if parse_log_line(line, run) == "train_inner":
            bar.update(run.updates - bar.n)
            bar.set_postfix(nll=f"{run.losses[-1][1]:.2f}",
                            budget=f"{time.time() - started:.0f}/{budget:.0f}s")

    code, run.train_cpu = stream(command, work / run.key / "train.log", on_line,
                                 child_env(threads_per_job(args)))
    bar.update(run.updates - bar.n)
    bar.close()
    if code != 0 or not (work / run.key / "checkpoint_last.pt").is_file():
        tail = (work / run.key / "train.log").read_text()[-3000:]
        raise RuntimeError(f"fairseq-train failed for {run.key} (exit {code}):\n{tail}")
    write_text_atomic(work / run.key / "cpu.json", json.dumps({"train_cpu": run.train_cpu}))
    if run.updates < max_update:
        run.note = f"stopped by the {budget:.0f} s time cap after {run.updates} updates"


def trained_before(run: Run, work: Path) -> bool:
    """Fold a finished earlier training log into ``run``; False if there is none."""
    log = work / run.key / "train.log"
    if not (work / run.key / "checkpoint_last.pt").is_file() or not log.is_file():
        return False
    fresh = replace(run, losses=[], wps=[])
    for line in log.read_text().splitlines():
        parse_log_line(line, fresh)
    if math.isnan(fresh.train_seconds):  # interrupted: train again
        return False
    cpu = work / run.key / "cpu.json"
    if cpu.is_file():
        fresh.train_cpu = float(json.loads(cpu.read_text())["train_cpu"])
    run.__dict__.update(fresh.__dict__)
    return True


_TRANSLATED = re.compile(r"Translated [\d,]+ sentences \([\d,]+ tokens\) in ([\d.]+)s")


def generate(run: Run, data_bin: Path, work: Path, scale: Scale, args: argparse.Namespace,
             position: int = 0) -> None:
    """Decode the test split and score it.

    Translation: sacreBLEU on detokenised text and fairseq's tokenised BLEU. Summaries:
    ROUGE-1/2/L F1 against the untouched reference summaries, with the recipes' scorer.
    """
    from tqdm import tqdm

    summaries = run.data == "summaries"
    prep = work / "prep" / run.data
    n_test = len(read_lines(prep / f"test.{DOC if summaries else SRC}"))
    if summaries:
        s = scale.summary
        decode = ["--post-process", "sentencepiece", "--max-len-a", "0",
                  "--max-len-b", str(s.target_tokens), "--max-tokens", str(8 * s.source_tokens),
                  "--max-source-positions", str(s.source_tokens),
                  "--max-target-positions", str(s.target_tokens + 8)]
    else:
        decode = ["--remove-bpe", "--max-tokens", "6000"]
    command = [
        fairseq_command("fairseq-generate"), data_bin, "--user-dir", USER_DIR,
        "--path", work / run.key / "checkpoint_last.pt", "--gen-subset", "test",
        "--beam", str(scale.beam), *decode, "--cpu",
        "--num-workers", "0", "--required-batch-size-multiple", "1",
        "--skip-invalid-size-inputs-valid-test", *run.generate_flags,
    ]
    hypotheses: Dict[int, str] = {}
    bar = tqdm(total=n_test, desc=f"decode {run.key:<15}", unit="sent", leave=True,
               disable=args.quiet, dynamic_ncols=True, mininterval=1.0, position=position)

    def on_line(line: str) -> None:
        match = re.match(r"^H-(\d+)\t\S+\t(.*)$", line)
        if match:
            hypotheses[int(match.group(1))] = match.group(2)
            bar.update(1)
        match = re.search(r"BLEU4? = ([\d.]+)", line)
        if match:
            run.tok_bleu = float(match.group(1))
        match = _TRANSLATED.search(line)
        if match:
            run.decode_seconds = float(match.group(1))

    code, _ = stream(command, work / run.key / "generate.log", on_line,
                     child_env(threads_per_job(args)))
    bar.close()
    if code != 0:
        tail = (work / run.key / "generate.log").read_text()[-3000:]
        raise RuntimeError(f"fairseq-generate failed for {run.key} (exit {code}):\n{tail}")
    ordered = [hypotheses.get(i, "") for i in range(n_test)]
    if summaries:
        write_lines(work / run.key / "test.hyp", ordered)
        references = read_lines(prep / "test.reference")
        run.rouge = rouge_scores(ordered, references)
        return
    import sacrebleu

    references = read_lines(work / "raw" / f"test.{TGT}")
    detok = moses_detokenize(ordered, TGT)
    write_lines(work / run.key / "test.hyp.detok", detok)
    # The models see lower-cased text, so BLEU is case-insensitive.
    run.bleu = sacrebleu.corpus_bleu(detok, [references], lowercase=True).score


# ----------------------------------------------------------------------------- attention

def heatmap_sentence(prep: Path, low: int = 6, high: int = 14) -> int:
    """Index of the first test sentence of a readable length for the heat map."""
    src = read_lines(prep / "sentences" / f"test.{SRC}")
    tgt = read_lines(prep / "sentences" / f"test.{TGT}")
    for i, (s, t) in enumerate(zip(src, tgt)):
        if low <= len(s.split()) <= high and low <= len(t.split()) <= high:
            return i
    return 0



def analyse_attention(runs: List[Run], data_bin: Path, out: Path, sentence: int,
                      max_sentences: int, threads: int) -> List[Path]:
    """Entropy and zero share of every model's attention on the test split, and the figures.

    Uses ``scripts/analysis/analyze_attention.py``: the table numbers are means over every
    attention row of every attention module; the per-layer plots and the heat map compare the
    softmax Transformer with the ReLUFormer.
    """
    import torch

    from scripts.analysis import analyze_attention as aa

    torch.set_num_threads(threads)
    paths = {run.key: str(out / "work" / run.key / "checkpoint_last.pt") for run in runs}
    args = aa.parse_args([str(data_bin), "--path", *paths.values(), "--out", str(out),
                          "--gen-subset", "test", "--max-sentences", str(max_sentences),
                          "--sentence", str(sentence)])
    analyses = {}
    for run in runs:
        analysis = aa.analyze(paths[run.key], run.label, args)
        means = analysis.attention_means()
        run.entropy, run.zeros = means["entropy"], means["zeros"]
        analyses[run.key] = analysis
    shown = [analyses[k] for k in ("softmax", "relu") if k in analyses]
    args.path = [paths[k] for k in ("softmax", "relu") if k in analyses]
    return aa.write_outputs(shown, args)


# ----------------------------------------------------------------------------- report

TABLE_HEADERS = ["model", "params", "updates", "train s", "words/s", "valid nll", "BLEU",
                 "tok BLEU", "attn entropy", "attn zeros"]
SUMMARY_HEADERS = ["model", "params", "updates", "train s", "train CPU s", "valid nll",
                   "ROUGE-1", "ROUGE-2", "ROUGE-L", "train speed", "decode s", "decode speed"]


def _dashes(row: list) -> list:
    # not measured reads better as "-" than nan
    return ["-" if isinstance(v, float) and math.isnan(v) else v for v in row]


def _median(values: Sequence[float]) -> float:
    return sorted(values)[len(values) // 2] if values else math.nan


def table_rows(runs: Sequence[Run]) -> List[list]:
    """The translation table."""
    return [_dashes([run.label, run.params if run.params is not None else "-", run.updates,
                     run.train_seconds, _median(run.wps), run.valid_nll, run.bleu,
                     run.tok_bleu, run.entropy, run.zeros])
            for run in runs if run.data == "sentences"]


def summary_rows(runs: Sequence[Run]) -> List[list]:
    """The summarization table; speeds are relative to the first (vanilla) row.

    Training speed: CPU seconds per update of the vanilla run over this run's. Decoding
    speed: fairseq-generate's own time for the test split, vanilla over this run.
    """
    runs = [run for run in runs if run.data == "summaries"]
    if not runs:
        return []
    base = runs[0]

    def per_update(run: Run) -> float:
        return run.train_cpu / run.updates if run.updates else math.nan

    def ratio(numerator: float, denominator: float) -> float:
        # fairseq prints times to 0.1 s: a tiny decode may read 0.0
        return numerator / denominator if denominator > 0 else math.nan

    rows = []
    for run in runs:
        rows.append(_dashes([
            run.label, run.params if run.params is not None else "-", run.updates,
            run.train_seconds, run.train_cpu, run.valid_nll,
            run.rouge.get("rouge1", math.nan), run.rouge.get("rouge2", math.nan),
            run.rouge.get("rougeL", math.nan), ratio(per_update(base), per_update(run)),
            run.decode_seconds, ratio(base.decode_seconds, run.decode_seconds)]))
    return rows


def loss_plot(runs: Sequence[Run], path: Path,
              references: SummaryReferences | None = None) -> Path:
    """One panel per task (their vocabularies differ); the summaries' unigram entropy dashed."""
    def curves(data: str) -> Dict[str, tuple]:
        return {run.label: ([u for u, _ in run.losses], [v for _, v in run.losses])
                for run in runs if run.losses and run.data == data}

    dashed = ({} if references is None else
              {"Summarization": ("unigram entropy of the summaries", references.entropy_bits)})
    return task_loss_panels(path, {"Translation": curves("sentences"),
                                   "Summarization": curves("summaries")},
                            "Training cross-entropy (full softmax)", references=dashed)


def summary_table(runs: Sequence[Run], references: SummaryReferences | None) -> List[list]:
    """The models' rows, then the trivial and lead reference rows."""
    rows = summary_rows(runs)
    return rows + (references.rows(SUMMARY_HEADERS) if references and rows else [])


def summary_findings(runs: Sequence[Run], references: SummaryReferences | None) -> List[str]:
    if references is None:
        return []
    models = [dict(zip(SUMMARY_HEADERS, row), label=row[0]) for row in summary_rows(runs)]
    return references.findings(models)


def try_commands(runs: Sequence[Run], work: Path, scale: Scale) -> List[tuple]:
    """``(label, shell line)`` for every trained model, for the report's last section."""
    commands = []
    for run in runs:
        checkpoint = work / run.key / "checkpoint_last.pt"
        if run.data == "summaries":
            command = summary_command(work / "bin" / "summaries", checkpoint,
                                      work / "prep" / "summaries" / "spm.model", USER_DIR,
                                      scale.beam, scale.summary.target_tokens)
        else:
            command = translation_command(work / "bin" / "sentences", checkpoint,
                                          work / "prep" / "bpe.codes", USER_DIR, scale.beam,
                                          run.generate_flags)
        commands.append((run.label, command))
    return commands



def _report_section(title: str, corpus: str, size: str, table: str, columns: str) -> List[str]:
    """One task's part of the report: what it trained on, at what size, the table, its columns."""
    return [f"## {title}\n", f"Corpus: {corpus}.  ", f"{size}.\n", table, columns]


def write_report(out: Path, runs: Sequence[Run], context: Dict[str, object],
                 figures: Sequence[Path]) -> Path:
    notes = [f"- {run.label}: {run.note}" for run in runs if run.note]
    images = {p.name: p for p in figures}
    parts = [
        "# relu-former demo report\n",
        f"Machine: {context['machine']}. Total wall time {context['wall']}.\n",
    ]
    translation = table_rows(runs)
    if translation:
        parts += _report_section(
            "Translation", context["corpus"], f"Size `{context['scale']}`: {context['model']}",
            markdown_table(TABLE_HEADERS, translation, digits=3),
            "Columns: `train s` is fairseq's own training time (no start-up); `words/s` the median "
            "of its per-interval target words per second; `valid nll` the full-softmax "
            "cross-entropy on valid (bits); `BLEU` sacreBLEU on detokenised, case-insensitive test "
            "output; `tok BLEU` fairseq's BLEU on the tokenised text (the paper's kind); attention "
            "entropy (nats) and share of exactly-zero weights are means over every attention row "
            "of every layer and head on the test split "
            "(`scripts/analysis/analyze_attention.py`). The models trained from scratch get the "
            "same update budget and wall-clock cap, whichever comes first; the "
            "last two continue the softmax Transformer's last checkpoint, each for the same "
            "number of updates, with a fresh Adam and a constant learning rate (the one the "
            "softmax run ended at).\n")
    if context.get("summary_corpus"):
        parts += _report_section(
            "Long-input summarization", context["summary_corpus"],
            f"Size: {context['summary_model']}",
            markdown_table(SUMMARY_HEADERS,
                           summary_table(runs, context.get("summary_references")), digits=3),
            "Columns: ROUGE-1/2/L are F1 x 100 (rouge-score, Porter stemmer) of the decoded "
            "summaries against the pages' own NAME descriptions "
            "(`scripts/recipes/lib/score.py`, the recipes' scorer); `train CPU s` the CPU "
            "time of the whole fairseq-train process; `train speed` the vanilla encoder's "
            "CPU seconds per update divided by this model's (above 1: faster); `decode s` "
            "fairseq-generate's own time for the test split and `decode speed` the vanilla "
            "encoder's time divided by this model's. The models train, and then "
            "decode, at the same time, so that the machine's load affects each alike. The "
            "reference rows read no model: the trivial output is the same for every page (the "
            "most frequent words of the training summaries; its `valid nll` is the summaries' "
            "unigram entropy, what a model of word frequencies alone gets), the lead output "
            "a page's first words.\n")
        findings = summary_findings(runs, context.get("summary_references"))
        if findings:
            parts.append("\n".join(f"- {line}" for line in findings) + "\n")
    if notes:
        parts.append("\n".join(notes) + "\n")
    captions = [
        ("demo_loss.png", "Training curves of every run"),
        ("analyze_attention_heatmap.png",
         "Cross-attention of one test sentence, softmax vs ReLU (last layer, mean of heads)"),
        ("analyze_attention_entropy.png", "Attention entropy per layer"),
        ("analyze_attention_zeros.png", "Share of zero attention weights per layer"),
    ]
    for name, caption in captions:
        if name in images:
            parts.append(f"## {caption}\n\n![{caption}]({name})\n")
    if "analyze_attention.md" in images:
        parts.append("Per-layer and per-head figures: [analyze_attention.md]"
                     "(analyze_attention.md).\n")
    if context.get("try_it"):
        parts.append(context["try_it"])
    return write_text_atomic(out / "report.md", "\n".join(parts))


# ----------------------------------------------------------------------------- main

def add_run_args(parser: argparse.ArgumentParser, out: str, out_files: str, unit: str,
                 jobs_help: str) -> None:
    """The flags the demo and the ablations share: report folder, catalogs, CPU share, seed;
    ``unit`` is what is trained ("model", "variant")."""
    parser.add_argument("--out", type=Path, default=REPO_ROOT / out,
                        help=f"report folder ({out_files}; work files in OUT/work; "
                             f"default: {out})")
    parser.add_argument("--locale-dir", type=Path, default=Path("/usr/share/locale"),
                        help="where the gettext catalogs are: <dir>/<lang>/LC_MESSAGES/*.mo "
                             "(default: %(default)s)")
    parser.add_argument("--lang", default=SRC,
                        help="catalog language used as the source side, into English "
                             "(default: de)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="CPU threads in all, shared by the --jobs processes (default: "
                             "all cores)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help=jobs_help)
    parser.add_argument("--budget-scale", type=float, default=1.0,
                        help=f"multiply every {unit}'s wall-clock training cap (default 1)")
    parser.add_argument("--seed", type=int, default=1, help="training seed (default 1)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def check_run_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``parser.error`` for the flags of :func:`add_run_args` out of range."""
    if args.threads < 1 or args.jobs < 1:
        parser.error("--threads and --jobs must be at least 1")
    if args.budget_scale <= 0:
        parser.error(f"--budget-scale must be positive, got {args.budget_scale}")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_const", dest="scale", const="full",
                      help="a longer, better run: every pair, 3+3 layers of width 256, "
                           "3000 updates per translation model, 2,048-token summarization "
                           "inputs (not measured; hours on 2 cores)")
    size.add_argument("--tiny", action="store_const", dest="scale", const="tiny",
                      help="a smoke test: 400 pairs, 1 layer of width 32, 20 updates per "
                           "model, 64-token summarization inputs")
    parser.set_defaults(scale="default")
    add_run_args(parser, "demo_out", "report.md, PNGs", "model",
                 "translation models trained (and decoded) at the same time, each with "
                 "--threads / --jobs threads (default: 2, or 1 on one core); the "
                 "summarization models always run together")
    parser.add_argument("--man-dir", type=Path, default=Path("/usr/share/man"),
                        help="where the manual pages are: <dir>/man<section>/*.gz "
                             "(default: %(default)s)")
    parser.add_argument("--sparse-k", type=int, default=20,
                        help="k of the sparse-softmax training criterion (default 20)")
    parser.add_argument("--sparse-decode-k", type=int, default=5,
                        help="k of sparse-softmax decoding of the sparse-softmax models, "
                             "raised to the beam if smaller; 0 decodes with the full softmax "
                             "(default 5)")
    parser.add_argument("--no-summaries", action="store_true",
                        help="skip the long-input summarization part")
    parser.add_argument("--no-translation", action="store_true",
                        help="skip the translation part (and the attention analysis)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the corpora, data and finished trainings already in "
                             "OUT/work (same size and corpus flags); decode and report again")
    args = parser.parse_args(argv)
    check_run_args(parser, args)
    if args.sparse_k < 1 or args.sparse_decode_k < 0:
        parser.error("--sparse-k must be >= 1 and --sparse-decode-k >= 0")
    if args.no_summaries and args.no_translation:
        parser.error("--no-summaries and --no-translation leave nothing to run")
    return args


def machine_line() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPU cores, load average {load} (1/5/15 min) at the end"



@dataclass
class Demo:
    """One demo run's settings and folders, and how it reports progress."""

    args: argparse.Namespace
    scale: Scale
    work: Path
    resume: bool
    started: float = field(default_factory=time.time)

    def say(self, message: str) -> None:
        print(f"[demo {time.time() - self.started:6.0f}s] {message}", flush=True)

    def bin(self, data: str) -> Path:
        return self.work / "bin" / data

    def data_step(self, name: str, step: str, what: str, how: str,
                  build: Callable[[], str]) -> str:
        """Run ``build`` (it returns the data's description) once: with ``--resume``, the
        description an earlier run saved as ``WORK/NAME.txt`` stands for the data."""
        path = self.work / f"{name}.txt"
        corpus = path.read_text().strip() if self.resume and path.is_file() else None
        if corpus:
            self.say(f"{step} reusing the {what} in {self.work}: {corpus}")
            return corpus
        self.say(f"{step} {what}: {how}")
        corpus = build()
        write_text_atomic(path, corpus + "\n")
        return corpus


def start(args: argparse.Namespace) -> Demo:
    """Check ``--resume`` against the work folder's settings, or empty it."""
    scale = SCALES[args.scale]
    work = args.out / "work"
    stamp = work / "settings.json"
    settings = {"scale": scale.name, "locale_dir": str(args.locale_dir), "lang": args.lang,
                "man_dir": str(args.man_dir)}
    resume = args.resume and stamp.is_file()
    if resume and json.loads(stamp.read_text()) != settings:
        raise SystemExit(f"--resume: {work} was made with {stamp.read_text()}, not "
                         f"{json.dumps(settings)}; drop --resume to start afresh")
    if not resume and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    write_text_atomic(stamp, json.dumps(settings))
    return Demo(args, scale, work, resume)


def translation_data(demo: Demo) -> str:
    """Step 1: the gettext corpus, tokenised, BPE'd and binarised."""

    def build() -> str:
        raw, prep = demo.work / "raw", demo.work / "prep"
        corpus = make_corpus(demo.args, demo.scale, raw, demo.say)
        demo.say(f"  {corpus}")
        prepare(raw, prep, demo.scale.bpe_merges, demo.say)
        preprocess(prep / "sentences", demo.bin("sentences"), child_env(demo.args.threads))
        return corpus

    return demo.data_step("corpus", "1/6", "translation data",
                          "the corpus, Moses tokenisation, BPE, fairseq-preprocess", build)


def summarization_data(demo: Demo) -> str:
    """Step 2: the manual-page corpus, SentencePiece, cut to length, binarised."""

    def build() -> str:
        prep = demo.work / "prep" / "summaries"
        prep.mkdir(parents=True, exist_ok=True)
        corpus = build_summary_data(demo.args.man_dir, demo.scale.summary,
                                    demo.work / "raw" / "summaries", prep, demo.say)
        demo.say(f"  {corpus}")
        preprocess(prep, demo.bin("summaries"), child_env(demo.args.threads), src=DOC, tgt=SUM)
        return corpus

    return demo.data_step("summary_corpus", "2/6", "summarization data",
                          "manual pages, SentencePiece, fairseq-preprocess", build)


def train_all(demo: Demo, runs: List[Run], jobs: int, step: str) -> None:
    """Train every run not already trained (``--resume``), ``jobs`` at a time."""
    done = [run for run in runs if demo.resume and trained_before(run, demo.work)]
    if done:
        demo.say("  reusing the trained " + ", ".join(r.key for r in done) + " (--resume)")
    todo = [run for run in runs if run not in done]
    if not todo:
        return
    demo.say(f"{step} training {len(todo)} models: " + ", ".join(r.label for r in todo))
    in_parallel(lambda run, pos: train(run, demo.bin(run.data), demo.work, demo.scale,
                                       demo.args, pos), todo, jobs)


def decode_all(demo: Demo, runs: List[Run], jobs: int) -> None:
    in_parallel(lambda run, pos: generate(run, demo.bin(run.data), demo.work, demo.scale,
                                          demo.args, pos), runs, jobs)


def describe(demo: Demo) -> Dict[str, str]:
    scale, args, s = demo.scale, demo.args, demo.scale.summary
    return {
        "scale": scale.name,
        "model": (f"{scale.layers}+{scale.layers} layers, width {scale.dim}, FFN {scale.ffn}, "
                  f"{scale.heads} heads, joint BPE {scale.bpe_merges} merges, beam {scale.beam}; "
                  f"budget per model {scale.max_update} updates or "
                  f"{scale.time_budget_s * args.budget_scale:.0f} s, continuations "
                  f"{scale.finetune_update} updates; {args.jobs} models at a time with "
                  f"{threads_per_job(args)} thread(s) each"),
        "summary_model": (f"{s.layers}+{s.layers} layers, width {s.dim}, FFN {s.ffn}, "
                          f"{s.heads} heads, full attention, inputs of {s.source_tokens} "
                          f"tokens, summaries of at most {s.target_tokens}, beam {scale.beam}; "
                          f"{s.max_update} updates of {s.max_tokens} source tokens or "
                          f"{s.time_budget_s * args.budget_scale:.0f} s per model, the models "
                          "at once with one thread each"),
        "machine": machine_line(),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    demo = start(args)
    demo.say(f"size {demo.scale.name}; report in {args.out}")
    context: Dict[str, object] = {"corpus": "skipped (--no-translation)", "summary_corpus": ""}
    if not args.no_translation:
        context["corpus"] = translation_data(demo)
    if not args.no_summaries:
        context["summary_corpus"] = summarization_data(demo)
    names = registered_names()
    translation = ([] if args.no_translation
                   else translation_runs(demo.scale, names, args, demo.say))
    summaries = [] if args.no_summaries else summary_runs(demo.scale.summary, names, demo.say)
    if not summaries:
        context["summary_corpus"] = ""
    train_all(demo, translation, args.jobs, "3/6")
    # the summarization models side by side, one thread each, so that load slows each alike
    train_all(demo, summaries, len(summaries), "4/6")
    demo.say("5/6 decoding the test splits")
    decode_all(demo, translation, args.jobs)
    decode_all(demo, summaries, len(summaries))
    demo.say("6/6 attention analysis, plots, report")
    figures = []
    if translation:
        figures = analyse_attention(translation, demo.bin("sentences"), args.out,
                                    heatmap_sentence(demo.work / "prep"),
                                    demo.scale.analysis_sentences, args.threads)
    references = None
    if summaries:
        references = SummaryReferences.measure(demo.work / "prep" / "summaries",
                                                demo.bin("summaries") / f"dict.{SUM}.txt")
    figures.append(loss_plot(translation + summaries, args.out / "demo_loss.png", references))
    wall = time.time() - demo.started
    context.update(describe(demo), wall=f"{wall / 60:.1f} min", summary_references=references,
                   try_it=try_it_section(try_commands(translation + summaries, demo.work,
                                                      demo.scale)))
    report = write_report(args.out, translation + summaries, context, figures)
    print()
    if translation:
        print(markdown_table(TABLE_HEADERS, table_rows(translation)))
    if summaries:
        print(markdown_table(SUMMARY_HEADERS, summary_table(summaries, references)))
        print("\n".join(summary_findings(summaries, references)))
    demo.say(f"done in {wall / 60:.1f} min; report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
