"""A cell's training resumed from its last checkpoint keeps fairseq's ``--patience`` count
(``scripts/reproduce/patient_train.py``): the count replayed from a validation curve, the
curve of a seeded folder, and a real tiny training stopped half-way and resumed, which stops
at the update, with the curve, of the same training run in one go; and its checkpoint copies
are atomic."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace

import pytest
import torch
from fairseq import checkpoint_utils

import relu_former.plugin  # noqa: F401  (the allowlist torch.load needs here)
from scripts.common.child_processes import child_env, stream
from scripts.reproduce import patient_train
from scripts.reproduce.cell_plan import at_rate
from scripts.reproduce.kinds import translation
from scripts.reproduce.log_figures import training_record
from scripts.reproduce.tables import TABLES
from tests.scripts.reproduce.settings_args import data_folder

TABLE = "relu_former_table4"


def test_the_count_is_fairseqs_rule_replayed_on_the_curve():
    # a strictly lower value sets the best; equal or worse ones count
    assert patient_train.patience_state([5.0, 4.0, 4.2, 4.0, 3.9, 4.1, 3.9]) == (3.9, 2)
    assert patient_train.patience_state([5.0]) == (5.0, 0)
    assert patient_train.patience_state([]) == (None, 0)
    # a NaN after the best counts as no improvement, as fairseq's comparison reads it
    assert patient_train.patience_state([4.0, math.nan, 4.5]) == (4.0, 2)


def valid_line(update: int, nll: float) -> str:
    record = {"epoch": 1, "valid_nll_loss": str(nll), "valid_num_updates": str(update)}
    return f"2026-01-01 00:00:00 | INFO | valid | {json.dumps(record)}\n"


def test_a_resumed_training_counts_from_its_logs_curve_up_to_its_checkpoint(tmp_path):
    def count(updates: int) -> tuple:
        curve = patient_train.curve_so_far(tmp_path, updates)
        return patient_train.patience_state([nll for _, nll in curve])

    assert patient_train.curve_so_far(tmp_path, 10) == []  # no log yet
    (tmp_path / "train.log").write_text("".join(valid_line(*point) for point in [
        (2, 5.0), (4, 4.0), (6, 4.3), (8, 4.1), (10, 3.0)]))
    assert patient_train.curve_so_far(tmp_path, 8) == [[2, 5.0], [4, 4.0], [6, 4.3], [8, 4.1]]
    # validations after the checkpoint are made again by the resumed training
    assert count(8) == count(9) == (4.0, 2)
    assert count(10) == (3.0, 0)
    assert count(4) == (4.0, 0)


def test_the_launcher_takes_fairseq_trains_arguments_and_name(capsys, monkeypatch,
                                                              loggers_restored):
    train = ["/venv/bin/fairseq-train", "data", "--patience", "2"]
    launched = patient_train.command(train)
    assert launched == [sys.executable, "-m", patient_train.MODULE, "data", "--patience", "2"]
    assert patient_train.train_args(launched) == patient_train.train_args(train) == [
        "data", "--patience", "2"]
    # fairseq-train's own parser, under fairseq-train's name (the plugin's error style): its
    # main in this process (every cell's training runs the module as a process), the argv and
    # fairseq functions it replaces put back after the test
    from fairseq.tasks import FairseqTask
    from fairseq_cli import train as fairseq_train

    for owner, name in ((sys, "argv"), (fairseq_train, "should_stop_early"),
                        (fairseq_train.checkpoint_utils, "load_checkpoint"),
                        (FairseqTask, "get_batch_iterator")):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    with pytest.raises(SystemExit) as shown:
        patient_train.main(["--help"])
    out = capsys.readouterr().out
    assert shown.value.code == 0 and out.startswith("usage: fairseq-train")
    assert "--patience" in out


def test_a_training_stopped_half_way_stops_where_the_uninterrupted_one_stops(
        tmp_path, table4_data, table4_transformer):
    spec = TABLES[TABLE]
    # 4e-2 reaches a plateau on the fixture catalogs (patience 2; toy_settings.py)
    settings = at_rate({**spec.settings("tiny"), "locale_dir": str(table4_data / "locale"),
                        "max_epoch": spec.settings("tiny")["plateau_max_epoch"]}, 4e-2)
    data = data_folder(table4_data)  # Table 4's tiny data, built once
    (step,) = translation.steps(spec, replace(spec.row("transformer"), hidden=True), 1, "tiny",
                                settings, {"folder": str(data)}, tmp_path / "halves", None)

    # the same command run in one go, on one thread: Table 4's Transformer row, whose chosen
    # rate, 4e-2, the runner trained to its plateau (conftest.py: trained once, read only)
    record = json.loads((table4_transformer / "reproduction" / "cells" / "tiny" / TABLE / (
        f"transformer-seed1-lr0.04-max_epoch{settings['max_epoch']}.json")).read_text())
    whole = table4_transformer / "work" / "cells" / "tiny" / TABLE / (
        f"transformer-seed1-{record['key'][:12]}")
    uninterrupted = training_record(whole / "train.log", settings["patience"])
    curve = uninterrupted["curve"]
    assert uninterrupted["stopped"] == "plateau"
    # stopped at the validation after the best, one of its patience of 2 spent: a count that
    # starts again there would train 2 validations more than the run in one go
    best = min(range(len(curve)), key=lambda i: curve[i][1])
    assert best == len(curve) - 1 - settings["patience"]
    half = curve[best + 1][0]

    halves = tmp_path / "halves"
    # the first half: the same command stopped at that validation (it saves its last
    # checkpoint there), the second the same command resumed after its log, as the runner
    # resumes a training stopped half-way
    code, _ = stream([*step.argv, "--max-update", str(half)], halves / step.log,
                     lambda _: None, child_env(1))
    assert code == 0 and training_record(halves / step.log, 2)["updates"] == half
    code, _ = stream(step.argv, halves / step.log, lambda _: None, child_env(1), append=True)
    assert code == 0
    # fairseq on one CPU thread with the same seed: the same validations, the same stop, and
    # the same model to the bit (the resumption drew the batches the run in one go drew)
    assert training_record(halves / step.log, settings["patience"]) == uninterrupted
    models = [checkpoint_utils.load_checkpoint_to_cpu(str(folder / "checkpoint_last.pt"))
              ["model"] for folder in (whole, halves)]
    assert models[0].keys() == models[1].keys()
    assert all(torch.equal(models[0][name], models[1][name]) for name in models[0])
    log = (halves / step.log).read_text()
    assert "Loaded checkpoint" in log
    # fairseq's copies to checkpoint_best/last went through the launcher's atomic copy
    assert (halves / "checkpoint_last.pt").is_file()
    assert not list(halves.glob("*.copying"))
    assert (f"resumed at update {half}: --patience goes on from the best nll_loss "
            f"{curve[best][1]}, 1 validation(s) since it") in log
