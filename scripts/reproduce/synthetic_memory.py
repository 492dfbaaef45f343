"""The ReLUFormer paper's memory study (section 3) as a task that trains to the end in seconds:
the plugin's FFN variant (:mod:`relu_former.relu_attention.memory_ffn`) with N slots memorises
the classes of V random keys, read out by fixed random unit vectors (a trained read-out alone
would memorise them: the slots are the only memory). docs/reproduction.md ("Memory study,
synthetic") describes the task and protocol; :mod:`scripts.reproduce.synthetic_study` runs it.

    python -m scripts.reproduce.synthetic_memory --out /tmp/synthetic_memory
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

import torch
import torch.nn.functional as F

from relu_former.relu_attention.memory_ffn import build_memory_fc2, memory_activation
from scripts.reproduce.cell_plan import Cell
from scripts.reproduce.claims import NoModel
from scripts.reproduce.spec import Comparison, Metric, Row, TableSpec
from scripts.reproduce.synthetic_study import (
    Plateau,
    Study,
    add_protocol_arguments,
    cell_result,
    check_positive,
    results,
    run_study,
)

NAME = "synthetic_memory"
VARIANTS = {"stock": "ReLU memory (stock FFN)", "softmax": "softmax memory",
            "softmax_ln": "softmax memory + LayerNorm"}
MARGIN = 1.0  # points of accuracy: a parity claim's margin (see the module's docstring)
ACCURACY = Metric("accuracy", "memorisation accuracy (%)")
LOSS = Metric("loss", "final training loss (nats)", higher_is_better=False, digits=4)


@dataclass(frozen=True)
class Task:
    keys: torch.Tensor      # V x width, unit rows
    targets: torch.Tensor   # V class ids
    readout: torch.Tensor   # V x width, unit rows: class c's logit is readout[c] . output

    @property
    def size(self) -> int:
        return self.keys.shape[0]

    def trivial_accuracy(self) -> float:
        """The best accuracy without reading the key: the most frequent class's share."""
        return torch.bincount(self.targets).max().item() / self.size


def make_task(keys: int, width: int, seed: int = 0) -> Task:
    generator = torch.Generator().manual_seed(seed)
    unit = lambda: F.normalize(torch.randn(keys, width, generator=generator), dim=-1)  # noqa: E731
    stored = unit()
    return Task(stored, torch.randint(keys, (keys,), generator=generator), unit())


def train(task: Task, variant: str, slots: int, lr: float, seed: int, limits: Dict[str, int]
          ) -> Dict[str, Any]:
    """Full-batch Adam until the accuracy plateaus or ``max_steps``; the cell's result."""
    torch.manual_seed(seed)
    width = task.keys.shape[1]
    fc1 = torch.nn.Linear(width, slots)
    fc2 = build_memory_fc2(variant, slots, width, 0.0, 8)
    activation = memory_activation(variant, torch.relu)
    optimizer = torch.optim.Adam([*fc1.parameters(), *fc2.parameters()], lr=lr)
    # a gain adds a share of the keys; the loss counts too, as softmax memories sit at chance
    # before they take off; once every key is memorised only the logits grow, which is not
    # learning the task
    plateau = Plateau(limits, need=max(1, math.ceil(limits["min_gain"] * task.size)),
                      full=task.size)
    curve, start = [], time.process_time()
    for step in range(limits["max_steps"] + 1):
        logits = fc2(activation(fc1(task.keys))) @ task.readout.t()
        loss = F.cross_entropy(logits, task.targets)
        correct = int((logits.argmax(-1) == task.targets).sum())
        if step % limits["every"] == 0:
            curve.append([step, round(loss.item(), 5), round(100.0 * correct / task.size, 3)])
        if not math.isfinite(loss.item()):
            return result(curve, step, "diverged", plateau.best, task, start)
        stop = plateau.update(step, correct, loss.item())
        if stop is not None:
            if curve[-1][0] != step:
                curve.append([step, round(loss.item(), 5), round(100.0 * correct / task.size, 3)])
            return result(curve, step, stop, max(plateau.best, correct), task, start)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    raise AssertionError("unreachable: the loop returns at max_steps")


def result(curve: List[List[float]], step: int, stop: str, best: int, task: Task,
           start: float) -> Dict[str, Any]:
    accuracy = math.nan if stop == "diverged" else 100.0 * best / task.size
    return cell_result(curve, step, stop, start, {
        "accuracy": accuracy, "final_accuracy": curve[-1][2], "loss": curve[-1][1]})


def spec(slots: Sequence[int]) -> TableSpec:
    claims = []
    for n in slots:
        claims += [Comparison(f"stock_{n}", f"softmax_{n}", "accuracy",
                              f"ReLU memory beats softmax memory at {n} slots"),
                   Comparison(f"stock_{n}", f"softmax_ln_{n}", "accuracy",
                              f"ReLU memory matches softmax + LayerNorm at {n} slots",
                              margin=MARGIN)]
    return TableSpec(NAME, "FFN key-value memorisation against the number of slots",
                     "ReLUFormer, section 3 (synthetic)", "", "synthetic", (ACCURACY, LOSS),
                     tuple(Row(f"{variant}_{n}", f"{label} @ {n}", point={"slots": n})
                           for n in slots for variant, label in VARIANTS.items()),
                     tuple(claims), valid_loss_stop=False)


def make_study(args: argparse.Namespace) -> Study:
    """The study of ``args``: cells keyed by the variant, slots, seed, rate, task and limits."""
    task = make_task(args.keys, args.width)
    limits = {"max_steps": args.max_steps, "patience": args.patience,
              "min_gain": args.min_gain, "loss_gain": args.loss_gain, "every": args.every}

    def settings(row: Row, seed: int, lr: float) -> Dict[str, Any]:
        variant, slots = row.key.rsplit("_", 1)
        return {"variant": variant, "slots": int(slots), "seed": seed, "lr": lr,
                "keys": args.keys, "width": args.width, **limits}

    def trained(cell: Dict[str, Any]) -> Dict[str, Any]:
        return train(task, cell["variant"], cell["slots"], cell["lr"], cell["seed"], limits)

    return Study(spec(args.slots), args, settings, trained, task, limits)


def report(study: Study, cells: Sequence[Cell]) -> Dict[str, Any]:
    trivial = 100.0 * study.task.trivial_accuracy()
    references = {row.key: [NoModel(ACCURACY, trivial, "the most frequent class's share, "
                                                        "which needs no model")]
                  for row in study.table.rows}
    keys, width = study.args.keys, study.args.width
    return results(study, cells, references, {
        "keys": keys, "classes": keys, "width": width, "chance_accuracy": 100.0 / keys,
        "trivial_accuracy": trivial},
        f"{keys} keys and classes at width {width}; chance accuracy {100.0 / keys:.3g}%, the "
        f"most frequent class {trivial:.3g}% (the reference that reads no model).\n")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.reproduce.synthetic_memory",
        description="The ReLUFormer memory study as key-to-class memorisation by the "
                    "plugin's FFN variants (stock = ReLU, softmax, softmax_ln), each trained "
                    "to a plateau at its own learning rate; the paper's claims judged per "
                    "slot count by Welch's test with Holm's correction.")
    add_protocol_arguments(parser, max_steps=2000, patience=250, loss_gain=0.01, every=25)
    parser.add_argument("--slots", type=int, nargs="+", default=[64, 128, 256, 512],
                        metavar="N", help="FFN inner widths (default 64 128 256 512)")
    parser.add_argument("--keys", type=int, default=512, metavar="V",
                        help="keys to memorise, and classes (default 512)")
    parser.add_argument("--width", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--min-gain", type=float, default=0.0025, metavar="FRACTION",
                        help="the share of the keys a gain must add (at least one key; "
                             "default 0.0025)")
    args = parser.parse_args(argv)
    check_positive(parser, args, ("seeds", "keys", "width", "max_steps", "patience", "every"))
    if min(args.slots) < 1:
        parser.error("--slots: give positive numbers")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    torch.set_num_threads(1)
    return run_study(make_study(parse(argv)), report)

if __name__ == "__main__":
    raise SystemExit(main())
