"""The cells at a row's chosen rate may train longer than the rate grid (``plateau_max_epoch``)
without changing the grid cells' keys, and seed 1's continues its grid cell's checkpoints
through the real fairseq-train (a plateau grid cell is reused without training: see
``test_reproduce_protocol_end_to_end.py``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from scripts.common.fairseq_log import json_log_records
from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce import continuation, patient_train
from scripts.reproduce.__main__ import main
from scripts.reproduce.budget import with_budget
from scripts.reproduce.cell_plan import at_rate, make_cell
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.tables import TABLES

from catalog_fixtures import write_fixture_catalogs

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


def finished_cell(folder: Path, stopped: str) -> dict:
    folder.mkdir(parents=True)
    for name in (*continuation.CHECKPOINTS, "train.log", "train.log.cpu"):
        (folder / name).write_text(name)
    return {"stopped": stopped, "curve": [[2, 5.0], [4, 4.0]], "seconds": 9.0,
            "figures": {"valid_nll": 4.0, "first_nll": 6.0, "train_seconds": 1.0,
                        "train_cpu_seconds": 3.0}}


def test_only_a_finished_cell_with_its_checkpoints_is_continued(tmp_path):
    result = finished_cell(tmp_path / "old", "cap")
    assert continuation.can_continue(tmp_path / "old", result)
    assert not continuation.can_continue(tmp_path / "old", None)
    assert not continuation.can_continue(tmp_path / "old", {**result, "stopped": None})
    assert not continuation.can_continue(tmp_path / "old", {**result, "figures": {
        "diverged": 1.0}})
    (tmp_path / "old" / "checkpoint_last.pt").unlink()  # a fresh clone: records only
    assert not continuation.can_continue(tmp_path / "old", result)
    plateau = finished_cell(tmp_path / "done", "plateau")
    (tmp_path / "done" / "train.log").unlink()  # reused only with the log that says done
    assert not continuation.can_continue(tmp_path / "done", plateau)


@pytest.mark.parametrize("stopped", ["cap", "plateau"])
def test_a_seeded_folder_copies_and_never_changes_the_old_one(tmp_path, stopped):
    result = finished_cell(tmp_path / "old", stopped)
    before = files(tmp_path / "old")
    continuation.seed(tmp_path / "old", "k" * 64, result, tmp_path / "new")
    assert files(tmp_path / "old") == before
    copied = {*continuation.CHECKPOINTS, *(["train.log", "train.log.cpu"]
                                           if stopped == "plateau" else [])}
    assert set(files(tmp_path / "new")) == copied | {continuation.MARKER}
    assert continuation.earlier_of(tmp_path / "new")["folder"] == "old"
    assert continuation.earlier_of(tmp_path / "old") is None


def test_a_continued_curve_follows_the_old_one_without_duplicates(tmp_path):
    old = finished_cell(tmp_path / "old", "cap")
    earlier = {"folder": "old", "key": "k", "result": old}
    new = {"stopped": "plateau", "curve": [[4, 4.0], [6, 3.5], [8, 3.6]], "updates": 8,
           "figures": {"valid_nll": 3.5, "first_nll": 4.1, "train_seconds": 2.0}}
    merged = continuation.merged(earlier, new, patience=2)
    assert merged["curve"] == [[2, 5.0], [4, 4.0], [6, 3.5], [8, 3.6]]
    assert merged["continued_from"] == "old" and not merged["still_improving"]
    assert merged["figures"] == {"valid_nll": 3.5, "first_nll": 6.0, "train_seconds": 3.0}
    assert continuation.train_cpu(earlier) == 3.0
    # worse than before: the best is still the old cell's, which checkpoint_best.pt keeps
    # (and, judged over the whole curve, not still improving after a window of 1)
    worse = continuation.merged(earlier, {**new, "curve": [[6, 4.5]], "stopped": "cap"}, 1)
    assert worse["figures"]["valid_nll"] == 4.0 and not worse["still_improving"]


def files(folder: Path) -> dict:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.iterdir()) if path.is_file()}


@pytest.mark.slow
def test_a_capped_grid_cell_is_continued_from_its_checkpoints(tmp_path):
    locale = write_fixture_catalogs(tmp_path / "locale", "fr")
    tiny = TABLES[TABLE].settings("tiny")
    # 2e-2 is stopped by the grid's cap on the fixture catalogs (toy_settings.py)
    command = [TABLE, "--scale", "tiny", "--seeds", "1", "--rows", "transformer", "--set",
               f"locale_dir={locale}", "--set", "lr_grid=[0.02]", "--set",
               "lr_limits=[0.02,0.02]", "--work", str(tmp_path / "work"),
               "--out", str(tmp_path / "reproduction.md")]
    assert main([*command, "--max-new-cells", "1"]) == 1  # the grid cell only
    records = tmp_path / "reproduction" / "cells" / "tiny" / TABLE
    grid = json.loads((records / "transformer-seed1-lr0.02.json").read_text())
    assert grid["search"] and grid["stopped"] == "cap"
    (grid_folder,) = (tmp_path / "work" / "cells" / "tiny" / TABLE).iterdir()
    before = files(grid_folder)

    assert main(command) == 0
    assert files(grid_folder) == before  # read, never changed
    chosen = json.loads((records / f"transformer-seed1-lr0.02-max_epoch"
                                    f"{tiny['plateau_max_epoch']}.json").read_text())
    assert chosen["continued_from"] == grid_folder.name and not chosen["search"]
    folder = grid_folder.parent / f"transformer-seed1-{chosen['key'][:12]}"
    log = (folder / "train.log").read_text()
    assert "Loaded checkpoint" in log
    # its patience goes on from the grid cell's curve (patient_train), not from zero
    best, since = patient_train.patience_from_curve(grid["curve"], grid["updates"])
    assert (f"resumed at update {grid['updates']}: --patience goes on from the best nll_loss "
            f"{best}, {since} validation(s) since it") in log
    assert "is not the checkpoint's" not in log  # the grid cell's curve was read
    # fairseq resumed the grid cell's training: its updates go on from the grid's last
    lines = log.splitlines()
    new = [int(float(r["train_num_updates"])) for r in json_log_records(lines, "train")]
    new += [int(float(r["valid_num_updates"])) for r in json_log_records(lines, "valid")]
    assert new and min(new) > grid["updates"]
    assert chosen["updates"] == max(new) > grid["updates"]
    # one curve: the grid cell's, then the new validations, once each
    curve = chosen["curve"]
    assert curve[:len(grid["curve"])] == grid["curve"] and len(curve) > len(grid["curve"])
    updates = [update for update, _ in curve]
    assert updates == sorted(set(updates))
    assert chosen["figures"]["valid_nll"] == min(nll for _, nll in curve)
    assert chosen["figures"]["first_nll"] == grid["figures"]["first_nll"]
    assert chosen["stopped"] in ("cap", "plateau") and chosen["figures"]["bleu"] >= 0
    assert chosen["cpu_seconds"] > grid["cpu_seconds"]  # both trainings' CPU time
    assert "checkpoint_best.pt" in (folder / "generate-test-beam2.txt").read_text()
