"""Plugin option errors reach the user as one line naming the flag, like fairseq's own."""

from __future__ import annotations

import sys

import pytest

from relu_former.errors import is_fairseq_command

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


def test_importing_the_plugin_keeps_the_excepthook(tmp_path):
    """A notebook, a test runner or a library importing the plugin keeps its own hook."""
    run_command([sys.executable, "-c", "import sys; h = sys.excepthook; "
                 "import relu_former.plugin; assert sys.excepthook is h"], cwd=tmp_path)


def test_plugin_installs_the_hook_in_a_fairseq_command(tmp_path):
    """Loaded by a program named like fairseq's console scripts, the plugin prints its errors
    as that program's one line (the slow tests below run the real scripts)."""
    code = ("import sys; sys.argv[0] = '/bin/fairseq-generate'; import relu_former.plugin; "
            "from relu_former.errors import OptionError; raise OptionError('--x', 'bad')")
    proc = run_command([sys.executable, "-c", code], cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["fairseq-generate: error: --x: bad"]


@pytest.mark.parametrize("argv0, expected", [
    ("/venv/bin/fairseq-train", True), ("fairseq-hydra-train", True),
    ("/site-packages/fairseq_cli/generate.py", True), ("-c", False),
    ("/venv/bin/pytest", False), ("/ipykernel_launcher.py", False), ("", False)])
def test_fairseq_commands_are_known_by_their_program_name(monkeypatch, argv0, expected):
    monkeypatch.setattr(sys, "argv", [argv0])
    assert is_fairseq_command() is expected


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
