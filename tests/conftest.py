"""Shared fixtures: the toy corpus, binarized once per session, and a CLI driver on it.

Helpers the tests import live in ``tests/helpers.py``; this file only defines fixtures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import FairseqRun, preprocess, write_toy_parallel_corpus


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
