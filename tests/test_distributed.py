"""fairseq's own distributed training with the plugin: two CPU processes over gloo.

Started by hand, one rank per process, as docs/design.md ("fairseq build") explains
is needed without a GPU
(fairseq's spawn starts no process on a CPU machine, torch's DDP wrapper refuses CPU modules,
hence ``--ddp-backend legacy_ddp``). With a fixed batch of 8 sentences per rank, the logged
batch of each update is 16 sentences: the two ranks' statistics, like their gradients, are
summed over the process group; fairseq itself stops with "gradients are inconsistent between
workers" if the ranks' gradient norms ever differ. Each rank is a fork of the test process,
which has fairseq and the plugin imported, running the command as ``run_command`` runs it in
the test process: a new interpreter per rank would spend ~4.5 CPU s importing them again.
"""

from __future__ import annotations

import os
import re
import socket

import pytest
from fairseq_in_process import exit_codes, forked_command

from helpers import TINY_MODEL_ARGS, USER_DIR, fairseq_command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_cpu_ranks_train_the_plugin_model(toy_data_bin, tmp_path):
    port = free_port()
    save = tmp_path / "ckpt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    pids = []
    for rank in range(2):
        args = [
            fairseq_command("fairseq-train"), toy_data_bin, "--user-dir", USER_DIR,
            "--arch", "relu_former_iwslt_de_en",
            "--criterion", "regularized_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            *TINY_MODEL_ARGS, "--optimizer", "adam", "--lr", "0.003",
            "--batch-size", "8", "--required-batch-size-multiple", "1", "--max-update", "3",
            "--cpu", "--distributed-backend", "gloo", "--distributed-world-size", "2",
            "--distributed-rank", str(rank), "--distributed-no-spawn",
            "--distributed-init-method", f"tcp://127.0.0.1:{port}",
            "--ddp-backend", "legacy_ddp", "--save-dir", save, "--no-epoch-checkpoints",
            "--log-format", "simple", "--log-interval", "1", "--no-progress-bar",
            "--num-workers", "0", "--disable-validation", "--seed", "1",
        ]
        pids.append(forked_command(args, tmp_path, env, tmp_path / f"rank{rank}.log"))
    codes = exit_codes(pids, timeout_s=600)
    logs = [log.read_text() if log.exists() else "no log" for log in
            (tmp_path / f"rank{r}.log" for r in range(2))]
    assert codes == [0, 0], "\n\n".join(text[-3000:] for text in logs)

    for rank, text in enumerate(logs):
        assert f"distributed init (rank {rank})" in text, text[-2000:]
    assert "world_size': 2" in logs[0] or "distributed_world_size': 2" in logs[0]
    # every logged update holds both ranks' batches: 2 x 8 sentences
    batches = [int(b) for b in re.findall(r"\| bsz (\d+) \|", logs[0])]
    assert batches and all(b == 16 for b in batches), batches
    updates = re.findall(r"num_updates (\d+)", logs[0])
    assert updates and updates[-1] == "3"
    assert (save / "checkpoint_last.pt").is_file()
