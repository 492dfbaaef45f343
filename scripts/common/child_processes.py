"""Child processes of the scripts: a thread cap in their environment, their log teed to a file.

The fairseq commands run as child processes, several at a time; each gets its own share of
the CPU threads through ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``, and its CPU time is read
back from the kernel when it ends.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable, Dict, Sequence

from scripts.common.repo_paths import REPO_ROOT


def child_env(threads: int) -> Dict[str, str]:
    """This process's environment with the thread count of a child set to ``threads``."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # Checkpoints load safely through the plugin's allowlist; never the unsafe switch.
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    return env


def stream(command: Sequence[object], log_path: Path, on_line: Callable[[str], None],
           env: Dict[str, str]) -> tuple[int, float]:
    """Run a command, tee its merged output to ``log_path``, feed each line to ``on_line``.

    Returns the exit status and the CPU seconds (user + system) the process used: unlike
    wall-clock time, the CPU time of a run hardly changes when other processes load the
    machine, so speed ratios computed from it hold on a busy machine too.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log, subprocess.Popen(
            [str(c) for c in command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, cwd=REPO_ROOT) as proc:
        for line in proc.stdout:
            log.write(line)
            on_line(line.rstrip("\n"))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime
