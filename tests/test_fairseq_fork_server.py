"""The fork server runs a fairseq command as a new interpreter would: same output streams,
log format, exit status and files, and a timeout ends it."""

from __future__ import annotations

import re
import subprocess

import pytest

from helpers import USER_DIR, fairseq_command, run_command

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ", re.M)


def both(args, **kwargs):
    """The same command forked from the server and in a new interpreter."""
    return run_command(args, **kwargs), run_command(args, fresh=True, **kwargs)


def test_help_and_a_bad_flag_are_the_same_as_in_a_new_interpreter():
    forked, fresh = both([fairseq_command("fairseq-train"), "--user-dir", USER_DIR, "--arch",
                          "relu_former", "--help"])
    assert forked.stdout == fresh.stdout
    assert "regularized_label_smoothed_cross_entropy" in forked.stdout  # the plugin loaded
    forked, fresh = both([fairseq_command("fairseq-train"), "--user-dir", USER_DIR, "--arch",
                          "relu_former", "--relu-gamma", "nan"], check=False)
    assert forked.returncode == fresh.returncode == 2
    assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    assert "--relu-gamma must be a finite number > 0" in forked.stderr


@pytest.mark.slow
def test_training_logs_to_the_same_stream_in_the_same_format(fairseq_run, tmp_path):
    forked = fairseq_run.train(save_dir="forked")
    fresh = run_command(forked.args[:forked.args.index("--save-dir") + 1]
                        + [str(tmp_path / "fresh")]
                        + forked.args[forked.args.index("--save-dir") + 2:], fresh=True,
                        cwd=fairseq_run.work)
    for proc in (forked, fresh):
        assert TIMESTAMP.search(proc.stdout), proc.stdout[-1000:]  # fairseq-train's format
        assert "| INFO | fairseq_cli.train | done training" in proc.stdout
    assert (tmp_path / "fresh" / "checkpoint_last.pt").is_file()
    # the same seed trains the same losses in both
    losses = [re.findall(r"train_inner .* loss=([\d.]+)", p.stdout) for p in (forked, fresh)]
    assert losses[0] == losses[1] and losses[0]


def test_a_command_past_its_timeout_is_killed(toy_data_bin, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        run_command([fairseq_command("fairseq-train"), toy_data_bin, "--user-dir", USER_DIR,
                     "--arch", "transformer", "--cpu", "--max-tokens", "400",
                     "--save-dir", tmp_path], timeout=1)
