"""Child processes: the log teed line by line, the exit status and the CPU time read back,
the thread cap in the environment."""

from __future__ import annotations

import os
import sys
import time

import pytest

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


def test_a_failed_line_handler_stops_the_child_instead_of_waiting_for_it(tmp_path):
    def refuse(_line: str) -> None:
        raise ValueError("cannot take this line")

    started = time.monotonic()
    with pytest.raises(ValueError):
        stream([sys.executable, "-c", "import time; print('first', flush=True); time.sleep(60)"],
               tmp_path / "log", refuse, child_env(1))
    assert time.monotonic() - started < 30  # not the child's 60 s


def test_a_child_gets_its_thread_share_and_never_the_unsafe_load_switch(monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    env = child_env(3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in env


FAULTS_OF_BIG_BLOCKS = (
    "import resource\n"
    "for _ in range(12):\n"
    "    block = bytearray(64 << 20)  # written through: every page is touched\n"
    "    del block\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)\n")


def _page_faults(env) -> int:
    import subprocess

    done = subprocess.run([sys.executable, "-c", FAULTS_OF_BIG_BLOCKS], env=env,
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_child_keeps_big_blocks_instead_of_faulting_them_in_again(monkeypatch):
    from scripts.common.child_processes import KEEP_BIG_BLOCKS

    for name in KEEP_BIG_BLOCKS:
        monkeypatch.delenv(name, raising=False)
    kept = child_env(1)
    plain = {k: v for k, v in kept.items() if k not in KEEP_BIG_BLOCKS}
    # 12 blocks of 64 MiB are 196,608 pages: freed to the kernel each time without the
    # setting, reused from the heap with it
    assert _page_faults(plain) > 12 * 16384
    assert _page_faults(kept) < 3 * 16384


def test_the_callers_own_malloc_setting_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert child_env(1)["MALLOC_MMAP_THRESHOLD_"] == "65536"


def test_children_find_the_console_scripts_of_the_python_running_them(monkeypatch):
    # a venv's python called by its path, not activated: its fairseq-train comes first
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", os.path.dirname(sys.executable)]))
    parts = child_env(1)["PATH"].split(os.pathsep)
    assert parts[0] == os.path.dirname(sys.executable)
    assert parts.count(os.path.dirname(sys.executable)) == 1 and "/usr/bin" in parts


# a child that prints its pid, then waits for the file named by its argument
WAITER = ("import os, sys, time\nprint(os.getpid(), flush=True)\n"
          "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n")


def _state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T``: stopped)."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def _children() -> set:
    return {int(pid) for task in os.listdir("/proc/self/task")
            for pid in open(f"/proc/self/task/{task}/children").read().split()}


def _in_thread(go, lines):
    import threading

    done = []
    thread = threading.Thread(target=lambda: done.append(stream(
        [sys.executable, "-c", WAITER, str(go)], go.with_suffix(".log"), lines.append,
        child_env(1))))
    thread.start()
    return thread, done


def _wait_for(test, what: str, seconds: float = 30):
    end = time.monotonic() + seconds
    while not test():
        assert time.monotonic() < end, f"waited {seconds} s for {what}"
        time.sleep(0.01)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")
def test_a_timed_child_runs_alone_the_others_paused_then_continued(tmp_path):
    from scripts.common.child_processes import alone

    go, lines = tmp_path / "go", []
    thread, done = _in_thread(go, lines)
    _wait_for(lambda: lines, "the first child's pid")
    first = int(lines[0])
    assert _state(first) != "T"
    with alone():
        # the timed child sees the other one stopped
        seen = []
        stream([sys.executable, "-c", f"print(open('/proc/{first}/stat').read()"
                ".rsplit(')', 1)[1].split()[0])"], tmp_path / "timed.log", seen.append,
               child_env(1))
        assert seen == ["T"]
        # one started meanwhile by another thread starts paused
        before = _children()
        late_go, late_lines = tmp_path / "late", []
        late, late_done = _in_thread(late_go, late_lines)
        _wait_for(lambda: _children() - before, "the second child")
        second = (_children() - before).pop()
        _wait_for(lambda: _state(second) == "T", "the second child to be paused", 5)
        assert _state(first) == "T" and not late_lines
    _wait_for(lambda: _state(first) != "T" and _state(second) != "T", "both to continue", 5)
    go.touch(), late_go.touch()
    thread.join(30), late.join(30)
    assert done[0][0] == late_done[0][0] == 0 and late_lines == [str(second)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")
def test_a_stop_by_hand_ends_a_child_paused_for_a_timed_one(tmp_path, monkeypatch):
    from scripts.common import child_processes

    monkeypatch.setattr(child_processes, "_STOPPED", [])
    go, lines = tmp_path / "go", []
    thread, done = _in_thread(go, lines)  # never told to go: only a stop ends it
    _wait_for(lambda: lines, "the child's pid")
    with child_processes.alone():
        _wait_for(lambda: _state(int(lines[0])) == "T", "the child to be paused", 5)
        child_processes.stop_children("SIGTERM")
        thread.join(30)
        assert not thread.is_alive() and done[0][0] == -15  # ended by SIGTERM inside the block
