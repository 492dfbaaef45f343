"""Child processes of the scripts: a thread cap in their environment, their log teed to a file.

Each child gets its share of the CPU threads (``OMP_NUM_THREADS``), its CPU time is read back
from the kernel (``wait4``), and it ends with the thread that started it, SIGKILL included
(Linux's parent-death signal); :func:`stop_children` stops them all, as a deadline stops one.
The children keep big blocks in the heap (``MALLOC_MMAP_THRESHOLD_`` ...): glibc returns each
block above 32 MiB to the kernel, and a CPU training step paid page faults for its output
layer's tensors again at every update (28% system time; 1.42x faster without, same numbers).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Sequence

from scripts.common.repo_paths import REPO_ROOT

# glibc tunables read at a process's start (bytes): big blocks stay in the heap, and the heap
# is not trimmed back after every step
KEEP_BIG_BLOCKS = {"MALLOC_MMAP_THRESHOLD_": str(2 ** 31 - 1),
                   "MALLOC_TRIM_THRESHOLD_": str(2 ** 32), "MALLOC_TOP_PAD_": str(2 ** 28)}


# every child that stream() is running: its guarded signalling (none once it is reaped)
_RUNNING: Dict[int, Callable[[int], None]] = {}
_RUNNING_LOCK = threading.RLock()
_STOPPED: list = []  # why stop_children() was called (e.g. "SIGTERM"), once it has been
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# looked up here, not in the child: between fork and exec a child may only call, not load
_PRCTL = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None


def stop_children(reason: str) -> None:
    """Terminate every child :func:`stream` runs or will start, as its deadline would
    (``reason``: :func:`stopped_by`). Safe in a signal handler: its lock is reentrant."""
    _STOPPED.append(reason)
    with _RUNNING_LOCK:
        children = list(_RUNNING.values())
    for send in children:
        send(signal.SIGTERM)


def _end_with_parent() -> None:
    """In the child before its command: SIGTERM when the thread that started it ends (Linux)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def stopped_by() -> str | None:
    """The reason :func:`stop_children` was given, or None when it has not been called."""
    return _STOPPED[0] if _STOPPED else None


def child_env(threads: int) -> Dict[str, str]:
    """This process's environment with the thread count of a child set to ``threads``."""
    env = {**KEEP_BIG_BLOCKS, **os.environ}  # tunables the environment sets stay its own
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # the console scripts (fairseq-train, ...) of the Python running this script come first,
    # so a venv's python called by its path, not activated, runs its own fairseq
    scripts_dir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([scripts_dir, *[part for part in env.get("PATH", "").split(
        os.pathsep) if part and part != scripts_dir]])
    # Checkpoints load safely through the plugin's allowlist; never the unsafe switch.
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    return env


def stream(command: Sequence[object], log_path: Path, on_line: Callable[[str], None],
           env: Dict[str, str], append: bool = False,
           deadline: float | None = None) -> tuple[int, float]:
    """Run a command, tee its output to ``log_path`` (``append``: after what it holds) and
    ``on_line``; terminate it at ``deadline`` (a ``time.time()``) or :func:`stop_children`.
    Returns its exit status and CPU seconds, which, unlike wall time, hold on a busy machine."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a" if append else "w", encoding="utf-8") as log, subprocess.Popen(
            [str(c) for c in command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, cwd=REPO_ROOT, preexec_fn=_end_with_parent) as proc:
        guard, running = threading.RLock(), [True]

        def send(number: int) -> None:
            with guard:  # never signal the pid once it is reaped (it may be reused)
                if running[0]:
                    # not proc.terminate(): its poll() would reap a child that has just
                    # exited, and wait4 below would find none
                    os.kill(proc.pid, number)

        def stop() -> None:
            send(signal.SIGTERM)

        with _RUNNING_LOCK:
            _RUNNING[id(proc)] = send
        if _STOPPED:  # stopped before it was registered
            stop()
        timer = None if deadline is None else threading.Timer(
            max(0.0, deadline - time.time()), stop)
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            for line in proc.stdout:
                log.write(line)
                on_line(line.rstrip("\n"))
        except BaseException:  # a failed read or log write: stop the child it can no longer see
            stop()
            raise
        finally:
            with guard:
                running[0] = False
            with _RUNNING_LOCK:
                _RUNNING.pop(id(proc), None)
            if timer is not None:
                timer.cancel()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime
