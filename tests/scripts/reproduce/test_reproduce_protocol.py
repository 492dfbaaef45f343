"""The training protocol of the reproduction tables: a validation curve and a stop reason read
from fairseq-train's log, a stopped training resumed from its own checkpoint, each row's
learning rate chosen on seed 1 from a grid, a time budget, finished cells kept as records
beside the report, and one run of a table at a time in a work folder."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from scripts.common.folder_lock import FolderInUse
from scripts.reproduce import cell_plan, runner
from scripts.reproduce.cell_cache import settings_key
from scripts.reproduce.cell_steps import BudgetSpent, run_step
from scripts.reproduce.data_folder import BUILDING, STAMP, shared_data
from scripts.reproduce.kinds import Step, translation
from scripts.reproduce.log_figures import train_figures, training_record
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.runner import run_table
from scripts.reproduce.spec import Metric, Row, TableSpec
from tests.scripts.reproduce.lock_holder import lock_held_elsewhere


def fairseq_log(valid: list, stopped_early: bool = False, done: bool = True) -> str:
    """A fairseq-train json log with one training record and ``valid`` = [(update, nll)]."""
    lines = ['2026-01-01 00:00:01 | INFO | train_inner | {"epoch": 1, "loss": "9.1", '
             '"nll_loss": "8.5", "num_updates": "10"}']
    for update, nll in valid:
        lines.append('2026-01-01 00:00:02 | INFO | valid | {"epoch": 1, "valid_loss": "9.9", '
                     f'"valid_nll_loss": "{nll}", "valid_num_updates": "{update}"}}')
    if stopped_early:
        lines.append("2026-01-01 00:00:03 | INFO | fairseq_cli.train | early stop since valid "
                     "performance hasn't improved for last 2 runs")
    if done:
        lines.append("2026-01-01 00:00:04 | INFO | fairseq_cli.train | done training in 3.0 "
                     "seconds")
    return "\n".join(lines) + "\n"


def test_a_plateau_and_a_cap_are_told_apart(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(fairseq_log([(5, 6.0), (10, 5.0), (15, 5.2), (20, 5.1)], stopped_early=True))
    record = training_record(log, patience=2)
    assert record == {"curve": [[5, 6.0], [10, 5.0], [15, 5.2], [20, 5.1]], "updates": 20,
                      "stopped": "plateau", "still_improving": False}
    # the decoded model is the best validated one: its valid nll is the table's
    assert train_figures(log)["valid_nll"] == 5.0 and train_figures(log)["updates"] == 20
    # the same curve stopped by the budget: the best is 2 validations back, not within 1
    log.write_text(fairseq_log([(5, 6.0), (10, 5.0), (15, 5.2), (20, 5.1)]))
    assert training_record(log, patience=1)["stopped"] == "cap"
    assert not training_record(log, patience=1)["still_improving"]
    assert training_record(log, patience=3)["still_improving"]
    log.write_text(fairseq_log([(400, 6.9)]))  # a fixed budget validated once, at its end
    assert training_record(log, patience=None)["still_improving"]


def test_a_resumed_log_keeps_one_curve(tmp_path):
    """Killed after validating at 15 but before saving: the run resumes from update 10, so
    its second 15 replaces the first."""
    log = tmp_path / "train.log"
    log.write_text(fairseq_log([(5, 6.0), (10, 5.5), (15, 5.3)], done=False)
                   + fairseq_log([(15, 5.25), (20, 5.1)]))
    assert training_record(log, patience=2)["curve"] == [[5, 6.0], [10, 5.5], [15, 5.25],
                                                         [20, 5.1]]


def test_the_decoded_model_is_the_last_of_equal_best_validations():
    """A continuation starts from its parent's checkpoint_best.pt at the rate of that
    checkpoint's update: with equal best validations (logged to 3 decimals), the last."""
    # fairseq's own rule for checkpoint_best.pt: replaced when the value is <= the best
    def fairseq_best(curve):
        best = None
        for update, loss in curve:
            if math.isfinite(loss) and (best is None or loss <= best[1]):
                best = [update, loss]
        return best

    for curve in ([[1, 3.0], [2, 2.0], [3, 2.5], [4, 2.0], [5, math.nan]],
                  [[142, 2.205], [284, 2.21], [426, 2.205], [568, 2.3]],
                  [[1, 1.0]], [[1, math.nan]], []):
        assert translation.best_validation(curve) == fairseq_best(curve)
    assert translation.best_validation([[1, 3.0], [2, 2.0], [4, 2.0]]) == [4, 2.0]


def fake_training(tmp_path, finishes: bool) -> Step:
    """A training step that logs one line (and the fairseq's last line if it ``finishes``)."""
    code = "print('trained a bit')" + ("; print('done training in 1.0 seconds')" if finishes
                                       else "")
    return Step("train.log", argv=[sys.executable, "-c", code], trains=True)


def test_a_stopped_training_continues_after_its_log_and_a_finished_one_is_not_rerun(tmp_path):
    (tmp_path / "train.log").write_text("the first part\n")
    (tmp_path / "train.log.cpu").write_text("2.5\n")
    # no checkpoint: fairseq starts afresh, and so does the log
    run_step(fake_training(tmp_path, False), tmp_path, 1)
    assert (tmp_path / "train.log").read_text() == "trained a bit\n"
    first = float((tmp_path / "train.log.cpu").read_text())
    (tmp_path / "checkpoint_last.pt").write_bytes(b"saved")
    cpu = run_step(fake_training(tmp_path, True), tmp_path, 1)
    assert (tmp_path / "train.log").read_text() == ("trained a bit\ntrained a bit\n"
                                                    "done training in 1.0 seconds\n")
    assert cpu > first > 0  # both parts' CPU time
    stamp = (tmp_path / "train.log").stat().st_mtime_ns
    assert run_step(fake_training(tmp_path, True), tmp_path, 1) == pytest.approx(cpu, abs=0.01)
    assert (tmp_path / "train.log").stat().st_mtime_ns == stamp  # finished: not run again


# ---- each row's rate, chosen on seed 1 from a grid --------------------------------------


def grid_kind(calls: list, best: dict):
    """A kind whose valid nll is lowest at the rate ``best[row]`` (squared log2 distance),
    seed-dependent by a little; 'train' and 'decode' are counted per (row, seed, rate)."""

    def prepare(spec, scale, settings, work, say):
        return {"description": "synthetic"}

    def cell_settings(spec, row, seed, scale, settings, data):
        return {"settings": dict(settings), "row": row.key, "flags": row.flags, "seed": seed}

    def steps(spec, row, seed, scale, settings, data, folder, parent):
        lr = settings["lr"]

        def train() -> None:
            if (folder / "nll.json").is_file():  # finished: not run again, as run_step does
                return
            calls.append(("train", row.key, seed, lr))
            nll = 1.0 + math.log2(lr / best[row.key]) ** 2 + 0.01 * seed
            (folder / "nll.json").write_text(json.dumps(nll))

        def decode() -> None:
            calls.append(("decode", row.key, seed, lr))
            (folder / "bleu.json").write_text(json.dumps(10.0 * lr))

        return [Step("nll.json", call=train)] + ([] if row.hidden else
                                                 [Step("bleu.json", call=decode)])

    def collect(spec, row, folder):
        figures = {"valid_nll": json.loads((folder / "nll.json").read_text())}
        if not row.hidden:
            figures["bleu"] = json.loads((folder / "bleu.json").read_text())
        return figures

    return SimpleNamespace(prepare=prepare, cell_settings=cell_settings, steps=steps,
                           collect=collect)


GRID_SPEC = TableSpec(
    name="grid", title="a table that chooses rates", paper="Nobody, Table 2", claim="-",
    kind="translation", metrics=(Metric("bleu", "BLEU"),),
    rows=(Row("a", "A"), Row("b", "B")),
    toy={"lr": 5.0, "lr_grid": [2.0, 4.0, 8.0], "lr_limits": [1.0, 64.0]})


@pytest.fixture
def grid(monkeypatch):
    state = SimpleNamespace(calls=[], best={"a": 4.0, "b": 32.0})
    for module in (runner, cell_plan):  # the table's run, and its cells' keys
        monkeypatch.setattr(module, "kind_module",
                            lambda name: grid_kind(state.calls, state.best))
    return state


def test_each_row_trains_at_its_best_rate_of_seed_1(grid, tmp_path):
    options = RunOptions(seeds=3, work=tmp_path, say=lambda _: None)
    cells, _ = run_table(GRID_SPEC, options)
    trained = {(row, seed, lr) for step, row, seed, lr in grid.calls if step == "train"}
    # a: 4 is inside the grid; b: best at 8, widened to 16, 32 and 64, where 32 is inside
    assert {(lr, seed) for row, seed, lr in trained if row == "a"} == {
        (2.0, 1), (4.0, 1), (8.0, 1), (4.0, 2), (4.0, 3)}
    assert {(lr, seed) for row, seed, lr in trained if row == "b"} == {
        (2.0, 1), (4.0, 1), (8.0, 1), (16.0, 1), (32.0, 1), (64.0, 1), (32.0, 2), (32.0, 3)}
    assert len(trained) == len([c for c in grid.calls if c[0] == "train"])  # each once
    # only the chosen cells are decoded; seed 1's grid cell is decoded, not trained again
    assert sorted(c[1:] for c in grid.calls if c[0] == "decode") == [
        ("a", 1, 4.0), ("a", 2, 4.0), ("a", 3, 4.0), ("b", 1, 32.0), ("b", 2, 32.0),
        ("b", 3, 32.0)]
    assert {(c.row.key, c.seed): c.result["lr"] for c in cells} == {
        (row, seed): {"a": 4.0, "b": 32.0}[row] for row in "ab" for seed in (1, 2, 3)}
    b = next(c for c in cells if c.row.key == "b")
    assert [lr for lr, _ in b.lr_grid] == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    assert b.lr_grid[4][1] == pytest.approx(1.01) and b.result["figures"]["bleu"] == 320.0
    assert all(c.rate_chosen for c in cells)  # every grid finished: the report shows it
    grid.calls.clear()
    run_table(GRID_SPEC, options)
    assert grid.calls == []  # everything cached, the grid too


def test_a_dry_run_names_each_cell_s_rate(grid, tmp_path):
    said = []
    cells, _ = run_table(GRID_SPEC, RunOptions(seeds=2, work=tmp_path, dry_run=True,
                                               say=said.append))
    assert not any(c.rate_chosen for c in cells)  # no grid run: no rate chosen yet
    headers = [line for line in said if line.startswith("# a,")]
    # the grid (trained only), then seed 1 decoded and seed 2, at the rate the table has
    # until the grid is run: said to be one for now
    for_now = "(lr 5 for now: no cell of the rate grid has finished; the grid chooses the rate)"
    assert [line.split("  ", 1)[1] for line in headers] == [
        "(lr 2, a rate of the grid: not decoded)", "(lr 4, a rate of the grid: not decoded)",
        "(lr 8, a rate of the grid: not decoded)", for_now, for_now]
    assert grid.calls == []


def test_a_dry_run_says_a_rate_is_chosen_only_once_its_grid_has_finished(grid, tmp_path):
    def rates(**options) -> dict:
        said = []
        with contextlib.suppress(BudgetSpent):
            run_table(GRID_SPEC, RunOptions(work=tmp_path, say=said.append, **options))
        return {line.split(" -> ")[0]: line.split("  ", 1)[1] for line in said
                if line.startswith(("# a, seed 2", "# b, seed 2"))}

    rates(seeds=1, rows=["a"], max_new_cells=2)  # a's grid: 2 of its 3 rates trained
    assert rates(seeds=2, dry_run=True) == {
        "# a, seed 2": "(lr 4 for now: the best of 2 finished cells of the rate grid; chosen "
                       "when the grid has finished)",
        "# b, seed 2": "(lr 5 for now: no cell of the rate grid has finished; the grid "
                       "chooses the rate)"}
    rates(seeds=1)  # both grids finish (b's widened to 64)
    assert rates(seeds=2, dry_run=True) == {"# a, seed 2": "(lr 4)", "# b, seed 2": "(lr 32)"}


def test_the_grid_stops_widening_at_its_limits(grid, tmp_path):
    spec = replace(GRID_SPEC, toy={**GRID_SPEC.toy, "lr_limits": [2.0, 8.0]})
    cells, _ = run_table(spec, RunOptions(seeds=1, work=tmp_path, say=lambda _: None))
    assert {c.row.key: c.lr for c in cells} == {"a": 4.0, "b": 8.0}
    assert len(next(c for c in cells if c.row.key == "b").lr_grid) == 3
    # a table without limits widens by at most four doublings either way (2 / 16 to 8 x 16)
    grid.best["b"] = 1000.0
    unlimited = replace(GRID_SPEC, toy={k: v for k, v in GRID_SPEC.toy.items()
                                        if k != "lr_limits"})
    cells, _ = run_table(unlimited, RunOptions(seeds=1, work=tmp_path / "unlimited",
                                               say=lambda _: None))
    assert [lr for lr, _ in next(c for c in cells if c.row.key == "b").lr_grid] == [
        2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]


# ---- tables that span sessions: a time budget, records beside the report, a lock ---------


def test_a_time_budget_stops_a_running_training_which_continues_next_time(tmp_path):
    (tmp_path / "checkpoint_last.pt").write_bytes(b"saved")  # as a training saves it
    slow = Step("train.log", trains=True, argv=[
        sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"])
    began = time.monotonic()
    with pytest.raises(BudgetSpent, match="time budget"):
        run_step(slow, tmp_path, 1, deadline=time.time() + 1.0)
    assert time.monotonic() - began < 20  # stopped, not waited for
    assert (tmp_path / "train.log").read_text() == "started\n"
    run_step(fake_training(tmp_path, True), tmp_path, 1)  # the next call: after its log
    assert (tmp_path / "train.log").read_text().startswith("started\ntrained a bit\n")


def test_a_cut_cell_s_seconds_add_up_over_its_calls(monkeypatch, tmp_path):
    """A record's wall ``seconds`` are the whole cell's, as its CPU seconds are: a training
    the budget cut is counted with the call that finishes it."""
    cut = []

    def train() -> None:
        time.sleep(0.5)
        if not cut:  # the first call's budget is spent half-way
            cut.append(True)
            raise BudgetSpent("the time budget is spent")

    kind = SimpleNamespace(
        prepare=lambda *args: {"description": "synthetic"},
        cell_settings=lambda spec, row, seed, *rest: {"row": row.key, "seed": seed},
        steps=lambda *args: [Step("nll.json", call=train)],
        collect=lambda spec, row, folder: {"valid_nll": 1.0})
    for module in (runner, cell_plan):
        monkeypatch.setattr(module, "kind_module", lambda name: kind)
    spec = replace(GRID_SPEC, rows=GRID_SPEC.rows[:1], toy={"lr": 5.0})
    options = RunOptions(seeds=1, work=tmp_path, say=lambda _: None)
    with pytest.raises(BudgetSpent):
        run_table(spec, options)
    (folder,) = (tmp_path / "cells").glob("*/*/a-seed1-*")
    assert float((folder / runner.WALL_SO_FAR).read_text()) >= 0.5
    cells, _ = run_table(spec, options)
    assert cells[0].result["seconds"] >= 1.0  # both calls' half second
    assert not (folder / runner.WALL_SO_FAR).exists()  # stored: nothing left to add to


def test_finished_cells_are_taken_from_the_records_on_a_fresh_work_folder(grid, tmp_path):
    records = tmp_path / "records"
    first = RunOptions(seeds=2, work=tmp_path / "one", say=lambda _: None, records=records)
    cells, _ = run_table(GRID_SPEC, first)
    stored = sorted(p.name for p in (records / "grid").iterdir())
    # a: its grid of 3 at seed 1, seed 2 at 4; b: its widened grid of 6, seed 2 at 32
    assert len(stored) == 4 + 7 and {"a-seed2-lr4.json", "b-seed2-lr32.json"} <= set(stored)
    assert json.loads((records / "grid" / "b-seed1-lr32.json").read_text())["lr"] == 32.0
    grid.calls.clear()
    again, _ = run_table(GRID_SPEC, replace(first, work=tmp_path / "two"))
    assert grid.calls == []  # nothing trained on the new machine
    assert [c.result["figures"] for c in again] == [c.result["figures"] for c in cells]
    # a record of other settings is not taken: that cell runs again
    changed = replace(GRID_SPEC, rows=(replace(GRID_SPEC.rows[0], flags=("--x",)),
                                       GRID_SPEC.rows[1]))
    run_table(changed, replace(first, work=tmp_path / "three"))
    assert {row for _, row, _, _ in grid.calls} == {"a"}


def test_a_second_run_of_a_table_on_one_work_folder_is_refused(grid, tmp_path):
    with lock_held_elsewhere(tmp_path / "locks" / "grid.lock") as pid:
        with pytest.raises(FolderInUse) as refused:
            run_table(GRID_SPEC, RunOptions(work=tmp_path, say=lambda _: None))
        message = str(refused.value)
        assert "\n" not in message
        assert str(tmp_path) in message and f"pid {pid}" in message
        assert not (tmp_path / "cells").exists()  # nothing ran
        said = []  # a dry run writes no cell: it answers beside the running call
        run_table(GRID_SPEC, RunOptions(work=tmp_path, dry_run=True, say=said.append))
        assert any(line.startswith("# ") for line in said)
        assert not (tmp_path / "cells").exists()
    run_table(replace(GRID_SPEC, toy={**GRID_SPEC.toy, "lr_grid": [4.0]}),
              RunOptions(seeds=1, work=tmp_path, say=lambda _: None))  # free again


def test_a_data_folder_not_written_here_is_never_deleted(tmp_path):
    def build(folder):
        (folder / "corpus.txt").write_text("built\n")
        return {"description": "built"}

    key = settings_key({"a": 1})[:12]
    foreign = tmp_path / "data" / f"x-{key}"
    foreign.mkdir(parents=True)
    (foreign / "thesis.tex").write_text("mine")
    with pytest.raises(FolderInUse, match="not written by scripts.reproduce"):
        shared_data(tmp_path, "x", {"a": 1}, build, lambda _: None)
    assert (foreign / "thesis.tex").read_text() == "mine"
    # a build of this program's that stopped half-way is built again
    (foreign / "thesis.tex").unlink()
    (foreign / BUILDING).write_text("123\n")
    (foreign / "half.txt").write_text("half")
    info = shared_data(tmp_path, "x", {"a": 1}, build, lambda _: None)
    assert info["description"] == "built" and sorted(p.name for p in foreign.iterdir()) == [
        "corpus.txt", STAMP]


def test_a_budget_trains_the_chosen_cells_at_each_row_s_rate_as_new_records(grid, tmp_path):
    records = tmp_path / "records"
    options = RunOptions(seeds=2, work=tmp_path / "one", say=lambda _: None, records=records)
    run_table(GRID_SPEC, options)  # to each row's plateau: the grid, then the chosen cells
    before = sorted(p.name for p in (records / "grid").iterdir())
    budgeted = replace(GRID_SPEC, toy={**GRID_SPEC.toy, "budget_updates": 300})
    grid.calls.clear()
    cells, _ = run_table(budgeted, options)
    # the grid's cells are the same cells (nothing screened again); the chosen ones are new,
    # each row at its own rate, seed 1 too
    assert sorted((c[1], c[2], c[3]) for c in grid.calls if c[0] == "train") == [
        ("a", 1, 4.0), ("a", 2, 4.0), ("b", 1, 32.0), ("b", 2, 32.0)]
    assert all(c.result["budget_updates"] == 300 for c in cells)
    after = sorted(p.name for p in (records / "grid").iterdir())
    assert set(before) < set(after)  # the plateau records stay beside the new ones
    assert sorted(set(after) - set(before)) == [
        "a-seed1-lr4-budget300.json", "a-seed2-lr4-budget300.json",
        "b-seed1-lr32-budget300.json", "b-seed2-lr32-budget300.json"]
    assert {json.loads((records / "grid" / name).read_text())["budget_updates"]
            for name in set(after) - set(before)} == {300}
