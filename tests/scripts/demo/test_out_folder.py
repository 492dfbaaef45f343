"""The demo writes only into a report folder it owns: new, empty, or marked by an earlier run;
anything else is refused in one line before any work, and left as it was."""

from __future__ import annotations

import sys

import pytest

from scripts.common.work_folder import OWNER_STAMP
from scripts.demo.out_folder import MARKER, claim

from helpers import REPO_ROOT, run_command


def _refused(out):
    with pytest.raises(SystemExit) as refused:
        claim(out)
    message = str(refused.value.code)
    assert message.startswith(f"--out: {out} ") and "\n" not in message
    return message


def test_a_new_or_empty_folder_is_claimed_and_marked(tmp_path):
    for out in (tmp_path / "new" / "report", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        claim(out)
        assert [p.name for p in out.iterdir()] == [MARKER]
    (out / "report.md").write_text("an earlier run's report")
    (out / "notes.txt").write_text("anything, once the demo owns the folder")
    claim(out)  # marked: a later run may write there again
    assert (out / "notes.txt").read_text() == "anything, once the demo owns the folder"


@pytest.mark.parametrize("content", [
    {"results.csv": "a user's table"},
    {".bashrc": "a dotfile alone"},
    {"report.md": "a report of the user's, no stamped work folder beside it"},
])
def test_a_folder_holding_what_the_demo_did_not_write_is_refused(tmp_path, content):
    out = tmp_path / "out"
    out.mkdir()
    for name, text in content.items():
        (out / name).write_text(text)
    name = next(iter(content))
    assert _refused(out).startswith(f"--out: {out} holds {name}, which the demo did not write")
    assert sorted(p.name for p in out.iterdir()) == sorted(content)  # untouched


def test_a_symbolic_link_or_a_file_is_refused(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    claim(folder)  # even a link to a folder the demo owns: the files would land over there
    links = {"to a marked folder": folder, "dangling": tmp_path / "nowhere"}
    for name, target in links.items():
        link = tmp_path / name
        link.symlink_to(target)
        assert "is a symbolic link" in _refused(link)
    afile = tmp_path / "report.txt"
    afile.write_text("a user's file")
    assert "is a file" in _refused(afile)
    assert afile.read_text() == "a user's file"
    inside = afile / "out"  # a file as a parent folder
    assert "cannot be made" in _refused(inside)
    (folder / "work").symlink_to(tmp_path / "elsewhere")
    assert "holds work as a symbolic link" in _refused(folder)


def test_a_report_folder_of_a_demo_from_before_the_marker_is_its_own(tmp_path):
    out = tmp_path / "demo_out"
    (out / "work").mkdir(parents=True)
    (out / "work" / OWNER_STAMP).write_text("stamp")
    for name in ("report.md", "demo_loss.png", "analyze_attention.md",
                 "analyze_attention_heatmap.png"):
        (out / name).write_text("written by the demo")
    claim(out)
    assert (out / MARKER).is_file()
    (out / MARKER).unlink()
    (out / "mine.txt").write_text("added by the user")
    assert "holds mine.txt" in _refused(out)


@pytest.mark.parametrize("case", ["file", "dotfile", "symlink"])
def test_the_demo_refuses_in_one_line_before_any_work(tmp_path, case):
    out = tmp_path / "out"
    if case == "file":
        out.write_text("x")
    elif case == "dotfile":
        out.mkdir()
        (out / ".keep").write_text("")
    else:
        (tmp_path / "empty").mkdir()
        out.symlink_to(tmp_path / "empty")
    proc = run_command([sys.executable, "-m", "scripts.demo.demo", "--tiny", "--out", out],
                       cwd=REPO_ROOT, check=False, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(f"--out: {out} ")
    assert not (tmp_path / "empty" / MARKER).exists()
