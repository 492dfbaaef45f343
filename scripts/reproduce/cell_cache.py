"""The on-disk cache of finished cells, keyed by the SHA-256 of the canonical JSON of every
setting of the cell (its parent's key included), so a changed setting gives only its cells new
keys; a result is written atomically the moment its cell finishes.
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
