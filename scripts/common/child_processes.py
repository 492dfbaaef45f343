"""Child processes of the scripts: a thread cap in their environment, their log teed to a file.

The fairseq commands run as child processes, several at a time; each gets its own share of
the CPU threads through ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``, and its CPU time is read
back from the kernel when it ends. :func:`stop_children` stops them all, and any started
after it (a stop by hand: the command line's SIGINT/SIGTERM handler), as a deadline stops
one.

Each child ends with the process that started it, however that process ends, SIGKILL
included (:func:`_end_with_parent`: Linux's parent-death signal, set in the child before it
runs its command). It stays in its parent's process group, so Ctrl-C in a terminal reaches it
as it reaches its parent.

glibc's malloc hands every block above 32 MiB straight back to the kernel when it is freed,
so a CPU training step whose output layer allocates tensors of that size (tokens x
vocabulary) pays page faults for them again at every step: measured on the toy translation
model (2,048 tokens, 8,000 words), 28% of its CPU time was system time. The children keep
such blocks in the heap instead (``MALLOC_MMAP_THRESHOLD_`` and friends, unless the caller's
environment sets them), which made the same 60 updates 1.42x faster in words per second
(side by side) and changes no number they compute.
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
    """Terminate every child :func:`stream` is running, and each it starts from now on, as its
    deadline would: its caller still gets its exit status and CPU time (``reason`` is what
    :func:`stopped_by` says). Safe in a signal handler (run by the main thread, which it may
    have interrupted in :func:`stream`): its lock is reentrant."""
    _STOPPED.append(reason)
    with _RUNNING_LOCK:
        children = list(_RUNNING.values())
    for send in children:
        send(signal.SIGTERM)


def _end_with_parent() -> None:
    """In the child, before it runs its command: SIGTERM when the thread that started it
    ends (with its process, however it ends). Linux only; elsewhere a child outlives a
    killed parent."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def stopped_by() -> str | None:
    """The reason :func:`stop_children` was given, or None when it has not been called."""
    return _STOPPED[0] if _STOPPED else None


def child_env(threads: int) -> Dict[str, str]:
    """This process's environment with the thread count of a child set to ``threads``."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # the console scripts (fairseq-train, ...) of the Python running this script come first,
    # so a venv's python called by its path, not activated, runs its own fairseq
    scripts_dir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([scripts_dir, *[part for part in env.get("PATH", "").split(
        os.pathsep) if part and part != scripts_dir]])
    for name, value in KEEP_BIG_BLOCKS.items():
        env.setdefault(name, value)
    # Checkpoints load safely through the plugin's allowlist; never the unsafe switch.
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    return env


def stream(command: Sequence[object], log_path: Path, on_line: Callable[[str], None],
           env: Dict[str, str], append: bool = False,
           deadline: float | None = None) -> tuple[int, float]:
    """Run a command, tee its merged output to ``log_path`` (after what it holds, with
    ``append``), feed each line to ``on_line``; terminate it at ``deadline`` (a
    ``time.time()``, which a job in another process shares), if it is still running then,
    or at :func:`stop_children`.

    Returns the exit status and the CPU seconds (user + system) the process used: unlike
    wall-clock time, the CPU time of a run hardly changes when other processes load the
    machine, so speed ratios computed from it hold on a busy machine too.
    """
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
