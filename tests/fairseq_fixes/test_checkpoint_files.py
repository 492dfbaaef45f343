"""Checkpoint files stay whole: an interrupted copy keeps the previous ``checkpoint_last.pt``,
resuming skips a damaged one, and a corrupt ``--path`` is named as corrupt."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
import types

import pytest
import torch

from relu_former.atomic_files import copy_atomic
from relu_former.fairseq_fixes.checkpoint_files import (
    checkpoint_problem,
    copies_in_place,
    install_atomic_copy,
)

from helpers import USER_DIR, fairseq_command, loaded_updates, run_command


def _copy_killed_midway(source, target) -> int:
    """The exit status of a process that copies ``source`` to ``target`` with fairseq's copy
    and is SIGKILLed half way through: whatever copy routine shutil uses writes half of the
    file, then the process kills itself. A fork of this process (fairseq and the plugin
    imported, as in a training), not a new interpreter that would import them again."""
    from fairseq import checkpoint_utils

    import relu_former.plugin  # noqa: F401

    def killed_midway(source, target, *args, **kwargs):
        target.write(source.read(os.fstat(source.fileno()).st_size // 2))
        target.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            shutil._fastcopy_sendfile = killed_midway
            shutil.copyfileobj = killed_midway
            checkpoint_utils.PathManager.copy(str(source), str(target), overwrite=True)
        finally:
            os._exit(1)
    deadline = time.monotonic() + 120
    while not (ended := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the copy neither ended nor was killed in 120 s")
        time.sleep(0.05)
    return os.waitstatus_to_exitcode(ended[1])


def _whole_checkpoint(path, size: int = 20000):
    torch.save({"model": {"w": torch.arange(size, dtype=torch.float32)}}, path)
    return path


def test_copy_killed_midway_keeps_the_previous_checkpoint_last(tmp_path):
    new = _whole_checkpoint(tmp_path / "checkpoint_1_6.pt")
    last = _whole_checkpoint(tmp_path / "checkpoint_last.pt", size=100)
    before = last.read_bytes()
    assert _copy_killed_midway(new, last) == -signal.SIGKILL  # really killed
    assert last.read_bytes() == before
    assert checkpoint_problem(str(last)) is None


def test_copy_replaces_the_target_whole(tmp_path):
    from fairseq import checkpoint_utils

    import relu_former.plugin  # noqa: F401

    new = _whole_checkpoint(tmp_path / "checkpoint_1_6.pt")
    last = _whole_checkpoint(tmp_path / "checkpoint_last.pt", size=100)
    assert checkpoint_utils.PathManager.copy(str(new), str(last), overwrite=True)
    assert last.read_bytes() == new.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_1_6.pt",
                                                          "checkpoint_last.pt"]


def test_atomic_copy_is_installed_only_where_fairseq_copies_in_place():
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    import relu_former.plugin  # noqa: F401

    assert copies_in_place(PathManager)  # this fairseq's fault: the probe sees it
    assert not copies_in_place(checkpoint_utils.PathManager)  # repaired

    class AtomicPathManager(PathManager):  # a fairseq that copies atomically is left alone
        copy = staticmethod(lambda src, dst, overwrite=False: bool(copy_atomic(src, dst)))

    fairseq_without_the_fault = types.SimpleNamespace(PathManager=AtomicPathManager)
    install_atomic_copy(fairseq_without_the_fault)
    assert fairseq_without_the_fault.PathManager is AtomicPathManager


def test_checkpoint_problem_tells_whole_from_damaged(tmp_path):
    whole = _whole_checkpoint(tmp_path / "whole.pt")
    data = whole.read_bytes()
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "half.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    flipped = bytearray(data)
    start = data.index(b"data/0") + 200  # inside the tensor's bytes
    flipped[start] ^= 0xFF
    (tmp_path / "flipped.pt").write_bytes(bytes(flipped))
    assert checkpoint_problem(str(whole)) is None
    assert "empty" in checkpoint_problem(str(tmp_path / "empty.pt"))
    assert "truncated" in checkpoint_problem(str(tmp_path / "half.pt"))
    assert "not a torch checkpoint" in checkpoint_problem(str(tmp_path / "text.pt"))
    assert "checksum" in checkpoint_problem(str(tmp_path / "flipped.pt"))


@pytest.mark.slow
def test_truncated_checkpoint_last_resumes_from_newest_intact(fairseq_run):
    every_3 = ("--save-interval-updates", "3", "--validate-interval-updates", "3")
    fairseq_run.train(*every_3)
    save = fairseq_run.work / "checkpoints"
    last = save / "checkpoint_last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])  # what a kill during fairseq's copy leaves

    proc = fairseq_run.train(*every_3, "--max-update", "8")
    log = proc.stdout + proc.stderr
    warning = re.search(rf"WARNING .*{re.escape(str(last))} is corrupt: it is truncated .*"
                        r"resuming from (\S+), the newest intact checkpoint", log)
    assert warning, log[-3000:]
    assert warning.group(1) != str(last)
    assert loaded_updates(log) == 6  # the state saved at update 6, not a fresh start
    assert "num_updates 8" in log or "num_updates=8" in log.replace(" ", "")
    assert checkpoint_problem(str(last)) is None  # the next save replaced it


@pytest.mark.slow
def test_damaged_checkpoint_last_without_fallback_is_named(fairseq_run):
    save = fairseq_run.work / "checkpoints"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 cut here")
    proc = fairseq_run.train(check=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    last_line = proc.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"fairseq-train: error: checkpoint {save}/checkpoint_last.pt "
                                "is corrupt: it is truncated"), last_line
    assert "move checkpoint_last.pt away" in last_line


@pytest.mark.slow
@pytest.mark.parametrize("content, problem", [
    (b"", "the file is empty"),
    (b"PK\x03\x04 the rest is missing", "it is truncated"),
    (b"a text file, not a checkpoint\n", "it is not a torch checkpoint"),
])
def test_generate_names_a_corrupt_checkpoint(content, problem, toy_data_bin, tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    proc = run_command([fairseq_command("fairseq-generate"), toy_data_bin, "--user-dir",
                        USER_DIR, "--path", path, "--cpu", "--num-workers", "0"],
                       check=False, cwd=tmp_path)
    assert proc.returncode == 1
    assert "weights_only" not in proc.stderr and "Traceback" not in proc.stderr
    last_line = proc.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"fairseq-generate: error: checkpoint {path} is corrupt: "
                                f"{problem}"), last_line
