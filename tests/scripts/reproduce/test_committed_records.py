"""Every record committed beside the report still loads where the runner looks for it, under
the key its cell has today: the tables' finished cells stay finished."""

from __future__ import annotations

import json

from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce.budget import BUDGET, budget_of, with_budget
from scripts.reproduce.cell_cache import CellRecords
from scripts.reproduce.cell_plan import at_rate, make_cell, parent_of
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.tables import TABLES

RECORDS = REPO_ROOT / "docs" / "reproduction" / "cells"
# the toy data Table 4's committed cells trained on (the description is part of their keys)
TOY_DATA = ("gettext catalogs /usr/share/locale/fr -> en, word level, sentences: train 55117, "
            "valid 1033, test 2123")


def test_every_committed_record_loads_where_the_runner_looks_for_it():
    paths = sorted(RECORDS.rglob("*.json"))
    assert len(paths) >= 100
    for path in paths:
        scale, table = path.parent.parent.name, path.parent.name
        record = json.loads(path.read_text())
        # a record trained before its table had a budget is read as the model it holds, as
        # the rows of other tables that start from it read it; one of another budget as that
        spec = with_budget(TABLES[table], record.get(BUDGET))
        settings = spec.settings(scale)
        budget = budget_of(settings)
        row = spec.row(record["row"])
        # the name the runner gives the record of this row, seed, rate and cap
        # a rate where the row chooses one, or trains at the rate of the row it starts from
        lr = record.get("lr") if "lr_grid" in settings or parent_of(row, settings) else None
        cap = at_rate(settings, lr, record["search"]).get("max_epoch")
        longer = cap if cap != settings.get("max_epoch") and budget is None else None
        expected = CellRecords(RECORDS / scale).path(table, row.key, record["seed"], lr, longer,
                                                     budget)
        assert expected == path, path
        assert CellRecords(RECORDS / scale).get(path, record["key"]) == record
        assert isinstance(record["figures"], dict) and len(record["key"]) == 64


def test_table_4s_committed_cells_keep_their_keys(tmp_path):
    """Table 4 trains from scratch on data whose description is known: each of its records,
    grid cell or seed at the chosen rate, is the cell the runner plans today."""
    paths = sorted((RECORDS / "toy" / "relu_former_table4").glob("*.json"))
    assert len(paths) >= 15
    for path in paths:
        record = json.loads(path.read_text())
        spec = TABLES["relu_former_table4"]
        spec = with_budget(spec, record.get(BUDGET))
        cell = make_cell(spec, RunOptions(work=tmp_path), {"description": TOY_DATA},
                         spec.row(record["row"]), record["seed"], record["lr"], None,
                         search=record["search"])
        assert cell.key == record["key"], path
