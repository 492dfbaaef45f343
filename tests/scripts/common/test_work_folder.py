"""The work folder: emptied unless resumed with the same settings; data built once."""

from __future__ import annotations

import pytest

from scripts.common.work_folder import WorkFolder, open_work_folder


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
