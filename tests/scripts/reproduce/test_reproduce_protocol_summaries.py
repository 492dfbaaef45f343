"""The training protocol on the Pyramidion summary tables, through the real fairseq command
line on fixture manual pages: Table 7's tiny scale screens a row's rates on seed 1, keeps the
best valid nll's, and the cell at that rate stops at a plateau, validated twice an epoch of
the summary data (the epoch :func:`epoch_updates` counts for the doc/sum pair), and decodes
its best validated checkpoint on the process's CPU clock; its figures are read back from the
logs, and the report names the trivial summary's ROUGE beside them."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from scripts.demo.reference_summaries import median_length, trivial_summary
from scripts.recipes.lib.prepare_text import read_lines
from scripts.recipes.lib.score import rouge_scores
from scripts.reproduce.__main__ import main
from scripts.reproduce.kinds import summarization
from scripts.reproduce.kinds.translation import epoch_updates
from scripts.reproduce.tables import TABLES
from tests.scripts.reproduce.protocol_records import chosen_cell

pytestmark = pytest.mark.slow
TABLE = "pyramidion_table7"


def test_a_summary_row_takes_its_best_rate_and_decodes_its_plateau(tmp_path, table7_data):
    man = (table7_data / "man").resolve()  # and its data, built once (conftest.py)
    work, out = tmp_path / "work", tmp_path / "reproduction.md"
    shutil.copytree(table7_data / "work" / "data", work / "data")
    assert main([TABLE, "--scale", "tiny", "--seeds", "1", "--rows", "pyramidion", "--set",
                 f"man_dir={man}", "--work", str(work), "--out", str(out)]) == 0
    folder = tmp_path / "reproduction" / "cells" / "tiny" / TABLE
    found = {path.name: json.loads(path.read_text()) for path in folder.glob("*.json")}
    spec = TABLES[TABLE]
    settings = spec.settings("tiny")
    # the grid: one seed-1 cell a rate, trained, not decoded
    chosen, _, decoded = chosen_cell(found, "pyramidion", settings, "valid_nll", "rouge1")
    # validated every half epoch of fairseq-train's batching and nowhere else (not at an
    # epoch's end: the tiny epoch is odd, 2 x every + 1)
    data_bin = next(work.glob("data/summarization-*/bin"))
    positions = (settings["source_tokens"], settings["target_tokens"] + 8)
    epoch = epoch_updates(data_bin, settings["max_tokens"], positions, ("doc", "sum"))
    every = epoch // settings["validations_per_epoch"]
    assert epoch % every  # an epoch end that falls between two validations
    for record in found.values():
        assert [update for update, _ in record["curve"]] == [
            update for update in range(1, record["updates"] + 1) if update % every == 0]
    # the decoded model is the best validated one, in the chosen cell's own folder
    cell = work / "cells" / "tiny" / TABLE / f"pyramidion-seed1-{decoded['key'][:12]}"
    generated = (cell / "generate-test.txt").read_text()
    assert f"{cell}/checkpoint_best.pt" in generated
    assert "2:32,3:16" in (cell / "train.log").read_text()  # the Pyramidion's pooling
    # the decoding loop on the process's CPU clock (one thread: about its wall time, which
    # fairseq prints to 0.1 s; measured on Table 4's decoding, 7.47-7.67 CPU s against
    # 7.4-7.6 s on a quiet machine), logged after fairseq's own line
    assert 0 < decoded["figures"]["decode_cpu_seconds"] <= (
        1.05 * decoded["figures"]["decode_seconds"] + 0.05)
    lines = generated.splitlines()
    fairseq_line, cpu_line = (next(i for i, line in enumerate(lines) if text in line)
                              for text in ("Translated ", "Decoding CPU time: "))
    assert fairseq_line < cpu_line == len(lines) - 1
    # its figures, read back from its logs: ROUGE from the scorer's file, nll from train.log
    row = next(row for row in spec.rows if row.key == "pyramidion")
    figures = summarization.collect(spec, row, cell)
    scored = json.loads((cell / "score-test.json").read_text())
    assert figures["rouge1"] == decoded["figures"]["rouge1"] == pytest.approx(scored["rouge1"])
    assert figures["valid_nll"] == decoded["figures"]["valid_nll"]
    assert 0 <= figures["rouge1"] <= 100 and decoded["figures"]["train_cpu_per_update"] > 0
    # a grid cell's: its training figures only
    screened = next(path.parent for path in work.rglob("pyramidion-seed1-*/train.log")
                    if path.parent != cell and not (path.parent / "score-test.json").exists())
    assert "rouge1" not in summarization.collect(spec, replace(row, hidden=True),
                                                 screened)
    # the report: the rate, the grid beside it, how the seed stopped, the row's ROUGE-1
    text = out.read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("| Pyramidion")
               and f"| {chosen:g} |" in line]
    assert "1 plateau" in line and f"{chosen:g}: " in line
    assert line.startswith("| Pyramidion (blocks of L/4")
    assert f"{decoded['figures']['rouge1']:.2f}" in text
    # what a model must beat, on the table's own test pages, beside the results
    prep = next(work.glob("data/summarization-*/prep"))
    references = read_lines(prep / "test.reference")
    summaries = read_lines(prep / "train.reference")
    trivial = rouge_scores([trivial_summary(summaries, median_length(summaries))]
                           * len(references), references)
    assert f"(trivial) score ROUGE-1 {trivial['rouge1']:.2f}," in text


@pytest.mark.parametrize("name", ["pyramidion_table4", TABLE])
def test_each_summary_table_says_the_budget_its_settings_train(name):
    settings = TABLES[name].settings("toy")
    assert settings["max_update"] is None and settings["patience"] > 0
    (budget,) = [d for d in TABLES[name].deviations if d.setting == "budget"]
    assert f"of {settings['max_epoch']} epochs" in budget.ours
    assert f"at most {settings['plateau_max_epoch']})" in budget.ours
    assert "700 updates" in TABLES[name].notes  # the former budget's figures kept
