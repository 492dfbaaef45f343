"""The shared reference rows and comparison sentences, and the translation table's rows."""

from __future__ import annotations

import math

import pytest

from scripts.common.fairseq_generate import sacre_bleu
from scripts.common.run_record import Run
from scripts.demo.reference_rows import (
    LATE_DROP,
    References,
    finished,
    late_drop,
    updates_cell,
)
from scripts.demo.reference_summaries import unigram_entropy
from scripts.demo.report import TABLE_HEADERS, translation_findings, translation_table
from scripts.demo.translation_references import (
    measure_translation_references,
    translation_labels,
)
from scripts.recipes.lib.prepare_text import write_lines


def _references(copy_bleu: float = 3.0) -> References:
    return References(labels={"copy": "reference: copy", "trivial": "reference: trivial"},
                      scores={"copy": {"BLEU": copy_bleu}, "trivial": {"BLEU": 1.0}},
                      entropy_bits=9.0, entropy_row="trivial", metric="BLEU",
                      targets="the target sentences", floor_rows=("copy", "trivial"))


def _model(label: str, nll: float, bleu: float, updates: object = 800) -> dict:
    return {"label": label, "valid nll": nll, "BLEU": bleu, "updates": updates}


def test_rows_put_the_unigram_entropy_in_the_trivial_row_and_dashes_elsewhere():
    rows = _references().rows(["model", "updates", "valid nll", "BLEU", "train s"])
    assert rows == [["reference: copy", "-", "-", 3.0, "-"],
                    ["reference: trivial", "-", 9.0, 1.0, "-"]]


def test_both_learned_gives_the_figures_and_says_why_they_rank_nothing():
    first = {**_model("softmax", 6.5, 26.4), LATE_DROP: 0.314}
    line = _references().comparison(first, {**_model("relu", 6.9, 22.6), LATE_DROP: 0.1})
    assert line.startswith("softmax against relu: both learned (BLEU 26.40 and 22.60")
    assert "2.50 and 2.10 bits below" in line and "not meaningful" not in line
    assert "**not a comparison of the methods**: one seed each" in line
    assert "over the last quarter of its updates: 0.31 and 0.10 bits" in line
    assert line.endswith("(docs/reproduction.md compares such models trained to a plateau, "
                         "each at its own rate, over 3 seeds).")
    assert "ahead" not in line
    assert "last quarter of its updates: not recorded" in _references().comparison(
        first, _model("relu", 6.9, 22.6))


def test_the_late_drop_is_the_fall_into_the_last_tenth():
    # updates 0..100: the tenth before the last quarter is 65..75, the last tenth 90..100
    losses = [(u, 10.0 - 0.02 * u) for u in range(0, 101, 5)]
    # means: 65, 70, 75 -> 8.6; 90, 95, 100 -> 8.1
    assert late_drop(losses) == pytest.approx(0.5, abs=1e-12)
    assert late_drop([(u, 3.0) for u in range(10, 110, 10)]) == 0.0  # a flat curve
    assert math.isnan(late_drop([])) and math.isnan(late_drop([(100, 3.0)]))


@pytest.mark.parametrize("second, reason", [
    (_model("relu", 7.1, 22.6), "relu's valid nll is 1.90 bits below the unigram entropy"),
    (_model("relu", 6.0, 3.0), "relu's BLEU 3.00 is not above the copy and trivial rows' 3.00"),
    (_model("relu", 6.0, 22.6, "316 (not finished)"),
     "relu is not finished (the safety cap stopped it after 316 updates)"),
])
def test_not_meaningful_unless_both_learned_and_why(second, reason):
    line = _references().comparison(_model("softmax", 6.5, 26.4), second)
    assert "**not meaningful**" in line and reason in line
    assert "ahead" not in line
    assert "softmax" not in line.split(":", 1)[1].split("(learned")[0]  # softmax learned


def test_the_bar_is_the_best_reference_row():
    # BLEU 5 beats the trivial row's 1 but not the copy row's 6
    assert "not above the copy and trivial rows' 6.00" in _references(copy_bleu=6.0).comparison(
        _model("a", 6.0, 5.0), _model("b", 6.0, 7.0))


def test_updates_cell_marks_a_run_that_did_not_finish():
    assert updates_cell(800, True) == 800
    assert updates_cell(316, False) == "316 (not finished)"
    assert finished({"updates": 800}) and not finished({"updates": "316 (not finished)"})
    run = Run("relu", "ReLUFormer", "arch", [], updates=316, budget_updates=800)
    assert not run.finished
    assert dict(zip(TABLE_HEADERS, translation_table([run], None)[0]))["updates"] == (
        "316 (not finished)")


def _work(tmp_path):
    """A work folder with the files the translation references read."""
    work = tmp_path / "work"
    write_lines(work / "raw" / "test.de", ["Datei öffnen", "GNOME Terminal 3.2 beta version"])
    write_lines(work / "raw" / "test.en", ["Open file", "GNOME Terminal 3.2 beta version"])
    write_lines(work / "prep" / "tok.train.en", ["open the file", "the file", "close the file"])
    write_lines(work / "prep" / "sentences" / "train.en", ["op@@ en the file", "the file"])
    write_lines(work / "prep" / "sentences" / "valid.en", ["the fi@@ le"])
    write_lines(work / "bin" / "sentences" / "dict.en.txt", ["the 3", "file 2", "op@@ 1"])
    return work


def test_translation_references_score_the_copy_and_the_frequent_words(tmp_path):
    work = _work(tmp_path)
    references = measure_translation_references(work)
    targets = ["Open file", "GNOME Terminal 3.2 beta version"]
    assert references.labels == translation_labels(3)  # the upper median of 3, 2, 3 words
    assert references.scores["copy"]["BLEU"] == pytest.approx(
        sacre_bleu(["Datei öffnen", "GNOME Terminal 3.2 beta version"], targets))
    assert references.scores["copy"]["BLEU"] > 0  # the program name survives translation
    assert references.scores["trivial"]["BLEU"] == pytest.approx(
        sacre_bleu(["the file open"] * 2, targets))
    assert references.entropy_bits == pytest.approx(
        unigram_entropy(["op@@ en the file", "the file"], ["the fi@@ le"], 3 + 4))
    assert math.isfinite(references.entropy_bits)


def test_translation_findings_compare_the_pairs_by_run_key(tmp_path):
    runs = [Run(key, key.upper(), "arch", [], updates=800, budget_updates=800,
                valid_nll=nll, bleu=bleu)
            for key, nll, bleu in (("softmax", 6.0, 26.4), ("relu", 6.5, 22.6),
                                   ("finetune_ce", 5.0, 30.4), ("finetune_sparse", 8.0, 30.4))]
    # softmax still falling 0.002 bits an update (0.4 from the 520-600 window to 720-800),
    # relu flat
    runs[0].losses = [(u, 5.0 - 0.002 * u) for u in range(0, 801, 40)]
    runs[1].losses = [(u, 4.0) for u in range(0, 801, 40)]
    lines = translation_findings(runs, _references())
    assert lines[0].startswith("Unigram entropy of the target sentences: 9.00 bits/token; "
                               "SOFTMAX: valid nll 6.00 bits, 3.00 bits below it")
    assert "SOFTMAX against RELU: both learned" in lines[1]
    assert "ahead" not in lines[1] and "**not a comparison of the methods**" in lines[1]
    assert "last quarter of its updates: 0.40 and 0.00 bits" in lines[1]  # from their curves
    assert lines[2].startswith("FINETUNE_CE against FINETUNE_SPARSE: **not meaningful**")
    assert "FINETUNE_SPARSE's valid nll is 1.00 bits below" in lines[2]
    assert len(lines) == 3
    rows = translation_table(runs, _references())
    assert [row[0] for row in rows[-2:]] == ["reference: copy", "reference: trivial"]
