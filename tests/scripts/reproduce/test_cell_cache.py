"""Cells are keyed by a hash of their full settings and stored atomically; a training again
reproduces a record with the same curve, updates and stop."""

from __future__ import annotations

import json

from scripts.reproduce.cell_cache import RESULT, CellCache, settings_key
from scripts.reproduce.cell_records import differs


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


def test_a_training_again_reproduces_a_record_only_with_its_curve_updates_and_stop():
    record = {"curve": [[100, 5.25], [200, 4.5]], "updates": 200, "stopped": "plateau",
              "finished_at": 1.0, "seconds": 60.0}
    # tuples as a training's result holds them; the time and clock figures are not the model
    again = {"curve": [(100, 5.25), (200, 4.5)], "updates": 200, "stopped": "plateau",
             "finished_at": 9.0, "seconds": 75.0}
    assert differs(record, again) is None
    assert differs(record, {**again, "curve": [(100, 5.25), (200, 4.501)]}) == (
        "valid nll 4.501 at update 200, recorded 4.5 at update 200")
    assert differs(record, {**again, "curve": [(100, 5.25), (210, 4.5)]}) == (
        "valid nll 4.5 at update 210, recorded 4.5 at update 200")
    assert differs(record, {**again, "curve": [(100, 5.25)], "updates": 100}) == (
        "curve [(100, 5.25)], recorded [[100, 5.25], [200, 4.5]]")
    assert differs(record, {**again, "stopped": "cap"}) == "stopped cap, recorded plateau"
