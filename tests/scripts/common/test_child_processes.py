"""Child processes: the log teed line by line, the exit status and the CPU time read back,
the thread cap in the environment."""

from __future__ import annotations

import sys

from scripts.common.child_processes import child_env, stream


def test_stream_returns_exit_status_and_cpu_seconds(tmp_path):
    lines = []
    code, cpu = stream(
        [sys.executable, "-c", "import sys, time\nt = time.process_time()\n"
         "while time.process_time() - t < 0.3: pass\nprint('done'); sys.exit(3)"],
        tmp_path / "log", lines.append, child_env(1))
    assert code == 3 and lines == ["done"]
    assert 0.3 <= cpu < 5
    assert (tmp_path / "log").read_text() == "done\n"


def test_a_child_gets_its_thread_share_and_never_the_unsafe_load_switch(monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    env = child_env(3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in env
