"""A checkpoint saved while the criteria's k was ``--sparse-k`` still loads, for
``fairseq-generate`` and for ``fairseq-validate`` (which builds the saved criterion).

``fixtures/old_sparse_k.pt`` is a tiny transformer (width 16, one layer each side) trained
two updates on the toy corpus of ``helpers`` with ``--criterion sparse_softmax_cross_entropy
--sparse-k 3`` by the code of the commit before the flag was renamed, without optimizer
state; its saved ``cfg.criterion`` holds ``sparse_k: 3``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils, criterions

import relu_former.plugin  # noqa: F401  (installs the upgrade)
from relu_former.sparse_softmax.old_checkpoints import upgrade_saved_k
from scripts.benchmarks.criterion_harness import DictionaryTask

from helpers import USER_DIR, assert_generation_output, fairseq_command, run_command

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:hydra.*")

FIXTURE = Path(__file__).parent / "fixtures" / "old_sparse_k.pt"


def test_fixture_uses_the_old_name():
    """The fixture must keep exercising the old name (else the tests below prove little)."""
    saved = torch.load(FIXTURE, weights_only=False)["cfg"]["criterion"]
    assert saved["sparse_k"] == 3 and "sparse_softmax_k" not in saved


def test_loaded_config_has_the_new_name_and_builds_the_criterion():
    cfg = checkpoint_utils.load_checkpoint_to_cpu(str(FIXTURE))["cfg"]
    assert cfg.criterion.sparse_softmax_k == 3 and "sparse_k" not in cfg.criterion
    criterion = criterions.build_criterion(cfg.criterion, DictionaryTask(64))
    assert criterion.k == 3


def test_args_of_a_pre_config_checkpoint_are_renamed_too():
    state = {"args": argparse.Namespace(criterion="sparse_softmax_cross_entropy", sparse_k=4)}
    upgrade_saved_k(state)
    assert state["args"].sparse_softmax_k == 4 and not hasattr(state["args"], "sparse_k")
    other = {"args": argparse.Namespace(criterion="cross_entropy", sparse_k=4)}
    upgrade_saved_k(other)  # not ours: left alone
    assert other["args"].sparse_k == 4


@pytest.mark.slow
def test_fairseq_generate_and_validate_load_the_old_checkpoint(toy_data_bin, tmp_path):
    common = [toy_data_bin, "--user-dir", USER_DIR, "--path", FIXTURE, "--cpu",
              "--num-workers", "0", "--max-tokens", "1000"]
    generated = run_command([fairseq_command("fairseq-generate"), *common, "--gen-subset",
                             "test", "--beam", "2"], cwd=tmp_path)
    assert_generation_output(generated.stdout)
    validated = run_command([fairseq_command("fairseq-validate"), *common, "--task",
                             "translation", "--valid-subset", "valid"], cwd=tmp_path)
    log = validated.stdout + validated.stderr
    assert re.search(r"valid on 'valid' subset \| loss [\d.]+ .*\| outside_topk ", log), log
