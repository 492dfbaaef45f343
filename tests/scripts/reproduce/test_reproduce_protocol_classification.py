"""The training protocol on sparse-softmax's classification table, through the real fairseq
command line on fixture gettext catalogs: the tiny scale screens a row's rates on seed 1 by
the valid error rate (100 - fairseq's valid accuracy, which it maximises), keeps the best, and
the cell at that rate stops at a plateau of that rate, validated twice an epoch
(the epoch :func:`epoch_updates` counts, as fairseq batches it), and scores its best validated
checkpoint; its figures are read back from the logs, and are the model's own on the test
split (fairseq-validate finds the same accuracy)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from scripts.common.fairseq_log import json_log_records
from scripts.reproduce.__main__ import main
from scripts.reproduce.kinds import classification
from scripts.reproduce.tables import TABLES
from tests.scripts.analysis.domain_catalogs import write_domain_catalogs
from tests.scripts.reproduce.fairseq_epoch import fairseq_epoch
from tests.scripts.reproduce.protocol_records import chosen_cell

from helpers import USER_DIR, fairseq_command, run_command

TABLE = "sparse_softmax_classification"
ROW = "sparse_k1"  # its loss, max(z) - z_t, is far from the error rate


def logged(folder: Path, key: str) -> list:
    """``[[update, value], ...]`` of ``valid_<key>`` in the cell's own train.log."""
    lines = (folder / "train.log").read_text().splitlines()
    return [[int(record["valid_num_updates"]), float(record[f"valid_{key}"])]
            for record in json_log_records(lines, "valid")]


@pytest.mark.slow
def test_a_classifier_takes_its_best_rate_and_scores_its_plateau(tmp_path):
    locale = write_domain_catalogs(tmp_path / "locale")
    work, out = tmp_path / "work", tmp_path / "reproduction.md"
    assert main([TABLE, "--scale", "tiny", "--seeds", "1", "--rows", ROW, "--set",
                 f"locale_dir={locale}", "--work", str(work), "--out", str(out)]) == 0
    found = {path.name: json.loads(path.read_text()) for path in
             (tmp_path / "reproduction" / "cells" / "tiny" / TABLE).glob("*.json")}
    spec = TABLES[TABLE]
    settings = spec.settings("tiny")
    cells = work / "cells" / "tiny" / TABLE

    def folder(record: dict) -> Path:
        return cells / f"{ROW}-seed1-{record['key'][:12]}"

    # the grid: one seed-1 cell a rate, trained, not scored, compared by the error rate
    chosen, grid, scored = chosen_cell(found, ROW, settings, "valid_error", "micro_f1")
    assert "valid_nll" not in scored["figures"] and "valid_loss" not in scored["figures"]
    # a curve is 100 - the valid accuracy fairseq logged, not its loss; validated every half
    # epoch and nowhere else
    data_bin = next(work.glob("data/classification/data-bin"))
    epoch = classification.epoch_updates(data_bin, settings["batch_size"])
    every = epoch // settings["validations_per_epoch"]
    for name in grid:
        record = found[name]
        accuracy = logged(folder(record), "accuracy")
        assert record["curve"] == [[update, 100.0 - value] for update, value in accuracy]
        assert record["curve"] != logged(folder(record), "loss")
    for record in found.values():
        assert [update for update, _ in record["curve"]] == [
            update for update in range(1, record["updates"] + 1) if update % every == 0]
    # the chosen rate's grid cell stopped at its cap: the longer cell, trained from scratch
    # at the same seed and rate, validated as it did up to there and went on
    cell = folder(scored)
    screened = found[f"{ROW}-seed1-lr{chosen:g}.json"]
    assert screened["stopped"] == "cap" and "continued_from" not in scored
    assert scored["curve"][:len(screened["curve"])] == screened["curve"]
    assert scored["updates"] > screened["updates"]
    # the scored model is the best validated one, in the chosen cell's own folder
    from fairseq import checkpoint_utils

    best = checkpoint_utils.load_checkpoint_to_cpu(str(cell / "checkpoint_best.pt"))
    # fairseq keeps the best accuracy
    assert best["extra_state"]["best"] == pytest.approx(100.0 - scored["figures"]["valid_error"])
    from scripts.analysis.classification import evaluate

    assert json.loads((cell / "scores.json").read_text()) == pytest.approx(
        evaluate(cell / "checkpoint_best.pt", data_bin))
    # its figures, read back from its logs: F1 from scores.json, the error from train.log
    row = spec.row(ROW)
    figures = classification.collect(spec, row, cell)
    for key in ("accuracy", "micro_f1", "macro_f1", "valid_error"):
        assert figures[key] == scored["figures"][key]
    assert 0 <= figures["macro_f1"] <= 100
    # fairseq-validate on the test split, counting correct sentences in the criterion, finds
    # the same accuracy (logged to 0.1)
    validate = run_command([fairseq_command("fairseq-validate"), data_bin, "--user-dir",
                            USER_DIR, "--task", "sentence_prediction", "--criterion",
                            "sparse_softmax_sentence_prediction", "--path",
                            cell / "checkpoint_best.pt", "--valid-subset", "test",
                            "--batch-size", "64", "--cpu", "--num-workers", "0"], cwd=tmp_path)
    accuracy = re.search(r"valid on 'test' subset .*\| accuracy ([\d.]+)",
                         validate.stdout + validate.stderr)
    assert accuracy, validate.stderr[-3000:]
    assert figures["accuracy"] == pytest.approx(float(accuracy.group(1)), abs=0.06)
    assert "micro_f1" not in classification.collect(spec, replace(row, hidden=True),
                                                     folder(screened))
    # the report: the rate, the grid beside it, how the seed stopped, the row's micro-F1
    text = out.read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("| sparse-softmax @ 1 ")
               and f"| {chosen:g} |" in line]
    assert "1 plateau" in line and f"{chosen:g}: " in line
    assert "rate grid (seed 1's valid error rate)" in text
    assert "from the grid by valid error rate" in text
    assert "(each row's own criterion)" not in text
    assert f"{scored['figures']['micro_f1']:.2f}" in text


def test_a_classifier_validates_twice_the_epoch_fairseq_batches(tmp_path):
    """The toy command (at the tiny data) parses with fairseq's parser, trains to a plateau
    on the error rate (fairseq: the accuracy, maximised) with what a resumption needs, and
    validates every half of the epoch that fairseq's sentence_prediction task batches."""
    spec = TABLES[TABLE]
    locale = write_domain_catalogs(tmp_path / "locale")
    settings = {**spec.settings("tiny"), "locale_dir": str(locale)}
    data = classification.prepare(spec, "tiny", settings, tmp_path, lambda _: None)
    toy = {**spec.settings("toy"), "batch_size": settings["batch_size"]}
    for row in (spec.row("cross_entropy"), spec.row(ROW)):
        (train, score) = classification.steps(spec, row, 1, "tiny", toy, data,
                                              tmp_path / row.key, None)
        assert train.trains and score.log == "scores.json"
        args, updates = fairseq_epoch(train.argv)
        epoch = classification.epoch_updates(Path(data["folder"]), settings["batch_size"])
        assert updates == epoch > 2
        assert args.validate_interval_updates == args.save_interval_updates == epoch // 2
        assert args.best_checkpoint_metric == "accuracy" and args.maximize_best_checkpoint_metric
        assert (args.patience, args.max_epoch) == (toy["patience"], toy["max_epoch"])
        assert not (args.no_last_checkpoints or args.no_save_optimizer_state)
        assert args.save_dir == str(tmp_path / row.key)
        # a grid cell is trained only
        assert len(classification.steps(spec, replace(row, hidden=True), 1, "tiny", toy, data,
                                        tmp_path / row.key, None)) == 1


def test_the_classification_table_says_the_budget_its_settings_train():
    spec = TABLES[TABLE]
    settings = spec.settings("toy")
    assert settings["patience"] > 0 and "lr_grid" in settings
    (budget,) = [d for d in spec.deviations if d.setting == "budget"]
    assert f"{settings['max_epoch']}-epoch screening" in budget.ours
    assert f"at most {settings['plateau_max_epoch']})" in budget.ours
    assert "10 epochs" in spec.notes and "34.12" in spec.notes  # the former figures kept
