"""Sparse-softmax's generation table at the training protocol: at toy and tiny scale both rows
fine-tune ReLUFormer Table 4's Transformer cell of their own seed, each until its own
criterion's valid loss (fairseq's ``loss``, the table's ``validation_loss``) stops improving,
and decode the best validated checkpoint; ``valid_nll`` is that model's full-softmax nll. At
paper scale both fine-tune the best checkpoint of one Transformer the gigaword_10k recipe
trains, the table's hidden row. Checked on the spec, on the plan and the fairseq-train
commands, on fairseq-train logs written here, and in a tiny run through the real fairseq
command line on a fixture catalog."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from scripts.common.fairseq_train import final_learning_rate
from scripts.reproduce.__main__ import main
from scripts.reproduce.cell_plan import foreign_parents, parent_of, plan, selected_rows
from scripts.reproduce.kinds import stopping_loss, translation
from scripts.reproduce.log_figures import validation_curve
from scripts.reproduce.report import section
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.spec import split_parent
from scripts.reproduce.tables import TABLES
from tests.scripts.reproduce.settings_args import GRID, copy_table4_data, copy_table4_run, sets

T4, GEN = "relu_former_table4", "sparse_softmax_generation"
ROWS = ("finetune_ce", "finetune_sparse")


def test_both_rows_fine_tune_table4s_transformer_to_a_plateau_of_their_own_loss():
    spec = TABLES[GEN]
    toy, paper = spec.settings("toy"), spec.settings("paper")
    assert [row.key for row in spec.rows if not row.hidden] == list(ROWS)
    assert all(spec.row(row).parent == f"{T4}:transformer" for row in ROWS)
    for scale in ("toy", "tiny"):  # Table 4's model, not the hidden paper-scale start
        settings = spec.settings(scale)
        assert [row.key for row in selected_rows(spec, None, settings)] == list(ROWS)
        assert foreign_parents(selected_rows(spec, None, settings), settings) == {
            T4: ["transformer"]}
        assert all(parent_of(spec.row(row), settings) == f"{T4}:transformer" for row in ROWS)
    # the model it starts from; the sparse row only changes the criterion
    softmax = TABLES[T4].row("transformer").flags
    assert spec.row("finetune_ce").flags == spec.row("pretrained").flags == softmax
    assert spec.row("finetune_sparse").flags[:len(softmax)] == softmax
    # each row stops on its own criterion's loss; Table 4, which it starts from, on the nll
    assert stopping_loss(spec) == "loss" and stopping_loss(TABLES[T4]) == "nll_loss"
    # the sentence data of Table 4 (one dictionary), trained to a plateau, no update cap
    data = ("locale_dir", "lang", "block_tokens", "valid_per_mille", "test_per_mille",
            "max_train_pairs", "max_test_docs", "lengths", "vocab")
    for scale in ("toy", "tiny"):
        ours, theirs = spec.settings(scale), TABLES[T4].settings(scale)
        assert {k: ours[k] for k in data} == {k: theirs[k] for k in data}
        assert ours["warmup"] == theirs["warmup"]  # the rate its schedule had reached
        assert "finetune_update" not in ours and "lr_grid" not in ours
    assert (toy["patience"], toy["validations_per_epoch"], toy["max_epoch"],
            toy["max_update"]) == (4, 2, 30, None)
    assert toy["beams"] == [1, 5]
    # at paper scale Table 4's models are IWSLT14's: both rows start from the table's hidden
    # row, the recipe's softmax Transformer, trained only there
    assert paper["recipe"] == "gigaword_10k" and foreign_parents(spec.rows, paper) == {}
    start = spec.row("pretrained")
    assert start.hidden and start.parent is None and start.recipe_model == "transformer"
    assert [row.key for row in selected_rows(spec, None, paper)] == ["pretrained", *ROWS]
    assert [row.key for row in selected_rows(spec, ["finetune_sparse"], paper)] == [
        "pretrained", "finetune_sparse"]
    assert all(parent_of(spec.row(row), paper) == "pretrained" for row in ROWS)


def test_a_fine_tuning_cell_starts_from_table4s_cell_of_its_seed(tmp_path):
    data = {"folder": str(tmp_path), "description": "fake"}
    options = RunOptions(scale="toy", seeds=3, work=tmp_path)
    theirs = plan(TABLES[T4], replace(options, rows=["transformer"]), data,
                  {"transformer": 5e-3})
    parents = {(f"{T4}:{cell.row.key}", cell.seed): cell for cell in theirs}
    cells = plan(TABLES[GEN], options, data, parents=parents)
    assert sorted((cell.row.key, cell.seed) for cell in cells) == sorted(
        (row, seed) for row in ROWS for seed in (1, 2, 3))
    for cell in cells:
        assert cell.parent is parents[f"{T4}:transformer", cell.seed]
        assert cell.lr == 5e-3  # Table 4's chosen rate (its schedule's, from there on)
        assert cell.folder.parent == tmp_path / "cells" / "toy" / GEN
    # another start, another cell; the two rows are two cells
    other = plan(TABLES[GEN], options, data, parents={
        key: replace(cell, key="0" * 64) for key, cell in parents.items()})
    assert not {cell.key for cell in cells} & {cell.key for cell in other}
    assert len({cell.key for cell in cells}) == 6
    # the loss a cell stops on is in its key; Table 4's cells keep theirs (nll, not named)
    row = TABLES[GEN].row("finetune_ce")
    assert translation.cell_settings(TABLES[GEN], row, 1, "toy", {}, data)[
        "validation_loss"] == "loss"
    assert "validation_loss" not in translation.cell_settings(
        TABLES[T4], TABLES[T4].rows[0], 1, "toy", {}, data)


def test_the_dry_run_trains_each_row_on_its_own_loss_from_table4s_model(tmp_path, capsys,
                                                                       table4_data):
    locale = copy_table4_data(table4_data, tmp_path)  # Table 4's (and this table's) data
    work = tmp_path / "work"
    data = {"locale_dir": str(locale)}
    assert main([GEN, "--scale", "tiny", "--seeds", "2", "--dry-run", *sets(data),
                 *sets({**data, **GRID}, T4), "--work", str(work)]) == 0
    out = capsys.readouterr().out
    # Table 4's cells at its chosen rate (not its grid's), planned by Table 4's run
    starts = {seed: [line.split()[5] for line in out.splitlines()
                     if line.startswith(f"# {T4}:transformer, seed {seed} -> ")
                     and "a rate of the grid" not in line] for seed in (1, 2)}
    assert all(len(found) == 1 for found in starts.values())
    trains = {}
    for row in ROWS:
        for seed in (1, 2):
            block = out.split(f"# {row}, seed {seed} -> ")[1].split("\n# ")[0]
            (trains[row, seed],) = [line for line in block.splitlines()
                                    if "scripts.reproduce.patient_train" in line]
            # from Table 4's cell of the same seed (not trained yet: its last checkpoint)
            (start,) = starts[seed]
            assert f"--finetune-from-model {start}/checkpoint_last.pt" in trains[row, seed]
    for command in trains.values():
        assert "--best-checkpoint-metric loss" in command
        assert "--patience 2 " in command and "--max-epoch 40 " in command
        assert "--lr-scheduler fixed" in command
    sparse = "--criterion sparse_softmax_cross_entropy --sparse-softmax-k 20"
    assert sparse in trains["finetune_sparse", 1] and sparse not in trains["finetune_ce", 1]
    assert "# pretrained, seed" not in out  # the paper scale's start is not trained here
    assert not list(work.rglob("train.log"))  # nothing ran


def test_the_paper_scale_fine_tunes_one_recipe_transformer_both_ways(tmp_path, capsys):
    assert main([GEN, "--scale", "paper", "--dry-run", "--seeds", "2", "--work",
                 str(tmp_path / "work"), "--out", str(tmp_path / "reproduction.md")]) == 0
    out = capsys.readouterr().out
    assert "iwslt14" not in out and T4 not in out  # not Table 4's models
    # each cell's commands, under its "# ROW, seed S -> FOLDER" line
    blocks = {(row, seed): (folder, commands) for row, seed, folder, commands in re.findall(
        r"^# (\w+), seed (\d) -> (\S+)\n(.*?)(?=^# |\Z)", out, re.M | re.S)}
    assert sorted(blocks) == sorted((row, seed) for row in ("pretrained", *ROWS)
                                    for seed in ("1", "2"))
    recipe = "scripts/recipes/gigaword_10k"
    for seed in ("1", "2"):
        # the start: the recipe's Transformer, trained from scratch and not decoded
        folder, start = blocks["pretrained", seed]
        assert f"{recipe}/train.sh transformer -- --seed {seed}\n" in start
        assert "--finetune-from-model" not in start and "evaluate.sh" not in start
        # each row: that model's best checkpoint, fine-tuned by the recipe with its criterion
        for row, model in zip(ROWS, ("transformer", "sparse_softmax")):
            _, block = blocks[row, seed]
            assert (f"{recipe}/train.sh {model} -- --seed {seed} --finetune-from-model "
                    f"{folder}/checkpoint_best.pt\n") in block
            (train,) = [line for line in block.splitlines() if "fairseq-train " in line]
            assert train.endswith(f"--finetune-from-model {folder}/checkpoint_best.pt")
            for beam in (1, 5):
                assert f"{recipe}/evaluate.sh {model} -- --beam {beam}\n" in block
    assert not list(tmp_path.rglob("result.json"))  # nothing ran


def fairseq_log(valid: list) -> str:
    """A finished fairseq-train json log with ``valid`` = [(update, loss, nll)]."""
    lines = ['2026-01-01 00:00:01 | INFO | train_inner | {"epoch": 1, "loss": "9.1", '
             '"nll_loss": "8.5", "num_updates": "10"}']
    lines += ['2026-01-01 00:00:02 | INFO | valid | {"epoch": 1, '
              f'"valid_loss": "{loss}", "valid_nll_loss": "{nll}", '
              f'"valid_num_updates": "{update}"}}' for update, loss, nll in valid]
    lines.append("2026-01-01 00:00:04 | INFO | fairseq_cli.train | done training in 3.0 "
                 "seconds")
    return "\n".join(lines) + "\n"


def test_a_row_that_stops_on_its_loss_reports_the_decoded_models_nll(tmp_path):
    # the sparse loss is lowest at update 30 (twice: the later is kept), the nll at 10
    (tmp_path / "train.log").write_text(fairseq_log(
        [(10, 5.0, 3.0), (20, 4.5, 3.4), (30, 4.2, 3.9), (40, 4.4, 4.0), (50, 4.2, 4.1)]))
    (tmp_path / "score-test-beam1.json").write_text(json.dumps({"bleu4_tokenized": 12.5}))
    spec = TABLES[GEN]
    figures = translation.collect(spec, spec.row("finetune_sparse"), tmp_path)
    assert figures["valid_loss"] == 4.2 and figures["first_loss"] == 9.1
    assert figures["valid_nll"] == 4.1  # the nll of checkpoint_best.pt, not the lowest
    assert figures["bleu_beam1"] == figures["bleu"] == 12.5
    assert "first_nll" not in figures
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert min(nll for _, nll in validation_curve(lines)) == 3.0
    # a table that stops on the nll reads the same log as before: its lowest nll
    table4 = TABLES[T4]
    figures = translation.collect(table4, table4.row("transformer"), tmp_path)
    assert figures["valid_nll"] == 3.0 and "valid_loss" not in figures


def test_the_report_names_the_grid_table4s_loss_and_the_stop_the_rows_own():
    spec = TABLES[GEN]
    cells = [SimpleNamespace(row=spec.row(row), seed=seed, lr=5e-3, stale=None,
                             lr_grid=[[2.5e-3, 2.3], [5e-3, 2.2]],
                             result={"stopped": "plateau", "updates": 900.0,
                                     "figures": {"bleu_beam1": 20.0 + seed, "valid_loss": 4.0,
                                                 "bleu_beam5": 21.0, "valid_nll": 3.0}})
             for row in ROWS for seed in (1, 2, 3)]
    text = section(spec, cells, {}, "toy", 3, "cmd")
    assert "| row | rate | rate grid (seed 1's valid nll) | stopped | updates |" in text
    assert ("its learning rate (chosen on seed 1 from the grid by valid nll), how its seeds "
            "stopped (`plateau`: valid loss (each row's own criterion) stopped improving"
            in text)
    assert "| + sparse-softmax (k 20, top-5 decoding) | 0.005 | 0.0025: 2.30, 0.005: 2.20 | " \
           "3 plateau | 900 |" in text


@pytest.mark.slow
def test_a_tiny_run_fine_tunes_table4s_best_model_to_a_plateau_of_each_loss(
        tmp_path, table4_transformer):
    # Table 4's start, trained by Table 4's protocol (its grid), in a copy of that run
    # (conftest.py); both rows fine-tune it
    locale = copy_table4_run(table4_transformer, tmp_path)
    work, out = tmp_path / "work", tmp_path / "reproduction.md"
    data = {"locale_dir": str(locale)}
    t4_logs = {log: log.read_text() for log in (work / "cells" / "tiny" / T4).rglob("*.log")}
    assert main([GEN, "--scale", "tiny", "--seeds", "1", *sets(data), *sets(data, T4),
                 "--work", str(work), "--out", str(out)]) == 0
    # Table 4's cells were taken as they were, not trained again
    assert {log: log.read_text() for log in (work / "cells" / "tiny" / T4).rglob("*.log")} == (
        t4_logs)
    records = tmp_path / "reproduction" / "cells" / "tiny"
    (start,) = [json.loads(path.read_text()) for path in (records / T4).glob("*.json")
                if not json.loads(path.read_text())["search"]]
    (parent,) = (work / "cells" / "tiny" / T4).glob(f"transformer-seed1-{start['key'][:12]}")
    found = {path.name: json.loads(path.read_text()) for path in (records / GEN).glob("*")}
    assert sorted(found) == [f"{row}-seed1-lr{start['lr']:g}.json" for row in ROWS]
    best = translation.best_validation(start["curve"])[0]
    rate = final_learning_rate(start["lr"], TABLES[GEN].settings("tiny")["warmup"], best)
    for record in found.values():  # each stopped at a plateau of its own loss
        assert record["stopped"] == "plateau" and not record["still_improving"]
        assert not record["search"] and len(record["curve"]) >= 3
        updates = [update for update, _ in record["curve"]]
        assert updates == sorted(set(updates)) and record["updates"] >= updates[-1]
        figures = record["figures"]
        assert figures["valid_loss"] == min(loss for _, loss in record["curve"])
        assert 0 <= figures["bleu_beam1"] <= 100 and 0 <= figures["bleu_beam2"] <= 100
        cell = work / "cells" / "tiny" / GEN / f"{record['row']}-seed1-{record['key'][:12]}"
        log = (cell / "train.log").read_text()
        # from the model Table 4 decodes, at the rate its schedule had reached there
        assert f"'finetune_from_model': '{parent}/checkpoint_best.pt'" in log
        assert re.search(rf"'lr_scheduler': {{'_name': 'fixed'.*'lr': \[{rate:.6g}\]", log)
        assert "'best_checkpoint_metric': 'loss'" in log and "'patience': 2," in log
        assert "'max_update': 0," in log and "'max_epoch': 40," in log
        # the curve is the row's own loss; valid nll that of the model decoded
        assert record["curve"] == validation_curve(log.splitlines(), "loss")
        assert figures["valid_nll"] == translation.decoded_nll(cell / "train.log", "loss")
        for beam in (1, 2):
            generated = (cell / f"generate-test-beam{beam}.txt").read_text()
            assert f"{cell}/checkpoint_best.pt" in generated
    (sparse_log,) = (work / "cells" / "tiny" / GEN).glob("finetune_sparse-seed1-*/train.log")
    assert "'_name': 'sparse_softmax_cross_entropy'" in sparse_log.read_text()
    text = out.read_text().split(f"reproduce:{GEN} start")[1]
    assert "2 of 2 cells finished" in text and "rate grid (seed 1's valid nll)" in text
    assert "| Transformer (softmax) |" not in text  # Table 4's row is not a row of this one
    assert split_parent(TABLES[GEN].row("finetune_ce").parent) == (T4, "transformer")
    assert not list((work / "cells" / "tiny" / GEN).glob("pretrained-*"))  # paper scale's
