"""fairseq's ``Trainer`` in this process, built from a ``fairseq-train`` command line.

The benchmarks time ``Trainer.train_step`` (forward, backward, optimizer step) of models built
exactly as ``fairseq-train`` builds them: its option parser (the plugin's ``--user-dir``
included), seeds, task, model, criterion and ``Trainer``; and :func:`first_epoch_batches`
draws the batches of the training split the way ``fairseq-train``'s first epoch does
(fairseq's own length-bucketed, shuffled batching, grouped by ``--update-freq``).
"""

from __future__ import annotations

import itertools
from typing import Any, List, Sequence, Tuple


def trainer_from_argv(argv: Sequence[str]) -> Any:
    """fairseq's Trainer for ``argv``, the arguments of a ``fairseq-train`` command (without
    the program's name): what ``fairseq_cli.train.main`` builds before its first update."""
    import numpy as np
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    args = options.parse_args_and_arch(options.get_training_parser(),
                                       input_args=[str(arg) for arg in argv])
    cfg = convert_namespace_to_omegaconf(args)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    return Trainer(cfg, task, model, criterion)


def first_epoch_batches(trainer: Any, count: int) -> Tuple[List[List[dict]], int, int]:
    """The first ``count`` updates' samples of epoch 1 (each a list of ``--update-freq``
    batches, what ``Trainer.train_step`` takes), the updates of a whole epoch and the target
    tokens of a whole epoch (EOS included, as fairseq's ``ntokens`` counts them)."""
    from fairseq.data import iterators

    epoch = trainer.get_train_iterator(epoch=1, load_dataset=True)
    cfg = trainer.cfg
    batches = iterators.GroupedIterator(
        epoch.next_epoch_itr(fix_batches_to_gpus=cfg.distributed_training.fix_batches_to_gpus,
                             shuffle=epoch.next_epoch_idx > cfg.dataset.curriculum),
        cfg.optimization.update_freq[0],
        skip_remainder_batch=cfg.optimization.skip_remainder_batch)
    updates = len(batches)
    samples = list(itertools.islice(batches, count))
    target_sizes = trainer.task.dataset("train").tgt_sizes
    tokens = sum(int(target_sizes[batch].sum()) for batch in epoch.frozen_batches)
    return samples, updates, tokens
