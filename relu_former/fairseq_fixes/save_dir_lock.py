"""One training per save directory at a time.

fairseq 0.12 lets two ``fairseq-train`` runs share a ``--save-dir``: both write
``checkpoint_*.pt.tmp`` and rename it, both copy to ``checkpoint_last.pt``, and one run's
checkpoint ends up holding the other run's model while its log says it saved its own. The plugin
locks the save directory for the life of the training: fairseq-train's first act on it,
``checkpoint_utils.verify_checkpoint_directory`` (called once, by the first rank), is wrapped to
take an exclusive ``fcntl.flock`` on ``SAVE_DIR/fairseq-train.lock`` and write the process id
there. A second run on the same directory is refused with one line naming the directory and the
pid of the run that holds it. The kernel releases the lock when the process ends, however it
ends, so a crashed run never leaves a stale lock (the file stays, with an old pid, and means
nothing by itself).

The training is fairseq's train ``main()``: the lock is released when it returns or raises
(``save_dirs_released_after``), not only when its process ends, so that a notebook, a test or a
sweep that calls ``fairseq_cli.train.main()`` again in the same process (on the directory, to
resume) is not refused by its own earlier call. A ``main()`` whose own ``--user-dir`` import is
the plugin's first (its first call, from Python) holds the lock until the process ends, as
before: the plugin was not there when that call began.

Like any ``flock``, it holds between processes of one machine, on local or NFSv4 file systems;
remote save directories (``s3://...``) are not locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sys
from typing import Callable, Iterator

from relu_former.errors import OptionError
from relu_former.fairseq_fixes.wrap_once import wrap_once

LOCK_FILE = "fairseq-train.lock"

_held: dict[str, int] = {}  # save dir (real path) -> the open file descriptor holding its lock


def lock_save_dir(save_dir: str) -> None:
    """Hold the lock of ``save_dir`` until this process ends (or the enclosing
    :func:`save_dirs_released_after` block does); raise ``OptionError`` naming the
    directory and the other process when another one holds it. Taking it again is a no-op."""
    key = os.path.realpath(save_dir)
    if key in _held:
        return
    path = os.path.join(save_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise OptionError("--save-dir", f"{save_dir} is in use by another training (pid "
                                        f"{holder}, which holds {path}): wait for it to end or "
                                        "give another --save-dir") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode("ascii"))
    _held[key] = fd  # closed only by save_dirs_released_after: the lock lasts until then


def _locking_save_dir(original: Callable) -> Callable:
    """``verify_checkpoint_directory`` that also locks the (local) directory."""

    @functools.wraps(original)
    def verify_checkpoint_directory(save_dir: str) -> None:
        original(save_dir)
        if "://" not in str(save_dir):
            lock_save_dir(save_dir)

    return verify_checkpoint_directory


@contextlib.contextmanager
def save_dirs_released_after() -> Iterator[None]:
    """Release the save-directory locks taken inside the block when it ends, however it ends;
    a lock held before the block stays held."""
    before = set(_held)
    try:
        yield
    finally:
        for key in [key for key in _held if key not in before]:
            os.close(_held.pop(key))  # closing the only descriptor releases its flock


def _released_after(main: Callable) -> Callable:
    """fairseq's train ``main()`` that releases the locks it took when it ends."""

    @functools.wraps(main)
    def released_main(*args, **kwargs):
        with save_dirs_released_after():
            return main(*args, **kwargs)

    return released_main


def release_save_dirs_after_training() -> None:
    """Wrap the train ``main()`` of ``fairseq_cli.train`` in :func:`save_dirs_released_after`
    if that module is imported (idempotent; never imported here: it sets up logging)."""
    train = sys.modules.get("fairseq_cli.train")
    if train is None:
        return
    wrap_once(train, "main", _released_after)
    hydra = sys.modules.get("fairseq_cli.hydra_train")
    if hydra is not None and hydra.pre_main is train.main.__wrapped__:
        # fairseq-hydra-train imported main under this name before the plugin loaded; the
        # same wrapped function, so that distributed workers unpickle it by its name
        hydra.pre_main = train.main


def lock_save_dirs() -> None:
    """Install the lock on ``fairseq.checkpoint_utils``, released when fairseq's train
    ``main()`` ends (idempotent)."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "verify_checkpoint_directory", _locking_save_dir)
    release_save_dirs_after_training()
