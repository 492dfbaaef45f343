"""``--device cuda``: the same cells (the same keys, so the same cache folders and records) with
fairseq's commands on the GPU, their ``--cpu`` left out; a record says where its commands ran;
refused in one line where torch sees no GPU. And a data folder copied to another machine or
work folder (carried to a lent GPU) is read where it is."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts.reproduce import cell_plan, runner
from scripts.reproduce.__main__ import main, reproducing_argv
from scripts.reproduce.data_folder import shared_data
from scripts.reproduce.kinds import Step
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.runner import run_table
from scripts.reproduce.spec import Metric, Row, TableSpec
from tests.scripts.reproduce.settings_args import GRID, copy_table4_data, sets

T4 = "relu_former_table4"


def commands(out: str) -> list[str]:
    """The training and decoding commands a dry run printed."""
    return [line for line in out.splitlines()
            if "scripts.reproduce.patient_train " in line
            or "scripts.reproduce.timed_generate " in line]


def headers(out: str) -> list[str]:
    """``# ROW, seed S -> FOLDER ...``: the cells, their folders named by their keys."""
    return [line for line in out.splitlines() if re.match(r"# \w+, seed \d+ -> ", line)]


def test_cuda_leaves_out_cpu_and_keeps_every_cells_key(tmp_path, capsys, table4_data):
    locale = copy_table4_data(table4_data, tmp_path)  # Table 4's data, built once
    args = [T4, "--scale", "tiny", "--seeds", "2", "--rows", "relu_former", "--dry-run",
            *sets({"locale_dir": str(locale), **GRID}), "--work", str(tmp_path / "work")]
    out = {}
    for device in ("cpu", "cuda"):  # a dry run prints the cuda commands on any machine
        assert main([*args, "--device", device]) == 0
        out[device] = capsys.readouterr().out
    cpu, cuda = commands(out["cpu"]), commands(out["cuda"])
    assert any("scripts.reproduce.timed_generate " in line for line in cpu)
    assert len(cpu) == 5  # the grid cell's training, then each seed's training and decoding
    assert all("--cpu" in line.split() for line in cpu)
    assert not any("--cpu" in line.split() for line in cuda)
    assert cuda == [line.replace(" --cpu ", " ") for line in cpu]  # nothing else changes
    assert "--fp16" not in out["cuda"] and "--bf16" not in out["cuda"]  # float32 both ways
    assert headers(out["cuda"]) == headers(out["cpu"]) != []  # the same cells and folders
    assert out["cuda"].startswith("# --device cuda: the commands below leave out --cpu")
    assert "--device" not in out["cpu"]  # the default's output is as it was
    # the report's command is the table's, on either device
    assert reproducing_argv([T4, "--device", "cuda", "--seeds", "3"]) == [T4, "--seeds", "3"]


def test_cuda_without_a_gpu_is_refused_in_one_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: --device cuda runs")
    with pytest.raises(SystemExit) as refused:
        main([T4, "--device", "cuda", "--work", str(tmp_path)])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device cuda, but torch sees no CUDA device" in err
    assert "leave out --device" in err
    assert not list(tmp_path.iterdir())  # refused before any data is built


def argv_kind():
    """A table kind whose one step is a process that writes the arguments it was given."""
    def steps(spec, row, seed, scale, settings, data, folder, parent):
        return [Step("argv.log", argv=[sys.executable, "-c", "import sys; print(sys.argv[1:])",
                                        "--cpu"])]

    return SimpleNamespace(
        prepare=lambda spec, scale, settings, work, say: {"description": "none"},
        cell_settings=lambda spec, row, seed, scale, settings, data: {"seed": seed},
        steps=steps, collect=lambda spec, row, folder: {"score": 1.0})


SPEC = TableSpec(name="argv", title="arguments", paper="-", claim="-", kind="translation",
                 metrics=(Metric("score", "score"),), rows=(Row("only", "Only"),), toy={})


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_record_says_the_device_and_the_other_device_reuses_it(device, tmp_path,
                                                                   monkeypatch):
    for module in (runner, cell_plan):  # the table's run, and its cells' keys
        monkeypatch.setattr(module, "kind_module", lambda name: argv_kind())
    records = tmp_path / "records"

    def options(work: str, on: str) -> RunOptions:
        return RunOptions(seeds=1, work=tmp_path / work, records=records, device=on,
                          say=lambda _: None)

    (cell,), _ = run_table(SPEC, options("here", device))
    given = (cell.folder / "argv.log").read_text().strip()
    assert given == ("['--cpu']" if device == "cpu" else "[]")
    (record,) = records.glob("argv/*.json")
    assert json.loads(record.read_text())["device"] == device
    other = "cuda" if device == "cpu" else "cpu"
    # the other device's call, with this work folder or only the records (another machine):
    # the same key, so the cell is found, not trained again
    for work in ("here", "elsewhere"):
        (again,), _ = run_table(SPEC, options(work, other))
        assert again.key == cell.key and again.result["device"] == device
    assert not (tmp_path / "elsewhere" / "cells").exists()


def test_a_data_folder_copied_elsewhere_is_read_where_it_is(tmp_path):
    def build(folder):
        (folder / "corpus.txt").write_text("words\n")
        return {"description": "built"}

    built = shared_data(tmp_path / "here", "x", {"a": 1}, build, lambda _: None)
    copy = tmp_path / "there" / "data"
    shutil.copytree(tmp_path / "here" / "data", copy)  # carried to another machine

    def rebuilt(folder):
        raise AssertionError("built again")

    found = shared_data(tmp_path / "there", "x", {"a": 1}, rebuilt, lambda _: None)
    assert found == {**built, "folder": str(copy / Path(built["folder"]).name)}
