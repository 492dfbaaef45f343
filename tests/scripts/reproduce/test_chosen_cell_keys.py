"""The cells at a row's chosen rate may train longer than the rate grid (``plateau_max_epoch``)
without changing the grid cells' keys."""

from __future__ import annotations

import json

from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce.budget import with_budget
from scripts.reproduce.cell_plan import at_rate, make_cell
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.tables import TABLES

TABLE = "relu_former_table4"
COMMITTED = REPO_ROOT / "docs" / "reproduction" / "cells" / "toy" / TABLE
# the toy data the committed cells trained on (the description is part of their keys)
TOY_DATA = ("gettext catalogs /usr/share/locale/fr -> en, word level, sentences: train 55117, "
            "valid 1033, test 2123")


def test_the_grid_cells_keep_the_keys_of_their_committed_records(tmp_path):
    spec = TABLES[TABLE]
    settings = spec.settings("toy")
    options = RunOptions(work=tmp_path)
    grid = [json.loads(path.read_text()) for path in sorted(COMMITTED.glob("*.json"))]
    grid = [record for record in grid if record["search"]]
    assert {record["lr"] for record in grid} >= {0.005}
    for record in grid:
        row = spec.row(record["row"])
        cell = make_cell(spec, options, {"description": TOY_DATA}, row, 1, record["lr"], None,
                         search=True)
        assert cell.key == record["key"]
        assert cell.folder.name == f"{row.key}-seed1-{record['key'][:12]}"
        # the chosen rate's cell is another cell: a larger cap, its own key
        chosen = make_cell(spec, options, {"description": TOY_DATA}, row, 1, record["lr"],
                           None)
        assert chosen.key != record["key"]
    assert at_rate(settings, 0.005, search=True)["max_epoch"] == settings["max_epoch"] == 20
    # at the table's budget the chosen cells train exactly U updates (budget.py); the plateau
    # runs its records hold, under the larger cap
    assert at_rate(settings, 0.005)["max_update"] == settings["budget_updates"]
    plateau = with_budget(spec).settings("toy")
    assert at_rate(plateau, 0.005)["max_epoch"] == plateau["plateau_max_epoch"] == 60

