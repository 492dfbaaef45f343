"""One lock helper for every lock of the project: an ``flock`` on a small file holding the pid.

The kernel drops an ``flock`` when the last descriptor of it closes, however its process ends,
so a killed run never leaves a stale lock. The processes a holder started (fairseq's data
workers, forked) share that descriptor, so right after a holder is killed its workers keep
the lock for a few seconds: a taker then waits for them (``workers_grace_s``) instead of
naming a dead process, and says so if they outlive the wait.
"""

from __future__ import annotations

import fcntl
import os
import time

WORKERS_GRACE_S = 15.0


class LockHeld(Exception):
    """Another process holds the lock; ``str()`` says whether it runs or only its workers do."""

    def __init__(self, path: str, holder: str, alive: bool) -> None:
        self.path, self.holder, self.alive = path, holder, alive
        super().__init__(
            f"pid {holder}, which holds {path}" if alive else
            f"its last holder, pid {holder}, has ended, but processes it started (its data "
            f"workers) still hold {path}: they are finishing, retry in a few seconds")


def _alive(pid: str) -> bool:
    if not pid.isdigit():
        return True  # unknown: assume it runs
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def take_lock(path: str, workers_grace_s: float | None = None) -> int:
    """Lock ``path`` (created if missing) for this process and write its pid there; returns
    the descriptor (``os.close`` it to release the lock). Raises :class:`LockHeld` when a
    live process holds it, or when a dead holder's workers still do after
    ``workers_grace_s`` seconds (default :data:`WORKERS_GRACE_S`)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    grace = WORKERS_GRACE_S if workers_grace_s is None else workers_grace_s
    deadline = time.monotonic() + grace
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            alive = _alive(holder)
            if alive or time.monotonic() >= deadline:
                os.close(fd)
                raise LockHeld(path, holder, alive) from None
            time.sleep(0.1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd
