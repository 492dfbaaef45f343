"""Fairseq checkpoints load with torch's ``weights_only`` unpickler once the plugin is imported,
and anything outside the allowlist is still refused."""

from __future__ import annotations

import argparse
import io
import os
import pickle
import sys
import textwrap

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils
from omegaconf import OmegaConf

import relu_former.plugin  # noqa: F401  (installs the allowlist)
from relu_former.average_checkpoints import average_checkpoints
from relu_former.errors import UnsafeCheckpointError
from relu_former.fairseq_fixes.checkpoint_safety import (
    allow_fairseq_checkpoint_globals,
    fairseq_checkpoint_globals,
)

from helpers import (
    REPO_ROOT,
    assert_generation_output,
    fairseq_command,
    loaded_updates,
    run_command,
)


class _RunsCodeOnLoad:
    """Pickles as a call to ``os.getcwd``: a stand-in for code hidden in a checkpoint."""

    def __reduce__(self):
        return (os.getcwd, ())


class _Opaque:
    """A class of the test module's own: not on the allowlist, so never unpickled."""

    def __init__(self, value) -> None:
        self.value = value


# The dtypes of numbers fairseq's metrics and scores can hold (numpy's, or torch's .numpy())
NUMERIC_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                  np.uint32, np.uint64, np.float16, np.float32, np.float64]


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


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda t: t.__name__)
def test_numpy_numbers_in_extra_state_load(tmp_path, dtype):
    """What fairseq's metrics and best score hold: numpy arrays (the summed ``_bleu_counts``)
    and numpy scalars (a score rounded by numpy) load, values and dtypes unchanged."""
    counts = np.array([53, 5, 0, 1]).astype(dtype)
    matrix = np.asfortranarray(np.arange(6).reshape(2, 3).astype(dtype))
    state = {"model": {"w": torch.ones(2)},
             "extra_state": {"best": dtype(1), "metrics": {"valid": [("_bleu_counts", counts)]},
                             "matrix": matrix}}
    loaded = torch.load(_save(state, tmp_path / "ckpt.pt"))
    extra = loaded["extra_state"]
    assert type(extra["best"]) is dtype and extra["best"] == 1
    loaded_counts = extra["metrics"]["valid"][0][1]
    assert loaded_counts.dtype == counts.dtype and np.array_equal(loaded_counts, counts)
    assert extra["matrix"].flags.f_contiguous and extra["matrix"].dtype == matrix.dtype
    assert np.array_equal(extra["matrix"], matrix)


def _with_numpy_1_paths(obj) -> io.BytesIO:
    """``obj`` pickled as numpy 1.x pickles it: its functions under ``numpy.core``, not
    numpy 2.x's ``numpy._core`` (torch's legacy format keeps the pickle bytes as they are)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer, _use_new_zipfile_serialization=False)
    data = buffer.getvalue()
    for name in (b"_reconstruct", b"scalar"):
        data = data.replace(b"numpy._core.multiarray\n" + name, b"numpy.core.multiarray\n" + name)
    assert b"numpy.core.multiarray\n_reconstruct" in data and b"numpy._core" not in data
    return io.BytesIO(data)


def test_numpy_1_checkpoint_loads():
    """A checkpoint written under numpy 1.x names ``numpy.core.multiarray``; it loads too."""
    state = {"extra_state": {"best": np.float64(3.5), "counts": np.array([4, 2])}}
    loaded = torch.load(_with_numpy_1_paths(state))
    assert loaded["extra_state"]["best"] == np.float64(3.5)
    assert np.array_equal(loaded["extra_state"]["counts"], [4, 2])


@pytest.mark.parametrize("element", [os.getcwd, _Opaque(3)], ids=["function", "instance"])
def test_object_array_elements_go_through_the_allowlist(tmp_path, element):
    """numpy's allowlisted functions only rebuild arrays: an object array's elements are
    unpickled by the same restricted unpickler, so a disallowed one is refused."""
    path = _save({"model": {}, "extra_state": {"hidden": np.array([1, element], dtype=object)}},
                 tmp_path / "evil.pt")
    with pytest.raises(UnsafeCheckpointError, match="is refused"):
        checkpoint_utils.load_checkpoint_to_cpu(path)
    # Object arrays themselves are not on the allowlist; even with their dtype allowed, the
    # refusal is the element's.
    refused = "getcwd" if element is os.getcwd else "_Opaque"
    with torch.serialization.safe_globals([type(np.dtype(object))]):
        with pytest.raises(pickle.UnpicklingError, match=refused):
            torch.load(path)
        allowed = torch.load(_save({"a": np.array([1, "x"], dtype=object)}, tmp_path / "ok.pt"))
    assert allowed["a"].tolist() == [1, "x"]


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
    names = [g[1] if isinstance(g, tuple) else f"{g.__module__}.{getattr(g, '__qualname__', g)}"
             for g in allowed]
    assert "argparse.Namespace" in names
    # Nothing that can run code: classes, and numpy's two functions that rebuild an array or
    # a scalar from its raw bytes (under numpy 1.x's and 2.x's module paths).
    functions = {name for g, name in zip(allowed, names)
                 if not (isinstance(g, type) or g is __import__("typing").Any)}
    assert functions == {f"numpy.{core}.multiarray.{function}"
                         for core in ("core", "_core") for function in ("_reconstruct", "scalar")}


def test_fresh_interpreter_needs_the_plugin(tmp_path):
    """Without the plugin a fairseq checkpoint is refused; with it, it loads (same file).
    One new interpreter tries both in turn: nothing of the plugin is imported before its
    first load, as in an interpreter of its own (a child costs ~2 s of importing torch)."""
    path = _save({"args": argparse.Namespace(arch="transformer"), "model": {}},
                 tmp_path / "ckpt.pt")
    load_without_then_with = textwrap.dedent(f"""
        import pickle, sys, torch
        assert not any(name.startswith(("relu_former", "fairseq")) for name in sys.modules)
        try:
            torch.load({str(path)!r})
        except pickle.UnpicklingError as error:
            print("refused:", error)
        import relu_former.plugin
        torch.load({str(path)!r})
        print("loaded")
    """)
    proc = run_command([sys.executable, "-c", load_without_then_with], cwd=REPO_ROOT)
    refused, loaded = proc.stdout.rsplit("\n", 2)[:2]
    assert refused.startswith("refused:") and "Weights only load failed" in refused, proc.stdout
    assert loaded == "loaded", proc.stdout


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


def _holds_numpy_array(value) -> bool:
    """Whether a numpy array is somewhere in ``value``'s dicts, lists and tuples."""
    if isinstance(value, np.ndarray):
        return True
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, (list, tuple)) and any(_holds_numpy_array(v) for v in value)


@pytest.mark.slow
def test_eval_bleu_checkpoint_resumes_decodes_and_averages(fairseq_run):
    """fairseq-train --eval-bleu saves its validation metrics (numpy arrays of n-gram counts)
    in every checkpoint; training resumes from it, fairseq-generate decodes with the best
    one, and the plugin's averaging reads both, weights_only on."""
    bleu = ["--eval-bleu", "--eval-bleu-args", '{"beam": 1}', "--best-checkpoint-metric", "bleu",
            "--maximize-best-checkpoint-metric", "--validate-interval-updates", "2",
            "--save-interval-updates", "2"]
    train = fairseq_run.train(*bleu, "--max-update", "2")
    assert "| bleu " in train.stdout + train.stderr
    checkpoints = fairseq_run.work / "checkpoints"
    last, best = checkpoints / "checkpoint_last.pt", checkpoints / "checkpoint_best.pt"
    for path in (last, best):  # the files really hold numpy arrays
        assert _holds_numpy_array(torch.load(path, weights_only=False)["extra_state"]), path

    resumed = fairseq_run.train(*bleu, "--max-update", "4")
    log = resumed.stdout + resumed.stderr
    assert loaded_updates(log) == 2 and "num_updates 4" in log

    generate = run_command([
        fairseq_command("fairseq-generate"), fairseq_run.data_bin, "--user-dir",
        fairseq_run.user_dir, "--path", best, "--gen-subset", "test", "--beam", "1",
        "--max-tokens", "1000", "--cpu", "--num-workers", "0",
    ], cwd=fairseq_run.work)
    assert_generation_output(generate.stdout)

    average = average_checkpoints([str(last), str(best)])
    assert _holds_numpy_array(average["extra_state"])
