"""Writes that never leave a half-written file: a temporary name beside the target, a rename.

At every moment the target is either its old content or the complete new one; the temporary
file (``.NAME.XXXX.tmp``) is deleted if the writer raises. The plugin's checkpoint copies and
the scripts' tables, logs and figures all write through here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[str]:
    """A temporary name beside ``path`` to write to (ending in ``suffix``: a writer may read
    the format from it); synced and renamed to ``path`` if the block ends normally, deleted if
    it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make the result private
    try:
        yield tmp
        with open(tmp, "rb") as handle:  # on disk before the rename makes it visible
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    return Path(path)


def copy_atomic(source: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Copy ``source`` to ``path`` through a temporary file and a rename."""
    with atomic_path(path) as tmp:
        shutil.copyfile(source, tmp)
    return Path(path)
