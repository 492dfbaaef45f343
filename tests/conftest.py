"""Shared fixtures: the toy corpus, binarized once per session, and a CLI driver on it; and
the order the suite runs in.

Helpers the tests import live in ``tests/helpers.py``; this file defines fixtures and the one
collection hook.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import FairseqRun, preprocess, write_toy_parallel_corpus


def pytest_collection_modifyitems(items) -> None:
    """The end-to-end tests first, the scripts' (the longest) before the others: with two
    workers the short unit tests then fill the gaps at the end instead of one long test
    running alone while the other worker idles."""
    def rank(item) -> int:
        if item.get_closest_marker("slow") is None:
            return 2
        return 0 if item.nodeid.startswith("tests/scripts/") else 1
    items.sort(key=rank)  # stable: file order within each rank


@pytest.fixture(scope="session")
def toy_raw_corpus(tmp_path_factory) -> Path:
    """Raw text of the toy translation task (shared by the whole session; do not modify)."""
    return write_toy_parallel_corpus(tmp_path_factory.mktemp("toy_raw"))


@pytest.fixture(scope="session")
def toy_data_bin(toy_raw_corpus, tmp_path_factory) -> Path:
    """The toy corpus binarized by ``fairseq-preprocess`` (shared; do not modify)."""
    return preprocess(toy_raw_corpus, tmp_path_factory.mktemp("toy_bin"))


@pytest.fixture
def fairseq_run(toy_data_bin, tmp_path) -> FairseqRun:
    """A fresh work folder driving the fairseq CLI on the toy binarized corpus."""
    return FairseqRun(data_bin=toy_data_bin, work=tmp_path)


@pytest.fixture
def one_thread():
    """Torch at one thread for the test, as the synthetic studies' commands run (restored
    after): their figures depend on the thread count only through float rounding."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
