"""The work folder: emptied unless resumed with the same settings, but only when the program
wrote it (a folder of the user's is refused, not emptied); data built once."""

from __future__ import annotations

import sys

import pytest

from scripts.common.work_folder import OWNER_STAMP, WorkFolder, empty_own_folder, open_work_folder

from helpers import run_command


def test_resume_keeps_the_folder_only_for_the_same_settings(tmp_path):
    work = tmp_path / "work"
    assert open_work_folder(work, {"scale": "tiny"}, resume=True) is False  # nothing to resume
    (work / "kept.txt").write_text("x")
    assert open_work_folder(work, {"scale": "tiny"}, resume=True) is True
    assert (work / "kept.txt").is_file()
    with pytest.raises(SystemExit, match="drop --resume"):
        open_work_folder(work, {"scale": "default"}, resume=True)
    assert open_work_folder(work, {"scale": "default"}, resume=False) is False
    assert not (work / "kept.txt").exists()  # a fresh start empties it


def test_data_is_built_once_and_its_description_reused(tmp_path, capsys):
    calls = []

    def build() -> str:
        calls.append(1)
        return "corpus of 3 pairs"

    first = WorkFolder(tmp_path, resume=False, tag="t")
    assert first.data_step("corpus", "1/2", "data", "building", build) == "corpus of 3 pairs"
    again = WorkFolder(tmp_path, resume=True, tag="t")
    assert again.data_step("corpus", "1/2", "data", "building", build) == "corpus of 3 pairs"
    assert len(calls) == 1
    assert "reusing the data" in capsys.readouterr().out
    fresh = WorkFolder(tmp_path, resume=False, tag="t")
    fresh.data_step("corpus", "1/2", "data", "building", build)
    assert len(calls) == 2


def test_a_folder_the_program_did_not_write_is_refused_not_emptied(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    empty_own_folder(work)  # an empty folder is taken over
    assert (work / OWNER_STAMP).is_file()
    (work / "old-run.txt").write_text("x")
    empty_own_folder(work)  # stamped: the program's own, emptied
    assert sorted(p.name for p in work.iterdir()) == [OWNER_STAMP]

    earlier = tmp_path / "earlier"  # made by a version that did not stamp its folder yet
    earlier.mkdir()
    (earlier / "settings.json").write_text('{"scale": "tiny"}')
    (earlier / "corpus.txt").write_text("x")
    assert open_work_folder(earlier, {"scale": "default"}, resume=False) is False
    assert sorted(p.name for p in earlier.iterdir()) == [OWNER_STAMP, "settings.json"]

    mine = tmp_path / "mine"
    (mine / "thesis").mkdir(parents=True)
    (mine / "thesis" / "chapter1.tex").write_text("my thesis")
    (mine / "settings.json").write_text('{"editor": "vim"}')  # not a run's settings
    for call in (lambda: empty_own_folder(mine),
                 lambda: open_work_folder(mine, {"scale": "tiny"}, resume=False)):
        with pytest.raises(SystemExit, match=f"^--out: {mine} holds files this program did "
                                             "not write.*give another --out$"):
            call()
        assert (mine / "thesis" / "chapter1.tex").read_text() == "my thesis"


@pytest.mark.parametrize("module", ["scripts.demo.demo", "scripts.analysis.ablations"])
def test_out_with_a_users_work_folder_keeps_the_users_files(module, tmp_path):
    out = tmp_path / "report"
    thesis = out / "work" / "thesis" / "chapter1.tex"
    thesis.parent.mkdir(parents=True)
    thesis.write_text("my thesis")
    proc = run_command([sys.executable, "-m", module, "--tiny", "--out", out], check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    refusal = (f"--out: {out / 'work'} holds files this program did not write (it has no "
               f"{OWNER_STAMP}), and a fresh run empties OUT/work: move them away or give "
               "another --out")
    if module == "scripts.demo.demo":  # the demo refuses the whole folder first (out_folder.py)
        refusal = (f"--out: {out} holds work, which the demo did not write; give a new or "
                   "empty folder, or one an earlier demo run wrote (it holds "
                   ".written-by-relu-former-demo)")
    assert proc.stderr.strip().splitlines() == [refusal]
    assert thesis.read_text() == "my thesis"
    assert sorted(p.name for p in out.rglob("*")) == ["chapter1.tex", "thesis", "work"]


def test_train_all_trains_what_is_not_done_and_runs_after_for_every_run(tmp_path,
                                                                       monkeypatch):
    import argparse

    from scripts.common import work_folder
    from scripts.common.run_record import Budget, Run

    trained, after = [], []
    monkeypatch.setattr(work_folder, "trained_before", lambda run, work: run.key == "old")
    monkeypatch.setattr(work_folder, "train",
                        lambda run, budget, *rest: trained.append((run.key, budget.max_update)))
    folder = WorkFolder(tmp_path, resume=True, tag="t")
    runs = [Run("old", "o", "arch", []), Run("new", "n", "arch", [])]
    budget = Budget(1, 8, 16, 2, 100, 7, 60.0, 1, 1e-3)
    folder.train_all(runs, lambda run: budget, argparse.Namespace(), 2, "1/1",
                     after=lambda run, position: after.append(run.key))
    assert trained == [("new", 7)]           # the reused run is not trained again ...
    assert sorted(after) == ["new", "old"]   # ... but decoded like the others
    assert [run.budget_updates for run in runs] == [7, 7]
