"""A table's shared data, built once per data setting and reused by every cell and run.

The folder is named by a hash of the settings that shape the data, so two tables (or two
runs) with the same data settings share it and a changed setting builds a new one. A
``data.json`` stamp, written last and atomically, marks a finished build; a folder without
it was left by a stopped build and is built again from scratch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Mapping

from scripts.common.atomic_files import write_text_atomic
from scripts.reproduce.cell_cache import settings_key

STAMP = "data.json"


def shared_data(work: Path, prefix: str, data_settings: Mapping[str, Any],
                build: Callable[[Path], Dict[str, Any]],
                say: Callable[[str], None]) -> Dict[str, Any]:
    """``build(folder)``'s description of the data, built only when not already finished;
    the returned dict also holds ``folder``."""
    folder = work / "data" / f"{prefix}-{settings_key(dict(data_settings))[:12]}"
    stamp = folder / STAMP
    if stamp.is_file():
        return json.loads(stamp.read_text())
    if folder.exists():
        shutil.rmtree(folder)  # a build stopped half-way
    say(f"building {prefix} data in {folder}")
    folder.mkdir(parents=True)
    info = {**build(folder), "folder": str(folder)}
    write_text_atomic(stamp, json.dumps(info, indent=1))
    return info
