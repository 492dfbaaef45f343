"""A lock that keeps two runs from working in one folder at once (filelock's, on a file
beside it: the kernel drops it when its holder ends, however it ends). A second run is
refused with one line naming the folder and the pid of the run holding it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout


class FolderInUse(SystemExit):
    """Another live process holds the lock; the message names the folder and its pid."""


@contextlib.contextmanager
def folder_lock(lock_file: Path, what: str) -> Iterator[None]:
    """Hold ``lock_file``'s lock for the block; raise :class:`FolderInUse` naming ``what``
    and the holder's pid (kept in ``<lock_file>.pid``) when another process holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    holder = lock_file.with_name(lock_file.name + ".pid")
    try:
        with FileLock(lock_file, timeout=0):
            holder.write_text(f"{os.getpid()}\n")
            yield
    except Timeout:
        pid = holder.read_text().strip() if holder.is_file() else "unknown"
        raise FolderInUse(f"{what} is in use by another run (pid {pid}); wait for it "
                          "to finish, or give this run another --work folder") from None
