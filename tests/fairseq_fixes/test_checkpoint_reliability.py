"""A checkpoint is verified before it is used, a refused one never gets torch's advice to load it
unsafely, a failed save leaves no temporary file, and a save directory that lost its
``checkpoint_last.pt`` resumes from the checkpoints it still holds."""

from __future__ import annotations

import os
import re

import pytest
import torch
from fairseq import checkpoint_utils

import relu_former.plugin  # noqa: F401  (installs the checkpoint fixes)
from relu_former.errors import CorruptCheckpointError, UnsafeCheckpointError

from helpers import loaded_updates


def _fairseq_state(**extra) -> dict:
    """The smallest dict fairseq's ``load_checkpoint_to_cpu`` loads and upgrades as is."""
    return {"args": None, "cfg": None, "model": {"w": torch.arange(20000, dtype=torch.float32)},
            "optimizer_history": [{"criterion_name": "x", "optimizer_name": "y",
                                   "lr_scheduler_state": {"best": 0}, "num_updates": 0}],
            "extra_state": dict(extra)}


class _RunsCodeOnLoad:
    """Pickles as a call to ``os.getcwd``: a stand-in for code hidden in a checkpoint."""

    def __reduce__(self):
        return (os.getcwd, ())


def test_a_flipped_bit_in_the_weights_is_caught_before_the_load(tmp_path):
    path = tmp_path / "model.pt"
    torch.save(_fairseq_state(), path)
    assert checkpoint_utils.load_checkpoint_to_cpu(str(path))["model"]["w"][5] == 5
    data = bytearray(path.read_bytes())
    data[data.index(b"data/0") + 400] ^= 0x01  # one bit of the tensor's bytes
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match=rf"checkpoint {re.escape(str(path))} is "
                                                     r"corrupt: its member .* fails its checksum"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))


def test_a_refused_checkpoint_gets_our_message_not_torchs_advice(tmp_path):
    path = tmp_path / "model.pt"
    torch.save(_fairseq_state(hook=_RunsCodeOnLoad()), path)
    with pytest.raises(UnsafeCheckpointError) as caught:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    message = str(caught.value)
    assert message.startswith(f"checkpoint {path} is refused: it holds the global "), message
    assert "getcwd" in message
    assert "Do not load it unsafely" in message
    assert "will likely succeed" not in message and "set to `False`" not in message
    # nothing in the chain repeats torch's advice either
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_failed_save_leaves_no_tmp_file(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_utils.time, "sleep", lambda seconds: None)  # its 3 retries
    target = tmp_path / "checkpoint_1_6.pt"
    with pytest.raises(AttributeError, match="pickle"):
        checkpoint_utils.torch_persistent_save({"f": lambda: 0}, str(target))  # cannot pickle
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow
def test_missing_checkpoint_last_resumes_from_best(fairseq_run):
    """A save directory with checkpoint_best.pt but no checkpoint_last.pt (a first save that
    hit a full disk; a user freeing space): the rerun resumes from the best one, with a
    warning, and never trains from update 0 over it. A fairseq .tmp of a killed save goes."""
    fairseq_run.train()
    save = fairseq_run.work / "checkpoints"
    (save / "checkpoint_last.pt").unlink()
    (save / "checkpoint_1_6.pt.tmp").write_bytes(b"PK\x03\x04 half a save")
    best = save / "checkpoint_best.pt"

    proc = fairseq_run.train("--max-update", "8")
    log = proc.stdout + proc.stderr
    assert re.search(rf"WARNING .*{re.escape(str(save / 'checkpoint_last.pt'))} is missing .*"
                     rf"resuming from {re.escape(str(best))}", log), log[-3000:]
    assert loaded_updates(log) == 6
    assert not (save / "checkpoint_1_6.pt.tmp").exists()
    state = checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 8
