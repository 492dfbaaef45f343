"""The classification benchmark: its scores against scikit-learn, and a tiny end-to-end run of
both criteria (fairseq-preprocess, fairseq-train, test-set evaluation, table and plot) on
fixture catalogs."""

from __future__ import annotations

import json
import random

import pytest
from sklearn.metrics import f1_score

from scripts.analysis.classification import (
    evaluate,
    f1_scores,
    main,
    parse_args,
    parse_ks,
    prepare_data,
)

from domain_catalogs import write_domain_catalogs


def test_scores_match_scikit_learn():
    rng = random.Random(0)
    targets = [rng.randrange(12) for _ in range(300)]
    predictions = [t if rng.random() < 0.6 else rng.randrange(14) for t in targets]
    got = f1_scores(predictions, targets)
    assert got["accuracy"] == pytest.approx(
        100 * sum(p == t for p, t in zip(predictions, targets)) / 300, abs=1e-12)
    assert got["micro_f1"] == pytest.approx(
        100 * f1_score(targets, predictions, average="micro"), abs=1e-9)
    assert got["micro_f1"] == pytest.approx(got["accuracy"], abs=1e-9)  # single label
    assert got["macro_f1"] == pytest.approx(
        100 * f1_score(targets, predictions, average="macro"), abs=1e-9)
    assert got["macro_f1"] < got["micro_f1"]
    with pytest.raises(ValueError):
        f1_scores([], [])


def test_parse_ks():
    assert parse_ks("20,1, 5,5") == [1, 5, 20]
    for bad in ("0,3", "a", ""):
        with pytest.raises(Exception, match="k must be|integers"):
            parse_ks(bad)


@pytest.mark.slow
def test_tiny_run_trains_both_criteria_and_writes_the_table(tmp_path, capsys,
                                                            loggers_restored):
    locale = write_domain_catalogs(tmp_path / "locale")
    out = tmp_path / "out"
    # main() in this process, as prepare_data and evaluate below (its trainings are
    # processes): no interpreter start and fairseq import of its own; loggers_restored puts
    # back the log levels it sets and closes fairseq-preprocess's log file
    assert main(["--tiny", "--locale-dir", str(locale), "--out", str(out), "--jobs", "2"]) == 0
    stderr = capsys.readouterr().err
    result = json.loads((out / "classification.json").read_text())
    assert result["corpus"]["classes"] == 4
    runs = {run["name"]: run for run in result["runs"]}
    assert list(runs) == ["cross-entropy", "sparse k=1", "sparse k=3"]
    assert "--criterion sentence_prediction " in runs["cross-entropy"]["command"]
    assert "--criterion sparse_softmax_sentence_prediction --sparse-softmax-k 3" in (
        runs["sparse k=3"]["command"])
    for name, run in runs.items():
        assert len(run["valid_accuracy"]) == 2, name  # one validation per epoch
        assert 0 <= run["test"]["accuracy"] <= 100
        assert run["test"]["micro_f1"] == pytest.approx(run["test"]["accuracy"])
        # the evaluation reproduces what fairseq measured on valid with the best checkpoint
        checkpoint = out / "work" / "checkpoints" / name.replace(" ", "_").replace("=", "")
        valid = evaluate(checkpoint / "checkpoint_best.pt", out / "work" / "data-bin", "valid")
        assert valid["accuracy"] == pytest.approx(max(run["valid_accuracy"]), abs=0.06)
    table = (out / "classification.md").read_text()
    assert "| cross-entropy |" in table and "| sparse k=3 |" in table
    assert (out / "classification_k_sweep.png").stat().st_size > 1000
    assert "[sparse k=1] epoch 2/2: valid accuracy" in stderr  # progress
    # the same corpus flags reuse the corpus and binarized data
    args = parse_args(["--tiny", "--locale-dir", str(locale), "--out", str(out)])
    data, info = prepare_data(args)
    assert "reusing the corpus" in capsys.readouterr().err
    assert data == out / "work" / "data-bin" and info == result["corpus"]
    with pytest.raises(SystemExit) as bad:
        main(["--out", str(out), "--ks", "0"])
    assert bad.value.code == 2 and "--ks" in capsys.readouterr().err
