"""Fairseq checkpoints load with torch's ``weights_only`` unpickler once the plugin is imported,
and anything outside the allowlist is still refused."""

from __future__ import annotations

import argparse
import os
import sys

import pytest
import torch
from fairseq import checkpoint_utils
from omegaconf import OmegaConf

import relu_former.plugin  # noqa: F401  (installs the allowlist)
from relu_former.errors import UnsafeCheckpointError
from relu_former.fairseq_fixes.checkpoint_safety import (
    allow_fairseq_checkpoint_globals,
    fairseq_checkpoint_globals,
)

from helpers import REPO_ROOT, fairseq_command, run_command


class _RunsCodeOnLoad:
    """Pickles as a call to ``os.getcwd``: a stand-in for code hidden in a checkpoint."""

    def __reduce__(self):
        return (os.getcwd, ())


def _save(obj, path) -> str:
    torch.save(obj, path)
    return str(path)


def test_legacy_and_omegaconf_checkpoint_state_loads(tmp_path):
    cfg = OmegaConf.create({"model": {"arch": "transformer", "dropout": 0.1, "layers": [1, 2]},
                            "common": {"fp16": False, "seed": None}})
    state = {
        "args": argparse.Namespace(arch="transformer", lr=[0.1]),
        "cfg": cfg,
        "model": {"w": torch.ones(2)},
        "extra_state": {"best": 1.5, "train_iterator": {"epoch": 1}},
    }
    path = _save(state, tmp_path / "ckpt.pt")
    loaded = torch.load(path)  # weights_only=True by default on this torch
    assert loaded["args"].lr == [0.1]
    assert loaded["cfg"].model.layers == [1, 2]
    assert torch.equal(loaded["model"]["w"], torch.ones(2))


def test_pickled_callable_is_refused_by_fairseq_loader(tmp_path):
    path = _save({"args": None, "cfg": None, "model": {}, "hook": _RunsCodeOnLoad()},
                 tmp_path / "evil.pt")
    with pytest.raises(UnsafeCheckpointError, match=r"is refused: it holds the global \S*getcwd"):
        checkpoint_utils.load_checkpoint_to_cpu(path)


def test_allowlist_is_idempotent_and_small():
    before = list(torch.serialization.get_safe_globals())
    allow_fairseq_checkpoint_globals()
    allow_fairseq_checkpoint_globals()
    after = list(torch.serialization.get_safe_globals())
    assert after == before
    allowed = fairseq_checkpoint_globals()
    names = {f"{g.__module__}.{getattr(g, '__qualname__', g)}" for g in allowed}
    assert "argparse.Namespace" in names
    # Nothing that can run code: no function, no module-level callable besides classes.
    assert all(isinstance(g, type) or g is __import__("typing").Any
               for g in fairseq_checkpoint_globals())


def test_fresh_interpreter_needs_the_plugin(tmp_path):
    """Without the plugin a fairseq checkpoint is refused; with it, it loads (same file)."""
    path = _save({"args": argparse.Namespace(arch="transformer"), "model": {}},
                 tmp_path / "ckpt.pt")
    load = f"import torch; torch.load({path!r}); print('loaded')"
    without = run_command([sys.executable, "-c", load], cwd=tmp_path, check=False)
    assert without.returncode != 0 and "Weights only load failed" in without.stderr
    with_plugin = run_command([sys.executable, "-c", "import relu_former.plugin; " + load],
                              cwd=REPO_ROOT)
    assert "loaded" in with_plugin.stdout


@pytest.mark.slow
def test_train_generate_restore_validate_with_weights_only(fairseq_run):
    """A checkpoint trained with the plugin decodes, resumes and validates, weights_only on."""
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ
    fairseq_run.train()
    fairseq_run.generate()
    ckpt = fairseq_run.work / "checkpoints" / "checkpoint_last.pt"
    resumed = fairseq_run.train("--restore-file", str(ckpt), "--max-update", "8",
                                save_dir="resumed")
    assert "Loaded checkpoint" in resumed.stdout + resumed.stderr
    assert "@ 6 updates" in resumed.stdout + resumed.stderr
    validate = run_command([
        fairseq_command("fairseq-validate"), fairseq_run.data_bin, "--user-dir",
        fairseq_run.user_dir, "--task", "translation", "--path", ckpt, "--cpu",
        "--max-tokens", "1000",
        "--num-workers", "0",
    ], cwd=fairseq_run.work)
    assert "valid on 'valid' subset" in validate.stdout + validate.stderr


@pytest.mark.slow
def test_generate_refuses_checkpoint_with_pickled_callable(fairseq_run):
    fairseq_run.train()
    ckpt = fairseq_run.work / "checkpoints" / "checkpoint_last.pt"
    state = checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))
    state["extra_state"]["hook"] = _RunsCodeOnLoad()
    # Written by the test module's own pickler; __main__-free path so the loader sees a global.
    torch.save(state, ckpt)
    proc = fairseq_run.generate(check=False)
    assert proc.returncode == 1
    last_line = proc.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"fairseq-generate: error: checkpoint {ckpt} is refused: it "
                                "holds the global "), last_line
    assert "getcwd" in last_line
    # torch's advice to load it with weights_only=False is never shown
    assert "will likely succeed" not in proc.stderr and "Traceback" not in proc.stderr
