"""The plugin installs, registers with fairseq and fails clearly on bad input."""

from __future__ import annotations

import argparse
import json
import re
import sys

import pytest
from fairseq import utils

import relu_former
from relu_former.help import plugin_names

from helpers import REPO_ROOT, USER_DIR, fairseq_command, run_command


def run_fresh(args, **kwargs):
    """A fairseq command in a new interpreter, for the tests about loading the plugin (the
    argparse and missing-path cases need none: they run in the test process, 4 s of imports
    less a case)."""
    return run_command(args, fresh=True, **kwargs)


def test_import_from_outside_the_checkout(tmp_path):
    """The installed package imports from any folder, criterions included."""
    proc = run_command([sys.executable, "-c",
                        "import relu_former, relu_former.criterions as c; "
                        "print(relu_former.__file__); print(c.__name__)"], cwd=tmp_path)
    assert "relu_former/__init__.py" in proc.stdout
    assert "relu_former.criterions" in proc.stdout


def test_import_and_user_dir_in_one_process_is_harmless(monkeypatch):
    """fairseq-fixed 0.12.3.1 accepts a --user-dir already imported from the same folder
    (its import_user_module compares the module's path), absolute or relative."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(utils.import_user_module, "memo", set(), raising=False)
    for user_dir in (USER_DIR, "relu_former", USER_DIR):
        utils.import_user_module(argparse.Namespace(user_dir=user_dir))
    assert sys.modules["relu_former"] is relu_former


def test_criterions_are_a_subpackage_of_the_plugin():
    import relu_former.criterions as criterions

    assert criterions.__name__ == "relu_former.criterions"
    assert criterions.__path__[0].endswith("criterions")


@pytest.mark.slow
def test_fairseq_train_help_lists_every_plugin_criterion(tmp_path):
    """fairseq's --help prints the choices of --criterion (not of --arch or --task, whose
    flags it adds only after a first parse that --help ends): all the plugin's are there."""
    proc = run_fresh([fairseq_command("fairseq-train"), "--user-dir", USER_DIR, "--help"],
                     cwd=tmp_path)
    choices = re.search(r"^  --criterion \{([^}]*)\}", proc.stdout, flags=re.M)
    assert choices, proc.stdout[-3000:]
    listed = set(choices.group(1).split(","))
    ours = set(plugin_names()["criterion"])
    assert len(ours) == 3 and ours <= listed, ours - listed
    assert "label_smoothed_cross_entropy" in listed  # fairseq's own are still there


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
    # the error is fairseq's, not from the plugin (whose train main() only passes it on)
    frames = re.findall(r'^  File "([^"]+)"', proc.stderr, re.M)
    assert frames and "relu_former/" not in frames[-1], proc.stderr[-3000:]


@pytest.mark.slow
def test_missing_user_dir_names_it(toy_data_bin, tmp_path):
    proc = run_command([fairseq_command("fairseq-train"), toy_data_bin, "--user-dir",
                        "no_such_plugin", "--arch", "transformer", "--cpu"],
                       cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "no_such_plugin" in proc.stderr.strip().splitlines()[-1]


HYDRA_CONFIG = """\
# @package _group_
common: {{cpu: true, log_format: simple, log_interval: 1, seed: 1, user_dir: {user_dir}}}
task: {{_name: translation, data: {data}}}
dataset: {{max_tokens: 400, num_workers: 0}}
optimization: {{max_update: 2, lr: [0.003]}}
optimizer: {{_name: adam}}
lr_scheduler: {{_name: fixed}}
criterion: {{_name: regularized_label_smoothed_cross_entropy, label_smoothing: 0.1}}
model:
  _name: relu_former_iwslt_de_en
  encoder_layers: 1
  decoder_layers: 1
  encoder_embed_dim: 16
  decoder_embed_dim: 16
  encoder_ffn_embed_dim: 32
  decoder_ffn_embed_dim: 32
  encoder_attention_heads: 2
  decoder_attention_heads: 2
checkpoint: {{save_dir: {save_dir}, no_epoch_checkpoints: true}}
"""


@pytest.mark.slow
def test_hydra_train_sees_plugin_components(toy_data_bin, tmp_path):
    (tmp_path / "tiny.yaml").write_text(HYDRA_CONFIG.format(
        user_dir=USER_DIR, data=toy_data_bin, save_dir=tmp_path / "ckpt"))
    proc = run_fresh([fairseq_command("fairseq-hydra-train"), "--config-dir", tmp_path,
                      "--config-name", "tiny"], cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert "num_updates=2" in log.replace(" ", "") or "num_updates 2" in log
    assert "attn_zero_share" in log  # logged by the plugin's regularised criterion
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").is_file()


@pytest.mark.slow
def test_installed_copy_registers_everything(tmp_path, installed_without_compiler):
    """A non-editable install (criterions/ mapped into the package) works as --user-dir. It
    is the install without a compiler of test_compiled_fallback.py: the compiled kernel is no
    part of what registers (the editable install ``make install`` makes builds it, and CI's
    RELU_FORMER_REQUIRE_COMPILED=1 fails the kernel's tests without it)."""
    target = installed_without_compiler
    installed = target / "relu_former"
    assert (installed / "criterions" / "__init__.py").is_file()
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith("-info")) == [
        "relu_former"]
    # fairseq's --help stops before model flags are added; an unknown flag shows instead that
    # the plugin's arch, criterion and their flags were all accepted.
    proc = run_fresh([fairseq_command("fairseq-train"), "--user-dir", installed, "--arch",
                      "relu_former_iwslt_de_en", "--criterion",
                      "regularized_label_smoothed_cross_entropy", "--attention-activation",
                      "relu", "--attention-entropy-margin", "0.7", "--no-such-flag",
                      str(tmp_path)],
                     cwd=tmp_path, check=False)
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "error: unrecognized arguments: --no-such-flag")
    # where an import of the criterions finds them, the install first on the path (found, not
    # run: running them imports fairseq; the run above loaded them)
    where = run_command([sys.executable, "-c",
                         f"import sys; sys.path.insert(0, {str(target)!r}); import importlib.util; "
                         "print(importlib.util.find_spec('relu_former.criterions').origin)"],
                        cwd=tmp_path)
    assert where.stdout.strip() == str(installed / "criterions" / "__init__.py")


WHICH_FILES = """
import argparse, inspect, json, sys
from fairseq import utils
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY
utils.import_user_module(argparse.Namespace(user_dir=sys.argv[1]))
ours = lambda registry: {name: inspect.getfile(cls) for name, cls in registry.items()
                         if cls.__module__.startswith("relu_former")}
print(json.dumps({"criterion": ours(CRITERION_REGISTRY), "arch": ours(ARCH_MODEL_REGISTRY)}))
"""


@pytest.mark.slow
def test_user_dir_of_a_second_checkout_loads_only_that_checkouts_code(tmp_path):
    """With one checkout installed (editable, as `make install` does), ``--user-dir`` of
    another checkout registers that one's models *and* criteria: one checkout's code."""
    import shutil

    neutral = {"PYTHONPATH": ""}
    # the installed checkout's criterions, found without running them (they import fairseq)
    installed = run_command([sys.executable, "-c", "import importlib.util; print(importlib.util."
                             "find_spec('relu_former.criterions').submodule_search_locations[0])"],
                            cwd=tmp_path, check=False, env=neutral)
    if installed.returncode != 0:
        pytest.skip("no relu_former installed: `make install` installs this checkout editable")
    second = tmp_path / "second_checkout"
    for folder in ("relu_former", "criterions"):
        shutil.copytree(REPO_ROOT / folder, second / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    assert not installed.stdout.strip().startswith(str(second))

    proc = run_command([sys.executable, "-c", WHICH_FILES, second / "relu_former"],
                       cwd=tmp_path, env=neutral)
    files = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(files["criterion"]) == set(plugin_names()["criterion"])
    assert set(files["arch"]) >= {"relu_former", "pyramidion"}
    outside = {name: path for kind in files.values() for name, path in kind.items()
               if not path.startswith(str(second) + "/")}
    assert not outside, f"registered from another checkout: {outside}"
