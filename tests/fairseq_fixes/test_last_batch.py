"""fairseq-fixed's batch_by_size no longer drops the sentences of an incomplete last batch."""

from __future__ import annotations

import re

import numpy as np
import pytest
from fairseq.data import data_utils

import relu_former.plugin  # noqa: F401  (applies the patch)
from relu_former.fairseq_fixes.last_batch import keep_last_batch


@pytest.mark.parametrize("multiple", [1, 3, 8])
@pytest.mark.parametrize("n", [1, 7, 20, 21])
def test_every_index_is_batched_once_in_order(n, multiple):
    indices = np.arange(100, 100 + n, dtype=np.int64)
    batches = data_utils.batch_by_size(indices, None, num_tokens_vec=np.full(n, 5),
                                       max_tokens=40, required_batch_size_multiple=multiple)
    assert np.concatenate(batches).tolist() == indices.tolist()
    for batch in batches[:-1]:
        assert len(batch) % multiple == 0 or len(batch) < multiple


def test_patch_is_idempotent():
    patched = data_utils.batch_by_size
    assert keep_last_batch() is False
    assert data_utils.batch_by_size is patched


@pytest.mark.slow
def test_generate_translates_every_test_sentence(fairseq_run, toy_raw_corpus):
    fairseq_run.train()
    proc = fairseq_run.generate()  # default --required-batch-size-multiple 8, 20 sentences
    n_test = len((toy_raw_corpus / "test.de").read_text().splitlines())
    ids = {int(i) for i in re.findall(r"^H-(\d+)\t", proc.stdout, flags=re.M)}
    assert ids == set(range(n_test))
    assert f"Translated {n_test} sentences" in proc.stdout + proc.stderr
