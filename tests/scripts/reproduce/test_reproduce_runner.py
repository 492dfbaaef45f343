"""The runner on a synthetic kind: runs every cell, caches each as it finishes, resumes
after a kill (a budget) or a failing cell without recomputing finished cells, invalidates
only the cells whose settings change, and builds the table from the stored figures."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts.reproduce import cell_plan, runner
from scripts.reproduce.cell_steps import BudgetSpent, CellFailed
from scripts.reproduce.kinds import Step
from scripts.reproduce.report import section, write_section
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.runner import run_table
from scripts.reproduce.spec import Comparison, Metric, Row, TableSpec
from scripts.reproduce.tables import TABLES
from tests.scripts.reproduce.lock_holder import lock_held_elsewhere

# a row's "score" is its base plus a small seed-dependent wobble
BASE = {"good": 10.0, "bad": 5.0, "child": 12.0}


def synthetic_kind(calls: list, fail: set):
    def prepare(spec, scale, settings, work, say):
        return {"description": "synthetic"}

    def cell_settings(spec, row, seed, scale, settings, data):
        return {"settings": dict(settings), "row": row.key, "flags": row.flags, "seed": seed}

    def steps(spec, row, seed, scale, settings, data, folder, parent):
        def compute() -> None:
            # kept in the work folder too, for a call whose jobs run in processes of their own
            log = folder.parents[3] / "calls.log"

            def called(*what) -> None:
                calls.append(what)
                with log.open("a") as out:
                    out.write(json.dumps(what) + "\n")

            began = time.time()
            called(row.key, seed)
            if row.key in fail and "slow" in fail:
                time.sleep(2.0)  # longer than a job process takes to start
                called("finished", row.key, seed)
            with (log.parent / "gpus.log").open("a") as out:  # the GPU it saw, and when
                out.write(json.dumps([os.environ.get("CUDA_VISIBLE_DEVICES"), began,
                                      time.time()]) + "\n")
            start = 0.0
            if parent is not None:  # a child reads its parent's output, as fine-tuning does
                start = json.loads((parent / "out.json").read_text())["score"] - 10.0
            score = BASE[row.key] + settings["offset"] + start + 0.1 * seed
            (folder / "out.json").write_text(json.dumps({"score": score}))

        found = [Step("out.json", call=compute)]
        if "timed" in fail:  # a decoding whose time is a figure: when it ran, kept beside
            found.append(Step("timed.log", timed=True, argv=[
                sys.executable, "-c", "import sys, time; began = time.time(); time.sleep(0.5); "
                "open(sys.argv[1], 'a').write(f'{began} {time.time()}\\n')",
                folder.parents[3] / "timed.log"]))
        if row.key in fail and "diverge" in fail:
            found.insert(0, Step("train.log", trains=True, argv=[
                sys.executable, "-c",
                "import sys; print('FloatingPointError: Minimum loss scale reached'); "
                "sys.exit(1)"]))
        elif row.key in fail and "slow" not in fail:
            found.append(Step("fail.log", argv=[sys.executable, "-c", "import sys; sys.exit(3)"]))
        return found

    def collect(spec, row, folder):
        # every synthetic model finished learning: its claims get a verdict
        return {"score": json.loads((folder / "out.json").read_text())["score"],
                "stopped": "plateau"}

    return SimpleNamespace(prepare=prepare, cell_settings=cell_settings, steps=steps,
                           collect=collect)


SPEC = TableSpec(
    name="synthetic", title="a synthetic table", paper="Nobody, Table 1",
    claim="good beats bad", kind="translation",
    metrics=(Metric("score", "score"),),
    rows=(Row("good", "Good", ("--x",), paper={"score": 11}), Row("bad", "Bad"),
          Row("child", "Child of good", parent="good")),
    comparisons=(Comparison("good", "bad", "score", "good beats bad"),
                 Comparison("bad", "good", "score", "bad beats good")),
    toy={"offset": 0.0},
)


@pytest.fixture
def kind(monkeypatch):
    state = SimpleNamespace(calls=[], fail=set())
    for module in (runner, cell_plan):  # the table's run, and its cells' keys
        monkeypatch.setattr(module, "kind_module",
                            lambda name: synthetic_kind(state.calls, state.fail))
    return state


def options(tmp_path: Path, **kw) -> RunOptions:
    return RunOptions(**{"scale": "toy", "seeds": 3, "work": tmp_path, "say": lambda m: None,
                         **kw})


def test_runs_every_cell_parents_first_and_caches(kind, tmp_path):
    cells, _ = run_table(SPEC, options(tmp_path))
    assert len(cells) == 9 and all(cell.result for cell in cells)
    assert kind.calls.index(("good", 1)) < kind.calls.index(("child", 1))
    child = next(c for c in cells if c.row.key == "child" and c.seed == 2)
    assert child.result["figures"]["score"] == pytest.approx(12.0 + 0.2 + 0.2)
    kind.calls.clear()
    run_table(SPEC, options(tmp_path))
    assert kind.calls == []  # everything cached


def test_a_killed_run_resumes_without_recomputing(kind, tmp_path):
    with pytest.raises(BudgetSpent):
        run_table(SPEC, options(tmp_path, max_new_cells=4))
    finished = list(kind.calls)
    assert len(finished) == 4
    kind.calls.clear()
    cells, _ = run_table(SPEC, options(tmp_path))
    assert not set(kind.calls) & set(finished)
    assert len(kind.calls) == 5 and all(cell.result for cell in cells)


def test_a_failing_cell_stops_the_run_and_keeps_finished_cells(kind, tmp_path):
    kind.fail.add("bad")
    with pytest.raises(CellFailed, match="exited 3"):
        run_table(SPEC, options(tmp_path, jobs=1))
    # seed by seed: good's seed 1 ran, then bad's seed 1 failed
    assert kind.calls == [("good", 1), ("bad", 1)]
    kind.fail.clear()
    kind.calls.clear()
    run_table(SPEC, options(tmp_path))
    assert ("good", 1) not in kind.calls
    assert sorted(kind.calls) == sorted([("bad", s) for s in (1, 2, 3)]
                                        + [("good", s) for s in (2, 3)]
                                        + [("child", s) for s in (1, 2, 3)])


def test_a_child_starts_when_its_parent_is_done_not_its_parents_wave(kind, tmp_path):
    kind.fail.update({"bad", "slow"})  # bad's cells take 2 s each, good's none
    said = []
    cells, _ = run_table(SPEC, options(tmp_path, jobs=2, say=said.append))
    # two jobs at a time, each in a process of its own (submitit's local executor): what
    # they did is in the work folder, what they said comes back to the call
    calls = [tuple(json.loads(line)) for line in (tmp_path / "calls.log").open()]
    assert kind.calls == [] and len(calls) == 12 and all(cell.result for cell in cells)
    assert sum(line.startswith("  done ") for line in said) == 9
    # good's cells are done at once; the children use the slot a finished bad cell frees
    # while the last bad cell is still running
    assert calls.index(("child", 1)) < calls.index(("finished", "bad", 3))


def test_with_cuda_each_running_job_sees_a_gpu_no_other_running_job_has(kind, tmp_path,
                                                                        monkeypatch):
    from scripts.reproduce import cell_jobs

    monkeypatch.setattr(cell_jobs, "_gpu_count", lambda: 2)  # a machine with 2 GPUs
    kind.fail.update({"bad", "slow"})
    cells, _ = run_table(SPEC, options(tmp_path, jobs=2, device="cuda"))
    assert all(cell.result for cell in cells)
    seen = [json.loads(line) for line in (tmp_path / "gpus.log").open()]
    assert len(seen) == 9 and {gpu for gpu, _, _ in seen} == {"0", "1"}
    for i, (gpu, began, ended) in enumerate(seen):
        for other, other_began, other_ended in seen[i + 1:]:
            if began < other_ended and other_began < ended:  # side by side
                assert gpu != other


def test_timed_steps_of_local_jobs_say_they_ran_beside_others(kind, tmp_path):
    kind.fail.add("timed")
    cells, _ = run_table(SPEC, options(tmp_path, jobs=2, seeds=2))
    assert not any(cell.result.get("timed_alone") for cell in cells)
    again, _ = run_table(SPEC, options(tmp_path / "alone", jobs=1, seeds=1))
    assert all(cell.result["timed_alone"] for cell in again)


def test_a_changed_setting_invalidates_only_its_cells(kind, tmp_path):
    run_table(SPEC, options(tmp_path))
    kind.calls.clear()
    changed = replace(SPEC, rows=(replace(SPEC.rows[0], flags=("--x", "--y")), *SPEC.rows[1:]))
    run_table(changed, options(tmp_path))
    # good changed; child starts from good, so its key changes too; bad is untouched
    assert sorted({row for row, _ in kind.calls}) == ["child", "good"]
    kind.calls.clear()
    run_table(replace(SPEC, toy={"offset": 1.0}), options(tmp_path, seeds=1))
    assert sorted(kind.calls) == [("bad", 1), ("child", 1), ("good", 1)]


def test_the_table_from_the_stored_figures(kind, tmp_path):
    cells, data = run_table(SPEC, options(tmp_path))
    text = section(SPEC, cells, data, "toy", 3, "python -m scripts.reproduce synthetic")
    assert "| Good | 10.20 ± 0.10 | 11.00 |" in text
    assert "| Bad | 5.20 ± 0.10 | - |" in text
    # the same seeds, and a seed moves both rows alike: paired differences of 5 with no
    # spread, so the exact sign-flip test, whose smallest p at 3 seeds is 2 / 2^3; Holm
    # doubles it over the two claims, and 7 seeds a side would resolve them (2 / 2^7 < 2.5%)
    for claim, d in (("good beats bad", "+5.00"), ("bad beats good", "-5.00")):
        assert (f"| {claim} | score | superiority, exact sign-flip test | {d} | - | 2.00 | 0.25 "
                "| 0.5 | not resolved: needs about 7 seeds a side |") in text
    assert "9 of 9 cells finished" in text
    # collected again from the cache alone, without running anything
    kind.calls.clear()
    again, _ = run_table(SPEC, options(tmp_path, collect_only=True))
    assert kind.calls == [] and [c.result for c in again] == [c.result for c in cells]


def test_a_section_replaces_only_its_own_part(tmp_path):
    doc = tmp_path / "reproduction.md"
    write_section(doc, "a", "<!-- reproduce:a start -->\nA1\n<!-- reproduce:a end -->", "# T\n")
    write_section(doc, "b", "<!-- reproduce:b start -->\nB1\n<!-- reproduce:b end -->", "# T\n")
    write_section(doc, "a", "<!-- reproduce:a start -->\nA2\n<!-- reproduce:a end -->", "# T\n")
    text = doc.read_text()
    assert text.startswith("# T") and "A2" in text and "A1" not in text and "B1" in text
    assert text.index("A2") < text.index("B1")
    assert [p.name for p in tmp_path.iterdir()] == ["reproduction.md"]


def test_not_run_tables_say_so_and_show_the_papers_numbers(kind, tmp_path):
    text = section(SPEC, [], {}, "toy", 3, "cmd")
    assert "not yet run at toy scale in this repository" in text
    assert "| Good | - | 11.00 |" in text
    # a table with a budget and no cell at it (its earlier budgets' records are not its cells)
    budgeted = section(TABLES["relu_former_table4"], [], {}, "toy", 3, "cmd")
    assert "Results: none yet at this table's budget of 80,000 updates (scale toy)" in budgeted


def test_new_sections_go_before_the_closing_note(tmp_path):
    doc = tmp_path / "reproduction.md"
    write_section(doc, "summary", "<!-- reproduce:summary start -->\nS\n"
                  "<!-- reproduce:summary end -->", "# T\n")
    write_section(doc, "a", "<!-- reproduce:a start -->\nA\n<!-- reproduce:a end -->", "# T\n")
    text = doc.read_text()
    assert text.index("\nA\n") < text.index("\nS\n")


def test_a_diverged_training_is_a_result_not_a_failure(kind, tmp_path):
    kind.fail.update({"good", "diverge"})
    cells, data = run_table(SPEC, options(tmp_path))  # no exception: the table goes on
    by_row = {(c.row.key, c.seed): c.result["figures"] for c in cells}
    assert by_row["good", 1]["diverged"] == 1.0 and "Minimum loss scale" in by_row["good", 1][
        "reason"]
    assert by_row["child", 2] == {"diverged": 1.0, "reason": "its starting point diverged"}
    assert by_row["bad", 3]["score"] == pytest.approx(5.3)
    text = section(SPEC, cells, data, "toy", 3, "cmd")
    assert "| Good | - | 11.00 | 0 (+3 diverged) |" in text
    assert ("| good beats bad | score | superiority | - | - | - | - | - | not resolved: Good "
            "diverged on every seed |") in text


def test_plots_a_curve_and_a_metric_against_a_metric(kind, tmp_path):
    cells, data = run_table(SPEC, options(tmp_path))
    spec = replace(SPEC, metrics=(Metric("score", "score"), Metric("cost", "cost", False)),
                   plot=("metric:score", "score"))
    text = section(spec, cells, data, "toy", 3, "cmd", plot_dir=tmp_path / "plots")
    assert "![score against score](plots/synthetic.png)" in text
    assert (tmp_path / "plots" / "synthetic.png").stat().st_size > 1000
    curve = replace(SPEC, rows=tuple(replace(r, label=f"F @ {i}", point={"x": i})
                                     for i, r in enumerate(SPEC.rows, 1)), plot=("x", "score"))
    text = section(curve, cells, data, "toy", 3, "cmd", plot_dir=tmp_path / "curve")
    assert "![score against x](curve/synthetic.png)" in text


def test_the_wall_time_counts_cells_run_side_by_side_once(tmp_path):
    from scripts.reproduce.report import busy_seconds

    def cell(seconds, finished_at=None, name="c"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "result.json").write_text("{}")
        result = {"seconds": seconds, **({"finished_at": finished_at} if finished_at else {})}
        return SimpleNamespace(result=result, folder=folder)

    # two cells side by side (100-160, 110-150), one after a pause (1000-1030), one from
    # before ``finished_at`` was stored: its result file's time ends it
    cells = [cell(60.0, 160.0, "a"), cell(40.0, 150.0, "b"), cell(30.0, 1030.0, "c")]
    assert busy_seconds(cells) == pytest.approx(60.0 + 30.0)
    unfinished = SimpleNamespace(result=None, folder=tmp_path)
    assert busy_seconds([*cells, cell(20.0, name="old"), unfinished]) == pytest.approx(110.0)


def test_a_claim_on_a_row_that_was_not_run_says_so(kind, tmp_path):
    cells, data = run_table(SPEC, options(tmp_path, rows=["good"]))
    text = section(SPEC, cells, data, "toy", 3, "cmd")
    assert "| good beats bad | score | superiority | - | - | - | - | - | not run |" in text


# ---- rows that start from another table's rows ------------------------------------------

DOCS = TableSpec(name="documents", title="rows that start from SPEC's", paper="Nobody, Table 2",
                 claim="-", kind="translation", metrics=(Metric("score", "score"),),
                 rows=(Row("child", "Child of the other table's good", parent="synthetic:good"),),
                 toy={"offset": 0.0})


def test_a_row_starts_from_the_other_tables_own_cell(kind, tmp_path):
    parents, _ = run_table(SPEC, options(tmp_path, rows=["good"]))
    kind.calls.clear()
    cells, _ = run_table(DOCS, options(tmp_path, tables={"synthetic": SPEC}))
    # the other table's cells are its own (same key and folder) and are not trained again
    assert kind.calls == [("child", 1), ("child", 2), ("child", 3)]
    assert [cell.row.key for cell in cells] == ["child"] * 3  # this table's cells only
    for cell, parent in zip(cells, parents):
        assert (cell.parent.key, cell.parent.folder) == (parent.key, parent.folder)
        assert cell.folder.parent.name == "documents"
        assert cell.result["figures"]["score"] == pytest.approx(12.0 + 0.2 * cell.seed)
    # the child's key holds its parent's: another parent setting, new parents and children
    kind.calls.clear()
    changed = {"synthetic": replace(SPEC, toy={"offset": 1.0})}
    again, _ = run_table(DOCS, options(tmp_path, seeds=1, tables=changed))
    assert kind.calls == [("good", 1), ("child", 1)]
    assert again[0].key != cells[0].key and again[0].parent.key != parents[0].key
    # not run yet, the other table's cell is run (by that table, into its folder) first
    kind.calls.clear()
    run_table(DOCS, options(tmp_path / "fresh", seeds=1, tables={"synthetic": SPEC}))
    assert kind.calls == [("good", 1), ("child", 1)]
    assert sorted(p.name for p in (tmp_path / "fresh" / "cells" / "toy").iterdir()) == [
        "documents", "synthetic"]


def test_a_row_whose_parent_table_is_running_elsewhere_is_refused(kind, tmp_path):
    from scripts.common.folder_lock import FolderInUse

    with lock_held_elsewhere(tmp_path / "locks" / "synthetic.lock") as pid:
        with pytest.raises(FolderInUse, match=rf"\(synthetic\) is in use .*pid {pid}"):
            run_table(DOCS, options(tmp_path, tables={"synthetic": SPEC}))
        assert kind.calls == [] and not (tmp_path / "cells").exists()
    run_table(DOCS, options(tmp_path, seeds=1, tables={"synthetic": SPEC}))  # free again
    assert kind.calls == [("good", 1), ("child", 1)]
