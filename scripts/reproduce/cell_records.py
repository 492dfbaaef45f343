"""Finished cells kept in the repository, so that a table is completed across sessions and
machines: one small JSON per cell (its figures, validation curve, learning rate, why it
stopped, the commit it ran at, the device its fairseq commands ran on and its key),
``ROOT/<table>/<row>-seed<S>[-lr<rate>].json`` beside the report
(``docs/reproduction/cells/<scale>/`` by default). Checkpoints stay in the work folder and
are not kept. A run on a fresh clone takes a cell whose record has the same key from here
instead of training it again; a record of another key (changed settings) is ignored and
replaced when the cell finishes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from scripts.common.atomic_files import write_text_atomic


class CellRecords:
    """The records under ``root``, one file per table, row, seed, (if chosen) rate and (for
    a cell at its row's chosen rate with a larger cap than the grid's) epoch cap."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, table: str, row: str, seed: int, lr: float | None,
             max_epoch: int | None = None) -> Path:
        rate = "" if lr is None else f"-lr{lr:g}"
        cap = "" if max_epoch is None else f"-max_epoch{max_epoch}"
        return self.root / table / f"{row}-seed{seed}{rate}{cap}.json"

    def get(self, path: Path, key: str) -> dict | None:
        """The record at ``path`` if it is of the cell ``key``."""
        if not path.is_file():
            return None
        stored = json.loads(path.read_text())
        return stored if stored.get("key") == key else None

    def put(self, path: Path, result: Mapping[str, Any]) -> None:
        write_text_atomic(path, json.dumps(result, indent=1, sort_keys=True, default=str)
                          + "\n")
