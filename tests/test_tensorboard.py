"""fairseq's ``--tensorboard-logdir`` works in the project's environment (tensorboardX is a
runtime requirement), and fairseq no longer prints an install notice on every start."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_tensorboard_logdir_writes_event_files(fairseq_run):
    logdir = fairseq_run.work / "tb"
    proc = fairseq_run.train("--tensorboard-logdir", str(logdir))
    assert "Please install tensorboardX" not in proc.stdout + proc.stderr
    for tag in ("train_inner", "train", "valid"):
        events = sorted((logdir / tag).glob("events.out.tfevents.*"))
        assert events, f"no event file in {logdir / tag}: {sorted(logdir.rglob('*'))}"
        # Scalars are stored under their names; the loss is logged at every one of these.
        assert b"loss" in b"".join(path.read_bytes() for path in events), tag
