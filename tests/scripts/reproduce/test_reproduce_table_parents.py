"""Rows that start from another table's rows, through the real fairseq command line on
fixture catalogs: ReLUFormer Table 6's document rows start from Table 4's own sentence
cells (used as they are when Table 4 has them, trained into Table 4's folders and records
when only their records are left), only with the same dictionary."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import pytest

from scripts.common.fairseq_train import final_learning_rate
from scripts.reproduce.__main__ import main, with_settings
from scripts.reproduce.cell_plan import foreign_parents, make_cell, selected_rows
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.runner import run_table
from scripts.reproduce.spec import split_parent
from scripts.reproduce.tables import TABLES
from tests.scripts.reproduce.settings_args import GRID, copy_table4_run, sets

T4, T6 = "relu_former_table4", "relu_former_table6"


def test_rows_name_the_other_tables_rows_they_start_from():
    spec = TABLES[T6]
    toy, paper = spec.settings("toy"), spec.settings("paper")
    assert split_parent(f"{T4}:transformer") == (T4, "transformer")
    assert split_parent("sentences") == (None, "sentences")
    rows = selected_rows(spec, ["relu_former_128"], toy)
    assert [row.key for row in rows] == ["relu_former_128"]  # another table's rows: none
    assert foreign_parents(rows, toy) == {T4: ["relu_former"]}
    every = selected_rows(spec, None, toy)
    assert not any(row.hidden for row in spec.rows)
    assert foreign_parents(every, toy) == {T4: ["transformer", "relu_former", "sparsemax"]}
    assert foreign_parents(every, paper) == {}  # the paper trains every row from scratch
    for row in spec.rows:  # the same attention (and criterion) as the row it starts from
        assert row.flags == TABLES[T4].row(split_parent(row.parent)[1]).flags
    # the document stage trains to a plateau, with no update cap and no fixed length
    assert toy["patience"] == 4 and toy["max_update"] is None
    # and at most the epochs the sentence rows train at their chosen rate
    assert toy["max_epoch"] == TABLES[T4].settings("toy")["plateau_max_epoch"]
    assert "finetune_update" not in toy and "finetune_update" not in spec.settings("tiny")


def test_a_parent_of_another_dictionary_is_refused(tmp_path, table4_data, table6_data):
    locale = (table4_data / "locale").resolve()  # Table 6's data on it, built once
    work = tmp_path / "work"
    shutil.copytree(table6_data / "work" / "data", work / "data")
    with pytest.raises(SystemExit) as refused:  # Table 4's data at a smaller vocabulary
        main([T6, "--scale", "tiny", "--seeds", "1", "--rows", "relu_former_128", "--dry-run",
              *sets({"locale_dir": str(locale)}),
              *sets({"locale_dir": str(locale), "vocab": 30}, T4), "--work", str(work)])
    message = str(refused.value)
    dictionaries = sorted(str(path) for path in work.glob("data/*/bin/dictionary/dict.xx.txt"))
    assert len(dictionaries) == 2 and "\n" not in message
    assert all(path in message for path in dictionaries)
    assert not (work / "cells").exists()  # refused before any cell


@pytest.mark.slow
def test_document_rows_start_from_table4s_cells(tmp_path, capsys, table4_relu_former,
                                               table6_data):
    # Table 4's relu_former row run first, at its one-rate grid, and Table 6's data
    # (conftest.py: each made once)
    locale = copy_table4_run(table4_relu_former, tmp_path)
    work, out = tmp_path / "work", tmp_path / "reproduction.md"
    shutil.copytree(table6_data / "work" / "data", work / "data", dirs_exist_ok=True)
    common = ["--scale", "tiny", "--seeds", "1", "--work", str(work), "--out", str(out)]
    data = {"locale_dir": str(locale)}
    table6 = [T6, "--rows", "relu_former_128", *sets(data), *sets({**data, **GRID}, T4),
              *common]
    records = tmp_path / "reproduction" / "cells" / "tiny"
    (chosen_record,) = [path for path in (records / T4).glob("*.json")
                        if not json.loads(path.read_text())["search"]]
    chosen = json.loads(chosen_record.read_text())
    cells4 = work / "cells" / "tiny" / T4
    parent = cells4 / f"relu_former-seed1-{chosen['key'][:12]}"

    # (a) a fresh clone: Table 4's records, none of its folders; the starting point must run
    # again. One training of the document row serves (a) and (b): it runs after (a) has
    # trained its starting point again, from that cell, which (b) then finds as it is.
    shutil.rmtree(cells4)
    capsys.readouterr()
    assert main([*table6, "--dry-run"]) == 0  # says so, and that the child's line waits on it
    said = capsys.readouterr().out
    assert "(recorded; not finished in this work folder: trained again first" in said
    assert "its parent has not trained yet" in said
    # the starting point is trained again first, counted with the table's new cells, and
    # its new record replaces the old
    assert main([*table6, "--max-new-cells", "1"]) == 1
    assert sorted(path.name for path in cells4.iterdir()) == [parent.name]  # Table 4's folder
    assert (parent / "checkpoint_best.pt").is_file()
    assert not list((work / "cells" / "tiny").glob(f"{T6}/*"))  # no document cell yet
    kept = json.loads(chosen_record.read_text())
    assert kept["key"] == chosen["key"] and not kept["search"]  # Table 4's record, its key
    assert kept["finished_at"] > chosen["finished_at"]
    assert sorted(path.name for path in (records / T4).glob("*.json")) == sorted(
        [chosen_record.name, f"relu_former-seed1-lr{GRID['lr_grid'][0]:g}.json"])

    # (b) Table 4's cell is the starting point as it is: a dry run says so, a run reuses it
    before = sorted(path.name for path in cells4.iterdir())
    stamp = (parent / "train.log").stat().st_mtime_ns
    capsys.readouterr()
    assert main([*table6, "--dry-run"]) == 0
    assert (f"# {T4}:relu_former, seed 1 -> {parent}  (lr {GRID['lr_grid'][0]:g}): cached\n"
            in capsys.readouterr().out)
    assert main(table6) == 0
    assert sorted(path.name for path in cells4.iterdir()) == before
    assert (parent / "train.log").stat().st_mtime_ns == stamp  # not trained again
    (child,) = (work / "cells" / "tiny" / T6).iterdir()
    log = (child / "train.log").read_text()
    # from the model Table 4 decodes (its best), at the rate its schedule had reached there
    assert f"'finetune_from_model': '{parent}/checkpoint_best.pt'" in log
    best = min(kept["curve"], key=lambda point: point[1])[0]
    rate = final_learning_rate(0.04, TABLES[T4].settings("tiny")["warmup"], best)
    assert re.search(rf"'lr_scheduler': {{'_name': 'fixed'.*'lr': \[{rate:.6g}\]", log)
    assert "'max_update': 0," in log and "'patience': 2," in log  # to a plateau, no cap
    text = out.read_text().split(f"reproduce:{T6} start")[-1]
    assert "1 of 1 cells finished" in text and "| ReLUFormer (ReLU attention" in text
    assert "| ReLUFormer | " not in text  # Table 4's row is not a row of Table 6
    # the child's key holds Table 4's cell's key
    tables = {T4: with_settings(TABLES[T4], "tiny", {**data, **GRID})}
    options = RunOptions(scale="tiny", seeds=1, work=work, rows=["relu_former_128"],
                         collect_only=True, records=records, tables=tables, say=print)
    spec6 = with_settings(TABLES[T6], "tiny", data)
    (cell,), data6 = run_table(spec6, options)
    (child_record,) = (records / T6).glob("*.json")
    assert cell.key == json.loads(child_record.read_text())["key"]
    assert cell.parent.key == chosen["key"] and cell.parent.folder == parent
    other = make_cell(spec6, options, data6, cell.row, 1, cell.lr,
                      replace(cell.parent, key="0" * 64))
    assert other.key != cell.key
