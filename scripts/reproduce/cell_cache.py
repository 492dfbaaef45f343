"""Where finished cells are kept, keyed by the SHA-256 of the canonical JSON of every setting
of the cell (its parent's key included), so a changed setting gives only its cells new keys: the
work folder's cache (:class:`CellCache`), written atomically the moment a cell finishes, and
the repository's records (:class:`CellRecords`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from scripts.common.atomic_files import write_text_atomic

RESULT = "result.json"


def settings_key(settings: Mapping[str, Any]) -> str:
    """Hex SHA-256 of ``settings`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_result(path: Path, key: str) -> dict | None:
    """The result stored at ``path`` if it is of the cell ``key``, else None."""
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    return stored if stored.get("key") == key else None


def write_result(path: Path, result: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")


class CellCache:
    """Finished cells under ``root/<table>/<row>-seed<S>-<key[:12]>/result.json``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def folder(self, table: str, row: str, seed: int, key: str) -> Path:
        return self.root / table / f"{row}-seed{seed}-{key[:12]}"

    def get(self, folder: Path, key: str) -> dict | None:
        """The stored result of the cell in ``folder``, or None if it has not finished (or
        the folder holds another key's result)."""
        return read_result(folder / RESULT, key)

    def put(self, folder: Path, key: str, result: Mapping[str, Any]) -> dict:
        """Store ``result`` (plus the key) atomically; returns what was stored."""
        stored = {**result, "key": key}
        write_result(folder / RESULT, stored)
        return stored


class CellRecords:
    """Finished cells kept in the repository, so that a table is completed across sessions and
    machines: one small JSON per cell (its figures, validation curve, learning rate, why it
    stopped, the commit it ran at, the device its fairseq commands ran on and its key),
    ``ROOT/<table>/<row>-seed<S>[-lr<rate>].json`` beside the report
    (``docs/reproduction/cells/<scale>/`` by default). Checkpoints stay in the work folder and
    are not kept. A run on a fresh clone takes a cell whose record has the same key from here
    instead of training it again; a record of another key (changed settings) is ignored and
    replaced when the cell finishes. A recorded cell whose checkpoints another cell needs is
    trained again, and its new record replaces the old. A record is named by its table, row,
    seed, (if chosen) rate and (for a cell at its row's chosen rate with a larger cap than the
    grid's) epoch cap, or (for a cell at its table's budget, :mod:`~scripts.reproduce.budget`)
    update budget."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, table: str, row: str, seed: int, lr: float | None,
             max_epoch: int | None = None, budget: int | None = None) -> Path:
        rate = "" if lr is None else f"-lr{lr:g}"
        cap = "" if max_epoch is None else f"-max_epoch{max_epoch}"
        updates = "" if budget is None else f"-budget{budget}"
        return self.root / table / f"{row}-seed{seed}{rate}{cap}{updates}.json"

    get = staticmethod(read_result)  # the record at ``path`` if it is of the cell ``key``
    put = staticmethod(write_result)
