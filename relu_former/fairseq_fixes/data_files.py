"""Binarized data that is incomplete (a missing ``.idx``, a cut ``.bin``, an empty split) is
one line naming the file and the fix, not a failure deep inside fairseq. No probe: the checks
read file sizes; whole data loads unchanged."""

from __future__ import annotations

import functools
import os
import struct
from typing import Callable

from relu_former.errors import DataFileError

_REBUILD = ("rebuild the folder with fairseq-preprocess (or the recipe's prepare.sh, after "
            "removing its data-bin)")
_EMPTY = ("holds no sentences: the split it stands for is empty. Give fairseq-preprocess text "
          "with sentences for it, or for an empty valid split train with --disable-validation")


def check_pair(prefix: str) -> None:
    """``DataFileError`` when only one of ``prefix.idx`` and ``prefix.bin`` exists, or empty."""
    idx, bin_ = f"{prefix}.idx", f"{prefix}.bin"
    has_idx, has_bin = os.path.exists(idx), os.path.exists(bin_)
    if has_bin and not has_idx:
        raise DataFileError(idx, f"is missing (its data {bin_} is there): {_REBUILD}")
    if has_idx and not has_bin:
        raise DataFileError(bin_, f"is missing (its index {idx} is there): {_REBUILD}")
    if has_bin and os.path.getsize(bin_) == 0:  # numpy cannot even map an empty file
        raise DataFileError(bin_, _EMPTY)


def check_loaded(prefix: str, dataset) -> None:
    """``DataFileError`` for a loaded split that is empty or whose ``.bin`` is shorter than its
    (memory-mapped) index says."""
    if len(dataset) == 0:
        raise DataFileError(f"{prefix}.bin", _EMPTY)
    index = getattr(dataset, "_index", None)
    if index is None or not hasattr(index, "_pointers"):
        return  # not the memory-mapped format: nothing to compare
    last = len(index) - 1
    expected = int(index._pointers[last]) + int(index._sizes[last]) * index.dtype().itemsize
    actual = os.path.getsize(f"{prefix}.bin")
    if actual < expected:
        raise DataFileError(
            f"{prefix}.bin", f"is truncated: {actual} bytes, its index {prefix}.idx says "
            f"{expected}; it was cut short while being written or copied: copy it again or "
            f"{_REBUILD}")


def checking_exists(original: Callable) -> Callable:
    @functools.wraps(original)
    def dataset_exists(path, impl):
        check_pair(path)
        return original(path, impl)

    return dataset_exists


def checking_load(original: Callable) -> Callable:
    @functools.wraps(original)
    def load_indexed_dataset(path, dictionary=None, dataset_impl=None, combine=False,
                             default="cached"):
        check_pair(path)
        try:
            dataset = original(path, dictionary=dictionary, dataset_impl=dataset_impl,
                               combine=combine, default=default)
        except (ValueError, AssertionError, struct.error) as error:
            # numpy's "buffer is smaller than requested size", fairseq's magic-number assert
            if not os.path.exists(f"{path}.idx"):
                raise
            raise DataFileError(f"{path}.idx", f"cannot be read as a fairseq index ({error}): "
                                f"it is damaged or cut short; {_REBUILD}") from error
        if dataset is not None:  # each part of a combined split is checked by its own path
            for part in getattr(dataset, "datasets", [dataset]) if combine else [dataset]:
                check_loaded(getattr(part, "_path", None) or path, part)
        return dataset

    return load_indexed_dataset
