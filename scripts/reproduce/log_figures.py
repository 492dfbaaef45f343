"""Figures of one cell read from the files fairseq and the recipes' scorer write.

``train.log``: fairseq-train's ``--log-format json`` output (the recipes tee theirs to
``SAVE_DIR/train.log``); ``score-<subset>.json``: ``scripts/recipes/lib/score.py``'s result;
``generate-<subset>.txt``: fairseq-generate's output, whose last line gives the decoding time.
The same readers serve the toy runs and a cluster's paper-scale logs.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Dict

from scripts.common.fairseq_log import json_log_records

_PARAMS = re.compile(r"model params: ([\d,]+)")
_DONE = re.compile(r"done training in ([\d.]+) seconds")
_DECODED = re.compile(r"Translated [\d,]+ sentences \(([\d,]+) tokens\) in ([\d.]+)s")


def train_figures(log: Path) -> Dict[str, float]:
    """``valid_nll`` (bits, the last validation), ``first_nll`` (the first logged training
    nll), ``updates``, ``train_seconds`` and ``params`` of a finished fairseq-train log; NaN
    where a figure is missing. Raises ``FileNotFoundError``/``ValueError`` for a missing log
    or one whose run did not finish (killed, or still running)."""
    if not log.is_file():
        raise FileNotFoundError(f"no training log {log}")
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    figures = dict.fromkeys(("valid_nll", "first_nll", "updates", "train_seconds", "params"),
                            math.nan)
    valid = json_log_records(lines, "valid")
    if valid:
        last = valid[-1]
        figures["valid_nll"] = float(last.get("valid_nll_loss", last.get("valid_loss", "nan")))
    inner = json_log_records(lines, "train_inner") or json_log_records(lines, "train")
    if inner:
        first = inner[0]
        figures["first_nll"] = float(first.get("nll_loss", first.get("loss",
                                                first.get("train_nll_loss", "nan"))))
        last = inner[-1]
        figures["updates"] = float(last.get("num_updates", last.get("train_num_updates",
                                                                    "nan")))
    for line in lines:
        if (match := _PARAMS.search(line)) and math.isnan(figures["params"]):
            figures["params"] = float(match.group(1).replace(",", ""))
        if match := _DONE.search(line):
            figures["train_seconds"] = float(match.group(1))
    if math.isnan(figures["train_seconds"]):
        raise ValueError(f"{log} has no 'done training' line: the run did not finish")
    return figures


def decode_seconds(generate_output: Path) -> float:
    """fairseq-generate's own decoding time of the subset (NaN if it did not finish)."""
    seconds = math.nan
    for line in generate_output.read_text(encoding="utf-8", errors="replace").splitlines():
        if match := _DECODED.search(line):
            seconds = float(match.group(2))
    return seconds


def score_figures(path: Path) -> Dict[str, float]:
    """The numeric entries of a scorer result file."""
    data = json.loads(path.read_text())
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}
