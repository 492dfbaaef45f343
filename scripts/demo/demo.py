"""The relu-former demo: real translation and summarization, offline, side by side.

What it does (``make demo`` runs it with the default size), one step at a time:

1. Translation data: a De-En corpus from the GNU gettext catalogs installed on the machine
   (``scripts/common/gettext_corpus.py``; falls back, saying so, to a generated task when there
   are none), Moses-tokenised, lower-cased, joint BPE (``scripts/recipes/lib/prepare_text.py``,
   the recipes' helpers), ``fairseq-preprocess``.
2. Summarization data (beside step 1, in a forked process): the manual pages installed on
   the machine, the page as the input and its one-line NAME description as the summary
   (``scripts/demo/manpage_corpus.py``, ``scripts/demo/summary_data.py``; a generated task
   when there are none), SentencePiece.
3. Every model trains its whole update budget (a safety cap far above it aside), through
   the real ``fairseq-train --user-dir relu_former``, in one queue of ``--jobs`` at a time:
   translation models of the same size, data and budget, a softmax Transformer, a ReLUFormer
   (ReLU attention + the regularisers) and (``--full``, ``--tiny``) a Transformer trained
   from scratch with the sparse-softmax criterion, then the softmax Transformer continued for
   the same number of updates once with label-smoothed cross-entropy and once with
   sparse-softmax, each decoded with ``fairseq-generate`` (sparse-softmax models with top-k
   decoding) and sacreBLEU as soon as it is trained; summarization models of one size and
   budget, a vanilla encoder, a Pyramidion and (``--full``, ``--tiny``) a Transpooler.
4. Decoding of the summaries, every model at the same time, ROUGE-1/2/L
   (``scripts/recipes/lib/score.py``, the recipes' scorer); training and decoding speed of
   the pooling models relative to the vanilla one.
5. Attention of every translation model (``scripts/analysis/analyze_attention.py``).
6. Reference rows that read no model and the targets' unigram entropy for both tables,
   plots, ``OUT/report.md`` with both tables, a sentence per comparison (whether both models
   learned; none is ranked: one seed at one shared rate and budget compares no methods) and
   commands to try each model. For a seed and a thread count the
   figures are the same on any machine; only times and speeds differ.

    python -m scripts.demo.demo                 # default size, ~13 min on 2 idle cores
    python -m scripts.demo.demo --full          # bigger models, longer training
    python -m scripts.demo.demo --tiny          # seconds per model: a smoke test (tests use it)
    python -m scripts.demo.demo --locale-dir /nonexistent --man-dir /nonexistent  # fallbacks
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Dict, List

from scripts.common.child_processes import child_env
from scripts.common.fairseq_generate import generate, translate_and_score
from scripts.common.fairseq_preprocess import preprocess
from scripts.common.parallel_runs import in_parallel, machine_line, threads_per_job
from scripts.common.plotting import markdown_table
from scripts.common.run_args import add_run_args, check_run_args
from scripts.common.run_record import Run
from scripts.common.translation_data import SRC, TGT, Say, make_corpus, prepare
from scripts.common.work_folder import WorkFolder, open_work_folder
from scripts.demo.attention_figures import analyse_attention, heatmap_sentence
from scripts.demo.out_folder import claim
from scripts.demo.registered_names import registered_names
from scripts.demo.report import (
    SUMMARY_HEADERS,
    TABLE_HEADERS,
    loss_plot,
    summary_findings,
    summary_table,
    translation_findings,
    translation_table,
    write_report,
)
from scripts.demo.scales import SCALES, Scale
from scripts.demo.summarization import SummaryReferences
from scripts.demo.summary_data import SOURCE as DOC
from scripts.demo.summary_data import TARGET as SUM
from scripts.demo.summary_data import SummaryScale, build_summary_data
from scripts.demo.translation_references import measure_translation_references
from scripts.demo.try_it import try_it_report
from scripts.recipes.lib.prepare_text import read_lines, write_lines
from scripts.recipes.lib.score import rouge_scores

# ----------------------------------------------------------------------------- the runs

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
    sparse = ["--criterion", "sparse_softmax_cross_entropy",
              "--sparse-softmax-k", str(args.sparse_softmax_k), "--label-smoothing", "0.1"]
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
    """A vanilla encoder, a Transpooler (if the scale has it), a Pyramidion: pooling apart.

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
                 "models trained (and decoded) at the same time, each with --threads / "
                 "--jobs threads (default: 2, or 1 on one core)", time_caps=False)
    parser.add_argument("--man-dir", type=Path, default=Path("/usr/share/man"),
                        help="where the manual pages are: <dir>/man<section>/*.gz "
                             "(default: %(default)s)")
    parser.add_argument("--sparse-softmax-k", "--sparse-k", type=int, default=20,
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
    if args.sparse_softmax_k < 1 or args.sparse_decode_k < 0:
        parser.error("--sparse-softmax-k must be >= 1 and --sparse-decode-k >= 0")
    if args.no_summaries and args.no_translation:
        parser.error("--no-summaries and --no-translation leave nothing to run")
    return args


class Demo(WorkFolder):
    """One demo run: its settings, its work folder, how it reports progress."""

    def __init__(self, args: argparse.Namespace, scale: Scale, work: Path, resume: bool):
        super().__init__(work, resume, "demo")
        self.args, self.scale = args, scale


def start(args: argparse.Namespace) -> Demo:
    """Claim ``--out`` (``out_folder.py``); check ``--resume`` against the work folder's
    settings, or empty it."""
    claim(args.out)
    scale = SCALES[args.scale]
    work = args.out / "work"
    settings = {"scale": scale.name, "locale_dir": str(args.locale_dir), "lang": args.lang,
                "man_dir": str(args.man_dir)}
    return Demo(args, scale, work, open_work_folder(work, settings, args.resume))


def translation_data(demo: Demo) -> str:
    """Step 1: the gettext corpus, tokenised, BPE'd and binarised."""

    def build() -> str:
        raw, prep = demo.work / "raw", demo.work / "prep"
        corpus = make_corpus(demo.args, demo.scale, raw, demo.say)
        demo.say(f"  {corpus}")
        prepare(raw, prep, demo.scale.bpe_merges, demo.say)
        preprocess(prep / "sentences", demo.bin("sentences"), child_env(demo.args.threads),
                   SRC, TGT)
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
        preprocess(prep, demo.bin("summaries"), child_env(demo.args.threads), DOC, SUM)
        return corpus

    return demo.data_step("summary_corpus", "2/6", "summarization data",
                          "manual pages, SentencePiece, fairseq-preprocess", build)


def build_data(demo: Demo) -> Dict[str, str]:
    """Steps 1 and 2, side by side when two jobs may run: the summaries' data in a forked
    process (reading the pages and SentencePiece use one core), the translation data here.

    Returns the corpora's descriptions: ``corpus`` and ``summary_corpus``.
    """
    args = demo.args
    corpora = {"corpus": "skipped (--no-translation)", "summary_corpus": ""}
    if args.no_translation or args.no_summaries or args.jobs < 2:
        if not args.no_translation:
            corpora["corpus"] = translation_data(demo)
        if not args.no_summaries:
            corpora["summary_corpus"] = summarization_data(demo)
        return corpora
    # fork: the child inherits this process (nothing to pickle but the result); no thread
    # has started yet, so forking is safe
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        summaries = pool.submit(summarization_data, demo)
        corpora["corpus"] = translation_data(demo)
        corpora["summary_corpus"] = summaries.result()
    return corpora


def decode_summaries(demo: Demo, runs: List[Run]) -> None:
    """Decode the summaries' test split with every summarization model at the same time (so
    that the machine's load affects each alike: their decoding times are compared); ROUGE-1/
    2/L F1 against the untouched references, with the recipes' scorer."""
    s, prep = demo.scale.summary, demo.work / "prep" / "summaries"
    flags = ["--post-process", "sentencepiece", "--max-len-a", "0",
             "--max-len-b", str(s.target_tokens), "--max-tokens", str(8 * s.source_tokens),
             "--max-source-positions", str(s.source_tokens),
             "--max-target-positions", str(s.target_tokens + 8)]

    def decode(run: Run, position: int) -> None:
        ordered = generate(run, demo.bin(run.data), demo.work, demo.scale.beam, flags,
                           len(read_lines(prep / f"test.{DOC}")), demo.args, position)
        write_lines(demo.work / run.key / "test.hyp", ordered)
        run.rouge = rouge_scores(ordered, read_lines(prep / "test.reference"))

    in_parallel(decode, runs, len(runs))


def train_and_decode(demo: Demo, translation: List[Run], summaries: List[Run]) -> None:
    """Steps 3 to 5: every model in one queue, ``--jobs`` at a time, so that no core waits
    for the slowest run of a group; a translation model is decoded (sacreBLEU) as soon as it
    is trained, the summarization models together at the end."""

    def decode(run: Run, position: int) -> None:
        if run.data == "sentences":
            translate_and_score(run, demo.bin(run.data), demo.work, demo.scale.beam,
                                demo.args, position)

    demo.train_all(translation + summaries, demo.scale.budget, demo.args, demo.args.jobs,
                   "3/6", after=decode)
    if summaries:
        demo.say("4/6 decoding the summaries (the summarization models at the same time)")
        decode_summaries(demo, summaries)


def describe(demo: Demo) -> Dict[str, str]:
    scale, args, s = demo.scale, demo.args, demo.scale.summary
    return {
        "scale": scale.name,
        "model": (f"{scale.layers}+{scale.layers} layers, width {scale.dim}, FFN {scale.ffn}, "
                  f"{scale.heads} heads, joint BPE {scale.bpe_merges} merges, beam {scale.beam}; "
                  f"budget per model {scale.max_update} updates, continuations "
                  f"{scale.finetune_update} updates; {args.jobs} models at a time with "
                  f"{threads_per_job(args)} thread(s) each, seed {args.seed}"),
        "summary_model": (f"{s.layers}+{s.layers} layers, width {s.dim}, FFN {s.ffn}, "
                          f"{s.heads} heads, full attention, inputs of {s.source_tokens} "
                          f"tokens, summaries of at most {s.target_tokens}, beam {scale.beam}; "
                          f"{s.max_update} updates of {s.max_tokens} source tokens per "
                          f"model, {threads_per_job(args)} thread(s) each"),
        "machine": machine_line(),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    demo = start(args)
    demo.say(f"size {demo.scale.name}; report in {args.out}")
    context: Dict[str, object] = dict(build_data(demo))
    names = registered_names()
    translation = ([] if args.no_translation
                   else translation_runs(demo.scale, names, args, demo.say))
    summaries = [] if args.no_summaries else summary_runs(demo.scale.summary, names, demo.say)
    if not summaries:
        context["summary_corpus"] = ""
    train_and_decode(demo, translation, summaries)
    demo.say("5/6 attention analysis")
    figures = []
    if translation:
        # one thread, as every job: the attention figures do not depend on the cores
        figures = analyse_attention(translation, demo.bin("sentences"), args.out,
                                    heatmap_sentence(demo.work / "prep"),
                                    demo.scale.analysis_sentences, threads_per_job(args))
    demo.say("6/6 reference rows, plots, report")
    references = SummaryReferences.in_work(demo.work) if summaries else None
    targets = measure_translation_references(demo.work) if translation else None
    figures.append(loss_plot(translation + summaries, args.out / "demo_loss.png", references,
                             targets))
    wall = time.time() - demo.started
    context.update(describe(demo), wall=f"{wall / 60:.1f} min", summary_references=references,
                   translation_references=targets,
                   try_it=try_it_report(translation + summaries, demo.work, demo.scale))
    report = write_report(args.out, translation + summaries, context, figures)
    print()
    if translation:
        print(markdown_table(TABLE_HEADERS, translation_table(translation, targets)))
        print("\n".join(translation_findings(translation, targets)) + "\n")
    if summaries:
        print(markdown_table(SUMMARY_HEADERS, summary_table(summaries, references)))
        print("\n".join(summary_findings(summaries, references)))
    demo.say(f"done in {wall / 60:.1f} min; report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

