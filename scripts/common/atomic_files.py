"""Writers that never leave a half-written file behind.

Every writer goes through a temporary name in the target folder and a rename, so an
interrupted run never leaves a half-written table, log summary or PNG that looks finished;
the temporary file is deleted if the writer raises.

    from scripts.common.atomic_files import atomic_path, copy_atomic, write_text_atomic
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
    """A temporary name beside ``path`` to write to; renamed to ``path`` if the block ends
    normally, deleted if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make the result private
    try:
        yield tmp
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
