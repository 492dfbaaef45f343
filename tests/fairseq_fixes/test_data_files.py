"""Incomplete binarized data stops fairseq with one line naming the file and the fix: a
missing .idx (or .bin), a truncated .bin or .idx, an empty split."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fairseq import options, tasks
from fairseq.data import indexed_dataset

import relu_former.plugin  # noqa: F401  (installs the data checks)
from relu_former.errors import DataFileError

from helpers import USER_DIR, fairseq_command, run_command

VALID = "valid.de-en.de"


@pytest.fixture
def data_bin(toy_data_bin, tmp_path) -> Path:
    copy = tmp_path / "data-bin"
    shutil.copytree(toy_data_bin, copy)
    return copy


def load(data_bin: Path, split: str = "valid"):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data_bin), "--user-dir", USER_DIR,
                                                "--arch", "transformer", "--task",
                                                "translation", "--source-lang", "de",
                                                "--target-lang", "en"])
    task = tasks.setup_task(args)
    task.load_dataset(split)
    return task.dataset(split)


def test_whole_data_loads(data_bin):
    assert len(load(data_bin)) > 0


def test_missing_idx_is_named(data_bin):
    (data_bin / f"{VALID}.idx").unlink()
    with pytest.raises(DataFileError, match=rf"data file {data_bin}/{VALID}\.idx is missing "
                                            r"\(its data .* is there\): rebuild the folder"):
        load(data_bin)


def test_missing_bin_is_named(data_bin):
    (data_bin / f"{VALID}.bin").unlink()
    with pytest.raises(DataFileError, match=rf"{VALID}\.bin is missing \(its index"):
        load(data_bin)


def test_truncated_bin_is_named(data_bin):
    path = data_bin / f"{VALID}.bin"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFileError, match=rf"{VALID}\.bin is truncated: {len(data) // 2} "
                                            rf"bytes, its index .* says {len(data)}"):
        load(data_bin)


# fairseq's half-built index object fails again in its __del__; that is not ours to silence
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_truncated_idx_is_named(data_bin):
    path = data_bin / f"{VALID}.idx"
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(DataFileError, match=rf"{VALID}\.idx cannot be read as a fairseq index"):
        load(data_bin)


def _empty_split(data_bin: Path, split: str) -> None:
    """What fairseq-preprocess writes for empty text: an index of 0 sentences, no tokens."""
    import numpy as np

    for lang in ("de", "en"):
        prefix = str(data_bin / f"{split}.de-en.{lang}")
        builder = indexed_dataset.MMapIndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
        builder.finalize(f"{prefix}.idx")


def test_empty_valid_split_is_named(data_bin):
    _empty_split(data_bin, "valid")
    with pytest.raises(DataFileError, match=rf"{VALID}\.bin holds no sentences: .* "
                                            r"--disable-validation"):
        load(data_bin)


@pytest.mark.slow
def test_fairseq_train_names_a_truncated_bin_in_one_line(data_bin, tmp_path):
    path = data_bin / "train.de-en.en.bin"
    path.write_bytes(path.read_bytes()[:100])
    proc = run_command([fairseq_command("fairseq-train"), data_bin, "--user-dir", USER_DIR,
                        "--arch", "transformer", "--cpu", "--max-update", "1",
                        "--max-tokens", "500", "--save-dir", tmp_path / "ckpt"],
                       check=False, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fairseq-train: error: data file {path} is truncated"), last
