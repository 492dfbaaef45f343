"""The repository's one atomic write and copy: the target is its old content or the whole new
one at every moment, and nothing is left beside it."""

from __future__ import annotations

import pytest

from relu_former.atomic_files import atomic_path, copy_atomic, write_text_atomic


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "table.md"
    write_text_atomic(target, "old\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        with open(tmp, "w") as handle:
            handle.write("half")
        raise RuntimeError("killed midway")
    assert target.read_text() == "old\n"
    assert [path.name for path in tmp_path.iterdir()] == ["table.md"]


def test_copy_and_write_replace_the_target_whole(tmp_path):
    source, target = tmp_path / "checkpoint_1_6.pt", tmp_path / "sub" / "checkpoint_last.pt"
    source.write_bytes(b"new" * 1000)
    copy_atomic(source, target)
    assert target.read_bytes() == source.read_bytes()
    with atomic_path(tmp_path / "figure.png", suffix=".png") as tmp:
        assert tmp.endswith(".png")  # matplotlib reads the format from the name
        open(tmp, "wb").close()
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "checkpoint_1_6.pt", "figure.png", "sub"]
