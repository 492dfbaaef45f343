"""Plugin option errors reach the user as one line naming the flag, like fairseq's own."""

from __future__ import annotations

import sys

import pytest

from helpers import run_command


def _run_hooked(tmp_path, raise_statement: str):
    code = ("import relu_former.errors as e; e.install_cli_error_hook(); " + raise_statement)
    return run_command([sys.executable, "-c", code], cwd=tmp_path, check=False)


def test_option_error_is_one_line_with_status_2(tmp_path):
    proc = _run_hooked(tmp_path, "raise RuntimeError('wrapped') from e.OptionError("
                                 "'--sparse-softmax-k', '--sparse-softmax-k must be >= 1, got 0')")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["-c: error: --sparse-softmax-k must be >= 1, got 0"]


def test_hook_leaves_other_errors_alone(tmp_path):
    proc = _run_hooked(tmp_path, "raise RuntimeError('boom')")
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "boom" in proc.stderr


@pytest.mark.slow
def test_bad_plugin_flag_is_one_line_without_traceback(fairseq_run):
    proc = fairseq_run.train("--relu-gamma", "0", arch="relu_former", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-train: error: argument --relu-gamma"), last
