"""Figures of one cell read from what fairseq and the recipes' scorer write: ``train.log``
(``--log-format json``), ``score-<subset>.json`` and ``generate-<subset>.txt`` (its decoding
times). The same readers serve the toy runs and a cluster's paper-scale logs.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Dict, List

from scripts.common.fairseq_log import json_log_records
from scripts.reproduce.stop_rule import stopped_at_plateau

_PARAMS = re.compile(r"model params: ([\d,]+)")
_DONE = re.compile(r"done training in ([\d.]+) seconds")
_DECODED = re.compile(r"Translated [\d,]+ sentences \(([\d,]+) tokens\) in ([\d.]+)s")
_DECODED_CPU = re.compile(r"Decoding CPU time: ([\d.]+)s")
# the validation loss a cell stops on and chooses its rate by, unless its kind names another
NLL = "nll_loss"
# the classifiers' stopping figure, 100 - valid accuracy (%): it falls as a model learns, so
# the protocol reads it as it reads a loss
ERROR = "error"


def as_loss(metric: str, value: float) -> float:
    """fairseq's ``value`` of ``metric`` as a falling figure (the accuracy as the error)."""
    return 100.0 - value if metric == ERROR else value


def checkpoint_metric_flags(metric: str) -> List[str]:
    """fairseq-train's flags that keep the best checkpoint by ``metric`` and stop on it."""
    if metric == ERROR:
        return ["--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric"]
    return ["--best-checkpoint-metric", metric]


def stopping_metric(fairseq_metric: str, maximize: bool) -> str:
    """The inverse of :func:`checkpoint_metric_flags`; a maximised figure other than the
    accuracy, which the stop rule cannot read as a loss, is refused."""
    if maximize and fairseq_metric != "accuracy":
        raise SystemExit(f"--best-checkpoint-metric {fairseq_metric}, maximised: the stop rule "
                         "reads a loss or the accuracy")
    return ERROR if maximize else fairseq_metric


def logged_value(record: Dict[str, Any], metric: str, prefix: str) -> float:
    """``metric`` in one log record whose keys start with ``prefix``, else its ``loss``,
    else NaN."""
    if metric == ERROR:
        return as_loss(metric, float(record.get(f"{prefix}accuracy", "nan")))
    return float(record.get(f"{prefix}{metric}", record.get(f"{prefix}loss", "nan")))


def short_name(metric: str) -> str:
    """A loss's name in a cell's figures (``valid_nll`` for ``nll_loss``)."""
    return metric.removesuffix("_loss")


def validation_curve(lines: List[str], metric: str = NLL) -> List[List[float]]:
    """``[[update, valid loss], ...]`` of a fairseq-train json log; a resumed run appends to
    the log, and a validation at or before an earlier one replaces the rest of the curve."""
    curve: List[List[float]] = []
    for record in json_log_records(lines, "valid"):
        nll = logged_value(record, metric, "valid_")
        update = int(float(record.get("valid_num_updates", len(curve))))
        curve = [point for point in curve if point[0] < update] + [[update, nll]]
    return curve


def training_record(log: Path, patience: int | None, metric: str = NLL) -> Dict[str, Any]:
    """A finished training's ``curve``, ``updates``, why it ``stopped`` (``plateau`` or
    ``cap``) and whether a capped run was ``still_improving``: its best valid loss within the
    last ``patience`` validations (the last one without a patience)."""
    text = log.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    curve = validation_curve(lines, metric)
    logged = [int(record["num_updates"]) for record in json_log_records(lines, "train_inner")]
    updates = max([*logged[-1:], *(point[0] for point in curve[-1:]), 0])
    stopped = "plateau" if stopped_at_plateau(text) else "cap"
    finite = [i for i, (_, loss) in enumerate(curve) if math.isfinite(loss)]
    best = min(finite, key=lambda i: curve[i][1]) if finite else None
    window = patience if patience and patience > 0 else 1
    return {"curve": curve, "updates": updates, "stopped": stopped, "still_improving":
            stopped == "cap" and best is not None and len(curve) - 1 - best < window}


def train_figures(log: Path, metric: str = NLL) -> Dict[str, float]:
    """``valid_nll`` (the best, bits), ``first_nll``, ``updates``, ``train_seconds`` and
    ``params`` of a finished fairseq-train log, NaN where missing; ``FileNotFoundError`` or
    ``ValueError`` for a missing or unfinished log."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    name = short_name(metric)
    valid, first_figure = f"valid_{name}", f"first_{name}"
    figures = dict.fromkeys((valid, first_figure, "updates", "train_seconds", "params"),
                            math.nan)
    curve = validation_curve(lines, metric)
    finite = [nll for _, nll in curve if math.isfinite(nll)]
    if finite:
        figures[valid] = min(finite)
    inner = json_log_records(lines, "train_inner") or json_log_records(lines, "train")
    if inner:
        first = inner[0]
        # train_inner records name their figures bare, an epoch's train record prefixed
        figures[first_figure] = logged_value(first, metric, "" if "loss" in first else "train_")
        last = inner[-1]
        figures["updates"] = float(last.get("num_updates", last.get("train_num_updates",
                                                                    "nan")))
    if curve and not curve[-1][0] <= figures["updates"]:  # validated after the last log line
        figures["updates"] = float(curve[-1][0])
    for line in lines:
        if (match := _PARAMS.search(line)) and math.isnan(figures["params"]):
            figures["params"] = float(match.group(1).replace(",", ""))
        if match := _DONE.search(line):
            figures["train_seconds"] = float(match.group(1))
    if math.isnan(figures["train_seconds"]):
        raise ValueError(f"{log} has no 'done training' line: the run did not finish")
    return figures


def decode_times(generate_output: Path) -> Dict[str, float]:
    """fairseq-generate's ``decode_seconds`` (wall) and ``decode_cpu_seconds`` (logged by
    :mod:`~scripts.reproduce.timed_generate`); NaN where the output has no such line."""
    times = {"decode_seconds": math.nan, "decode_cpu_seconds": math.nan}
    for line in generate_output.read_text(encoding="utf-8", errors="replace").splitlines():
        if match := _DECODED.search(line):
            times["decode_seconds"] = float(match.group(2))
        elif match := _DECODED_CPU.search(line):
            times["decode_cpu_seconds"] = float(match.group(1))
    return times


def score_figures(path: Path) -> Dict[str, float]:
    """The numeric entries of a scorer result file."""
    data = json.loads(path.read_text())
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}
