"""A cell at its row's chosen rate that starts from the screening run of the same rate.

A table that chooses each row's rate (``lr_grid``) screens the rates on seed 1 at
``max_epoch`` epochs; the cells at the chosen rate may train up to ``plateau_max_epoch``
(their settings differ from the grid cell's only there). Seed 1's is then the grid cell's
training with a larger cap, so instead of training it again from scratch its folder is
seeded with the grid cell's checkpoints: ``checkpoint_last.pt`` (fairseq-train resumes from
it by itself: the same optimizer, learning-rate schedule, epoch and data order; only
``--patience``'s count of validations without improvement starts again at the resumption)
and ``checkpoint_best.pt`` (fairseq keeps the best valid nll in the checkpoint, so the best
model is replaced only by a better one). A grid cell that stopped at a plateau has nothing
left to learn at a larger cap: its training log is copied too, so the training step counts as
done and the cell is only decoded. The grid cell's folder is read, never changed.

The seeded folder holds ``continued_from.json`` (the grid cell's folder name, key and
result), written before the checkpoints, so that a continuation stopped half-way and resumed
later is still merged: the result's curve is the grid cell's followed by the new
validations, its figures those of the whole training. The same curve, read while the
continuation trains (:func:`curve_so_far`), gives its ``--patience`` count back at every
resumption (:mod:`~scripts.reproduce.patient_train`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List

from scripts.common.atomic_files import copy_atomic, write_text_atomic
from scripts.reproduce.log_figures import NLL, short_name, still_improving, validation_curve

MARKER = "continued_from.json"
CHECKPOINTS = ("checkpoint_best.pt", "checkpoint_last.pt")  # the last one last: it marks a
# seeded folder (fairseq-train resumes from it)


def can_continue(folder: Path, result: Dict[str, Any] | None) -> bool:
    """Whether the finished cell in ``folder`` (its ``result``) can seed a longer one: it
    stopped at its cap or at a plateau, did not diverge, and its checkpoints (and, for a
    plateau, its training log) are still there."""
    if not result or result.get("stopped") not in ("cap", "plateau"):
        return False
    if result.get("figures", {}).get("diverged"):
        return False
    needed = [*CHECKPOINTS, *(["train.log"] if result["stopped"] == "plateau" else [])]
    return all((folder / name).is_file() for name in needed)


def seed(earlier: Path, key: str, result: Dict[str, Any], folder: Path) -> None:
    """Copy the finished cell ``earlier`` (``key``, ``result``) into ``folder``, each file
    through a temporary name, ``checkpoint_last.pt`` last."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / MARKER, json.dumps(
        {"folder": earlier.name, "key": key, "result": result}, indent=1, default=str))
    names = list(CHECKPOINTS)
    if result["stopped"] == "plateau":  # done: its log (and CPU time) say so
        names[-1:-1] = [name for name in ("train.log.cpu", "train.log")
                        if (earlier / name).is_file()]
    for name in names:
        copy_atomic(earlier / name, folder / name)


def earlier_of(folder: Path) -> Dict[str, Any] | None:
    """What the cell in ``folder`` continues (:func:`seed`'s record), None for a cell
    trained from scratch."""
    path = folder / MARKER
    return json.loads(path.read_text()) if path.is_file() else None


def train_cpu(earlier: Dict[str, Any]) -> float:
    """The CPU seconds of the earlier training that the continuation's own log does not
    count (none when the log was copied: its CPU time was copied with it)."""
    result = earlier["result"]
    if result["stopped"] == "plateau":
        return 0.0
    return float(result.get("figures", {}).get("train_cpu_seconds") or 0.0)


def joined(before: List[List[float]], after: List[List[float]]) -> List[List[float]]:
    """The validation curve ``before`` followed by the points of ``after`` past its last."""
    last = before[-1][0] if before else -1
    return [*before, *(point for point in after if point[0] > last)]


def curve_so_far(folder: Path, log: str = "train.log",
                 metric: str = NLL) -> List[List[float]]:
    """The validation curve (of the loss ``metric``) of the training in ``folder`` until now:
    that of the training it continues (a seeded folder: :func:`seed`'s record), then its own
    ``log``'s."""
    path = folder / log
    own = validation_curve(path.read_text(encoding="utf-8", errors="replace").splitlines(),
                           metric) if path.is_file() else []
    earlier = earlier_of(folder)
    return joined(list(earlier["result"].get("curve") or []) if earlier else [], own)


def merged(earlier: Dict[str, Any], result: Dict[str, Any],
           patience: int | None, metric: str = NLL) -> Dict[str, Any]:
    """``result`` of a seeded cell as the result of its whole training: ``continued_from``
    set; after a capped grid cell, its curve first, then the new validations (those after
    its last), the best valid loss (the curve's, ``metric``: the valid nll by default) and the
    first training loss over both, both trainings' seconds."""
    old = earlier["result"]
    result = {**result, "continued_from": earlier["folder"]}
    if old["stopped"] == "plateau":  # the copied log is the whole training
        return result
    curve = joined(old.get("curve", []), result.get("curve", []))
    result["curve"] = curve
    result["still_improving"] = still_improving(curve, result.get("stopped"), patience)
    figures = dict(result.get("figures", {}))
    before = old.get("figures", {})
    if not figures.get("diverged"):
        finite = [nll for _, nll in curve if math.isfinite(nll)]
        name = short_name(metric)
        if finite:
            figures[f"valid_{name}"] = min(finite)
        if f"first_{name}" in before:
            figures[f"first_{name}"] = before[f"first_{name}"]
        if "train_seconds" in figures and "train_seconds" in before:
            figures["train_seconds"] = round(figures["train_seconds"]
                                             + before["train_seconds"], 1)
    result["figures"] = figures
    return result
