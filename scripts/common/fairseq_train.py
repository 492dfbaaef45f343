"""Training one :class:`~scripts.common.run_record.Run` with the real ``fairseq-train``.

The command line is the same for every run of a comparison but for the run's own flags, its
:class:`~scripts.common.run_record.Budget` and, for a continuation, its parent's checkpoint:
validation and saving happen once, at the end, so that every second of the budget trains.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import List

from scripts.common.atomic_files import write_text_atomic
from scripts.common.child_processes import child_env, stream
from scripts.common.fairseq_cli import fairseq_command
from scripts.common.parallel_runs import threads_per_job
from scripts.common.repo_paths import USER_DIR
from scripts.common.run_record import Budget, Run, parse_log_line


def model_flags(layers: int, dim: int, ffn: int, heads: int,
                decoder_layers: int | None = None) -> List[str]:
    """Encoder and decoder of the same width (and depth, unless ``decoder_layers`` is given),
    all embeddings shared."""
    return [
        "--encoder-layers", str(layers),
        "--decoder-layers", str(layers if decoder_layers is None else decoder_layers),
        "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim),
        "--encoder-ffn-embed-dim", str(ffn), "--decoder-ffn-embed-dim", str(ffn),
        "--encoder-attention-heads", str(heads),
        "--decoder-attention-heads", str(heads), "--share-all-embeddings",
    ]


def final_learning_rate(lr: float, warmup: int, updates: int) -> float:
    """The learning rate of fairseq's inverse_sqrt schedule (from ~0) after ``updates``."""
    if updates < warmup:
        return lr * max(updates, 1) / warmup
    return lr * math.sqrt(warmup / updates)


def _schedule(run: Run, budget: Budget, work: Path) -> tuple[List, float]:
    """Learning-rate and start flags, and the training time already spent (a parent's)."""
    if run.parent is None:
        return ["--lr", str(budget.lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates",
                str(budget.warmup), "--warmup-init-lr", "1e-07"], 0.0
    # A continuation: the parent's weights (its last checkpoint, or ``run.start_from``), a
    # fresh optimizer, and a constant learning rate equal to the one the parent's schedule
    # reached at ``run.parent.updates``.
    lr = final_learning_rate(budget.lr, budget.warmup, run.parent.updates)
    spent = 0.0 if math.isnan(run.parent.train_seconds) else run.parent.train_seconds
    checkpoint = run.start_from or work / run.parent.key / "checkpoint_last.pt"
    return ["--lr", f"{lr:.6g}", "--lr-scheduler", "fixed", "--finetune-from-model",
            checkpoint], spent


def train_command(run: Run, budget: Budget, data_bin: Path, work: Path,
                  args: argparse.Namespace) -> tuple[List, int, float]:
    """The fairseq-train command of one run, its update budget and its wall-clock cap.

    ``args`` holds ``seed`` and ``budget_scale`` (the shared run flags).
    """
    cap = budget.time_budget_s * args.budget_scale
    schedule, spent = _schedule(run, budget, work)
    # fairseq's --stop-time-hours counts the training time stored in a checkpoint too
    stop_after = cap + spent
    command = [
        fairseq_command("fairseq-train"), data_bin, "--user-dir", USER_DIR, "--arch", run.arch,
        *model_flags(budget.layers, budget.dim, budget.ffn, budget.heads,
                    budget.decoder_layers), "--dropout", "0.1",
        "--cpu", "--seed", str(args.seed),
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
        *schedule, "--max-tokens", str(budget.max_tokens),
        "--max-update", str(budget.max_update), "--stop-time-hours", f"{stop_after / 3600:.6f}",
        # validate and save once, at the end: every second goes to training
        "--validate-interval", "1000", "--save-interval", "1000", "--no-epoch-checkpoints",
        "--save-dir", work / run.key, "--log-format", "json",
        "--log-interval", str(max(1, min(25, budget.max_update // 20))), "--no-progress-bar",
        "--num-workers", "0",
        # fairseq's batcher drops a whole split smaller than this multiple (8 by default)
        "--required-batch-size-multiple", "1",
        "--skip-invalid-size-inputs-valid-test", *run.train_flags,
    ]
    return command, budget.max_update, cap


def train(run: Run, budget: Budget, data_bin: Path, work: Path, args: argparse.Namespace,
          position: int = 0) -> None:
    """Train one model with ``fairseq-train`` into ``work/run.key``, folding its log into
    ``run``; raises ``RuntimeError`` with the log's tail when fairseq fails."""
    from tqdm import tqdm

    command, max_update, cap = train_command(run, budget, data_bin, work, args)
    run.budget_updates = max_update
    bar = tqdm(total=max_update, desc=f"train {run.key:<15}", unit="upd", leave=True,
               disable=args.quiet, dynamic_ncols=True, mininterval=1.0, position=position)
    started = time.time()

    def on_line(line: str) -> None:
        if parse_log_line(line, run) == "train_inner":
            bar.update(run.updates - bar.n)
            bar.set_postfix(nll=f"{run.losses[-1][1]:.2f}",
                            budget=f"{time.time() - started:.0f}/{cap:.0f}s")

    code, run.train_cpu = stream(command, work / run.key / "train.log", on_line,
                                 child_env(threads_per_job(args)))
    bar.update(run.updates - bar.n)
    bar.close()
    if code != 0 or not (work / run.key / "checkpoint_last.pt").is_file():
        tail = (work / run.key / "train.log").read_text()[-3000:]
        raise RuntimeError(f"fairseq-train failed for {run.key} (exit {code}):\n{tail}")
    write_text_atomic(work / run.key / "cpu.json", json.dumps({"train_cpu": run.train_cpu}))
    if not run.finished:
        run.note = (f"stopped by the {cap:.0f} s time cap after {run.updates} of its "
                    f"{max_update} updates: not finished")
