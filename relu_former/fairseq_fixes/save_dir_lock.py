"""One training per save directory at a time.

fairseq 0.12 lets two ``fairseq-train`` runs share a ``--save-dir``: both write and rename
their saves, both copy to ``checkpoint_last.pt``, and one run's checkpoint ends up holding the
other's model while its log says it saved its own. The plugin wraps fairseq-train's first act
on the directory, ``checkpoint_utils.verify_checkpoint_directory`` (called once, by the first
rank), to lock ``SAVE_DIR/fairseq-train.lock`` (``relu_former.file_lock``). A second run is
refused in one line naming the directory and the live process that holds it, or saying that
the last holder ended and its workers are finishing. A ``--save-dir`` that names a file is
refused in one line too (fairseq's ``os.makedirs`` ended in a ``FileExistsError`` traceback).
No probe: this is a check fairseq does not make.

The lock is released when fairseq's train ``main()`` returns or raises
(``save_dirs_released_after``), not only when its process ends, so that a notebook, a test or a
sweep calling ``fairseq_cli.train.main()`` again on the directory, to resume, is not refused by
its own earlier call. Like any ``flock``, it holds between processes of one machine, on local
or NFSv4 file systems; remote save directories (``s3://...``) are not locked.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Callable, Iterator

from relu_former.errors import OptionError
from relu_former.fairseq_fixes.wrap_once import wrap_once
from relu_former.file_lock import LockHeld, take_lock

LOCK_FILE = "fairseq-train.lock"

_held: dict[str, int] = {}  # save dir (real path) -> the open file descriptor holding its lock


def lock_save_dir(save_dir: str) -> None:
    """Hold the lock of ``save_dir`` until this process ends (or the enclosing
    :func:`save_dirs_released_after` block does); ``OptionError`` naming the directory and
    the holder when another process holds it. Taking it again is a no-op."""
    key = os.path.realpath(save_dir)
    if key in _held:
        return
    try:
        _held[key] = take_lock(os.path.join(save_dir, LOCK_FILE))
    except LockHeld as held:
        raise OptionError("--save-dir", f"{save_dir} is in use by another training ({held}): "
                          "wait for it to end or give another --save-dir") from None


def _locking_save_dir(original: Callable) -> Callable:
    """``verify_checkpoint_directory`` that refuses a file and locks the (local) directory."""

    @functools.wraps(original)
    def verify_checkpoint_directory(save_dir: str) -> None:
        local = "://" not in str(save_dir)
        if local and os.path.exists(save_dir) and not os.path.isdir(save_dir):
            raise OptionError("--save-dir", f"{save_dir} is a file, not a folder: give a "
                              "folder (it is created if missing)")
        original(save_dir)
        if local:
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
    """Install the lock on ``fairseq.checkpoint_utils`` (idempotent)."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "verify_checkpoint_directory", _locking_save_dir)
    release_save_dirs_after_training()
