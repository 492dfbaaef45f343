"""A fairseq command run in the test process gives what a new interpreter gives: the same
error line and exit status for a bad flag, the same log stream and format and the same losses
for a training, the same logging whatever the test process set; and a call leaves no logging
handler, argv or folder behind."""

from __future__ import annotations

import logging
import os
import re
import sys

import pytest

from helpers import USER_DIR, fairseq_command, run_command, tiny_hydra_train

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ", re.M)


def test_a_bad_flag_gives_the_same_line_and_status_as_a_new_interpreter(tmp_path):
    args = [fairseq_command("fairseq-train"), "--user-dir", USER_DIR, "--arch", "relu_former",
            "--relu-gamma", "nan"]
    handlers, argv, cwd = list(logging.root.handlers), list(sys.argv), os.getcwd()
    in_process = run_command(args, check=False, cwd=tmp_path)
    assert (list(logging.root.handlers), sys.argv, os.getcwd()) == (handlers, argv, cwd)
    fresh = run_command(args, check=False, cwd=tmp_path, fresh=True)
    assert in_process.returncode == fresh.returncode == 2
    assert in_process.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    assert "--relu-gamma must be a finite number > 0" in in_process.stderr


def test_a_command_logs_as_a_new_process_whatever_the_test_process_set(toy_raw_corpus,
                                                                         tmp_path):
    quiet = [logging.getLogger(name) for name in ("fairseq", "fairseq_cli")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:  # as a script run in the test process quiets fairseq
        logger.setLevel(logging.WARNING)
    try:
        proc = run_command([fairseq_command("fairseq-preprocess"), "--source-lang", "de",
                            "--target-lang", "en", "--trainpref", toy_raw_corpus / "train",
                            "--destdir", tmp_path / "bin", "--workers", "1"], cwd=tmp_path)
        assert [logger.level for logger in quiet] == [logging.WARNING] * 2
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
    # fairseq-preprocess's INFO lines, on stderr as in a new process
    assert re.search(r"\| INFO \| fairseq_cli.preprocess \| \[de\] Dictionary", proc.stderr), \
        proc.stderr[-2000:]


@pytest.mark.slow
def test_hydras_logging_set_up_leaves_the_test_process_handlers_open(toy_data_bin, tmp_path):
    handler = logging.FileHandler(tmp_path / "test.log", mode="w")  # as pytest's log file
    logging.root.addHandler(handler)
    try:
        proc = tiny_hydra_train(toy_data_bin, tmp_path / "ckpt", "model.dropout=nan")
        assert proc.returncode == 2, proc.stderr[-3000:]
        logging.getLogger("fairseq_in_process").warning("after the call")
    finally:
        logging.root.removeHandler(handler)
        handler.close()
    assert "after the call" in (tmp_path / "test.log").read_text()


@pytest.mark.slow
def test_training_logs_and_losses_are_those_of_a_new_interpreter(fairseq_run, tmp_path):
    in_process = fairseq_run.train(save_dir="in_process")
    args = list(in_process.args)
    args[args.index("--save-dir") + 1] = str(tmp_path / "fresh")
    fresh = run_command(args, fresh=True, cwd=fairseq_run.work)
    for proc in (in_process, fresh):
        assert TIMESTAMP.search(proc.stdout), proc.stdout[-1000:]  # fairseq-train's format
        assert "| INFO | fairseq_cli.train | done training" in proc.stdout
    assert (tmp_path / "fresh" / "checkpoint_last.pt").is_file()
    # the same seed trains the same losses in both
    losses = [re.findall(r"train_inner .* loss=([\d.]+)", p.stdout) for p in (in_process, fresh)]
    assert losses[0] == losses[1] and losses[0]
    # a second call on the same save directory is not refused by the first's lock
    again = fairseq_run.train("--max-update", "8", save_dir="in_process")
    assert "is in use by another training" not in again.stderr
