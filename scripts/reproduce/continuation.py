"""A cell at its row's chosen rate that continues the grid cell of that rate (seed 1).

The chosen cells may train up to ``plateau_max_epoch``, past the grid's ``max_epoch``, so seed
1's folder is seeded with the grid cell's checkpoints (fairseq-train resumes from
``checkpoint_last.pt``; only ``--patience``'s count starts again, which
:mod:`~scripts.reproduce.patient_train` gives back from :func:`curve_so_far`), and, after a
plateau, its log (nothing left to learn: only decoded). ``continued_from.json`` is written
first, so a continuation cut half-way is still merged: one curve, the whole training's figures.
The grid cell's folder is never changed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List

from scripts.common.atomic_files import copy_atomic, write_text_atomic
from scripts.reproduce.log_figures import NLL, short_name, still_improving, validation_curve

MARKER = "continued_from.json"
CHECKPOINTS = ("checkpoint_best.pt", "checkpoint_last.pt")  # last: marks a seeded folder


def can_continue(folder: Path, result: Dict[str, Any] | None) -> bool:
    """Whether the finished cell in ``folder`` can seed a longer one: stopped at its cap or a
    plateau, not diverged, its checkpoints (and, after a plateau, its log) here."""
    if not result or result.get("stopped") not in ("cap", "plateau"):
        return False
    if result.get("figures", {}).get("diverged"):
        return False
    needed = [*CHECKPOINTS, *(["train.log"] if result["stopped"] == "plateau" else [])]
    return all((folder / name).is_file() for name in needed)


def seed(earlier: Path, key: str, result: Dict[str, Any], folder: Path) -> None:
    """Copy the finished cell ``earlier`` into ``folder``, ``checkpoint_last.pt`` last."""
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
    """What the cell in ``folder`` continues (:func:`seed`'s record), if anything."""
    path = folder / MARKER
    return json.loads(path.read_text()) if path.is_file() else None


def train_cpu(earlier: Dict[str, Any]) -> float:
    """The earlier training's CPU seconds that the continuation's log does not count."""
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
    """The validation curve of the training in ``folder`` so far, the one it continues first."""
    path = folder / log
    own = validation_curve(path.read_text(encoding="utf-8", errors="replace").splitlines(),
                           metric) if path.is_file() else []
    earlier = earlier_of(folder)
    return joined(list(earlier["result"].get("curve") or []) if earlier else [], own)


def merged(earlier: Dict[str, Any], result: Dict[str, Any],
           patience: int | None, metric: str = NLL) -> Dict[str, Any]:
    """``result`` of a seeded cell as that of its whole training: one curve, the best and
    first losses and the seconds over both."""
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
