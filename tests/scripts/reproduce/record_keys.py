"""What a committed record's key hashes, less the data, as a fingerprint to watch for changes.

A cell's key (``cell_plan.make_cell``) hashes its kind's ``cell_settings`` (the table's toy
settings at its rate, its row's flags, its seed, ...), the description of the data built for
it and its parent's key. Only a build of the data gives the description, so a fingerprint
hashes the rest, its parent's fingerprint in place of its key: a settings change that gives
a recorded cell a new key changes its fingerprint. ``FINGERPRINTS`` holds each record's key
and fingerprint, and per table the ``Re-keyed:`` notes its spec had when they were taken.

    python -m tests.scripts.reproduce.record_keys    # accept the current ones
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping

from scripts.reproduce.budget import BUDGET, with_budget
from scripts.reproduce.cell_cache import settings_key
from scripts.reproduce.cell_plan import at_rate, parent_of
from scripts.reproduce.kinds import kind_module
from scripts.reproduce.spec import TableSpec, split_parent
from scripts.reproduce.tables import TABLES

REPO_ROOT = Path(__file__).resolve().parents[3]
RECORDS = REPO_ROOT / "docs" / "reproduction" / "cells" / "toy"
FINGERPRINTS = Path(__file__).with_name("record_fingerprints.json")
NOTE = "Re-keyed:"  # how a table's spec (its ``notes``) says it meant to change its keys


def fingerprint(spec: TableSpec, row_key: str, seed: int, lr: float | None, search: bool,
                tables: Mapping[str, TableSpec] = TABLES, budget: int | None = None) -> str:
    """The fingerprint of one cell of ``spec`` (see the module's notes); ``tables``: where a
    parent of another table is looked up; ``budget``: the updates a cell trained to its
    table's budget had (another table's rows start from the models as recorded, without it)."""
    row = spec.row(row_key)
    # the model its record holds, as the runner reads it (budget.py)
    spec = with_budget(spec, budget)
    settings = spec.settings("toy")
    described = kind_module(spec.kind).cell_settings(spec, row, seed, "toy",
                                                     at_rate(settings, lr, search), {})
    start = row.same_as or parent_of(row, settings)
    parent = None
    if start:
        table, key = split_parent(start)
        parent = fingerprint(tables[table] if table else spec, key, seed, lr, False, tables, None)
    described["same_as" if row.same_as else "parent"] = parent
    return settings_key(described)


def record_fingerprints(tables: Mapping[str, TableSpec] = TABLES) -> Dict[str, Dict[str, str]]:
    """Each committed toy record's key and fingerprint, by its path under ``RECORDS``."""
    found = {}
    for path in sorted(RECORDS.glob("*/*.json")):
        record = json.loads(path.read_text())
        now = fingerprint(tables[path.parent.name], record["row"], record["seed"],
                          record.get("lr"), bool(record.get("search")), tables,
                          budget=record.get(BUDGET))
        found[f"{path.parent.name}/{path.name}"] = {"key": record["key"], "fingerprint": now}
    return found


def notes(tables: Mapping[str, TableSpec] = TABLES) -> Dict[str, int]:
    """How many ``Re-keyed:`` notes each table's spec holds."""
    return {name: spec.notes.count(NOTE) for name, spec in tables.items()}


def accept() -> Dict[str, Any]:
    """Write the current fingerprints and notes to ``FINGERPRINTS``."""
    found = {"records": record_fingerprints(), "notes": notes()}
    FINGERPRINTS.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    return found


if __name__ == "__main__":
    accept()
