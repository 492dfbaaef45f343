"""Cells are keyed by a hash of their full settings and stored atomically."""

from __future__ import annotations

import json

from scripts.reproduce.cell_cache import RESULT, CellCache, settings_key


def test_key_ignores_order_and_changes_with_any_setting():
    a = settings_key({"lr": 1e-3, "flags": ["--x", "1"], "seed": 1})
    assert a == settings_key({"seed": 1, "flags": ["--x", "1"], "lr": 1e-3})
    assert a != settings_key({"seed": 2, "flags": ["--x", "1"], "lr": 1e-3})
    assert a != settings_key({"seed": 1, "flags": ["--x", "2"], "lr": 1e-3})
    assert len(a) == 64


def test_put_then_get_and_another_key_misses(tmp_path):
    cache = CellCache(tmp_path)
    key = settings_key({"a": 1})
    folder = cache.folder("t", "row", 2, key)
    assert folder.name == f"row-seed2-{key[:12]}"
    assert cache.get(folder, key) is None
    stored = cache.put(folder, key, {"figures": {"bleu": 3.5}})
    assert stored["key"] == key
    assert cache.get(folder, key)["figures"] == {"bleu": 3.5}
    assert cache.get(folder, settings_key({"a": 2})) is None
    # nothing but the result itself: no temporary file left behind
    assert sorted(p.name for p in folder.iterdir()) == [RESULT]
    assert json.loads((folder / RESULT).read_text())["key"] == key

