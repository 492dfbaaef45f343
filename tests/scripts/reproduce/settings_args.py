"""Command-line settings for the tests that run two tables in one call (a row starting from,
or being, another table's row), and copies of Table 4's tiny data and of a tiny Table 4 run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List

T4 = "relu_former_table4"
# one rate in a grid: a tiny model trains in seconds
GRID = {"lr_grid": [0.04], "lr_limits": [0.04, 0.04]}


def sets(values: Dict[str, Any], table: str = "") -> List[str]:
    """``--set KEY=VALUE`` for each of ``values`` (``--set TABLE:KEY=VALUE`` for ``table``)."""
    prefix = f"{table}:" if table else ""
    return [arg for key, value in values.items()
            for arg in ("--set", f"{prefix}{key}={json.dumps(value)}")]


def copy_table4_data(data: Path, tmp_path: Path) -> Path:
    """Copy the data of the ``table4_data`` fixture (``conftest.py``) into
    ``tmp_path/work/data`` and return its catalogs' folder: the data's key names it, so a run
    that gives it as ``locale_dir`` reads the copy instead of building the data again."""
    shutil.copytree(data / "work" / "data", tmp_path / "work" / "data")
    return (data / "locale").resolve()


def data_folder(data: Path) -> Path:
    """The one data folder of the ``table4_data``, ``table6_data`` or ``table7_data``
    fixture, as the kind's ``build_data`` fills it (read only)."""
    (folder,) = (path for path in (data / "work" / "data").iterdir() if path.is_dir())
    return folder


def copy_table4_run(run: Path, tmp_path: Path) -> Path:
    """Copy the run of a Table 4 fixture (``conftest.py``) into ``tmp_path`` (``work``, the
    report and its records, as ``main([T4, "--rows", ROW, *sets({"locale_dir": locale,
    ...}), "--scale", "tiny", "--seeds", "1", "--work", tmp_path / "work", "--out",
    tmp_path / "reproduction.md"])`` leaves them) and return its catalogs' folder: the data
    and cells' keys name it, so every later run gives it as ``locale_dir``."""
    for name in ("work", "reproduction"):
        shutil.copytree(run / name, tmp_path / name)
    shutil.copy2(run / "reproduction.md", tmp_path)
    return (run / "locale").resolve()
