"""The relu-former demo: real German-English translation, offline, side by side.

What it does (``make demo`` runs it with the default size):

1. Builds a De-En corpus from the GNU gettext catalogs installed on the machine
   (``scripts/demo/gettext_corpus.py``; falls back, saying so, to a generated task when there are
   none), Moses-tokenises and lower-cases it and learns a joint BPE
   (``scripts/recipes/lib/prepare_text.py``, the recipes' helpers), then ``fairseq-preprocess``.
2. Trains, with the same small size, data and update/time budget, through the real
   ``fairseq-train --user-dir relu_former``:
   a softmax Transformer, a ReLUFormer (ReLU attention + the regularisers) and a Transformer
   trained with the sparse-softmax criterion (decoded with sparse-softmax top-k).
3. Packs consecutive sentences of each catalog into long documents and trains a
   Transpooler (or Pyramidion) encoder against a vanilla encoder on them.
4. Decodes the test split with ``fairseq-generate``, scores it with sacreBLEU, measures each
   model's attention (``scripts/analysis/analyze_attention.py``) and prints a table; writes
   ``OUT/report.md`` with the table and PNGs (loss curves, softmax-vs-ReLU heat map, entropy
   and zero share per layer).

    python -m scripts.demo.demo                 # default size, < 20 min on 2 idle cores
    python -m scripts.demo.demo --full          # bigger models, 5x the training budget
    python -m scripts.demo.demo --tiny          # seconds per model: a smoke test (tests use it)
    python -m scripts.demo.demo --locale-dir /nonexistent   # the generated-task fallback
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
from typing import Dict, List, Sequence

from scripts.common.fairseq_cli import fairseq_command
from scripts.common.fairseq_log import parse_json_log_line
from scripts.common.plotting import line_plot, markdown_table, write_text_atomic
from scripts.demo.gettext_corpus import Pair, build_corpus, write_corpus
from scripts.recipes.lib.prepare_text import (
    BpeEncoder,
    learn_bpe,
    moses_detokenize,
    moses_tokenize,
    pack_documents,
    read_lines,
    write_lines,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC, TGT = "de", "en"
USER_DIR = str(REPO_ROOT / "relu_former")
# The generated fallback must be big enough for BPE and batching to behave like real data.
MIN_GETTEXT_TRAIN_PAIRS = 200


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
    max_update: int            # update budget of a sentence-level model ...
    time_budget_s: float       # ... and its wall-clock cap (whichever comes first)
    doc_max_tokens: int        # BPE tokens per document segment
    doc_max_update: int
    doc_time_budget_s: float
    beam: int
    warmup: int
    lr: float
    analysis_sentences: int
    generated_train: int       # training pairs of the generated fallback task
    heldout_per_mille: int = 15  # share of catalog pairs in valid, and again in test


SCALES = {
    # tiny holds out more, so that a fixture catalog of a few hundred pairs has a test set
    "tiny": Scale("tiny", 400, 40, 150, 1, 32, 64, 2, 1200, 20, 60.0, 48, 10, 60.0, 2, 10,
                  3e-3, 20, 400, heldout_per_mille=80),
    "default": Scale("default", 30000, 500, 3000, 2, 128, 256, 4, 2048, 800, 400.0, 128, 300,
                     360.0, 4, 300, 2e-3, 300, 20000),
    "full": Scale("full", None, 1000, 6000, 3, 256, 1024, 4, 4096, 3000, 1800.0, 256, 1000,
                  1200.0, 5, 1000, 1e-3, 500, 60000),
}


# ----------------------------------------------------------------------------- the runs

@dataclass
class Run:
    """One model of the comparison: how to train and decode it, and what it measured."""

    key: str
    label: str
    arch: str
    train_flags: List[str]
    data: str = "sentences"  # or "documents"
    generate_flags: List[str] = field(default_factory=list)
    # measured
    losses: List[tuple] = field(default_factory=list)  # (update, training nll in bits)
    wps: List[float] = field(default_factory=list)
    params: int | None = None
    updates: int = 0
    train_seconds: float = math.nan
    valid_nll: float = math.nan
    bleu: float = math.nan
    tok_bleu: float = math.nan
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


def model_flags(scale: Scale) -> List[str]:
    return [
        "--encoder-layers", str(scale.layers), "--decoder-layers", str(scale.layers),
        "--encoder-embed-dim", str(scale.dim), "--decoder-embed-dim", str(scale.dim),
        "--encoder-ffn-embed-dim", str(scale.ffn), "--decoder-ffn-embed-dim", str(scale.ffn),
        "--encoder-attention-heads", str(scale.heads),
        "--decoder-attention-heads", str(scale.heads), "--share-all-embeddings",
    ]


def plan_runs(scale: Scale, names: Dict[str, set], args: argparse.Namespace,
              say=print) -> List[Run]:
    """The comparison, with whatever the plugin registers; a missing name is said, not fatal."""
    smoothed = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]
    runs = []
    if "relu_former_iwslt_de_en" in names["arch"]:
        # The softmax baseline goes through the same attention module as ReLUFormer, so the
        # only difference between the two rows is the activation (DESIGN.md 2.4).
        base = "relu_former_iwslt_de_en"
        softmax = ["--attention-activation", "softmax"]
        runs.append(Run("softmax", "Transformer (softmax)", base, softmax + smoothed))
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
                            ["--attention-activation", "relu"] + smoothed))
    else:
        say("note: arch relu_former_iwslt_de_en is not registered; using fairseq's transformer")
        base, softmax = "transformer", []
        runs.append(Run("softmax", "Transformer (softmax)", base, smoothed))
    if "sparse_softmax_cross_entropy" in names["criterion"]:
        decode = []
        if "translation_sparse_decoding" in names["task"] and args.sparse_decode_k > 0:
            decode = ["--task", "translation_sparse_decoding",
                      "--sparse-softmax-k", str(max(args.sparse_decode_k, scale.beam))]
        runs.append(Run("sparse", "Transformer + sparse-softmax", base, softmax + [
            "--criterion", "sparse_softmax_cross_entropy", "--sparse-k", str(args.sparse_k),
            "--label-smoothing", "0.1"], generate_flags=decode))
    else:
        say("note: criterion sparse_softmax_cross_entropy is not registered; skipping that run")
    if not args.no_documents:
        runs += document_runs(scale, names, base, softmax + smoothed, say)
    return runs


def document_runs(scale: Scale, names: Dict[str, set], base: str, flags: List[str],
                  say=print) -> List[Run]:
    """A pooling encoder and the vanilla encoder it shortens, on packed documents.

    Both go through the same architecture; the vanilla one has ``--pooling-schedule none``,
    so the only difference is the pooling (to a quarter of the segment length, after the last
    encoder layer: a Transpooler).
    """
    positions = ["--max-source-positions", str(scale.doc_max_tokens + 8),
                 "--max-target-positions", str(scale.doc_max_tokens + 8)]
    arch = "transpooler_base"
    if arch not in names["arch"]:
        say(f"note: {arch} is not registered; the document part trains a vanilla encoder only")
        return [Run("doc_vanilla", "Vanilla encoder (documents)", base, flags + positions,
                    data="documents")]
    pooled = max(1, scale.doc_max_tokens // 4)
    return [
        Run("doc_vanilla", "Vanilla encoder (documents)", arch,
            flags + positions + ["--pooling-schedule", "none"], data="documents"),
        Run("doc_pooled", f"Transpooler {scale.doc_max_tokens}->{pooled} (documents)", arch,
            flags + positions + ["--pooling-schedule", f"last:{pooled}"], data="documents"),
    ]


# ----------------------------------------------------------------------------- corpus

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


def prepare(raw: Path, prep: Path, merges: int, doc_max_tokens: int, say=print) -> None:
    """Moses-tokenise + lower-case, learn a joint BPE, apply it, pack documents."""
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
    for split in ("train", "valid", "test"):
        src = read_lines(prep / "sentences" / f"{split}.{SRC}")
        tgt = read_lines(prep / "sentences" / f"{split}.{TGT}")
        catalogs = read_lines(raw / f"{split}.catalog")
        documents: List[list] = []
        for i, catalog in enumerate(catalogs):
            if i == 0 or catalog != catalogs[i - 1]:
                documents.append([])
            documents[-1].append((src[i], tgt[i]))
        segments = pack_documents(documents, doc_max_tokens)
        write_lines(prep / "documents" / f"{split}.{SRC}", (s for s, _ in segments))
        write_lines(prep / "documents" / f"{split}.{TGT}", (t for _, t in segments))
        if split == "train":
            say(f"  packed {len(src)} training sentences into {len(segments)} documents of "
                f"<= {doc_max_tokens} BPE tokens")


# ----------------------------------------------------------------------------- fairseq CLI

def child_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # Checkpoints load safely through the plugin's allowlist; never the unsafe switch.
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    return env


def threads_per_job(args: argparse.Namespace) -> int:
    return max(1, args.threads // args.jobs)


def in_parallel(step, runs: Sequence[Run], jobs: int) -> None:
    """Run ``step(run, position)`` for every run, ``jobs`` at a time; re-raise the first error.

    Small models use one core poorly, so two single-threaded runs side by side finish about
    twice as fast as two two-threaded runs one after the other.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(step, run, i % jobs) for i, run in enumerate(runs)]
        for future in futures:
            future.result()


def stream(command: Sequence[str], log_path: Path, on_line, env: Dict[str, str]) -> int:
    """Run a command, tee its merged output to ``log_path`` and feed each line to ``on_line``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log, subprocess.Popen(
            [str(c) for c in command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, cwd=REPO_ROOT) as proc:
        for line in proc.stdout:
            log.write(line)
            on_line(line.rstrip("\n"))
    return proc.returncode


def preprocess(text: Path, dest: Path, env: Dict[str, str], srcdict: Path | None = None) -> None:
    command = [fairseq_command("fairseq-preprocess"), "--source-lang", SRC, "--target-lang", TGT,
               "--trainpref", text / "train", "--validpref", text / "valid",
               "--testpref", text / "test", "--destdir", dest, "--joined-dictionary",
               "--workers", "1"]
    if srcdict is not None:
        command += ["--srcdict", srcdict]
    if stream(command, dest.parent / f"preprocess.{dest.name}.log", lambda _: None, env):
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


def train(run: Run, data_bin: Path, work: Path, scale: Scale, args: argparse.Namespace,
          position: int = 0) -> None:
    """Train one model with ``fairseq-train``, folding its log into ``run``."""
    from tqdm import tqdm

    documents = run.data == "documents"
    max_update = scale.doc_max_update if documents else scale.max_update
    budget = scale.doc_time_budget_s if documents else scale.time_budget_s
    budget *= args.budget_scale
    log_interval = max(1, min(25, max_update // 20))
    command = [
        fairseq_command("fairseq-train"), data_bin, "--user-dir", USER_DIR, "--arch", run.arch,
        *model_flags(scale), "--dropout", "0.1", "--cpu", "--seed", str(args.seed),
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
        "--lr", str(scale.lr), "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", str(scale.warmup), "--warmup-init-lr", "1e-07",
        "--max-tokens", str(scale.max_tokens * (2 if documents else 1)),
        "--max-update", str(max_update), "--stop-time-hours", f"{budget / 3600:.6f}",
        # validate and save once, at the end: every second goes to training
        "--validate-interval", "1000", "--save-interval", "1000", "--no-epoch-checkpoints",
        "--save-dir", work / run.key, "--log-format", "json",
        "--log-interval", str(log_interval), "--no-progress-bar", "--num-workers", "0",
        # fairseq's batcher drops a whole split smaller than this multiple (8 by default)
        "--required-batch-size-multiple", "1",
        "--skip-invalid-size-inputs-valid-test", *run.train_flags,
    ]
    bar = tqdm(total=max_update, desc=f"train {run.key:<11}", unit="upd", leave=True,
               disable=args.quiet, dynamic_ncols=True, mininterval=1.0, position=position)
    started = time.time()

    def on_line(line: str) -> None:
        if parse_log_line(line, run) == "train_inner":
            bar.update(run.updates - bar.n)
            bar.set_postfix(nll=f"{run.losses[-1][1]:.2f}",
                            budget=f"{time.time() - started:.0f}/{budget:.0f}s")

    code = stream(command, work / run.key / "train.log", on_line, child_env(threads_per_job(args)))
    bar.update(run.updates - bar.n)
    bar.close()
    if code != 0 or not (work / run.key / "checkpoint_last.pt").is_file():
        tail = (work / run.key / "train.log").read_text()[-3000:]
        raise RuntimeError(f"fairseq-train failed for {run.key} (exit {code}):\n{tail}")


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
    run.__dict__.update(fresh.__dict__)
    return True


def generate(run: Run, data_bin: Path, work: Path, raw: Path, scale: Scale,
             args: argparse.Namespace, position: int = 0) -> None:
    """Decode the test split and score it: sacreBLEU on detokenised text, and tokenised BLEU."""
    import sacrebleu
    from tqdm import tqdm

    n_test = len(read_lines(work / "prep" / run.data / f"test.{SRC}"))
    command = [
        fairseq_command("fairseq-generate"), data_bin, "--user-dir", USER_DIR,
        "--path", work / run.key / "checkpoint_last.pt", "--gen-subset", "test",
        "--beam", str(scale.beam), "--max-tokens", "6000", "--remove-bpe", "--cpu",
        "--num-workers", "0", "--required-batch-size-multiple", "1",
        "--skip-invalid-size-inputs-valid-test", *run.generate_flags,
    ]
    hypotheses: Dict[int, str] = {}
    bar = tqdm(total=n_test, desc=f"decode {run.key:<10}", unit="sent", leave=True,
               disable=args.quiet, dynamic_ncols=True, mininterval=1.0, position=position)

    def on_line(line: str) -> None:
        match = re.match(r"^H-(\d+)\t\S+\t(.*)$", line)
        if match:
            hypotheses[int(match.group(1))] = match.group(2)
            bar.update(1)
        match = re.search(r"BLEU4? = ([\d.]+)", line)
        if match:
            run.tok_bleu = float(match.group(1))

    code = stream(command, work / run.key / "generate.log", on_line,
                  child_env(threads_per_job(args)))
    bar.close()
    if code != 0:
        tail = (work / run.key / "generate.log").read_text()[-3000:]
        raise RuntimeError(f"fairseq-generate failed for {run.key} (exit {code}):\n{tail}")
    references = read_lines(raw / run.data / f"test.{TGT}")
    ordered = [hypotheses.get(i, "") for i in range(len(references))]
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

    Uses ``scripts/analysis/analyze_attention.py``: the table numbers are means over every attention
    row of every attention module; the per-layer plots and the heat map compare the softmax
    Transformer with the ReLUFormer.
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
        total = aa.RowSums()
        for (module, _, _), sums in analysis.sums.items():
            if module.endswith("attn"):
                total.add(sums)
        means = total.means()
        run.entropy, run.zeros = means["entropy"], means["zeros"]
        analyses[run.key] = analysis
    shown = [analyses[k] for k in ("softmax", "relu") if k in analyses]
    args.path = [paths[k] for k in ("softmax", "relu") if k in analyses]
    return aa.write_outputs(shown, args)


# ----------------------------------------------------------------------------- report

TABLE_HEADERS = ["model", "data", "params", "updates", "train s", "words/s", "valid nll",
                 "BLEU", "tok BLEU", "attn entropy", "attn zeros"]


def table_rows(runs: Sequence[Run]) -> List[list]:
    rows = []
    for run in runs:
        median_wps = sorted(run.wps)[len(run.wps) // 2] if run.wps else math.nan
        rows.append([run.label, run.data, run.params if run.params is not None else "-",
                     run.updates, run.train_seconds, median_wps, run.valid_nll, run.bleu,
                     run.tok_bleu, run.entropy, run.zeros])
        # not measured (the document models are not analysed) reads better as "-" than nan
        rows[-1] = ["-" if isinstance(v, float) and math.isnan(v) else v for v in rows[-1]]
    return rows


def loss_plot(runs: Sequence[Run], path: Path) -> Path:
    series = {run.label: ([u for u, _ in run.losses], [v for _, v in run.losses])
              for run in runs if run.losses}
    return line_plot(path, series, "Training cross-entropy (full softmax, bits per token)",
                     "update", "training nll (bits)")


def write_report(out: Path, runs: Sequence[Run], context: Dict[str, str],
                 figures: Sequence[Path]) -> Path:
    table = markdown_table(TABLE_HEADERS, table_rows(runs), digits=3)
    notes = [f"- {run.label}: {run.note}" for run in runs if run.note]
    images = {p.name: p for p in figures}
    parts = [
        "# relu-former demo report\n",
        f"Corpus: {context['corpus']}.  ",
        f"Size `{context['scale']}`: {context['model']}.  ",
        f"Machine: {context['machine']}. Total wall time {context['wall']}.\n",
        table,
        "Columns: `train s` is fairseq's own training time (no start-up); `words/s` the median "
        "of its per-interval target words per second; `valid nll` the full-softmax "
        "cross-entropy on valid (bits); `BLEU` sacreBLEU on detokenised, case-insensitive test "
        "output; `tok BLEU` fairseq's BLEU on the tokenised text (the paper's kind); attention "
        "entropy (nats) and share of exactly-zero weights are means over every attention row "
        "of every layer and head on the test split "
        "(`scripts/analysis/analyze_attention.py`). Every "
        "model gets the same update budget and the same wall-clock cap, whichever comes "
        "first.\n",
        *([("\n".join(notes) + "\n")] if notes else []),
    ]
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
    return write_text_atomic(out / "report.md", "\n".join(parts))


# ----------------------------------------------------------------------------- main

def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_const", dest="scale", const="full",
                      help="a longer, better run: every pair, 3+3 layers of width 256, "
                           "3000 updates per model (estimated 1.5-2 h on 2 cores)")
    size.add_argument("--tiny", action="store_const", dest="scale", const="tiny",
                      help="a smoke test: 400 pairs, 1 layer of width 32, 20 updates per model")
    parser.set_defaults(scale="default")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "demo_out",
                        help="report folder (report.md, PNGs; work files in OUT/work; "
                             "default: demo_out)")
    parser.add_argument("--locale-dir", type=Path, default=Path("/usr/share/locale"),
                        help="where the gettext catalogs are: <dir>/<lang>/LC_MESSAGES/*.mo "
                             "(default: %(default)s)")
    parser.add_argument("--lang", default=SRC,
                        help="catalog language used as the source side (default: de)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="CPU threads in all, shared by the --jobs processes (default: "
                             "all cores)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="models trained (and decoded) at the same time, each with "
                             "--threads / --jobs threads (default: 2, or 1 on one core)")
    parser.add_argument("--budget-scale", type=float, default=1.0,
                        help="multiply every model's wall-clock training cap (default 1)")
    parser.add_argument("--sparse-k", type=int, default=20,
                        help="k of the sparse-softmax training criterion (default 20)")
    parser.add_argument("--sparse-decode-k", type=int, default=5,
                        help="k of sparse-softmax decoding of that model, raised to the beam "
                             "if smaller; 0 decodes with the full softmax (default 5)")
    parser.add_argument("--no-documents", action="store_true",
                        help="skip the long-document part (Transpooler/Pyramidion vs vanilla)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the corpus, data and finished trainings already in OUT/work "
                             "(same size and corpus flags); decode and report again")
    parser.add_argument("--seed", type=int, default=1, help="training seed (default 1)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.jobs < 1:
        parser.error("--threads and --jobs must be at least 1")
    if args.budget_scale <= 0:
        parser.error("--budget-scale must be positive")
    if args.sparse_k < 1 or args.sparse_decode_k < 0:
        parser.error("--sparse-k must be >= 1 and --sparse-decode-k >= 0")
    return args


def machine_line() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPU cores, load average {load} (1/5/15 min) at the end"


def main(argv=None) -> int:
    args = parse_args(argv)
    scale = SCALES[args.scale]
    out: Path = args.out
    work, raw, prep = out / "work", out / "work" / "raw", out / "work" / "prep"
    stamp = work / "settings.json"
    settings = {"scale": scale.name, "locale_dir": str(args.locale_dir), "lang": args.lang,
                "documents": not args.no_documents}
    resume = args.resume and stamp.is_file() and (work / "corpus.txt").is_file()
    if resume and json.loads(stamp.read_text()) != settings:
        raise SystemExit(f"--resume: {work} was made with {stamp.read_text()}, not "
                         f"{json.dumps(settings)}; drop --resume to start afresh")
    if not resume and work.exists():
        shutil.rmtree(work)
    started = time.time()

    def say(message: str) -> None:
        print(f"[demo {time.time() - started:6.0f}s] {message}", flush=True)

    say(f"size {scale.name}; report in {out}")
    bins = {"sentences": work / "bin" / "sentences", "documents": work / "bin" / "documents"}
    if resume:
        corpus = (work / "corpus.txt").read_text().strip()
        say(f"1-2/5 reusing the corpus and data in {work}: {corpus}")
    else:
        say("1/5 building the corpus")
        corpus = make_corpus(args, scale, raw, say)
        say(f"  {corpus}")
        for data in ("sentences", "documents"):  # raw references of each test set, for scoring
            (raw / data).mkdir(parents=True, exist_ok=True)
        shutil.copy(raw / f"test.{TGT}", raw / "sentences" / f"test.{TGT}")
        say("2/5 Moses tokenisation, BPE, document packing, fairseq-preprocess")
        prepare(raw, prep, scale.bpe_merges, scale.doc_max_tokens, say)
        write_lines(raw / "documents" / f"test.{TGT}", moses_detokenize(
            [line.replace("@@ ", "") for line in read_lines(prep / "documents" / f"test.{TGT}")],
            TGT))
        env = child_env(args.threads)
        preprocess(prep / "sentences", bins["sentences"], env)
        if not args.no_documents:
            preprocess(prep / "documents", bins["documents"], env,
                       srcdict=bins["sentences"] / f"dict.{SRC}.txt")
        write_text_atomic(work / "corpus.txt", corpus + "\n")
        write_text_atomic(stamp, json.dumps(settings))
    names = registered_names()
    runs = plan_runs(scale, names, args, say)
    done = [run for run in runs if resume and trained_before(run, work)]
    if done:
        say("  reusing the trained " + ", ".join(r.key for r in done) + " (--resume)")
    todo = [run for run in runs if run not in done]
    say(f"3/5 training {len(todo)} models: " + ", ".join(r.label for r in todo))
    in_parallel(lambda run, pos: train(run, bins[run.data], work, scale, args, pos), todo,
                args.jobs)
    for run in runs:
        documents = run.data == "documents"
        if run.updates < (scale.doc_max_update if documents else scale.max_update):
            budget = scale.doc_time_budget_s if documents else scale.time_budget_s
            run.note = (f"stopped by the {budget * args.budget_scale:.0f} s time cap after "
                        f"{run.updates} updates")
    say("4/5 decoding the test split")
    in_parallel(lambda run, pos: generate(run, bins[run.data], work, raw, scale, args, pos),
                runs, args.jobs)
    say("5/5 attention analysis, plots, report")
    sentence_runs = [run for run in runs if run.data == "sentences"]
    figures = analyse_attention(sentence_runs, bins["sentences"], out, heatmap_sentence(prep),
                                scale.analysis_sentences, args.threads)
    figures.append(loss_plot(runs, out / "demo_loss.png"))
    wall = time.time() - started
    context = {
        "corpus": corpus, "scale": scale.name,
        "model": (f"{scale.layers}+{scale.layers} layers, width {scale.dim}, FFN {scale.ffn}, "
                  f"{scale.heads} heads, joint BPE {scale.bpe_merges} merges, beam {scale.beam}; "
                  f"budget per model {scale.max_update} updates or "
                  f"{scale.time_budget_s * args.budget_scale:.0f} s (documents: "
                  f"{scale.doc_max_update} updates or "
                  f"{scale.doc_time_budget_s * args.budget_scale:.0f} s, segments of <= "
                  f"{scale.doc_max_tokens} tokens), {args.jobs} models at a time with "
                  f"{threads_per_job(args)} thread(s) each"),
        "machine": machine_line(), "wall": f"{wall / 60:.1f} min",
    }
    report = write_report(out, runs, context, figures)
    print()
    print(markdown_table(TABLE_HEADERS, table_rows(runs)))
    say(f"done in {wall / 60:.1f} min; report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
