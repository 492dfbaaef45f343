"""CPU seconds per update and per epoch of the sentence-translation tables' toy model, per
vocabulary, and where they go.

A joint BPE shrinks the output layer (most of an update at 8,000 words) but lengthens every
sentence, so what decides is the cost of an **epoch**. Data: the table's own data folder under
``--work``, and per ``--bpe-merges M`` the same sentences in a joint BPE. Models: the table's
``transformer`` and ``relu_former`` rows, from the very ``fairseq-train`` command a cell runs,
timed in interleaved rounds (process CPU time, one thread, the cells' allocator settings);
``torch.profiler`` says where the time goes.

    python -m scripts.benchmarks.bench_toy_update --quick --out bench/toy_update   # seconds
    python -m scripts.benchmarks.bench_toy_update                                  # full size
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import torch

from scripts.benchmarks.benchmarking import (
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
    log,
    quiet_fairseq,
    torch_setup,
)
from scripts.benchmarks.fairseq_trainer import first_epoch_batches, trainer_from_argv
from scripts.common.atomic_files import write_text_atomic
from scripts.common.child_processes import KEEP_BIG_BLOCKS
from scripts.common.plotting import markdown_table
from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce import patient_train
from scripts.reproduce.data_folder import shared_data
from scripts.reproduce.kinds import translation
from scripts.reproduce.tables.relu_former_table4 import SPEC

ROWS = ("transformer", "relu_former")  # the table's softmax and ReLU rows
WORD = "word"
# the profile's groups, in the report's order; ``group_of`` says what falls in each
GROUPS = ("vocabulary", "other matrix products", "attention", "dropout", "optimizer step",
          "other")
# fairseq's Trainer.train_step names these parts of an update (record_function)
OPTIMIZER_SCOPES = ("optimizer", "clip-grads", "multiply-grads")
BACKWARD = "autograd::engine::evaluate_function"  # the scope of a node's backward


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchmarkParser(__doc__, quick_help="the table's test-sized settings (tiny "
                                                 "model and data), 1 batch: seconds")
    parser.add_argument("--work", type=Path, default=None,
                        help="the reproduction's work folder, whose shared data is reused "
                             "(default reproduce_out; --quick: OUT)")
    parser.add_argument("--locale-dir", default=None,
                        help="gettext catalogs to build the data from, if not yet built "
                             "(default: the table's, /usr/share/locale)")
    parser.add_quick_argument("--bpe-merges", [2000, 4000], [30, 60],
                              "joint BPE variants to compare with word level", type=int,
                              nargs="*")
    parser.add_quick_argument("--batches", 20, 2, "updates of each split a round", type=int)
    parser.add_quick_argument("--rounds", 5, 2, "timed interleaved rounds after one warm-up",
                              type=int)
    parser.add_quick_argument("--profile-steps", 5, 1, "profiled updates of each word-level "
                              "model", type=int)
    parser.add_threads_and_out("folder for bench_toy_update.md and the BPE data "
                               "(default bench/toy_update)")
    args = parser.parse_args(argv)
    for name in ("batches", "rounds", "profile_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if any(merges < 1 for merges in args.bpe_merges):
        parser.error("--bpe-merges must be positive")
    args.out = args.out or REPO_ROOT / "bench" / "toy_update"
    args.work = args.work or (args.out if args.quick else REPO_ROOT / "reproduce_out")
    args.scale = "tiny" if args.quick else "toy"
    return args


def bpe_data(words: Path, merges: int, cache: Path) -> Path:
    """The word-level data's sentences in a joint BPE of ``merges`` merges, binarized as the
    table's; built once, under ``cache``."""
    from scripts.recipes.lib.prepare_text import BpeEncoder, learn_bpe, read_lines

    sentences = words / "raw" / "sentences"
    src, tgt = translation.SRC, translation.TGT

    def build(folder: Path) -> Dict[str, Any]:
        codes = learn_bpe([sentences / f"train.{src}", sentences / f"train.{tgt}"],
                          folder / "bpe.codes", merges)
        encoder = BpeEncoder(codes)
        for split in ("train", "valid", "test"):
            for suffix in (src, tgt):
                text = "".join(line + "\n" for line in
                               encoder.encode_lines(read_lines(sentences / f"{split}.{suffix}")))
                # binarize learns the dictionary from "dictionary", a copy of the sentences
                for name in ("sentences", "dictionary"):
                    write_text_atomic(folder / "raw" / name / f"{split}.{suffix}", text)
        translation.binarize(folder / "raw", folder / "bin", [0], None)
        return {"description": f"{words.name}'s sentences, joint BPE of {merges} merges"}

    key = {"words": words.name, "merges": merges}
    return Path(shared_data(cache, f"translation-bpe{merges}", key, build, log)["folder"])


def data_folders(args: argparse.Namespace, settings: Dict[str, Any]) -> Dict[str, Path]:
    """``{variant: data folder}``: the table's word-level data, then each BPE variant."""
    words = Path(translation.prepare(SPEC, args.scale, settings, args.work, log)["folder"])
    folders = {WORD: words}
    for merges in args.bpe_merges:
        folders[f"bpe{merges}"] = bpe_data(words, merges, args.out)
    return folders


def table_trainer(scale: str, settings: Dict[str, Any], row: str, data: Path,
                  save_dir: Path) -> Any:
    """The Trainer of the table's cell for ``row`` (seed 1) on the sentences of ``data``."""
    cell = replace(SPEC.row(row), hidden=True)  # its training step only, as a grid cell
    train = translation.steps(SPEC, cell, 1, scale, settings, {"folder": str(data)},
                              save_dir / row, None)[0]
    return trainer_from_argv(patient_train.train_args(train.argv))


class Case:
    """One model on one vocabulary: its Trainer and the real batches it trains a round."""

    def __init__(self, trainer: Any, samples: List[List[dict]], updates: int, tokens: int):
        self.trainer, self.samples = trainer, samples
        self.epoch_updates, self.epoch_tokens = updates, tokens
        self.round_tokens = sum(batch["ntokens"] for sample in samples for batch in sample)

    def train_round(self) -> None:
        for sample in self.samples:
            self.trainer.train_step(sample)


def build_cases(args: argparse.Namespace, settings: Dict[str, Any], folders: Dict[str, Path],
                save_dir: Path) -> Dict[str, Case]:
    """``{"variant/row": Case}``; both rows of a variant train the same batches."""
    cases = {}
    for variant, folder in folders.items():
        for row in ROWS:
            trainer = table_trainer(args.scale, settings, row, folder, save_dir)
            if row == ROWS[0]:
                batches = first_epoch_batches(trainer, args.batches)
            cases[f"{variant}/{row}"] = Case(trainer, *batches)
        log(f"built {variant}: {len(trainer.task.target_dictionary)} types, "
            f"{batches[1]} updates and {batches[2]} target tokens an epoch")
    return cases


def chain_of(event: Any) -> List[Any]:
    """``event`` and the operators it runs inside, innermost first."""
    chain = []
    while event is not None:
        chain.append(event)
        event = event.cpu_parent
    return chain


def group_of(event: Any, forward: Dict[int, Any], vocab: int) -> str:
    """The group of a profiled operator's own time, from the operators it runs in (for a
    backward one, also its forward operator's), the first of :data:`GROUPS` that matches."""
    context = chain_of(event)
    for node in context:
        if node.name.startswith(BACKWARD) and node.sequence_nr in forward:
            context += chain_of(forward[node.sequence_nr])
            break
    names = [node.name.lower() for node in context]
    if any(name in OPTIMIZER_SCOPES or name.startswith("optimizer.") for name in names):
        return "optimizer step"
    if any(vocab in shape for node in context for shape in (node.input_shapes or [])
           if isinstance(shape, list) and all(isinstance(d, int) for d in shape)):
        return "vocabulary"
    if any("attention" in name or ("relu" in name and "sums" in name) for name in names):
        return "attention"
    if any("dropout" in name or "bernoulli" in name for name in names):
        return "dropout"
    if event.name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"):
        return "other matrix products"
    return "other"


def forward_operators(events: Sequence[Any]) -> Dict[int, Any]:
    """Autograd sequence number -> the innermost forward operator recorded with it."""
    forward: Dict[int, Any] = {}
    for event in events:
        chain = chain_of(event)
        if event.sequence_nr < 0 or any(node.name.startswith(BACKWARD) for node in chain):
            continue
        known = forward.get(event.sequence_nr)
        if known is None or len(chain) > len(chain_of(known)):
            forward[event.sequence_nr] = event
    return forward


def group_times(events: Sequence[Any], vocab: int) -> Dict[str, float]:
    """Self CPU microseconds of each group (:func:`group_of`) in the profiler's ``events``."""
    forward = forward_operators(events)
    totals = dict.fromkeys(GROUPS, 0.0)
    for event in events:
        totals[group_of(event, forward, vocab)] += event.self_cpu_time_total
    return totals


def profile_shares(args: argparse.Namespace, case: Case) -> Dict[str, float]:
    """Share of each group in the self CPU time of ``--profile-steps`` updates."""
    from torch.profiler import ProfilerActivity, profile

    samples = (case.samples * args.profile_steps)[: args.profile_steps]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for sample in samples:
            case.trainer.train_step(sample)
    totals = group_times(prof.events(), len(case.trainer.task.target_dictionary))
    whole = sum(totals.values()) or 1.0
    return {group: value / whole for group, value in totals.items()}


def cost_rows(cases: Dict[str, Case], seconds: Dict[str, float]) -> List[List[Any]]:
    """Per variant and row: types, epoch size, CPU seconds per update, per 1,000 target
    tokens and per epoch, and the epoch's figures over word level's."""
    def epoch_seconds(name: str) -> float:
        return seconds[name] / len(cases[name].samples) * cases[name].epoch_updates

    rows = []
    for name, case in cases.items():
        variant, row = name.split("/")
        word = f"{WORD}/{row}"
        rows.append([variant, row, len(case.trainer.task.target_dictionary),
                     case.epoch_tokens, case.epoch_tokens / cases[word].epoch_tokens,
                     case.epoch_updates, seconds[name] / len(case.samples),
                     1000 * seconds[name] / case.round_tokens, epoch_seconds(name),
                     epoch_seconds(name) / epoch_seconds(word)])
    return rows


def report(args: argparse.Namespace, settings: Dict[str, Any], folders: Dict[str, Path],
           rows: List[List[Any]], shares: Dict[str, Dict[str, float]]) -> str:
    malloc = ", ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                       if k.startswith("MALLOC_"))
    setup = (f"{torch_setup()}; allocator: {malloc or 'glibc defaults'}. The {SPEC.name} "
             f"cells' model at {args.scale} scale ({settings['layers']}+"
             f"{settings['layers']} layers, width {settings['dim']}, FFN {settings['ffn']}, "
             f"{settings['heads']} heads, shared embeddings, --max-tokens "
             f"{settings['max_tokens']}, the cells' fairseq-train flags); {args.batches} real "
             f"batches of each training split a round, median of {args.rounds} interleaved "
             "rounds after 1 warm-up, process CPU time of Trainer.train_step.")
    data = [[variant, str(folder)] for variant, folder in folders.items()]
    profile = [[group] + [100 * shares[row][group] for row in shares] for group in GROUPS]
    return "\n".join([
        "# bench_toy_update: CPU cost of a toy translation update, per vocabulary\n",
        setup + "\n",
        "## Cost per update, per 1,000 target tokens and per epoch\n",
        markdown_table(["vocabulary", "row", "types", "target tokens / epoch",
                        "tokens / word-level", "updates / epoch", "CPU s / update",
                        "CPU s / 1k target tokens", "CPU s / epoch", "epoch / word-level"],
                       rows),
        "An epoch's CPU seconds are its updates (fairseq's batching of the whole training "
        "split) times the CPU seconds of a measured update; the `/ word-level` columns divide "
        "by the same row's figure at word level (an epoch below 1: cheaper).\n",
        "## Where a word-level update's time goes\n",
        f"% of the operators' self time over {args.profile_steps} profiled update(s) "
        "(torch.profiler; it times an operator by the clock on the wall, so on a loaded "
        "machine an operator that was descheduled takes the blame: run it on an idle one).\n",
        markdown_table(["group"] + [f"{row} %" for row in shares], profile),
        "vocabulary = operators with an operand of the vocabulary's size (output projection "
        "forward and backward, log-softmax, label smoothing, the shared embedding's gradient); "
        "attention = inside the attention operators; optimizer step = the gradient norm and "
        "Adam's update.\n",
        "## Data\n",
        markdown_table(["vocabulary", "folder"], data),
    ])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    quiet_fairseq()
    log(f"bench_toy_update: {torch_setup()}")
    settings = SPEC.settings(args.scale)
    if args.locale_dir is not None:
        settings["locale_dir"] = args.locale_dir
    folders = data_folders(args, settings)
    with tempfile.TemporaryDirectory(prefix="bench_toy_update_") as save_dir:
        cases = build_cases(args, settings, folders, Path(save_dir))
        # the median round's process CPU seconds of each case
        seconds = interleaved_median_seconds(
            {name: case.train_round for name, case in cases.items()}, rounds=args.rounds,
            warmup=1, progress=lambda s: log(f"  {s}"), clock=time.process_time)
        shares = {row: profile_shares(args, cases[f"{WORD}/{row}"]) for row in ROWS}
    text = report(args, settings, folders, cost_rows(cases, seconds), shares)
    log(f"wrote {finish_report(args, 'bench_toy_update', text)}")
    return 0


def with_allocator_settings(start: Callable[[], int]) -> int:
    """Run ``start`` with the cells' allocator settings, which glibc reads at start-up: a
    process without them starts itself again with them."""
    if KEEP_BIG_BLOCKS.keys() <= os.environ.keys():
        return start()
    env = {**KEEP_BIG_BLOCKS, **os.environ}
    os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]], env)
    return 1  # not reached: execve replaces this process


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(with_allocator_settings(main))
