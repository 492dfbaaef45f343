"""The training protocol end to end, through the real fairseq command line on a fixture
catalog: Table 4's tiny scale chooses a row's rate from a 3-point grid and trains to a
plateau (a grid cell at a plateau stands for the chosen rate's longer-capped cell; the run of
``conftest.py``, which the generation table's test fine-tunes a copy of); a time budget stops
a table, then a SIGTERM stops it as a spent budget does (the CPU time trained so far kept),
and the same command completes it: one training, stopped twice; a fresh work folder takes
the finished cells from the records beside the report instead of training them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.common.repo_paths import REPO_ROOT
from scripts.reproduce.__main__ import main
from scripts.reproduce.tables import TABLES
from tests.scripts.reproduce.settings_args import copy_table4_data

pytestmark = pytest.mark.slow
TABLE = "relu_former_table4"
# one rate, 20 epochs of 4 updates (validated every 2) without a plateau
BUDGET = ["--set", "lr_grid=[0.01]", "--set", "lr_limits=[0.01,0.01]", "--set",
          "max_epoch=20", "--set", "patience=1000"]


def arguments(locale: Path, tmp_path: Path, work: str, *extra: str) -> list:
    return [TABLE, "--scale", "tiny", "--seeds", "1", "--rows", "transformer", "--set",
            f"locale_dir={locale}", *extra, "--work", str(tmp_path / work),
            "--out", str(tmp_path / "reproduction.md")]


def records(tmp_path: Path) -> dict:
    folder = tmp_path / "reproduction" / "cells" / "tiny" / TABLE
    return {path.name: json.loads(path.read_text()) for path in folder.glob("*.json")}


def row_line(tmp_path: Path) -> str:
    text = (tmp_path / "reproduction.md").read_text()
    return next(line for line in text.splitlines() if line.startswith("| Transformer"))


def test_a_row_takes_its_best_rate_of_a_grid_and_trains_to_a_plateau(table4_transformer):
    run = table4_transformer  # the tiny scale's own settings (conftest.py)
    found = records(run)
    settings = TABLES[TABLE].settings("tiny")
    grid = {f"transformer-seed1-lr{lr:g}.json": lr for lr in settings["lr_grid"]}
    nll = {lr: found[name]["figures"]["valid_nll"] for name, lr in grid.items()}
    chosen = min(nll, key=nll.get)
    # the chosen rate's cell may train up to plateau_max_epoch epochs: a cell of its own
    longer = f"transformer-seed1-lr{chosen:g}-max_epoch{settings['plateau_max_epoch']}.json"
    assert sorted(found) == sorted([*grid, longer])
    decoded = [record for record in found.values() if not record["search"]]
    assert [record["lr"] for record in decoded] == [chosen]  # only the chosen one decoded
    assert decoded[0]["figures"]["bleu"] >= 0
    # its grid cell stopped at a plateau below the grid's cap: trained in one go from scratch
    # under the larger cap, the chosen cell stops there too (fairseq-train is deterministic)
    screened = found[f"transformer-seed1-lr{chosen:g}.json"]
    assert screened["stopped"] == decoded[0]["stopped"] == "plateau"
    assert decoded[0]["curve"] == screened["curve"]
    assert decoded[0]["figures"]["valid_nll"] == screened["figures"]["valid_nll"]
    # every cell's curve: validations at rising updates, the table's nll the best of them
    for record in found.values():
        updates = [update for update, _ in record["curve"]]
        assert updates == sorted(set(updates)) and record["updates"] >= updates[-1]
        assert record["figures"]["valid_nll"] == min(nll for _, nll in record["curve"])
    plateaus = [record for record in found.values() if record["stopped"] == "plateau"]
    assert plateaus and all(len(record["curve"]) >= 3 for record in plateaus)
    assert not any(record["still_improving"] for record in plateaus)
    # the decoded model is the best validated one, in the chosen cell's own folder
    (cell,) = (run / "work").glob(f"cells/tiny/{TABLE}/transformer-seed1-*/"
                                  "generate-test-beam2.txt")
    assert f"{cell.parent}/checkpoint_best.pt" in cell.read_text()
    assert cell.parent.name.endswith(decoded[0]["key"][:12])


def sigterm_once_saved(argv: list, log: Path, after: int) -> tuple[int, str]:
    """Run the table as a process and send SIGTERM to the runner alone once its training has
    validated and saved a checkpoint past the first ``after`` characters of ``log``; its exit
    status and stderr."""
    runner = subprocess.Popen([sys.executable, "-m", "scripts.reproduce", *argv],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=REPO_ROOT)
    try:
        began = time.monotonic()
        while time.monotonic() - began < 900 and runner.poll() is None:  # a busy machine's
            if "Saved checkpoint" in log.read_text()[after:]:  # saved after validating
                break
            time.sleep(0.1)
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
    return runner.returncode, err


def test_a_time_budget_or_a_sigterm_stops_the_table_which_the_same_command_completes(
        tmp_path, capsys, table4_data):
    locale = copy_table4_data(table4_data, tmp_path)  # Table 4's data, built once
    argv = arguments(locale, tmp_path, "work", *BUDGET)
    spent = "the time budget (--budget-minutes) is spent"
    # no time: no cell starts
    assert main([*argv, "--budget-minutes", "0"]) == 1
    assert spent in capsys.readouterr().err
    assert not list((tmp_path / "work").rglob("train.log"))
    # 2 seconds: fairseq-train is stopped before it has finished (starting it takes about
    # that long; stopped after its first checkpoint, it continues from there)
    assert main([*argv, "--budget-minutes", "0.033"]) == 1
    assert spent in capsys.readouterr().err
    (log,) = (tmp_path / "work").rglob("train.log")
    stopped = log.read_text()
    assert "done training" not in stopped and records(tmp_path) == {}
    saved = (log.parent / "checkpoint_last.pt").is_file()
    # the same command, run as a process: a SIGTERM stops it as a spent budget does
    status, err = sigterm_once_saved(argv, log, len(stopped))
    assert status == 143, err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith(
        "python -m scripts.reproduce: stopped by SIGTERM: 0 cells finished in this call")
    # it continued the training, after its log and from its checkpoint if one was saved
    resumed = log.read_text()
    assert resumed.startswith(stopped) and ("Loaded checkpoint" in resumed[len(stopped):]
                                            or not saved)
    # and stopped it (not waited for), its CPU seconds so far kept
    assert "done training" not in resumed and records(tmp_path) == {}
    first = float((log.parent / "train.log.cpu").read_text())
    assert first > 0
    assert main(argv) == 0  # the same command completes it, after its log, from its checkpoint
    assert log.read_text().startswith(resumed)
    assert "Loaded checkpoint" in log.read_text()[len(resumed):]
    (record,) = records(tmp_path).values()
    assert record["lr"] == 0.01 and not record["search"] and record["stopped"] == "cap"
    assert [update for update, _ in record["curve"]] == list(range(2, 81, 2))
    assert record["figures"]["train_cpu_seconds"] > first  # the whole training's
    row = row_line(tmp_path)
    # a fresh clone: another work folder, the records beside the report
    assert main(arguments(locale, tmp_path, "fresh", *BUDGET)) == 0
    assert not list((tmp_path / "fresh").rglob("train.log"))  # nothing trained again
    assert "1 of 1 cells finished" in (tmp_path / "reproduction.md").read_text()
    assert row_line(tmp_path) == row  # the same figures
