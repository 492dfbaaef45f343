"""A lock that keeps two runs from working in one folder at once.

The lock is an ``flock`` on a small file that holds the pid of the run that took it: the
kernel drops it when that process ends, however it ends, so a killed run never leaves a
stale lock behind. A second run is refused with one line naming the folder and the pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator


class FolderInUse(SystemExit):
    """Another live process holds the lock; the message names the folder and its pid."""


@contextlib.contextmanager
def folder_lock(lock_file: Path, what: str) -> Iterator[None]:
    """Hold ``lock_file``'s lock for the block; raise :class:`FolderInUse` naming ``what``
    and the holder's pid when another process holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise FolderInUse(f"{what} is in use by another run (pid {holder}); wait for it "
                              "to finish, or give this run another --work folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
