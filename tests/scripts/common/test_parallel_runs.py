"""Runs side by side: every run once, a continuation after its parent in its job, the first
error."""

from __future__ import annotations

import argparse
import threading
import time

import pytest

from scripts.common.parallel_runs import in_parallel, threads_per_job
from scripts.common.run_record import Run


def test_a_continuation_starts_only_after_its_parent_finished():
    parent = Run("parent", "p", "arch", [])
    runs = [parent, Run("child", "c", "arch", [], parent=parent), Run("other", "o", "arch", [])]
    events, lock = [], threading.Lock()

    def step(run: Run, position: int) -> None:
        with lock:
            events.append(("start", run.key, position))
        time.sleep(0.2 if run.key == "parent" else 0.01)
        with lock:
            events.append(("end", run.key, position))

    in_parallel(step, runs, jobs=2)
    assert sorted(key for kind, key, _ in events if kind == "end") == ["child", "other", "parent"]
    # in its parent's job, right after it
    assert events.index(("end", "parent", 0)) + 1 == events.index(("start", "child", 0))
    # positions are the progress bars' lines: one per job
    assert {position for _, _, position in events} == {0, 1}


def test_the_first_error_is_raised_after_the_others_ran():
    ran = []

    def step(run: Run, position: int) -> None:
        ran.append(run.key)
        if run.key == "bad":
            raise RuntimeError("fairseq-train failed for bad")

    runs = [Run("bad", "b", "arch", []), Run("good", "g", "arch", [])]
    with pytest.raises(RuntimeError, match="failed for bad"):
        in_parallel(step, runs, jobs=1)
    assert sorted(ran) == ["bad", "good"]


def test_each_job_gets_its_share_of_the_threads_and_at_least_one():
    assert threads_per_job(argparse.Namespace(threads=5, jobs=2)) == 2
    assert threads_per_job(argparse.Namespace(threads=1, jobs=3)) == 1


def test_a_waiting_continuation_does_not_hold_a_job_that_a_ready_run_can_use():
    parent = Run("parent", "p", "arch", [])
    runs = [parent, Run("child", "c", "arch", [], parent=parent), Run("other", "o", "arch", [])]
    events, lock = [], threading.Lock()

    def step(run: Run, position: int) -> None:
        with lock:
            events.append(("start", run.key))
        time.sleep(0.3 if run.key == "parent" else 0.01)
        with lock:
            events.append(("end", run.key))

    in_parallel(step, runs, jobs=2)
    # the second job runs "other" at once instead of waiting for the parent with "child"
    assert events.index(("start", "other")) < events.index(("end", "parent"))
    assert events.index(("end", "parent")) < events.index(("start", "child"))


def test_the_continuation_of_a_failed_run_is_skipped_and_the_error_raised():
    parent = Run("parent", "p", "arch", [])
    runs = [parent, Run("child", "c", "arch", [], parent=parent), Run("other", "o", "arch", [])]
    ran = []

    def step(run: Run, position: int) -> None:
        ran.append(run.key)
        if run.key == "parent":
            raise RuntimeError("fairseq-train failed for parent")

    with pytest.raises(RuntimeError, match="failed for parent"):
        in_parallel(step, runs, jobs=2)
    assert sorted(ran) == ["other", "parent"]
