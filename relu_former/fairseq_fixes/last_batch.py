"""Put back the sentences fairseq-fixed 0.12.3.1's ``batch_by_size`` drops: the last batch
when not a multiple of ``--required-batch-size-multiple`` (fairseq-generate translated 16 of
20). Applied only where the probe :func:`_drops_last_batch` shows the drop."""

from __future__ import annotations

import functools

import numpy as np
from fairseq.data import data_utils


def _drops_last_batch(batch_by_size) -> bool:
    three = np.arange(3, dtype=np.int64)
    batches = batch_by_size(three, None, num_tokens_vec=np.ones_like(three), max_sentences=2,
                            required_batch_size_multiple=2)
    return sum(len(b) for b in batches) < 3


def keep_last_batch() -> bool:
    """Patch ``data_utils.batch_by_size`` where the probe sees the drop; True if patched."""
    original = data_utils.batch_by_size
    if not _drops_last_batch(original):
        return False

    @functools.wraps(original)
    def batch_by_size(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
                      max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None):
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batches = original(indices, num_tokens_fn, num_tokens_vec=num_tokens_vec,
                           max_tokens=max_tokens, max_sentences=max_sentences,
                           required_batch_size_multiple=required_batch_size_multiple,
                           fixed_shapes=fixed_shapes)
        covered = sum(len(b) for b in batches)
        if fixed_shapes is None and covered < len(indices):  # fixed shapes drop by design
            batches = list(batches) + [indices[covered:]]
        return batches

    data_utils.batch_by_size = batch_by_size
    return True
