"""fairseq-train whose ``--patience`` count goes on where a resumed training stopped, and
whose spent patience stops it only once the valid loss no longer falls.

fairseq-train stops after ``--patience`` N validations without a better
``--best-checkpoint-metric``: ``fairseq_cli.train.should_stop_early`` keeps the best value and
the validations since it (``num_runs``) as attributes of the function, in no checkpoint. A
training resumed from its ``checkpoint_last.pt`` (stopped by ``--budget-minutes`` or a
session's end, or seeded with a grid cell's checkpoints: :mod:`~scripts.reproduce.continuation`)
gets fairseq's best back (``checkpoint_utils.save_checkpoint.best``, restored from the
checkpoint's ``extra_state["best"]``) but not its patience: its first validation becomes the
reference whatever its value, and it trains at least N validations more. A cell trained across
sessions would stop at another plateau than the same cell trained in one go.

This launcher (``python -m scripts.reproduce.patient_train <fairseq-train args>``, the
command the translation and summary cells train with) runs fairseq-train with fairseq's
``checkpoint_utils.load_checkpoint`` wrapped: where the loaded checkpoint gave fairseq a best
value back (a resumption; a start from another model with ``--finetune-from-model`` resets
it) and ``--patience`` is on, it sets, before the first validation,

    should_stop_early.best     = save_checkpoint.best  (the checkpoint's, exact)
    should_stop_early.num_runs = validations since the one that set that best

the count being fairseq's own rule (:func:`patience_state`: a strictly better value sets the
best) replayed on the training's validation curve up to the checkpoint's update: the save
directory's ``train.log`` (where the runner streams the training, a resumption after what it
had written), after the curve of the training a seeded folder continues
(:func:`~scripts.reproduce.continuation.curve_so_far`). Validations logged after the
checkpoint are left out: the resumed training makes them again. A training stopped at any
checkpoint and resumed so stops at the validation where the uninterrupted one stops.

The curve is read for the training's own ``--best-checkpoint-metric``: a loss fairseq
minimises (``nll_loss``, the translation and summary cells'), or the accuracy it maximises
(the classifiers'), read as the error rate 100 - accuracy
(:data:`~scripts.reproduce.log_figures.ERROR`), so that every curve falls as a model learns;
the log holds ``valid_<metric>`` at every validation. Another metric to maximise is not
replayed: a warning says its count starts again at the resumption. Importing the plugin
changes nothing: only this launcher wraps fairseq.

It also puts the protocol's stop rule (:mod:`~scripts.reproduce.stop_rule`) into fairseq's
``should_stop_early``: every validation joins the curve (the one read from the log at the
start, :class:`Validations`), and where fairseq's count says stop while the last validations
still fall significantly the training goes on, logging why; the count is tested again at the
next validation. A training an earlier rule stopped that way, resumed from its last checkpoint
after the runner logged the overrule, goes on the same way.

It also builds a resumed training's batches as its first epoch built them
(:func:`first_epoch_batches`), so that it draws the uninterrupted training's batches and ends
with the same model, to the bit. Its three patches (``load_checkpoint``, ``should_stop_early``,
``get_batch_iterator``) change this process only. The copies of a saved checkpoint are atomic
through the plugin the training loads (``--user-dir``: ``checkpoint_files``).
"""

from __future__ import annotations

import functools
import logging
import math
import sys
from pathlib import Path
from typing import Any, Callable, List, Sequence, Tuple

from scripts.common.fairseq_cli import fairseq_command
from scripts.reproduce.continuation import curve_so_far
from scripts.reproduce.log_figures import NLL, as_loss, stopping_metric
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


def patience_from_curve(curve: Sequence[Sequence[float]],
                        updates: int) -> Tuple[float | None, int]:
    """:func:`patience_state` after the validations of ``curve`` (``[[update, nll], ...]``)
    made up to a checkpoint's ``updates``."""
    return patience_state([nll for update, nll in curve if update <= updates])


def restore_patience(curve: Sequence[Sequence[float]], best: float, updates: int,
                     where: Path, metric: str = NLL) -> None:
    """Set fairseq's early-stopping state to ``best`` (the loaded checkpoint's, fairseq's
    value) and the validations since it in ``curve``, the training's validations of the
    stopping figure ``metric`` (its ``--best-checkpoint-metric``, read as a loss: ``as_loss``)
    until the checkpoint's ``updates`` (read from ``where``)."""
    from fairseq_cli import train

    logged, since = patience_from_curve(curve, updates)
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
    """The training's validation curve, ``[[update, loss], ...]``, kept as it trains: read
    from its log (and the curve it continues) up to the checkpoint it starts from, then one
    point per validation; and its trainer, whose update count places each validation."""

    def __init__(self) -> None:
        self.curve: List[List[float]] = []
        self.trainer: Any = None
        # the stopping figure (log_figures.stopping_metric; None: one the rule cannot read)
        self.metric: str | None = NLL


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
        if metric is not None:
            validations.curve = [point for point in
                                 curve_so_far(Path(cfg.save_dir), LOG, metric)
                                 if point[0] <= updates]
        if cfg.patience <= 0 or best is None:
            return loaded
        if metric is None:  # patience_state counts a falling figure; this one is maximised
            logger.warning(f"--patience counts again from the resumption: its count is kept "
                           f"for a loss or the accuracy, not for {cfg.best_checkpoint_metric}, "
                           f"maximised")
            return loaded
        restore_patience(validations.curve, best, updates, Path(cfg.save_dir) / LOG, metric)
        return loaded

    return load_checkpoint


def trend_aware(stop_early: Callable, validations: Validations) -> Callable:
    """fairseq's ``should_stop_early`` under the protocol's stop rule
    (:mod:`~scripts.reproduce.stop_rule`): each validation joins ``validations``; a spent
    patience stops the training only where their last ones no longer fall. The early-stopping
    state (``best``, ``num_runs``) then lives on this function: fairseq's reads it through
    its module's name ``should_stop_early``, which is this one."""

    def should_stop_early(cfg: Any, valid_loss: float | None) -> bool:
        stop = stop_early(cfg, valid_loss)
        checkpoint = cfg.checkpoint
        if valid_loss is None or checkpoint.patience <= 0 or validations.metric is None:
            return stop
        validations.curve.append([validations.trainer.get_num_updates(),
                                  as_loss(validations.metric, float(valid_loss))])
        if stop and still_falling(validations.curve, checkpoint.patience):
            logger.info(goes_on(validations.curve, checkpoint.patience))
            return False
        return stop

    return should_stop_early


def first_epoch_batches(get_batch_iterator: Callable) -> Callable:
    """fairseq's ``FairseqTask.get_batch_iterator`` that builds a training's batches as its
    first epoch builds them, at whatever epoch it starts, so that a training resumed from a
    checkpoint draws the batches the uninterrupted one draws.

    fairseq builds the batches once, when it makes an iterator: the examples sorted by length,
    those of equal length in an order drawn with the seed ``seed + epoch``, then cut into
    batches. A training keeps the iterator it made at epoch 1 for all its epochs (it only
    shuffles the batches each epoch, with ``seed + epoch``); a training resumed at epoch E
    makes a new one, so its batches hold other examples from there on. (Measured: a tiny
    Transformer without dropout resumed at update 10 had a training loss of 4.614 on its next
    update against 4.648 uninterrupted.) The dataset is still told its epoch."""

    @functools.wraps(get_batch_iterator)
    def batches(self: Any, dataset: Any, *args: Any, epoch: int = 1, **kwargs: Any) -> Any:
        # a new iterator at epoch E is a resumption's, whose checkpoint then sets its epoch
        iterator = get_batch_iterator(self, dataset, *args, epoch=1, **kwargs)
        dataset.set_epoch(epoch)
        return iterator

    return batches


def main(args: Sequence[str]) -> None:
    """Run fairseq-train with ``args``, its patience count restored on a resumption and its
    spent patience overruled while the valid loss still falls, a resumption drawing the
    uninterrupted training's batches."""
    # As fairseq-train itself: the plugin installs its one-line errors only in a process
    # named as fairseq's programs (relu_former.errors.is_fairseq_command), argparse prints
    # the same program name.
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
