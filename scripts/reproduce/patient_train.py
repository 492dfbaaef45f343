"""fairseq-train that a resumption does not change: ``python -m scripts.reproduce.patient_train
<fairseq-train args>``, the command the table cells train with.

fairseq keeps ``--patience``'s count (``should_stop_early.best``/``num_runs``) in no
checkpoint, and a resumed training makes new batches: a cell trained across calls would stop
at another plateau, with another model, than the same cell trained in one go. This launcher
patches this process only: ``load_checkpoint`` restores the count from the validation curve
of the save directory's ``train.log`` (an accuracy read as an error rate),
``should_stop_early`` applies the protocol's stop rule (:mod:`~scripts.reproduce.stop_rule`:
a spent patience stops only once the loss no longer falls), and ``get_batch_iterator`` builds
a resumed training's batches as its first epoch did, so it ends with the same model, to the bit
(on one machine: another CPU takes another float path, ``scripts/common/cpu_path.py``).
"""

from __future__ import annotations

import functools
import logging
import math
import sys
from pathlib import Path
from typing import Any, Callable, List, Sequence, Tuple

from scripts.common.fairseq_cli import fairseq_command
from scripts.reproduce.log_figures import NLL, as_loss, stopping_metric, validation_curve
from scripts.reproduce.stop_rule import goes_on, still_falling

MODULE = "scripts.reproduce.patient_train"
LOG = "train.log"  # the runner's log of a training step, in the save directory
logger = logging.getLogger(MODULE)


def command(fairseq_train: Sequence[Any]) -> List[Any]:
    """The fairseq-train command line ``fairseq_train`` run through this launcher."""
    return [sys.executable, "-m", MODULE, *fairseq_train[1:]]


def train_args(argv: Sequence[str]) -> List[str]:
    """The fairseq-train arguments of ``argv``: a fairseq-train command or a :func:`command`."""
    return list(argv[3:] if list(argv[1:3]) == ["-m", MODULE] else argv[1:])


def curve_so_far(folder: Path, updates: int, metric: str = NLL) -> List[List[float]]:
    """The validation curve in ``folder``'s log up to a checkpoint's ``updates`` (those after
    it are made again by the resumed training)."""
    path = folder / LOG
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if (
        path.is_file()) else []
    return [point for point in validation_curve(lines, metric) if point[0] <= updates]


def patience_state(nlls: Sequence[float]) -> Tuple[float | None, int]:
    """``should_stop_early``'s ``(best, num_runs)`` after the validations ``nlls``: the first
    one sets the best, then each strictly lower one; ``num_runs`` counts those after it."""
    best, since = None, 0
    for nll in nlls:
        if best is None or nll < best:
            best, since = nll, 0
        else:  # a NaN too, as fairseq's comparison reads it
            since += 1
    return best, since


def restore_patience(curve: Sequence[Sequence[float]], best: float, updates: int,
                     where: Path, metric: str = NLL) -> None:
    """Set fairseq's early-stopping state to the checkpoint's ``best`` and the validations
    of ``curve`` (up to the checkpoint's ``updates``) since it (``where``: its log)."""
    from fairseq_cli import train

    logged, since = patience_state([nll for _, nll in curve])
    expected = as_loss(metric, best)
    if logged is None or not math.isclose(logged, expected, abs_tol=1e-9):
        # the count is then the log's, since its own best
        logger.warning(f"the best valid {metric} in {where} ({logged}) is not the "
                       f"checkpoint's ({expected})")
    train.should_stop_early.best = best
    train.should_stop_early.num_runs = since
    logger.info(f"resumed at update {updates}: --patience goes on from the best {metric} "
                f"{expected:g}, {since} validation(s) since it")


class Validations:
    """The training's validation curve as it trains, and its trainer (the updates)."""

    def __init__(self) -> None:
        self.curve: List[List[float]] = []
        self.trainer: Any = None
        self.metric = NLL  # the stopping figure (log_figures.stopping_metric)


def restoring(load: Callable, validations: Validations) -> Callable:
    """fairseq's ``checkpoint_utils.load_checkpoint`` that starts ``validations`` at the
    loaded checkpoint and restores the patience count when the checkpoint gave fairseq its
    best value back."""

    @functools.wraps(load)
    def load_checkpoint(cfg: Any, trainer: Any, **passthrough: Any) -> Any:
        from fairseq import checkpoint_utils

        loaded = load(cfg, trainer, **passthrough)
        updates = trainer.get_num_updates()
        metric = stopping_metric(cfg.best_checkpoint_metric, cfg.maximize_best_checkpoint_metric)
        validations.trainer, validations.metric = trainer, metric
        best = getattr(checkpoint_utils.save_checkpoint, "best", None)
        validations.curve = curve_so_far(Path(cfg.save_dir), updates, metric)
        if cfg.patience <= 0 or best is None:
            return loaded
        restore_patience(validations.curve, best, updates, Path(cfg.save_dir) / LOG, metric)
        return loaded

    return load_checkpoint


def trend_aware(stop_early: Callable, validations: Validations) -> Callable:
    """fairseq's ``should_stop_early`` under the stop rule: a spent patience stops only where
    the last validations no longer fall (fairseq keeps its state on this function)."""

    def should_stop_early(cfg: Any, valid_loss: float | None) -> bool:
        stop = stop_early(cfg, valid_loss)
        checkpoint = cfg.checkpoint
        if valid_loss is None or checkpoint.patience <= 0:
            return stop
        validations.curve.append([validations.trainer.get_num_updates(),
                                  as_loss(validations.metric, float(valid_loss))])
        if stop and still_falling(validations.curve, checkpoint.patience):
            logger.info(goes_on(validations.curve, checkpoint.patience))
            return False
        return stop

    return should_stop_early


def first_epoch_batches(get_batch_iterator: Callable) -> Callable:
    """fairseq's ``FairseqTask.get_batch_iterator`` building the batches of epoch 1 at any
    epoch: an uninterrupted training keeps its epoch-1 iterator (only shuffling its batches),
    while a resumption at epoch E would draw other examples into them."""

    @functools.wraps(get_batch_iterator)
    def batches(self: Any, dataset: Any, *args: Any, epoch: int = 1, **kwargs: Any) -> Any:
        # a new iterator at epoch E is a resumption's, whose checkpoint then sets its epoch
        iterator = get_batch_iterator(self, dataset, *args, epoch=1, **kwargs)
        dataset.set_epoch(epoch)
        return iterator

    return batches


def main(args: Sequence[str]) -> None:
    """Run fairseq-train with ``args`` and the three patches."""
    # named as fairseq-train: the plugin's one-line errors are for fairseq's programs
    sys.argv = [fairseq_command("fairseq-train"), *args]
    # fairseq_cli.train before any of fairseq: it sets up fairseq's log format first
    from fairseq_cli import train

    checkpoints = train.checkpoint_utils  # the module train's main calls
    validations = Validations()
    checkpoints.load_checkpoint = restoring(checkpoints.load_checkpoint, validations)
    train.should_stop_early = trend_aware(train.should_stop_early, validations)
    from fairseq.tasks import FairseqTask

    FairseqTask.get_batch_iterator = first_epoch_batches(FairseqTask.get_batch_iterator)
    train.cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
