"""A table's shared data, built once per data setting (a folder named by their hash). A
``data.json`` stamp, written last, marks a finished build; a build marks its folder
``building`` first, so a stopped build is built again and a folder with neither mark (not
written here) is never deleted.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Mapping

from scripts.common.atomic_files import write_text_atomic
from scripts.common.folder_lock import FolderInUse, folder_lock
from scripts.reproduce.cell_cache import settings_key

STAMP = "data.json"
BUILDING = "building"  # this program's mark on a folder it is building


def shared_data(work: Path, prefix: str, data_settings: Mapping[str, Any],
                build: Callable[[Path], Dict[str, Any]],
                say: Callable[[str], None]) -> Dict[str, Any]:
    """``build(folder)``'s description of the data and its ``folder``, built once."""
    folder = work / "data" / f"{prefix}-{settings_key(dict(data_settings))[:12]}"
    stamp = folder / STAMP
    if stamp.is_file():
        return {**json.loads(stamp.read_text()), "folder": str(folder)}
    with folder_lock(folder.with_name(folder.name + ".lock"), f"the data folder {folder}"):
        if stamp.is_file():  # finished by the run that held the lock
            return {**json.loads(stamp.read_text()), "folder": str(folder)}
        if folder.exists():
            if not (folder / BUILDING).is_file():
                raise FolderInUse(f"{folder} holds no finished build ({STAMP}) and was not "
                                  "written by scripts.reproduce; move it away or give "
                                  "another --work folder")
            shutil.rmtree(folder)  # this program's build, stopped half-way
        say(f"building {prefix} data in {folder}")
        folder.mkdir(parents=True)
        (folder / BUILDING).write_text(f"{os.getpid()}\n")
        info = {**build(folder), "folder": str(folder)}
        write_text_atomic(stamp, json.dumps(info, indent=1))
        (folder / BUILDING).unlink()
    return info
