"""The plugin installs, registers with fairseq and fails clearly on bad input."""

from __future__ import annotations

import argparse
import sys

import pytest
from conftest import REPO_ROOT, USER_DIR, fairseq_command, run_command
from fairseq import utils

import relu_former


def test_import_from_outside_the_checkout(tmp_path):
    """The installed package imports from any folder, criterions included."""
    proc = run_command([sys.executable, "-c",
                        "import relu_former, relu_former.criterions as c; "
                        "print(relu_former.__file__); print(c.__name__)"], cwd=tmp_path)
    assert "relu_former/__init__.py" in proc.stdout
    assert "relu_former.criterions" in proc.stdout


def test_import_and_user_dir_in_one_process_is_harmless(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    for user_dir in (USER_DIR, "relu_former", USER_DIR):
        utils.import_user_module(argparse.Namespace(user_dir=user_dir))
    assert sys.modules["relu_former"] is relu_former


def test_user_dir_memo_makes_second_import_a_noop():
    """fairseq 0.12.2 raises 'not globally unique' for an imported user dir not in its memo."""
    assert USER_DIR in utils.import_user_module.memo


def test_criterions_are_a_subpackage_of_the_plugin():
    import relu_former.criterions as criterions

    assert criterions.__name__ == "relu_former.criterions"
    assert criterions.__path__[0].endswith("criterions")


@pytest.mark.slow
def test_fairseq_train_help_lists_plugin(tmp_path):
    proc = run_command([fairseq_command("fairseq-train"), "--user-dir", "relu_former", "--help"],
                       cwd=REPO_ROOT)
    assert "--arch" in proc.stdout


@pytest.mark.slow
def test_unknown_arch_is_an_argparse_error(toy_data_bin, tmp_path):
    proc = run_command([fairseq_command("fairseq-train"), toy_data_bin, "--user-dir", USER_DIR,
                        "--arch", "relu_formr", "--cpu", "--max-tokens", "100"],
                       cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "argument --arch/-a: invalid choice: 'relu_formr'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_misspelled_flag_is_an_argparse_error(toy_data_bin, tmp_path):
    proc = run_command([fairseq_command("fairseq-train"), toy_data_bin, "--user-dir", USER_DIR,
                        "--arch", "transformer", "--cpu", "--max-tokens", "100",
                        "--relu-gama", "1"], cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "unrecognized arguments: --relu-gama 1" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_missing_data_directory_names_it(tmp_path):
    missing = tmp_path / "no_such_data_bin"
    proc = run_command([fairseq_command("fairseq-train"), missing, "--user-dir", USER_DIR,
                        "--arch", "transformer", "--cpu", "--max-tokens", "100"],
                       cwd=tmp_path, check=False)
    assert proc.returncode != 0
    last_line = proc.stderr.strip().splitlines()[-1]
    assert "No such file or directory" in last_line and str(missing) in last_line
    assert "relu_former/" not in proc.stderr  # the error is fairseq's, not from the plugin


@pytest.mark.slow
def test_missing_user_dir_names_it(toy_data_bin, tmp_path):
    proc = run_command([fairseq_command("fairseq-train"), toy_data_bin, "--user-dir",
                        "no_such_plugin", "--arch", "transformer", "--cpu"],
                       cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "no_such_plugin" in proc.stderr.strip().splitlines()[-1]
