"""How many updates fairseq's own task batches an epoch into, for a cell's training command:
the figure the kinds' ``epoch_updates`` compute without building the iterator."""

from __future__ import annotations

import argparse
from typing import Sequence, Tuple

from scripts.reproduce import patient_train


def fairseq_epoch(train_argv: Sequence[str]) -> Tuple[argparse.Namespace, int]:
    """The parsed arguments of a cell's training command (``Step.argv``) and the number of
    batches of its training split, as ``fairseq-train`` builds them (no update frequency)."""
    from fairseq import options, tasks

    import relu_former.plugin  # noqa: F401  (registers the plugin's archs and criteria)

    args = options.parse_args_and_arch(options.get_training_parser(),
                                       input_args=patient_train.train_args(list(train_argv)))
    task = tasks.setup_task(args)
    task.load_dataset("train")
    batches = task.get_batch_iterator(
        task.dataset("train"), max_tokens=args.max_tokens, max_sentences=args.batch_size,
        max_positions=task.max_positions(),
        required_batch_size_multiple=args.required_batch_size_multiple, num_workers=0)
    return args, len(batches)
