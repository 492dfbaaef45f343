"""A table's lock held by another process, for the tests that a second run is refused."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from scripts.common.repo_paths import REPO_ROOT


@contextmanager
def lock_held_elsewhere(lock: Path) -> Iterator[int]:
    """Hold ``lock`` (:func:`scripts.common.folder_lock.folder_lock`) in a child process until
    the block ends; yields the child's pid, which a refusal names."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from pathlib import Path; "
         "from scripts.common.folder_lock import folder_lock\n"
         f"with folder_lock(Path({str(lock)!r}), 'x'):\n"
         "    print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        assert holder.stdout.readline() == "locked\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
