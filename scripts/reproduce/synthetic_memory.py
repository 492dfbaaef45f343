"""The ReLUFormer paper's memory study (section 3) as a task that trains to the end in seconds:
the FFN memorises which of V classes each of V keys belongs to.

The keys are V fixed random unit vectors of width 64, each given a random class among V
(drawn once, the same for every model). A model is the plugin's FFN variant itself
(``memory_activation`` and ``build_memory_fc2`` of
:mod:`relu_former.relu_attention.memory_ffn`) with N slots (its inner width), read out by a
fixed random unit vector per class: logits = E fc2(act(fc1 key)). Only the FFN learns, so the
slots are the only memory (a trained read-out alone memorises the keys: a linear map of
width 64 separates V random unit vectors). Full-batch Adam on the cross-entropy; the metric
is the share of keys whose class is the top logit, and a model that reads nothing gets the
most frequent class's share at best.

Each row (variant x slots) picks its rate on seed 1 from a grid (1.25, 2.5, 5 and 10 x 1e-3,
widened while the best is at an edge) by its final training loss; its other seeds train at
that rate. A cell stops at a plateau (its accuracy has not risen by ``--min-gain`` of the
keys over ``--patience`` steps) or at ``--max-steps``. The paper's claims are judged per
slot count by :mod:`scripts.reproduce.claims` (Welch, Holm, refusals). Each finished cell is
kept under ``OUT/cells``, so a rerun resumes; results go to ``OUT/synthetic_memory.json``
and ``.md``.

    python -m scripts.reproduce.synthetic_memory --out /tmp/synthetic_memory
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import torch
import torch.nn.functional as F

from relu_former.relu_attention.memory_ffn import build_memory_fc2, memory_activation
from scripts.common.atomic_files import write_text_atomic
from scripts.common.plotting import markdown_table
from scripts.reproduce.cell_cache import CellCache, settings_key
from scripts.reproduce.claims import NoModel, judge
from scripts.reproduce.report import claims_table, plain, result_table, spreads
from scripts.reproduce.runner import widened
from scripts.reproduce.spec import Comparison, Metric, Row, TableSpec

NAME = "synthetic_memory"
VARIANTS = {"stock": "ReLU memory (stock FFN)", "softmax": "softmax memory",
            "softmax_ln": "softmax memory + LayerNorm"}
GRID = (1.25e-3, 2.5e-3, 5e-3, 1e-2)
LR_LIMITS = (1e-4, 4e-2)
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


@dataclass
class Cell:
    """One row at one seed and rate, with its result once trained (what
    :func:`scripts.reproduce.claims.judge` reads: ``row``, ``seed``, ``result``)."""

    row: Row
    seed: int
    lr: float
    result: Dict[str, Any] | None = None
    lr_grid: List[List[float]] | None = None


def train(task: Task, variant: str, slots: int, lr: float, seed: int, limits: Dict[str, int]
          ) -> Dict[str, Any]:
    """Full-batch Adam until the accuracy plateaus or ``max_steps``; the cell's result."""
    torch.manual_seed(seed)
    width = task.keys.shape[1]
    fc1 = torch.nn.Linear(width, slots)
    fc2 = build_memory_fc2(variant, slots, width, 0.0, 8)
    activation = memory_activation(variant, torch.relu)
    optimizer = torch.optim.Adam([*fc1.parameters(), *fc2.parameters()], lr=lr)
    need = max(1, math.ceil(limits["min_gain"] * task.size))  # keys a gain must add
    best, best_loss, best_step, curve, start = -1, math.inf, 0, [], time.process_time()
    for step in range(limits["max_steps"] + 1):
        logits = fc2(activation(fc1(task.keys))) @ task.readout.t()
        loss = F.cross_entropy(logits, task.targets)
        correct = int((logits.argmax(-1) == task.targets).sum())
        if step % limits["every"] == 0:
            curve.append([step, round(loss.item(), 5), round(100.0 * correct / task.size, 3)])
        if not math.isfinite(loss.item()):
            return result(curve, step, "diverged", best, task, start)
        # the loss counts too, as softmax memories sit at chance before they take off; once
        # every key is memorised only the logits grow, which is not learning the task
        if correct >= best + need or (correct < task.size and loss.item() < best_loss * (
                1.0 - limits["loss_gain"])):
            best, best_loss, best_step = max(best, correct), loss.item(), step
        if step - best_step >= limits["patience"] or step == limits["max_steps"]:
            if curve[-1][0] != step:
                curve.append([step, round(loss.item(), 5), round(100.0 * correct / task.size, 3)])
            stop = "plateau" if step - best_step >= limits["patience"] else "cap"
            return result(curve, step, stop, max(best, correct), task, start)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    raise AssertionError("unreachable: the loop returns at max_steps")


def result(curve: List[List[float]], step: int, stop: str, best: int, task: Task,
           start: float) -> Dict[str, Any]:
    diverged = stop == "diverged"
    return {"stopped": "cap" if diverged else stop, "still_improving": stop == "cap",
            "updates": step, "curve": curve, "cpu_seconds": time.process_time() - start,
            "figures": {"accuracy": math.nan if diverged else 100.0 * best / task.size,
                        "final_accuracy": curve[-1][2], "loss": curve[-1][1],
                        "diverged": diverged}}


def rows(slots: Sequence[int]) -> List[Row]:
    return [Row(f"{variant}_{n}", f"{label} @ {n}", point={"slots": n})
            for n in slots for variant, label in VARIANTS.items()]


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
                     tuple(rows(slots)), tuple(claims))


class Study:
    """The cells of one run: trained on demand, each cached the moment it finishes."""

    def __init__(self, args: argparse.Namespace, say: Callable[[str], None] = print) -> None:
        self.args, self.say = args, say
        self.task = make_task(args.keys, args.width)
        self.cache = CellCache(Path(args.out) / "cells")
        self.limits = {"max_steps": args.max_steps, "patience": args.patience,
                       "min_gain": args.min_gain, "loss_gain": args.loss_gain,
                       "every": args.every}
        self.seen: List[Cell] = []   # every cell looked up, the rate grids' included
        self.trained = 0

    def cell(self, row: Row, seed: int, lr: float) -> Cell:
        variant, slots = row.key.rsplit("_", 1)
        settings = {"variant": variant, "slots": int(slots), "seed": seed, "lr": lr,
                    "keys": self.args.keys, "width": self.args.width, **self.limits}
        key = settings_key(settings)
        folder = self.cache.folder(NAME, row.key, seed, f"{lr:g}-{key}")
        stored = self.cache.get(folder, key)
        if stored is None:
            found = train(self.task, variant, int(slots), lr, seed, self.limits)
            stored = self.cache.put(folder, key, {**found, "settings": settings})
            self.trained += 1
            figures = stored["figures"]
            self.say(f"{row.label}, seed {seed}, lr {lr:g}: accuracy {figures['accuracy']:.2f}%"
                     f", loss {figures['loss']:.4g}, {stored['stopped']} at step "
                     f"{stored['updates']} ({stored['cpu_seconds']:.1f} CPU s)")
        self.seen.append(Cell(row, seed, lr, stored))
        return self.seen[-1]

    def row_cells(self, row: Row) -> List[Cell]:
        """Seed 1 over the widened grid, then the other seeds at the rate of lowest loss."""
        grid, found = sorted(self.args.lr_grid), {}
        while True:
            for lr in grid:
                if lr not in found:
                    found[lr] = self.cell(row, 1, lr)
            loss = {lr: final_loss(cell) for lr, cell in found.items()}
            more = widened(grid, loss, LR_LIMITS)
            if more is None:
                break
            grid = sorted([*grid, more])
        chosen = min(grid, key=loss.get)
        points = [[lr, plain(loss[lr])] for lr in grid]
        cells = [found[chosen]] + [self.cell(row, seed, chosen)
                                   for seed in range(2, self.args.seeds + 1)]
        for cell in cells:
            cell.lr_grid = points
        return cells


def final_loss(cell: Cell) -> float:
    figures = cell.result["figures"]
    return math.inf if figures["diverged"] else float(figures["loss"])


def learning_table(cells: Sequence[Cell], slots: Sequence[int]) -> str:
    lines = []
    for row in rows(slots):
        done = [cell for cell in cells if cell.row.key == row.key]
        stops = [cell.result["stopped"] for cell in done]
        grid = ", ".join(f"{lr:g}: " + ("diverged" if loss is None else f"{loss:.4g}")
                         for lr, loss in done[0].lr_grid)
        lines.append([row.label, f"{done[0].lr:g}", grid,
                      ", ".join(f"{stops.count(s)} {s}" for s in sorted(set(stops))),
                      ", ".join(str(cell.result["updates"]) for cell in done)])
    return markdown_table(["row", "rate", "rate grid (seed 1's final loss)", "stopped",
                           "steps (seeds 1..)"], lines)


def report(study: Study, cells: Sequence[Cell], slots: Sequence[int]) -> Dict[str, Any]:
    table = spec(slots)
    trivial = 100.0 * study.task.trivial_accuracy()
    references = {row.key: [NoModel(ACCURACY, trivial, "the most frequent class's share, "
                                                        "which needs no model")]
                  for row in table.rows}
    judged = judge(table, cells, {"no_model": references})
    cpu = sum(cell.result["cpu_seconds"] for cell in study.seen) / 60
    return {"task": {"keys": study.args.keys, "classes": study.args.keys,
                     "width": study.args.width, "chance_accuracy": 100.0 / study.args.keys,
                     "trivial_accuracy": trivial},
            "limits": study.limits, "seeds": study.args.seeds,
            "rows": {row.key: {"label": row.label,
                               "lr": next(c.lr for c in cells if c.row.key == row.key),
                               "lr_grid": next(c.lr_grid for c in cells if c.row.key == row.key),
                               "seeds": [{"seed": c.seed, **{k: c.result[k] for k in (
                                   "stopped", "still_improving", "updates", "curve",
                                   "cpu_seconds", "figures")}}
                                   for c in cells if c.row.key == row.key]}
                     for row in table.rows},
            "claims": judged, "cpu_minutes": cpu,
            "markdown": "\n".join([
                f"{study.args.keys} keys and classes at width {study.args.width}; chance "
                f"accuracy {100.0 / study.args.keys:.3g}%, the most frequent class "
                f"{trivial:.3g}% (the reference that reads no model).\n",
                result_table(table, spreads(table, cells)),
                                   learning_table(cells, slots),
                                   claims_table(table, judged)])}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.reproduce.synthetic_memory",
        description="The ReLUFormer memory study as key-to-class memorisation by the "
                    "plugin's FFN variants (stock = ReLU, softmax, softmax_ln), each trained "
                    "to a plateau at its own learning rate; the paper's claims judged per "
                    "slot count by Welch's test with Holm's correction.")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="folder for the results and the finished cells (a rerun "
                             "resumes from them)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per row (default 3)")
    parser.add_argument("--slots", type=int, nargs="+", default=[64, 128, 256, 512],
                        metavar="N", help="FFN inner widths (default 64 128 256 512)")
    parser.add_argument("--keys", type=int, default=512, metavar="V",
                        help="keys to memorise, and classes (default 512)")
    parser.add_argument("--width", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--lr-grid", type=float, nargs="+", default=list(GRID), metavar="LR",
                        help="seed 1's rates per row, widened x2 while the best is at an edge "
                             f"(within {LR_LIMITS[0]:g}-{LR_LIMITS[1]:g}; default "
                             f"{' '.join(f'{lr:g}' for lr in GRID)})")
    parser.add_argument("--max-steps", type=int, default=2000,
                        help="the cap on full-batch steps (default 2000)")
    parser.add_argument("--patience", type=int, default=250,
                        help="steps without a gain before a plateau (default 250)")
    parser.add_argument("--min-gain", type=float, default=0.0025, metavar="FRACTION",
                        help="the share of the keys a gain must add (at least one key; "
                             "default 0.0025)")
    parser.add_argument("--loss-gain", type=float, default=0.01, metavar="FRACTION",
                        help="a relative fall of the loss that also counts as a gain while "
                             "some key is not memorised (default 0.01)")
    parser.add_argument("--every", type=int, default=25, help="steps between curve points")
    args = parser.parse_args(argv)
    for flag in ("seeds", "keys", "width", "max_steps", "patience", "every"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')}: give a positive whole number")
    if min(args.slots) < 1 or min(args.lr_grid) <= 0:
        parser.error("--slots and --lr-grid: give positive numbers")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    torch.set_num_threads(1)
    args = parse(argv)
    study = Study(args)
    cells = [cell for row in rows(args.slots) for cell in study.row_cells(row)]
    found = report(study, cells, args.slots)
    found["cells_trained_now"] = study.trained
    markdown = found.pop("markdown")
    write_text_atomic(args.out / f"{NAME}.json", json.dumps(plain(found), indent=1) + "\n")
    write_text_atomic(args.out / f"{NAME}.md", markdown)
    print(markdown)
    print(f"{len(study.seen)} cells ({study.trained} trained now), "
          f"{found['cpu_minutes']:.2f} CPU minutes in all; {args.out / (NAME + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
