"""One fairseq model of a comparison: how to train and decode it, and what it measured.

A :class:`Run` is filled from fairseq-train's ``--log-format json`` log as the log streams
(:func:`parse_log_line`), or afterwards from a finished log on disk (:func:`trained_before`,
what ``--resume`` reuses). A :class:`Budget` is the size and training budget it runs with.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List

from scripts.common.fairseq_log import parse_json_log_line


@dataclass(frozen=True)
class Budget:
    """A model's size and its training budget: ``max_update`` or the time cap, the first."""

    layers: int
    dim: int
    ffn: int
    heads: int
    max_tokens: int        # tokens per batch
    max_update: int
    time_budget_s: float   # wall-clock cap, before ``--budget-scale``
    warmup: int
    lr: float
    decoder_layers: int | None = None  # None: as many as the encoder's ``layers``


@dataclass
class Run:
    """One model of the comparison: how to train and decode it, and what it measured."""

    key: str
    label: str
    arch: str
    train_flags: List[str]
    data: str = "sentences"  # the data bin's name, e.g. "summaries"
    generate_flags: List[str] = field(default_factory=list)
    parent: Run | None = None  # fine-tuned from this run's last checkpoint
    # where the parent's checkpoint is elsewhere than WORK/parent.key/checkpoint_last.pt
    start_from: Path | None = None
    budget_updates: int = 0    # the update budget it trains for (0: not known yet)
    # measured
    losses: List[tuple] = field(default_factory=list)  # (update, training nll in bits)
    wps: List[float] = field(default_factory=list)
    params: int | None = None
    updates: int = 0
    train_seconds: float = math.nan
    train_cpu: float = math.nan       # CPU seconds of the whole fairseq-train process
    valid_nll: float = math.nan
    bleu: float = math.nan
    tok_bleu: float = math.nan
    rouge: Dict[str, float] = field(default_factory=dict)
    decode_seconds: float = math.nan  # fairseq-generate's own time for the test split
    entropy: float = math.nan
    zeros: float = math.nan
    note: str = ""

    @property
    def finished(self) -> bool:
        """Whether it trained its whole update budget (a time cap did not stop it first)."""
        return self.updates >= self.budget_updates


def parse_log_line(line: str, run: Run) -> str | None:
    """Fold one fairseq-train (json log format) line into ``run``; returns its tag if any."""
    if (match := re.search(r"model params: ([\d,]+)", line)) and run.params is None:
        run.params = int(match.group(1).replace(",", ""))
    if match := re.search(r"done training in ([\d.]+) seconds", line):
        run.train_seconds = float(match.group(1))
    parsed = parse_json_log_line(line)
    if parsed is None:
        return None
    tag, stats = parsed
    if tag == "train_inner":
        run.updates = int(stats["num_updates"])
        # nll_loss is the full-softmax cross-entropy in every criterion used here (loss also
        # holds regularisers or the sparse loss), so it is the one comparable curve.
        nll = stats["nll_loss"] if "nll_loss" in stats else stats["loss"]
        run.losses.append((run.updates, float(nll)))
        run.wps.append(float(stats["wps"]))
    elif tag == "valid":
        run.valid_nll = float(stats.get("valid_nll_loss", stats.get("valid_loss", math.nan)))
    elif tag == "train":
        run.updates = int(stats.get("train_num_updates", run.updates))
    return tag


def trained_before(run: Run, work: Path) -> bool:
    """Fold a finished earlier training log into ``run``; False if there is none."""
    log = work / run.key / "train.log"
    if not (work / run.key / "checkpoint_last.pt").is_file() or not log.is_file():
        return False
    fresh = replace(run, losses=[], wps=[])
    for line in log.read_text().splitlines():
        parse_log_line(line, fresh)
    if math.isnan(fresh.train_seconds):  # interrupted: train again
        return False
    cpu = work / run.key / "cpu.json"
    if cpu.is_file():
        fresh.train_cpu = float(json.loads(cpu.read_text())["train_cpu"])
    run.__dict__.update(fresh.__dict__)
    return True
