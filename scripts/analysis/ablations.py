"""ReLUFormer's ablations side by side (the shape of the paper's Table 5), offline.

Every variant trains through the real ``fairseq-train --user-dir relu_former`` with the same
size, data, seed and update budget, on a translation corpus built from the GNU gettext
catalogs installed on the machine (``scripts/common/gettext_corpus.py``; ``--lang`` picks the
catalog language, translated into English). Then each model decodes the test split
(``fairseq-generate``, so the checkpoint is reloaded from disk) and its attention is measured on
the valid split (``scripts/analysis/analyze_attention.py``). The table:

    BLEU / tok BLEU   sacreBLEU on detokenised, lower-cased text / fairseq's tokenised BLEU
    entropy, zeros    mean attention row entropy (nats) and share of exactly-zero weights, over
                      every attention row of every layer and head (held-out data)
    L_norm, L_ent     the two regulariser terms on held-out data (ReLU attention only): L_norm
                      on the ReLU score sums, L_ent with C = 0.7 on each side of the margin
    converged         training finished with finite losses and its valid nll fell below 90%
                      of its first logged training nll; a run that fairseq stops (NaN, inf) is
                      reported as diverged, not raised

The variants (flags on top of the shared ones; all relu ones use ``relu_former``'s defaults
unless named):

    softmax             --attention-activation softmax, label-smoothed cross-entropy
    relu_former         ReLU attention with the factor and both regularisers
    no_regularisers     both regulariser weights 0 (the factor alone)
    norm_only           L_ent weight 0
    entropy_only        L_norm weight 0
    margin_above        --attention-entropy-margin-side above
    norm_on_weights     --attention-norm-row-sum weights
    no_factor           --relu-attention-scaling none, no regularisers
    layernorm           --relu-attention-scaling layernorm, no regularisers
    self_relu_only      --cross-attention-activation softmax (ReLU in self-attention only)
    learned_gamma       --relu-learn-gamma

    python -m scripts.analysis.ablations                      # about 15 min on 2 loaded cores
    python -m scripts.analysis.ablations --lang fr --variants softmax relu_former no_factor
    python -m scripts.analysis.ablations --tiny               # seconds per model: a smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Sequence

from scripts.common.atomic_files import write_text_atomic
from scripts.common.child_processes import child_env
from scripts.common.fairseq_generate import translate_and_score
from scripts.common.fairseq_preprocess import preprocess
from scripts.common.fairseq_train import train
from scripts.common.parallel_runs import in_parallel, machine_line, threads_per_job
from scripts.common.plotting import markdown_table
from scripts.common.run_args import add_run_args, check_run_args
from scripts.common.run_record import Budget, Run
from scripts.common.translation_data import SRC, TGT, make_corpus, prepare
from scripts.common.work_folder import empty_own_folder

ARCH = "relu_former_iwslt_de_en"
SMOOTHED = ["--label-smoothing", "0.1"]
REGULARISED = ["--attention-activation", "relu",
               "--criterion", "regularized_label_smoothed_cross_entropy", *SMOOTHED]
UNREGULARISED = [*REGULARISED, "--attention-norm-loss-weight", "0",
                 "--attention-entropy-loss-weight", "0"]

# key -> (label, flags); the order is the table's.
VARIANTS: Dict[str, tuple] = {
    "softmax": ("Transformer (softmax)", [
        "--attention-activation", "softmax", "--criterion", "label_smoothed_cross_entropy",
        *SMOOTHED]),
    "relu_former": ("ReLUFormer (factor + both regularisers)", REGULARISED),
    "no_regularisers": ("- without regularisers (factor alone)", UNREGULARISED),
    "norm_only": ("- L_norm only", [*REGULARISED, "--attention-entropy-loss-weight", "0"]),
    "entropy_only": ("- L_ent only", [*REGULARISED, "--attention-norm-loss-weight", "0"]),
    "margin_above": ("- L_ent penalising entropy above C log n",
                     [*REGULARISED, "--attention-entropy-margin-side", "above"]),
    "norm_on_weights": ("- L_norm on the applied weights' row sums",
                        [*REGULARISED, "--attention-norm-row-sum", "weights"]),
    "no_factor": ("ReLU without the variance factor",
                  [*UNREGULARISED, "--relu-attention-scaling", "none"]),
    "layernorm": ("ReLU + LayerNorm (no factor)",
                  [*UNREGULARISED, "--relu-attention-scaling", "layernorm"]),
    "self_relu_only": ("ReLUFormer, softmax cross-attention",
                       [*REGULARISED, "--cross-attention-activation", "softmax"]),
    "learned_gamma": ("ReLUFormer, learned gamma", [*REGULARISED, "--relu-learn-gamma"]),
}

@dataclass(frozen=True)
class AblationScale:
    """The corpus (:class:`~scripts.common.translation_data.CorpusSize`), BPE, decoding and
    analysis sizes, and every variant's model size and budget."""

    name: str
    max_train: int | None
    max_test: int
    heldout_per_mille: int
    generated_train: int
    bpe_merges: int
    beam: int
    analysis_sentences: int
    budget: Budget


# The sizes: "tiny" is a smoke test (the demo's tiny translation size, 12 updates); "default"
# fits all eleven variants into about 15 minutes on two busy cores (two models at a time, one
# thread each).
ABLATION_SCALES = {
    "tiny": AblationScale("tiny", max_train=400, max_test=40, heldout_per_mille=80,
                          generated_train=400, bpe_merges=150, beam=2, analysis_sentences=10,
                          budget=Budget(layers=1, dim=32, ffn=64, heads=2, max_tokens=1200,
                                        max_update=12, time_budget_s=60.0, warmup=10,
                                        lr=3e-3)),
    "default": AblationScale("default", max_train=12000, max_test=200, heldout_per_mille=15,
                             generated_train=20000, bpe_merges=1500, beam=4,
                             analysis_sentences=60,
                             budget=Budget(layers=2, dim=64, ffn=128, heads=4, max_tokens=1024,
                                           max_update=250, time_budget_s=420.0, warmup=80,
                                           lr=3e-3)),
}

HEADERS = ["variant", "updates", "BLEU", "tok BLEU", "valid nll", "entropy", "zeros", "L_norm",
           "L_ent below", "L_ent above", "converged"]


@dataclass
class Result:
    """What one variant measured, besides the demo's ``Run`` figures."""

    converged: bool = False
    diverged: str = ""
    first_nll: float = math.nan
    norm_loss: float = math.nan
    entropy_below: float = math.nan
    entropy_above: float = math.nan


def plan(keys: Sequence[str]) -> List[Run]:
    return [Run(key, VARIANTS[key][0], ARCH, list(VARIANTS[key][1])) for key in keys]


def train_variant(run: Run, result: Result, data_bin: Path, work: Path, budget: Budget,
                  args: argparse.Namespace, position: int) -> None:
    """Train one variant; a run that fairseq stops is recorded as diverged."""
    try:
        train(run, budget, data_bin, work, args, position)
    except RuntimeError as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        reason = next((line for line in reversed(lines)
                       if re.search(r"nan|inf|overflow|Error", line, flags=re.I)), lines[-1])
        result.diverged = reason.strip()[-160:]
    if run.losses:
        result.first_nll = run.losses[0][1]
    finite = all(math.isfinite(nll) for _, nll in run.losses) and math.isfinite(run.valid_nll)
    result.converged = (not result.diverged and finite
                        and run.valid_nll < 0.9 * result.first_nll)


def measure_attention(run: Run, result: Result, data_bin: Path, work: Path,
                      scale: AblationScale) -> None:
    """Entropy, zeros and the regulariser terms of every attention row on the valid split."""
    import relu_former.plugin  # noqa: F401  (registers the models before a checkpoint loads)
    from scripts.analysis import analyze_attention as aa

    checkpoint = work / run.key / "checkpoint_last.pt"
    options = aa.parse_args([str(data_bin), "--path", str(checkpoint), "--out",
                             str(work / run.key / "analysis"), "--gen-subset", "valid",
                             "--max-sentences", str(scale.analysis_sentences)])
    analysis = aa.analyze(str(checkpoint), run.label, options)
    means = analysis.attention_means()
    run.entropy, run.zeros = means["entropy"], means["zeros"]
    result.norm_loss = means["norm_loss"]
    result.entropy_below = means["entropy_below"]
    result.entropy_above = means["entropy_above"]


def table_rows(runs: Sequence[Run], results: Dict[str, Result]) -> List[list]:
    rows = []
    for run in runs:
        result = results[run.key]
        row = [run.label, run.updates, run.bleu, run.tok_bleu, run.valid_nll, run.entropy,
               run.zeros, result.norm_loss, result.entropy_below, result.entropy_above,
               "yes" if result.converged else ("diverged" if result.diverged else "no")]
        rows.append(["-" if isinstance(v, float) and math.isnan(v) else v for v in row])
    return rows


def write_report(out: Path, runs: Sequence[Run], results: Dict[str, Result],
                 context: Dict[str, str]) -> Path:
    notes = []
    for run in runs:
        result = results[run.key]
        if result.diverged:
            notes.append(f"- {run.label}: stopped by fairseq: `{result.diverged}`")
        if run.note:
            notes.append(f"- {run.label}: {run.note}")
    text = "\n".join([
        "# ReLUFormer ablations\n",
        f"Command: `{context['command']}`  ",
        f"Corpus: {context['corpus']}.  ",
        f"Model: {context['model']}.  ",
        f"Machine: {context['machine']}. Wall time {context['wall']}.\n",
        markdown_table(HEADERS, table_rows(runs, results), digits=3),
        *([("\n".join(notes) + "\n")] if notes else []),
        "Flags of each variant:\n",
        *[f"- `{run.key}`: `{' '.join(run.train_flags)}`" for run in runs],
        "",
    ])
    path = write_text_atomic(out / "ablations.md", text)
    write_text_atomic(out / "ablations.json", json.dumps(
        {run.key: {"label": run.label, "updates": run.updates, "bleu": run.bleu,
                   "tok_bleu": run.tok_bleu, "valid_nll": run.valid_nll,
                   "entropy": run.entropy, "zeros": run.zeros, **vars(results[run.key])}
         for run in runs}, indent=1, default=str))
    return path


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--tiny", action="store_const", dest="scale", const="tiny",
                        default="default",
                        help="a smoke test: 400 pairs, 1 layer of width 32, 12 updates each")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        metavar="VARIANT",
                        help=f"which variants to run (default: all: {', '.join(VARIANTS)})")
    add_run_args(parser, "ablations_out", "ablations.md, ablations.json", "variant",
                 "variants trained at the same time (default 2, or 1 on one core)")
    parser.add_argument("--max-update", type=int, default=None,
                        help="update budget of every variant (default: the size's; 300)")
    args = parser.parse_args(argv)
    check_run_args(parser, args)
    if args.max_update is not None and args.max_update < 1:
        parser.error(f"--max-update must be at least 1, got {args.max_update}")
    if args.out.exists() and not args.out.is_dir():  # the demo checks its --out on its own
        parser.error(f"--out {args.out} is a file, not a folder; give a new or existing folder")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    scale = ABLATION_SCALES[args.scale]
    if args.max_update is not None:
        scale = replace(scale, budget=replace(scale.budget, max_update=args.max_update))
    out: Path = args.out
    work, raw, prep = out / "work", out / "work" / "raw", out / "work" / "prep"
    empty_own_folder(work)
    started = time.time()

    def say(message: str) -> None:
        print(f"[ablations {time.time() - started:6.0f}s] {message}", flush=True)

    say(f"size {scale.name}, {len(args.variants)} variants; report in {out}")
    say("1/4 building the corpus")
    corpus = make_corpus(args, scale, raw, say)
    say(f"  {corpus}")
    say("2/4 Moses tokenisation, BPE, fairseq-preprocess")
    prepare(raw, prep, scale.bpe_merges, say)
    data_bin = work / "bin" / "sentences"
    preprocess(prep / "sentences", data_bin, child_env(args.threads), SRC, TGT)

    runs = plan(args.variants)
    results = {run.key: Result() for run in runs}
    say(f"3/4 training {len(runs)} variants, {scale.budget.max_update} updates each, "
        f"{args.jobs} at a time")
    in_parallel(lambda run, pos: train_variant(run, results[run.key], data_bin, work, scale.budget,
                                               args, pos), runs, args.jobs)
    trained = [run for run in runs if (work / run.key / "checkpoint_last.pt").is_file()
               and not results[run.key].diverged]
    say("4/4 decoding the test split and measuring attention on valid")
    in_parallel(lambda run, pos: translate_and_score(run, data_bin, work, scale.beam, args, pos),
                trained,
                args.jobs)
    import torch

    torch.set_num_threads(threads_per_job(args))
    for run in trained:
        measure_attention(run, results[run.key], data_bin, work, scale)
    wall = time.time() - started
    size = scale.budget
    context = {
        "command": "python -m scripts.analysis.ablations " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "corpus": corpus,
        "model": (f"{ARCH} at {size.layers}+{size.layers} layers, width {size.dim}, FFN "
                  f"{size.ffn}, {size.heads} heads, shared embeddings, dropout 0.1; "
                  f"{size.max_update} updates of {size.max_tokens} tokens, lr {size.lr}, "
                  f"warm-up {size.warmup}, seed {args.seed}, beam {scale.beam}; "
                  f"{args.jobs} variants at a time with {threads_per_job(args)} thread(s) each"),
        "machine": machine_line(), "wall": f"{wall / 60:.1f} min",
    }
    report = write_report(out, runs, results, context)
    print()
    print(markdown_table(HEADERS, table_rows(runs, results), digits=3))
    say(f"done in {wall / 60:.1f} min; report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
