"""Killing ``python -m scripts.reproduce`` (SIGKILL: no handler runs) ends every process it
started within 10 seconds, and none is left stopped: cells run as local jobs of their own
(``--jobs 2``, submitit's local executor: its processes, and the trainings they started). A
cell run in the runner's own process (``--jobs 1``) is a child of the runner, which ends
with it (test_child_processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.scripts.reproduce.settings_args import copy_table4_data

from helpers import REPO_ROOT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]


def descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                children = [int(child) for child in task.read_text().split()]
            except OSError:  # it has just ended
                continue
            found.update(children)
            todo += children
    return found


def state(pid: int) -> str | None:
    """The kernel's one-letter state of ``pid`` (T: stopped, Z: ended, not reaped), None
    once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def test_killing_the_runner_ends_every_process_it_started(tmp_path, table4_data):
    jobs = 2
    locale = copy_table4_data(table4_data, tmp_path)  # Table 4's data, built once
    # two rows, so that two cells train at once with --jobs 2; long trainings, stopped by the kill
    argv = ["relu_former_table4", "--scale", "tiny", "--seeds", "1", "--rows", "transformer",
            "relu_former", "--set", f"locale_dir={locale}", "--set", "lr_grid=[0.01]",
            "--set", "lr_limits=[0.01,0.01]", "--set", "max_epoch=1000", "--jobs", str(jobs),
            "--work", str(tmp_path / "work"), "--out", str(tmp_path / "reproduction.md")]
    runner = subprocess.Popen([sys.executable, "-m", "scripts.reproduce", *argv], cwd=REPO_ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
    started: set[int] = set()
    try:
        began = time.monotonic()
        while time.monotonic() - began < 300 and runner.poll() is None:
            logs = list((tmp_path / "work").rglob("train.log"))
            if len(logs) == jobs and all(log.stat().st_size for log in logs):
                started = descendants(runner.pid)
                break
            time.sleep(0.2)
        assert runner.poll() is None and started, "no training started"
        time.sleep(1)
        started |= descendants(runner.pid)
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        end = time.monotonic() + 10
        while time.monotonic() < end and any(state(pid) not in (None, "Z") for pid in started):
            assert not any(state(pid) == "T" for pid in started), "a process was left stopped"
            time.sleep(0.1)
        left = {pid: state(pid) for pid in started if state(pid) not in (None, "Z")}
        assert not left, f"still running 10 s after the runner was killed: {left}"
    finally:  # nothing of this test outlives it, whatever failed
        for pid in started | (descendants(runner.pid) if runner.poll() is None else set()):
            if state(pid) not in (None, "Z"):
                os.kill(pid, signal.SIGKILL)
        if runner.poll() is None:
            runner.kill()
            runner.wait()
