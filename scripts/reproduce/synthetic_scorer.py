"""Pyramidion's scorer table (Table 4) as picking marked tokens out of 256, where the index and
random scorers are bounded, so the paper's claim is asked of the pooling alone; the task,
metric, no-model references and protocol are in docs/reproduction.md ("Pyramidion scorers,
synthetic").

Marked and unmarked tokens share their contents on purpose: otherwise the sum of all tokens
would hold the marked ones' counts, and a pooler averaging everything would solve the task
without selecting. The head starts at zero, so that the scorer's first gradients come from a
head that has begun to learn (with a random head the linear scorer's recall was 0% at step 100,
with the zero head 79%). The plateau counts the loss in units of the no-model loss, not of its
own value: the task is exactly solvable, and a relative 1% ran to 2,875 steps for no change in
recall. Minibatches: the PoWER-like scorer's attention costs O(n^2) per sequence.

    python -m scripts.reproduce.synthetic_scorer --out /tmp/synthetic_scorer
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F

import scripts.reproduce.synthetic_study as protocol
from relu_former.pyramidion.pooling import TokenPooler
from scripts.reproduce.cell_plan import Cell
from scripts.reproduce.claims import NoModel
from scripts.reproduce.spec import Comparison, Metric, Row, TableSpec
from scripts.reproduce.tables.pyramidion_table4 import SCORERS

NAME = "synthetic_scorer"
TRAINABLE = ("linear", "nonlinear", "power")
RECALL = Metric("recall", "marked recall (%)")
TEST_LOSS = Metric("test_loss", "test loss (squared error)", higher_is_better=False, digits=4)
EVAL_BATCH = 128  # test sequences a forward pass (bounds the PoWER scorer's n x n attention)


@dataclass(frozen=True)
class Split:
    ids: torch.Tensor      # [S, n] token ids
    marked: torch.Tensor   # [S, n] bool
    counts: torch.Tensor   # [S, C] the marked tokens' contents, counted


@dataclass(frozen=True)
class Task:
    table: torch.Tensor    # [2C, width]: unmarked contents, then the same contents marked
    kept: int              # k, the pooled length and the number of marked tokens
    train: Split
    test: Split

    @property
    def contents(self) -> int:
        return self.train.counts.shape[1]

    def chance_recall(self) -> float:
        """Marked recall of k tokens taken at random, in %: k / n."""
        return 100.0 * self.kept / self.train.ids.shape[1]

    def no_model_loss(self, split: Split) -> float:
        """The loss on ``split`` of predicting the training set's mean counts (no model)."""
        mean = self.train.counts.mean(0)
        return F.mse_loss(mean.expand_as(split.counts), split.counts).item()


def draw(count: int, length: int, kept: int, contents: int, generator: torch.Generator
         ) -> Split:
    marked_at = torch.rand(count, length, generator=generator).argsort(1)[:, :kept]
    marked = torch.zeros(count, length, dtype=torch.bool).scatter_(1, marked_at, True)
    content = torch.randint(contents, (count, length), generator=generator)
    counts = torch.zeros(count, contents).scatter_add_(
        1, content, marked.to(torch.float32))
    return Split(content + contents * marked.long(), marked, counts)


def make_task(length: int = 256, contents: int = 32, width: int = 64, train: int = 2048,
              test: int = 512, seed: int = 0) -> Task:
    generator = torch.Generator().manual_seed(seed)
    units = torch.randn(contents + 1, width, generator=generator) / math.sqrt(width)
    table = torch.cat([units[:contents], units[:contents] + units[contents]])
    kept = length // 4
    return Task(table, kept, draw(train, length, kept, contents, generator),
                draw(test, length, kept, contents, generator))


class Model(torch.nn.Module):
    """The plugin's pooler on the embedded tokens, then a linear head on the pooled sum."""

    def __init__(self, width: int, contents: int, scorer: str) -> None:
        super().__init__()
        self.pooler = TokenPooler(width, scorer=scorer)
        self.head = torch.nn.Linear(width, contents)
        torch.nn.init.zeros_(self.head.weight)  # see the module's docstring
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, tokens: torch.Tensor, kept: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Predicted counts [B, C] and the dominant input position of each slot [B, k]."""
        pooled, _, (slot, weight) = self.pooler(tokens.transpose(0, 1), None, kept)
        return self.head(pooled.sum(0)), dominant(slot, weight, kept)


def dominant(slot: torch.Tensor, weight: torch.Tensor, kept: int) -> torch.Tensor:
    """Per pooled slot, the input position of largest weight there (ties: the earliest)."""
    batch, length = slot.shape
    largest = weight.new_full((batch, kept), -1.0).scatter_reduce(1, slot, weight, "amax")
    position = torch.arange(length).expand(batch, length)
    candidates = torch.where(weight >= largest.gather(1, slot), position, length)
    return torch.full((batch, kept), length).scatter_reduce(1, slot, candidates, "amin")


def figures(model: Model, task: Task, split: Split, rows: torch.Tensor
            ) -> Tuple[torch.Tensor, float]:
    """The loss (with its graph) and the marked recall in % of ``rows`` of ``split``."""
    counts, source = model(task.table[split.ids[rows]], task.kept)
    recall = 100.0 * split.marked[rows].gather(1, source).float().mean().item()
    return F.mse_loss(counts, split.counts[rows]), recall


def evaluate(model: Model, task: Task) -> Tuple[float, float]:
    """Test loss and marked recall (%), a batch of :data:`EVAL_BATCH` at a time."""
    loss = recall = 0.0
    size = task.test.ids.shape[0]
    with torch.no_grad():
        for start in range(0, size, EVAL_BATCH):
            rows = torch.arange(start, min(start + EVAL_BATCH, size))
            part, hit = figures(model, task, task.test, rows)
            loss, recall = loss + part.item() * len(rows), recall + hit * len(rows)
    return loss / size, recall / size


def batches(size: int, batch: int, generator: torch.Generator):
    """Rows of the training set, ``batch`` at a time, a fresh permutation each epoch."""
    while True:
        order = torch.randperm(size, generator=generator)
        for start in range(0, size - batch + 1, batch):
            yield order[start:start + batch]


def train(task: Task, scorer: str, lr: float, seed: int, limits: Dict[str, Any]
          ) -> Dict[str, Any]:
    """Adam on minibatches until the recall plateaus or ``max_steps``; the cell's result."""
    torch.manual_seed(seed)  # the weights, and the random scorer's draws
    model = Model(task.table.shape[1], task.contents, scorer)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    rows = batches(task.train.ids.shape[0], min(limits["batch"], task.train.ids.shape[0]),
                   torch.Generator().manual_seed(seed))
    # the loss counts at 100% too, as the head is still learning the counts; in units of the
    # no-model loss, as it tends to 0 (see the module's docstring)
    plateau = protocol.Plateau(limits, need=limits["min_gain"], full=math.inf,
                      loss_scale=task.no_model_loss(task.train))
    curve: List[List[float]] = []
    window: List[Tuple[float, float]] = []  # (loss, recall) since the last curve point
    start = time.process_time()
    for step in range(1, limits["max_steps"] + 1):
        loss, recall = figures(model, task, task.train, next(rows))
        if not math.isfinite(loss.item()):
            return result(model, task, curve, step, "diverged", start)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        window.append((loss.item(), recall))
        if step % limits["every"] and step != limits["max_steps"]:
            continue
        mean_loss, mean_recall = (sum(values) / len(window) for values in zip(*window))
        curve.append([step, round(mean_loss, 5), round(mean_recall, 3)])
        window = []
        stop = plateau.update(step, mean_recall, mean_loss)
        if stop is not None:
            return result(model, task, curve, step, stop, start)
    raise AssertionError("unreachable: the loop returns at max_steps")


def result(model: Model, task: Task, curve: List[List[float]], step: int, stop: str,
           start: float) -> Dict[str, Any]:
    test_loss, recall = (math.nan, math.nan) if stop == "diverged" else evaluate(model, task)
    return protocol.cell_result(curve, step, stop, start, {
        "recall": recall, "test_loss": test_loss, "loss": curve[-1][1] if curve else math.nan,
        "train_recall": curve[-1][2] if curve else math.nan})


def spec() -> TableSpec:
    claims = [Comparison("linear", worse, "recall", f"linear scorer beats {what}")
              for worse, what in (("random", "random"), ("index", "index-based"),
                                  ("power", "PoWER-like"))]
    return TableSpec(NAME, "scorers picking marked tokens out of 256",
                     "Pyramidion, Table 4 (synthetic)", "", "synthetic", (RECALL, TEST_LOSS),
                     tuple(Row(key, f"{label} scorer") for key, label in SCORERS.items()),
                     tuple(claims), valid_loss_stop=False)


def make_study(args: argparse.Namespace) -> protocol.Study:
    """The study of ``args``: cells keyed by the scorer, seed, rate, task and limits."""
    task = make_task(args.length, args.contents, args.width, args.train, args.test)
    limits = {"max_steps": args.max_steps, "patience": args.patience, "batch": args.batch,
              "min_gain": args.min_gain, "loss_gain": args.loss_gain, "every": args.every}

    def settings(row: Row, seed: int, lr: float) -> Dict[str, Any]:
        return {"scorer": row.key, "seed": seed, "lr": lr, "length": args.length,
                "contents": args.contents, "width": args.width, "train": args.train,
                "test": args.test, **limits}

    def trained(cell: Dict[str, Any]) -> Dict[str, Any]:
        return train(task, cell["scorer"], cell["lr"], cell["seed"], limits)

    return protocol.Study(spec(), args, settings, trained, task, limits)


def report(study: protocol.Study, cells: Sequence[Cell]) -> Dict[str, Any]:
    task = study.task
    chance, no_model_loss = task.chance_recall(), task.no_model_loss(task.test)
    loss_reference = NoModel(TEST_LOSS, no_model_loss, "predicting the training set's mean "
                                                       "counts, which needs no model")
    references = {key: [NoModel(RECALL, chance, "k of n tokens taken at random (no model)"),
                        loss_reference] for key in TRAINABLE}
    args = study.args
    return protocol.results(study, cells, references, {
        "length": args.length, "kept": task.kept, "contents": args.contents,
        "width": args.width, "train": args.train, "test": args.test, "chance_recall": chance,
        "mean_prediction_loss": no_model_loss},
        f"{task.kept} marked tokens among {args.length} ({args.contents} contents, "
        f"width {args.width}; {args.train} training and {args.test} test sequences); "
        f"k of n taken at random hold {chance:.3g}% marked ones, and predicting the "
        f"mean counts has test loss {no_model_loss:.4g} (the references that read no "
        "model).\n")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m scripts.reproduce.{NAME}",
        description="Pyramidion's scorer table as picking the k = n/4 marked tokens out of "
                    "n by the plugin's TokenPooler (scorers linear, nonlinear, index, power, "
                    "random), each trained to a plateau at its own learning rate; the "
                    "paper's claims judged by Welch's test with Holm's correction.")
    protocol.add_protocol_arguments(parser, max_steps=2000, patience=200, loss_gain=0.01,
                                    every=25, step="minibatch step")
    parser.add_argument("--length", type=int, default=256, metavar="N",
                        help="tokens a sequence, a multiple of 4: a quarter are marked and "
                             "kept (default 256)")
    parser.add_argument("--contents", type=int, default=32, metavar="C",
                        help="contents a token can carry; the vocabulary is 2C ids, marked "
                             "and unmarked (default 32)")
    parser.add_argument("--width", type=int, default=64, help="embedding width (default 64)")
    parser.add_argument("--train", type=int, default=2048, metavar="S",
                        help="training sequences (default 2048)")
    parser.add_argument("--test", type=int, default=512, metavar="S",
                        help="test sequences (default 512)")
    parser.add_argument("--batch", type=int, default=32,
                        help="training sequences a step (default 32)")
    parser.add_argument("--min-gain", type=float, default=0.5, metavar="POINTS",
                        help="points of training recall a gain must add (default 0.5)")
    args = parser.parse_args(argv)
    protocol.check_positive(parser, args, ("seeds", "contents", "width", "train", "test",
                                           "batch", "max_steps", "patience", "every"))
    if args.length < 4 or args.length % 4:
        parser.error("--length: give a multiple of 4")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    torch.set_num_threads(1)
    return protocol.run_study(make_study(parse(argv)), report)

if __name__ == "__main__":
    raise SystemExit(main())
