"""Ctrl-C on ``python -m scripts.reproduce``: one line saying it stopped and that the same
command resumes, exit status 130, no traceback (SIGTERM, the same stop:
test_reproduce_protocol_end_to_end)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import REPO_ROOT, as_from_a_terminal

STOPPED = ("python -m scripts.reproduce: stopped by SIGINT: 0 cells finished in this call, the "
           "running trainings stopped: rerun the same command to resume them from their last "
           "checkpoints")


@pytest.mark.slow
def test_ctrl_c_stops_with_one_line_and_status_130(tmp_path):
    work = tmp_path / "work"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    # a session of its own, so that the interrupt reaches it and its children as Ctrl-C in a
    # terminal reaches the foreground process group
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.reproduce", "relu_former_table4", "--scale", "tiny",
         "--seeds", "1", "--work", str(work), "--out", str(tmp_path / "reproduction.md")],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=as_from_a_terminal)
    try:
        deadline = time.monotonic() + 120
        while not work.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # inside its work by now (data preparation, then training)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.splitlines()[-1] == STOPPED


def test_an_interrupt_while_a_cell_runs_starts_no_other_cell(tmp_path):
    """Ctrl-C while a cell's job runs in this process (``--jobs 1``): no queued cell starts,
    and the interrupt goes on up."""
    import _thread
    from types import SimpleNamespace

    from scripts.reproduce.cell_jobs import run_cells

    ran = []

    def run_cell(cell):
        ran.append(cell.key)
        if len(ran) == 1:
            _thread.interrupt_main()  # as Ctrl-C arrives while the first cell runs
            time.sleep(0.5)

    options = SimpleNamespace(jobs=1, executor="local", work=tmp_path, max_new_cells=None,
                              deadline=None, say=print, finished=[], device="cpu")
    table = SimpleNamespace(options=options, commit_id="x", started=0, run_cell=run_cell,
                            spec=SimpleNamespace(name="t"))
    table.root = table
    cells = [SimpleNamespace(key=i, seed=1, parent=None, owner=table,
                             folder=tmp_path / str(i))
             for i in range(4)]
    # interrupt_main does nothing unless Python's own SIGINT handler is installed, which a
    # test worker may have replaced
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_cells(table, cells, lambda: None)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert ran == [0]


def test_a_signal_the_call_was_started_ignoring_stays_ignored():
    """A background job of a shell script (``cmd &``) starts with SIGINT ignored: a Ctrl-C
    on the launching terminal must not stop it."""
    probe = ("import signal\n"
             "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             "from scripts.reproduce.__main__ import stop_on_signals\n"
             "stop_on_signals()\n"
             "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN,"
             " callable(signal.getsignal(signal.SIGTERM)))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["True", "True"]
