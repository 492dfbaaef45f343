"""ReLUFormer Table 5 at the training protocol, through the real fairseq command line on
fixture catalogs: its ReLUFormer row is Table 4's model (``same_as``), measured, never
trained again, with the attention figures in Table 5's own folder; its ablation rows choose a
rate on their grid and train to a plateau like any protocol row, their attention measured
after decoding."""

from __future__ import annotations

import json
import shutil

import pytest

from scripts.reproduce.__main__ import main
from scripts.reproduce.kinds.translation import ATTENTION
from scripts.reproduce.tables import TABLES
from tests.scripts.reproduce.settings_args import GRID, copy_table4_data, copy_table4_run, sets

pytestmark = pytest.mark.slow
T4, T5 = "relu_former_table4", "relu_former_table5"


def attention_means(folder) -> dict:
    (model,) = json.loads((folder / ATTENTION).read_text())["models"]
    return model["attention"]


def test_table5_rows_are_table4_models_or_one_change_from_relu_former():
    spec, table4 = TABLES[T5], TABLES[T4]
    relu_former = table4.row("relu_former").flags
    assert spec.row("softmax").same_as == f"{T4}:transformer"
    assert spec.row("softmax").flags == table4.row("transformer").flags
    assert spec.row("relu_former").same_as == f"{T4}:relu_former"
    assert spec.row("relu_former").flags == relu_former
    changes = {"no_regularisers": ("--attention-norm-loss-weight", "0",
                                   "--attention-entropy-loss-weight", "0"),
               "norm_only": ("--attention-entropy-loss-weight", "0"),
               "entropy_only": ("--attention-norm-loss-weight", "0"),
               "no_factor": ("--attention-norm-loss-weight", "0",
                             "--attention-entropy-loss-weight", "0",
                             "--relu-attention-scaling", "none"),
               "self_relu_only": ("--cross-attention-activation", "softmax")}
    for key, change in changes.items():
        assert spec.row(key).flags == (*relu_former, *change) and spec.row(key).same_as is None
    # every comparison names a row of the table; the attention figures are asked for
    assert {key for claim in spec.comparisons for key in (claim.better, claim.worse)} <= {
        row.key for row in spec.rows}
    assert spec.settings("toy")["attention_sentences"] >= 1033  # the whole French valid split


def test_the_relu_former_row_measures_table4s_cell_without_training_it(tmp_path, capsys,
                                                                     table4_relu_former):
    # Table 4's relu_former row run first, at its one-rate grid (conftest.py: run once)
    locale = copy_table4_run(table4_relu_former, tmp_path)
    work, out = tmp_path / "work", tmp_path / "reproduction.md"
    common = ["--scale", "tiny", "--seeds", "1", "--work", str(work), "--out", str(out)]
    data = {"locale_dir": str(locale)}
    table5 = [T5, "--rows", "relu_former", *sets(data), *sets({**data, **GRID}, T4), *common]
    records = tmp_path / "reproduction" / "cells" / "tiny"
    (chosen_record,) = [path for path in (records / T4).glob("*.json")
                        if not json.loads(path.read_text())["search"]]
    chosen = json.loads(chosen_record.read_text())
    cells4 = work / "cells" / "tiny" / T4
    parent = cells4 / f"relu_former-seed1-{chosen['key'][:12]}"
    before = {path: path.stat().st_mtime_ns for path in cells4.rglob("*")}

    # a dry run: Table 4's cell is cached, Table 5's only measures it
    capsys.readouterr()
    assert main([*table5, "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert f"# {T4}:relu_former, seed 1 -> {parent}  (lr 0.04): cached\n" in said
    assert "fairseq-train" not in said and "fairseq-generate" not in said
    assert f"-m scripts.analysis.analyze_attention {work}/data/" in said
    assert f"--path {parent}/checkpoint_best.pt" in said
    assert f"--json {work}/cells/tiny/{T5}/relu_former-seed1-" in said

    assert main(table5) == 0
    # Table 4's folders as they were: nothing trained, decoded or written there
    assert {path: path.stat().st_mtime_ns for path in cells4.rglob("*")} == before
    (cell,) = (work / "cells" / "tiny" / T5).iterdir()
    result = json.loads((cell / "result.json").read_text())
    measured = attention_means(cell)
    assert json.loads((cell / ATTENTION).read_text())["models"][0]["path"] == str(
        parent / "checkpoint_best.pt")
    assert (cell / "attention" / "analyze_attention.md").is_file()
    # Table 4's figures and how its model learnt, with this table's attention figures
    figures = result["figures"]
    assert figures["entropy"] == measured["entropy"] > 0
    assert figures["zeros"] == measured["zeros"] and 0 < figures["zeros"] < 1  # ReLU zeros
    assert {key: figures[key] for key in chosen["figures"]} == chosen["figures"]
    assert (result["lr"], result["curve"], result["stopped"]) == (
        chosen["lr"], chosen["curve"], chosen["stopped"])
    assert result["same_as"] == f"{T4}/{parent.name}" and result["key"] != chosen["key"]
    (record,) = (records / T5).glob("*.json")
    assert json.loads(record.read_text())["key"] == result["key"]
    text = out.read_text().split(f"reproduce:{T5} start")[1]
    assert "1 of 1 cells finished" in text
    assert f"| ReLUFormer (factor + both regularisers) | {chosen['figures']['bleu']:.2f} |" in text
    assert f"| {measured['entropy']:.2f} | - | {measured['zeros']:.3f} | - | 1 |" in text
    stamp = (cell / ATTENTION).stat().st_mtime_ns
    assert main(table5) == 0  # measured once
    assert (cell / ATTENTION).stat().st_mtime_ns == stamp

    # a fresh clone: the records, no checkpoints: Table 4's cell is to be trained again first,
    # then measured (a dry run says so). A run trains it as it does the cell of any row that
    # starts from another table's (cell_plan.foreign_parents): into Table 4's folder, under
    # its own key, which test_reproduce_table_parents's (a) checks
    shutil.rmtree(work / "cells")
    record.unlink()
    capsys.readouterr()
    assert main([*table5, "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert (f"# {T4}:relu_former, seed 1 -> {parent}  (lr 0.04): cached (recorded; not "
            "finished in this work folder: trained again first") in said
    assert f"# relu_former, seed 1 -> {work}/cells/tiny/{T5}/relu_former-seed1-" in said
    assert "    (the model it measures has not trained yet)\n" in said
    assert f"--path {parent}/checkpoint_best.pt" in said and not (work / "cells").exists()


def test_an_ablation_row_trains_to_a_plateau_and_measures_its_attention(tmp_path, table4_data):
    locale = copy_table4_data(table4_data, tmp_path)  # Table 4's (and 5's) data, built once
    work = tmp_path / "work"
    assert main([T5, "--rows", "no_regularisers", "--scale", "tiny", "--seeds", "1",
                 *sets({"locale_dir": str(locale), **GRID}), "--work", str(work),
                 "--out", str(tmp_path / "reproduction.md")]) == 0
    records = {path.name: json.loads(path.read_text()) for path in
               (tmp_path / "reproduction" / "cells" / "tiny" / T5).glob("*.json")}
    cap = TABLES[T5].settings("tiny")["plateau_max_epoch"]
    assert sorted(records) == sorted(["no_regularisers-seed1-lr0.04.json",
                                      f"no_regularisers-seed1-lr0.04-max_epoch{cap}.json"])
    chosen = records[f"no_regularisers-seed1-lr0.04-max_epoch{cap}.json"]
    assert chosen["stopped"] in ("plateau", "cap") and len(chosen["curve"]) >= 2
    cell = work / "cells" / "tiny" / T5 / f"no_regularisers-seed1-{chosen['key'][:12]}"
    train = (cell / "train.log").read_text()
    # the regularised criterion with both weights 0, the factor kept, to a plateau
    assert "'criterion': {'_name': 'regularized_label_smoothed_cross_entropy'" in train
    assert "'attention_norm_loss_weight': 0.0" in train
    assert "'attention_entropy_loss_weight': 0.0" in train
    assert "'patience': 2," in train and "'max_update': 0," in train
    # the decoded model is the one measured
    decoded = f"{cell}/checkpoint_best.pt"
    assert decoded in (cell / "generate-test-beam2.txt").read_text()
    measured = attention_means(cell)
    assert json.loads((cell / ATTENTION).read_text())["models"][0]["path"] == decoded
    assert chosen["figures"]["entropy"] == measured["entropy"] > 0
    assert chosen["figures"]["zeros"] == measured["zeros"]
    assert chosen["figures"]["bleu"] >= 0
    assert not (work / "cells" / "tiny" / T4).exists()  # no Table 4 model needed
