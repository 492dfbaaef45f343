"""Child processes: the log teed line by line, the exit status and the CPU time read back,
the thread cap in the environment, the end of a child with its parent's."""

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


def _gone(pid: int, seconds: float = 10) -> bool:
    """Whether ``pid`` has ended (or is a zombie) within ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in "ZX":
            return True
        time.sleep(0.05)
    return False


# a process that runs, through stream(), a child that prints its pid and sleeps
PARENT = ("import sys\nfrom pathlib import Path\n"
          "from scripts.common.child_processes import child_env, stream\n"
          "stream([sys.executable, '-c', 'import os, time; print(os.getpid(), flush=True); "
          "time.sleep(60)'], Path(sys.argv[1]), lambda line: print(line, flush=True), "
          "child_env(1))\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is "
                    "Linux's")
def test_a_child_ends_with_its_parent_killed_by_sigkill(tmp_path):
    import signal
    import subprocess

    from scripts.common.repo_paths import REPO_ROOT

    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "log")],
                              stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _gone(child), "the child outlived its parent"
