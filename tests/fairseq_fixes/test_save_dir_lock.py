"""A save directory in use by one fairseq-train is refused to a second one, naming the directory
and the first run's pid; the lock dies with its process, however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable

import pytest
from fairseq import checkpoint_utils
from fairseq_in_process import exit_codes, forked_command

import relu_former.plugin  # noqa: F401  (the allowlist torch.load needs here)
from relu_former import file_lock
from relu_former.errors import OptionError
from relu_former.fairseq_fixes.save_dir_lock import (
    LOCK_FILE,
    lock_save_dir,
    save_dirs_released_after,
)

from helpers import (
    REPO_ROOT,
    TINY_MODEL_ARGS,
    TINY_TRAIN_ARGS,
    FairseqRun,
    fairseq_command,
    loaded_updates,
    tiny_hydra_train,
)


def _wait_for_holder(lock, pid: int, running: Callable[[], bool], timeout: float = 300) -> None:
    """Wait until process ``pid`` has written its pid into the lock file."""
    deadline = time.time() + timeout
    while not (lock.is_file() and lock.read_text().strip() == str(pid)):
        assert running(), "the first process ended before taking the lock"
        assert time.time() < deadline, "the first process never took the lock"
        time.sleep(0.1)


def _holder(save_dir) -> subprocess.Popen:
    """Another process that holds the lock of ``save_dir`` (until it is killed)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; "
         "from relu_former.fairseq_fixes.save_dir_lock import lock_save_dir; "
         f"lock_save_dir({str(save_dir)!r}); time.sleep(600)"],
        cwd=REPO_ROOT)
    _wait_for_holder(save_dir / LOCK_FILE, holder.pid, lambda: holder.poll() is None)
    return holder


def test_the_lock_is_refused_while_held_and_free_after_a_kill(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(OptionError, match=f"^--save-dir: {tmp_path} is in use by another "
                                              f"training \\(pid {holder.pid}, "):
            lock_save_dir(str(tmp_path))
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: no clean-up runs
        holder.wait()
    lock_save_dir(str(tmp_path))  # no stale lock
    lock_save_dir(str(tmp_path))  # taken again by the same process: a no-op
    assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def _taken_by_another_process(save_dir) -> bool:
    """Whether a new process is refused the lock of ``save_dir``."""
    proc = subprocess.run(
        [sys.executable, "-c", "from relu_former.fairseq_fixes.save_dir_lock import "
         f"lock_save_dir; lock_save_dir({str(save_dir)!r})"],
        cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 or "is in use by another training" in proc.stderr, proc.stderr
    return proc.returncode != 0


def test_a_lock_taken_in_the_block_is_released_when_it_ends(tmp_path):
    earlier, inside, raising = (tmp_path / name for name in ("earlier", "inside", "raising"))
    for folder in (earlier, inside, raising):
        folder.mkdir()
    lock_save_dir(str(earlier))
    with save_dirs_released_after():
        lock_save_dir(str(inside))
        assert _taken_by_another_process(inside)
    assert not _taken_by_another_process(inside)
    assert _taken_by_another_process(earlier)  # held before the block: still held
    with pytest.raises(RuntimeError), save_dirs_released_after():
        lock_save_dir(str(raising))
        raise RuntimeError("the training failed")
    assert not _taken_by_another_process(raising)


@pytest.mark.slow
def test_hydra_train_is_refused_in_one_line(toy_data_bin, tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    holder = _holder(save)
    try:
        proc = tiny_hydra_train(toy_data_bin, save)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"fairseq-hydra-train: error: checkpoint.save_dir: {save} is in use by another "
        f"training (pid {holder.pid}, ")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_second_train_on_a_save_dir_in_use_is_refused(fairseq_run: FairseqRun):
    save = fairseq_run.work / "checkpoints"
    # a fork of the test process (fairseq and the plugin imported) runs the first training as
    # run_command runs one here: a process of its own, without a new interpreter's imports
    first = forked_command(
        [fairseq_command("fairseq-train"), fairseq_run.data_bin, "--user-dir",
         fairseq_run.user_dir, "--arch", "relu_former", "--save-dir", save, *TINY_TRAIN_ARGS,
         *TINY_MODEL_ARGS, "--max-update", "12"],
        fairseq_run.work, {**os.environ, "OMP_NUM_THREADS": "1"}, fairseq_run.work / "first.log")
    try:
        _wait_for_holder(save / LOCK_FILE, first,  # WNOWAIT: exit_codes reaps it
                         lambda: os.waitid(os.P_PID, first, os.WEXITED | os.WNOHANG
                                           | os.WNOWAIT) is None)
        os.kill(first, signal.SIGSTOP)  # still running, however fast this machine is
        second = fairseq_run.train("--attention-activation", "softmax", arch="relu_former",
                                   check=False)
    finally:
        os.kill(first, signal.SIGCONT)
        first_status = exit_codes([first], timeout_s=600)[0]
    log = (fairseq_run.work / "first.log").read_text()
    assert first_status == 0, log[-3000:]
    assert second.returncode == 2, second.stderr[-3000:]
    assert second.stderr.strip().splitlines()[-1] == (
        f"fairseq-train: error: --save-dir: {save} is in use by another training (pid "
        f"{first}, which holds {save / LOCK_FILE}): wait for it to end or give another "
        "--save-dir")
    assert "Traceback" not in second.stderr
    state = checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 12
    assert state["cfg"]["model"].attention_activation == "relu"  # the first run's model
    assert not list(save.glob("*.tmp"))

    # the lock ended with the first run: the same command resumes there
    resumed = fairseq_run.train("--max-update", "14", arch="relu_former")
    assert loaded_updates(resumed.stdout + resumed.stderr) == 12


# Takes the lock of argv[1], forks a worker that keeps it argv[2] seconds, prints its pid and
# ends at once: a training killed while its data workers finish their batch.
HOLDER_WITH_A_WORKER = """
import os, sys, time
from relu_former.fairseq_fixes.save_dir_lock import lock_save_dir
lock_save_dir(sys.argv[1])
if os.fork() == 0:
    for stream in (1, 2):  # the caller reads the output to its end
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream)
    time.sleep(float(sys.argv[2]))
    os._exit(0)
print(os.getpid(), flush=True)
os._exit(0)
"""


def _ended_holder_with_a_worker(save_dir, worker_s: float) -> int:
    proc = subprocess.run([sys.executable, "-c", HOLDER_WITH_A_WORKER, str(save_dir),
                           str(worker_s)], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def test_a_dead_holders_workers_are_waited_for_not_named_as_the_holder(tmp_path):
    _ended_holder_with_a_worker(tmp_path, worker_s=1.0)
    lock_save_dir(str(tmp_path))  # waits for the worker, then takes the lock
    assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_a_dead_holders_workers_outliving_the_wait_are_said_to_be_finishing(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(file_lock, "WORKERS_GRACE_S", 0.3)
    holder = _ended_holder_with_a_worker(tmp_path, worker_s=10.0)
    with pytest.raises(OptionError) as refused:
        lock_save_dir(str(tmp_path))
    assert str(refused.value) == (
        f"--save-dir: {tmp_path} is in use by another training (its last holder, pid {holder}, "
        f"has ended, but processes it started (its data workers) still hold "
        f"{tmp_path / LOCK_FILE}: they are finishing, retry in a few seconds): wait for it to "
        "end or give another --save-dir")
