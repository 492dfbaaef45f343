"""``--sparse-softmax-k``, the one name of sparse-softmax's k: the criteria's flag, its
deprecated spelling ``--sparse-k``, and one flag for a sparse criterion with the decoding task."""

from __future__ import annotations

import argparse
import logging

import pytest
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import relu_former.plugin  # noqa: F401  (registers the criteria and the task)
from relu_former.errors import OptionError
from relu_former.sparse_softmax.k_flag import check_k_in_range

from helpers import USER_DIR

# fairseq's namespace-to-config conversion initialises hydra the deprecated way
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:hydra.*")

SEQUENCE = ("--criterion", "sparse_softmax_cross_entropy")
CLASSIFY = ("--criterion", "sparse_softmax_sentence_prediction", "--task",
            "sentence_prediction", "--num-classes", "30")
BOTH = ("--task", "translation_sparse_decoding", *SEQUENCE)


def parse(data, *flags: str) -> argparse.Namespace:
    return options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--user-dir", USER_DIR, "--arch", "transformer", *flags])


@pytest.mark.parametrize("criterion", [SEQUENCE, CLASSIFY], ids=["sequence", "classify"])
def test_old_spelling_parses_to_the_same_value_with_a_warning(criterion, tmp_path, caplog):
    new = parse(tmp_path, *criterion, "--sparse-softmax-k", "7")
    assert new.sparse_softmax_k == 7 and "deprecated" not in caplog.text
    with caplog.at_level(logging.WARNING):
        old = parse(tmp_path, *criterion, "--sparse-k", "7")
    assert old.sparse_softmax_k == 7 and not hasattr(old, "sparse_k")
    warnings = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert warnings == ["--sparse-k is deprecated: use --sparse-softmax-k (read as "
                        "--sparse-softmax-k 7)"]
    assert parse(tmp_path, *criterion).sparse_softmax_k == 20  # the criteria's default


@pytest.mark.parametrize("flags, k", [
    ((), 20),  # the criterion's default: the task's 0 is no k of a loss
    (("--sparse-softmax-k", "5"), 5),
    (("--sparse-k", "6"), 6),
])
def test_criterion_and_decoding_task_share_the_one_flag(flags, k, toy_data_bin):
    cfg = convert_namespace_to_omegaconf(parse(toy_data_bin, *BOTH, *flags))
    assert cfg.task.sparse_softmax_k == cfg.criterion.sparse_softmax_k == k
    task = tasks.setup_task(cfg.task)
    assert task.build_criterion(cfg.criterion).k == k
    assert task.cfg.sparse_softmax_k == k


def test_decoding_task_alone_keeps_its_default(tmp_path):
    args = parse(tmp_path, "--task", "translation_sparse_decoding")
    assert args.sparse_softmax_k == 0


@pytest.mark.parametrize("spelling", ["--sparse-softmax-k", "--sparse-k"])
def test_a_bad_k_is_named_by_the_new_flag_in_either_spelling(spelling, toy_data_bin):
    cfg = convert_namespace_to_omegaconf(parse(toy_data_bin, *SEQUENCE, spelling, "0"))
    task = tasks.setup_task(cfg.task)
    with pytest.raises(OptionError, match=r"^--sparse-softmax-k must be an integer >= 1 "
                                          r"\(the number of largest logits") as error:
        task.build_criterion(cfg.criterion)
    assert error.value.flag == "--sparse-softmax-k"


@pytest.mark.parametrize("k, message", [
    (-1, r"--sparse-softmax-k must be an integer >= 0 \(zero means\), got -1"),
    (True, r"--sparse-softmax-k must be an integer >= 0 \(zero means\), got True"),
    (11, r"--sparse-softmax-k 11 is larger than the vocabulary \(10\); choose "
         r"--sparse-softmax-k <= 10 \(ten means\)"),
])
def test_range_check_names_the_flag_and_the_limits(k, message):
    with pytest.raises(OptionError, match=message) as error:
        check_k_in_range(k, 0, 10, "vocabulary", "zero means", "ten means")
    assert error.value.flag == "--sparse-softmax-k"
    check_k_in_range(10, 0, 10, "vocabulary", "", "")
    check_k_in_range(10**6, 0, None, "vocabulary", "", "")  # width not known yet
