"""Keys that say when they change: a settings change (``scripts/reproduce/tables/toy_settings.py``,
a row's flags, a table's toy settings) that would give committed records new keys, orphaning
them, fails here unless the table's spec says it meant to (a ``Re-keyed:`` note)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys

import scripts.reproduce.tables
from scripts.reproduce.tables import TABLES, toy_settings
from tests.scripts.reproduce.record_keys import FINGERPRINTS, NOTE, notes, record_fingerprints


def orphaned(tables=TABLES) -> dict[str, list[str]]:
    """Per table whose spec does not say it meant to: its records, as accepted (the same key: a
    record the runner replaced has another), whose fingerprint changed."""
    accepted = json.loads(FINGERPRINTS.read_text())
    found: dict[str, list[str]] = {}
    for path, now in record_fingerprints(tables).items():
        then = accepted["records"].get(path)
        if then is not None and then["key"] == now["key"] and \
                then["fingerprint"] != now["fingerprint"]:
            found.setdefault(path.split("/")[0], []).append(path)
    noted = notes(tables)
    return {table: paths for table, paths in found.items()
            if noted.get(table, 0) <= accepted["notes"].get(table, 0)}


def test_no_committed_record_is_orphaned_without_a_note():
    found = orphaned()
    assert not found, (
        "these settings changes give committed records new keys (the records would be "
        f"trained again): {found}. If that is meant, add a '{NOTE} <what changed, why>' "
        "sentence to the table spec's notes, then accept the new fingerprints: python -m "
        "tests.scripts.reproduce.record_keys")


def tables_as_imported() -> dict:
    """The table specs as a fresh import builds them from ``toy_settings`` as it is now."""
    for name in [name for name in sys.modules if name.startswith("scripts.reproduce.tables.")
                 and name != toy_settings.__name__]:
        importlib.reload(sys.modules[name])
    return dict(importlib.reload(scripts.reproduce.tables).TABLES)


def test_a_toy_settings_change_is_caught_and_a_note_lets_it_through():
    width = toy_settings.TRANSLATION_TOY["dim"]
    toy_settings.TRANSLATION_TOY["dim"] = 96  # as an edit of toy_settings.py
    try:
        tables = tables_as_imported()
    finally:
        toy_settings.TRANSLATION_TOY["dim"] = width
        tables_as_imported()
    found = orphaned(tables)
    assert "relu_former_table4" in found and "relu_former_table6" in found, found
    name = "relu_former_table4"
    tables[name] = dataclasses.replace(tables[name], notes=f"{tables[name].notes} {NOTE} "
                                       "width 96, to compare with the paper's ratio.")
    assert name not in orphaned(tables) and "relu_former_table6" in orphaned(tables)
