"""One training per save directory: two ``fairseq-train`` sharing one wrote each other's
models. fairseq-train's first act on it, ``verify_checkpoint_directory``, takes
``SAVE_DIR/fairseq-train.lock`` (``file_lock``) until the train ``main()`` returns; a second
run is refused in one line naming the holder. No probe: a check fairseq does not make."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Callable, Iterator

from relu_former.errors import OptionError
from relu_former.fairseq_fixes import wrap_once
from relu_former.file_lock import LockHeld, take_lock

LOCK_FILE = "fairseq-train.lock"

_held: dict[str, int] = {}  # save dir (real path) -> the open file descriptor holding its lock


def lock_save_dir(save_dir: str) -> None:
    """Lock ``save_dir`` until the process or :func:`save_dirs_released_after` block ends."""
    key = os.path.realpath(save_dir)
    if key in _held:
        return
    try:
        _held[key] = take_lock(os.path.join(save_dir, LOCK_FILE))
    except LockHeld as held:
        raise OptionError("--save-dir", f"{save_dir} is in use by another training ({held}): "
                          "wait for it to end or give another --save-dir") from None


def locking_save_dir(original: Callable) -> Callable:
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
    """Release the locks taken inside the block when it ends; earlier ones stay held."""
    before = set(_held)
    try:
        yield
    finally:
        for key in [key for key in _held if key not in before]:
            os.close(_held.pop(key))  # closing the only descriptor releases its flock


def _released_after(main: Callable) -> Callable:
    return save_dirs_released_after()(main)  # a fresh block per call (ContextDecorator)


def release_save_dirs_after_training() -> None:
    """Wrap ``fairseq_cli.train.main`` in :func:`save_dirs_released_after`, if imported."""
    train = sys.modules.get("fairseq_cli.train")
    if train is None:
        return
    wrap_once(train, "main", _released_after)
    hydra = sys.modules.get("fairseq_cli.hydra_train")
    if hydra is not None and hydra.pre_main is train.main.__wrapped__:
        # fairseq-hydra-train's name for main: distributed workers unpickle it by name
        hydra.pre_main = train.main
