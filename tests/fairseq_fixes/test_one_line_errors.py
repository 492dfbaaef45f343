"""The user's mistakes and interruptions end fairseq's commands in one line, never a traceback:
Ctrl-C (exit 130, naming the last checkpoint saved), weights that do not fit the model (how
many keys, the first, the likely cause), a file given where a folder is expected."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import torch

from relu_former.errors import mismatch_error
from relu_former.fairseq_fixes.checkpoint_files import checkpoint_problem

from helpers import (
    TINY_MODEL_ARGS,
    TINY_TRAIN_ARGS,
    FairseqRun,
    as_from_a_terminal,
    fairseq_command,
    run_command,
)


def _last_line(proc) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stderr.strip().splitlines()[-1]


def _interrupted(args, cwd, ready) -> subprocess.CompletedProcess:
    """Run ``args`` as a process of its own, Ctrl-C it once ``ready(its log so far)``."""
    out_file, err_file = cwd / "command.out", cwd / "command.err"
    with open(out_file, "w") as out, open(err_file, "w") as err:
        proc = subprocess.Popen([str(a) for a in args], cwd=cwd, stdout=out, stderr=err,
                                env={**os.environ, "OMP_NUM_THREADS": "1"},
                                preexec_fn=as_from_a_terminal)
        try:
            deadline = time.monotonic() + 300
            while not ready(err_file.read_text()):
                assert proc.poll() is None, err_file.read_text()[-3000:]
                assert time.monotonic() < deadline, "never ready"
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
            proc.wait(timeout=120)
        finally:  # a failed test leaves no training running
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return subprocess.CompletedProcess(args, proc.returncode, out_file.read_text(),
                                       err_file.read_text())


@pytest.mark.slow
def test_ctrl_c_in_train_and_generate_is_one_line_naming_the_last_checkpoint(
        fairseq_run: FairseqRun):
    save = fairseq_run.work / "checkpoints"
    train = [fairseq_command("fairseq-train"), fairseq_run.data_bin, "--user-dir",
             fairseq_run.user_dir, "--arch", "relu_former", "--save-dir", save,
             *TINY_TRAIN_ARGS, *TINY_MODEL_ARGS, "--max-update", "100000",
             "--save-interval-updates", "2", "--validate-interval-updates", "2",
             "--num-workers", "1"]  # a data worker, as by default
    proc = _interrupted(train, fairseq_run.work,
                        lambda log: len(list(save.glob("checkpoint_1_*.pt"))) >= 2)
    assert proc.returncode == 130, proc.stderr[-3000:]
    last = _last_line(proc)
    prefix = "fairseq-train: interrupted; the last checkpoint saved is "
    assert last.startswith(prefix), last
    named = last[len(prefix):]
    assert named.startswith(f"{save}/checkpoint") and checkpoint_problem(named) is None

    generate = [fairseq_command("fairseq-generate"), fairseq_run.data_bin, "--user-dir",
                fairseq_run.user_dir, "--path", save / "checkpoint_last.pt", "--gen-subset",
                "train", "--beam", "8", "--min-len", "150", "--max-len-b", "200",
                "--batch-size", "1", "--cpu", "--num-workers", "0"]  # slow: long hypotheses
    proc = _interrupted(generate, fairseq_run.work, lambda log: "creating new batches" in log)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert _last_line(proc) == "fairseq-generate: interrupted"


@pytest.mark.slow
def test_weights_that_do_not_fit_the_model_are_one_line(fairseq_run: FairseqRun):
    fairseq_run.train(arch="relu_former")
    save = fairseq_run.work / "checkpoints"
    # fine-tuning another number of layers: fairseq's "Cannot load model parameters"
    proc = fairseq_run.train("--finetune-from-model", save / "checkpoint_last.pt",
                             "--encoder-layers", "2", arch="relu_former", save_dir="more",
                             check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert _last_line(proc) == (
        f"fairseq-train: error: the weights of {save / 'checkpoint_last.pt'} do not fit this "
        "model: 16 missing (the first: encoder.layers.1.self_attn.k_proj.weight) keys. It was "
        "probably trained with another number of layers (--encoder-layers, --decoder-layers): "
        "give the flags it was trained with")
    # a checkpoint holding a weight its model lacks
    ckpt = save / "checkpoint_last.pt"
    state = torch.load(ckpt, map_location="cpu")
    state["model"]["encoder.extra.weight"] = torch.zeros(2)
    torch.save(state, ckpt)
    proc = fairseq_run.generate(check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert _last_line(proc).startswith(
        f"fairseq-generate: error: the weights of {ckpt} do not fit this model: 1 unexpected "
        "(the first: encoder.extra.weight) keys. It was probably trained with another --arch")


def test_mismatch_error_reads_torchs_message():
    model = torch.nn.Linear(2, 3)
    try:
        model.load_state_dict({"weight": torch.zeros(4, 2), "gain": torch.zeros(1)})
    except RuntimeError as error:
        found = str(mismatch_error(error))
    assert "1 missing (the first: bias), 1 unexpected (the first: gain), 1 of another shape " \
           "(the first: weight) keys" in found, found


@pytest.mark.slow
def test_a_file_given_as_a_folder_is_one_line(fairseq_run: FairseqRun):
    (fairseq_run.work / "a_file").write_text("not a folder\n")
    proc = fairseq_run.train(save_dir="a_file", check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _last_line(proc) == (f"fairseq-train: error: --save-dir: {fairseq_run.work / 'a_file'} "
                                "is a file, not a folder: give a folder (it is created if "
                                "missing)")
    data_file = fairseq_run.data_bin / "train.de-en.de.bin"
    proc = run_command([fairseq_command("fairseq-train"), data_file, "--user-dir",
                        fairseq_run.user_dir, "--arch", "transformer", "--save-dir",
                        fairseq_run.work / "ckpt", *TINY_TRAIN_ARGS, *TINY_MODEL_ARGS],
                       cwd=fairseq_run.work, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert _last_line(proc).startswith(f"fairseq-train: error: {data_file}"), proc.stderr[-500:]
    assert "is a file, but a folder is expected there" in _last_line(proc)
