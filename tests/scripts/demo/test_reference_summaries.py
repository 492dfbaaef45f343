"""The summaries' reference rows and unigram floor, against their formulas by hand."""

from __future__ import annotations

import math

import pytest

from scripts.common.run_record import Run
from scripts.demo.reference_rows import late_drop
from scripts.demo.reference_summaries import (
    lead_summary,
    median_length,
    reference_outputs,
    reference_scores,
    trivial_summary,
    unigram_entropy,
)
from scripts.demo.report import summary_findings
from scripts.demo.summarization import SummaryReferences, reference_labels
from scripts.recipes.lib.score import rouge_scores


def test_unigram_entropy_is_the_add_one_cross_entropy_of_valid_under_train():
    train = ["a b", "a"]            # counts a 2, b 1, </s> 2: N = 5
    valid = ["a c"]                 # tokens a, c, </s>
    vocabulary = 10                 # p(w) = (c(w) + 1) / (5 + 10)
    expected = -(math.log2(3 / 15) + math.log2(1 / 15) + math.log2(3 / 15)) / 3
    assert unigram_entropy(train, valid, vocabulary) == pytest.approx(expected, rel=1e-15)
    # a dictionary smaller than the tokens seen is raised to them: a, b, c, </s>
    small = -(math.log2(3 / 9) + math.log2(1 / 9) + math.log2(3 / 9)) / 3
    assert unigram_entropy(train, valid, 2) == pytest.approx(small, rel=1e-15)
    assert math.isnan(unigram_entropy(train, [], vocabulary))


def test_unigram_entropy_of_a_text_under_its_own_counts_approaches_its_entropy():
    # with a huge corpus the smoothing vanishes: the entropy of the empirical distribution
    line = "x x y"
    train = [line] * 20000
    p = {"x": 2 / 4, "y": 1 / 4, "</s>": 1 / 4}
    entropy = -sum(q * math.log2(q) for q in p.values())
    assert unigram_entropy(train, [line], 4) == pytest.approx(entropy, abs=1e-3)


def test_trivial_lead_and_median_length():
    summaries = ["list the files", "create a file", "delete the file now", "a b"]
    assert median_length(summaries) == 3      # lengths 2, 3, 3, 4: the upper median
    assert median_length([]) == 1
    # the, a and file twice each (ties in order of first appearance), then the once-words
    assert trivial_summary(summaries, 3) == "the a file"
    assert trivial_summary(summaries, 4) == "the a file list"
    assert lead_summary("synopsis: ls [option] description: list", 3) == "synopsis: ls [option]"
    outputs = reference_outputs(summaries, ["one two three four", "five"])
    assert outputs == {"trivial": ["the a file"] * 2, "lead": ["one two three", "five"]}
    references = ["the file a", "five words"]
    scores = reference_scores(summaries, ["one two three four", "five"], references)
    assert scores["trivial"] == rouge_scores(outputs["trivial"], references)
    assert scores["lead"] == rouge_scores(outputs["lead"], references)
    assert scores["trivial"]["rouge1"] == 50.0  # 3/3 words of the first, none of the second


def _references(trivial_rouge1: float = 20.0) -> SummaryReferences:
    return SummaryReferences(
        words=5, entropy_bits=7.5,
        scores={"trivial": {"rouge1": trivial_rouge1, "rouge2": 0.5, "rougeL": 19.0},
                "lead": {"rouge1": 40.0, "rouge2": 12.0, "rougeL": 30.0}})


HEADERS = ["model", "params", "valid nll", "ROUGE-1", "ROUGE-2", "ROUGE-L", "train speed"]


def test_reference_rows_fill_only_what_applies():
    rows = _references().rows(HEADERS)
    labels = reference_labels(5)
    assert rows == [
        [labels["trivial"], "-", 7.5, 20.0, 0.5, 19.0, "-"],
        [labels["lead"], "-", "-", 40.0, 12.0, 30.0, "-"],
    ]


def _model(label: str, nll: float, rouge1: float, speed: float = 1.0,
           updates: object = 700) -> dict:
    return {"label": label, "valid nll": nll, "ROUGE-1": rouge1, "train speed": speed,
            "updates": updates}


def test_findings_say_when_the_comparison_is_not_meaningful():
    lines = _references(trivial_rouge1=25.0).findings(
        [_model("vanilla", 7.0, 12.9), _model("pyramidion", 7.1, 4.6, 1.6)])
    text = "\n".join(lines)
    assert "0.50 bits below" in text and "less than the 2 bits" in text
    assert "not meaningful at this budget" in text and "25.00" in text
    assert "within" not in text  # no ROUGE comparison printed as one


def test_findings_print_the_entropy_gap_and_the_pyramidion_gap_with_its_speed():
    lines = _references().findings(
        [_model("vanilla", 5.0, 30.0), _model("transpooler", 5.2, 19.0, 1.0),
         _model("pyramidion", 5.1, 27.5, 1.4)])
    text = "\n".join(lines)
    assert "2.50 bits below" in text and "learnt from its inputs" in text
    assert "not meaningful" not in text
    assert "above the trivial output's 20.00: vanilla, pyramidion;" in text
    assert "pyramidion against vanilla: both learned" in text
    assert "ahead" not in text and "**not a comparison of the methods**" in text
    assert "ROUGE-1 -2.50 points (not within 2 points of each other)" in text
    assert "1.40x the vanilla speed" in text
    assert "last quarter of its updates: not recorded" in text  # no curves in these rows


def test_summary_findings_give_each_curves_fall_over_its_last_quarter():
    def run(key: str, rouge1: float, cpu: float, losses: list) -> Run:
        return Run(key, key, "arch", [], data="summaries", updates=700, budget_updates=700,
                   train_cpu=cpu, valid_nll=5.0, rouge={"rouge1": rouge1}, losses=losses)

    # updates 0..700 by 35: the tenth before the last quarter is 455..525 (455, 490, 525), the
    # last tenth 630..700 (630, 665, 700); the vanilla curve falls 0.004 bits an update there,
    # from a mean of 6 - 0.004 * 490 = 4.04 to 6 - 0.004 * 665 = 3.34: 0.70; the Pyramidion's
    # is flat: 0.00
    vanilla = run("vanilla", 30.0, 140.0, [(u, 6.0 - 0.004 * u) for u in range(0, 701, 35)])
    pyramidion = run("pyramidion", 29.0, 100.0, [(u, 5.0) for u in range(0, 701, 35)])
    assert late_drop(vanilla.losses) == pytest.approx(0.7, abs=1e-12)
    sentence = summary_findings([vanilla, pyramidion], _references())[-1]
    assert sentence.startswith("pyramidion against vanilla: both learned (ROUGE-1 29.00 and "
                               "30.00, above the trivial row's 20.00; valid nll 2.50 and "
                               "2.50 bits below the unigram entropy; ROUGE-1 -1.00 points "
                               "(within 2 points of each other), training 1.40x the vanilla "
                               "speed per update); **not a comparison of the methods**: ")
    assert "over the last quarter of its updates: 0.00 and 0.70 bits" in sentence
    assert "ahead" not in sentence


def test_a_model_the_safety_cap_stopped_is_left_out_of_the_comparisons():
    lines = _references().findings(
        [_model("vanilla", 5.0, 30.0), _model("pyramidion", 5.1, 27.5, 1.4,
                                              updates="400 (not finished)")])
    text = "\n".join(lines)
    assert "above the trivial output's 20.00: vanilla;" in text
    assert "pyramidion against vanilla: **not meaningful**: pyramidion is not finished" in text
    assert "ahead" not in text and "within" not in text
