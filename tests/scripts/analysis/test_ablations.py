"""The ablation script: a tiny real run through the CLI, and a diverged run as a result."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from scripts.analysis import ablations

from catalog_fixtures import write_fixture_catalogs
from helpers import table_by_label


def printed_table(stdout: str) -> dict:
    return table_by_label(stdout, ablations.HEADERS)


def recomputed_norm_loss(checkpoint: Path, data_bin: Path, sentences: int) -> float:
    """L_norm of a ReLU model without the variance factor, from its definition: the mean of
    |log max(S_i, eps)| over every row of every attention, S_i the row's sum of ReLU scores.

    Without the factor the weights an attention applies are its raw ReLU scores, so S_i is
    read from the per-head weights the modules return, apart from the row statistics (and the
    regulariser code) that the table's column comes from.
    """
    import torch
    from fairseq import checkpoint_utils

    import relu_former.plugin  # noqa: F401  (registers the models before the load)
    from relu_former.relu_attention.attention import ActivationMultiheadAttention
    from relu_former.relu_attention.regularisers import ROW_SUM_EPS

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data_bin)})
    model = models[0].eval()
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    row_sums = []

    def ask_weights(module, args, kwargs):
        kwargs.update(need_weights=True, need_head_weights=True)
        return args, kwargs

    def keep_row_sums(module, args, output):
        row_sums.append(output[1].sum(-1).flatten())

    modules = [m for m in model.modules() if isinstance(m, ActivationMultiheadAttention)]
    assert {m.activation for m in modules} == {"relu"} and len(modules) == 3
    handles = [handle for m in modules for handle in (
        m.register_forward_pre_hook(ask_weights, with_kwargs=True),
        m.register_forward_hook(keep_row_sums))]
    try:
        with torch.no_grad():
            for index in range(min(len(dataset), sentences)):  # one sentence a batch: no pad
                model(**dataset.collater([dataset[index]])["net_input"])
    finally:
        for handle in handles:
            handle.remove()
    sums = torch.cat(row_sums).double()
    return float(sums.clamp(min=ROW_SUM_EPS).log().abs().mean())


@pytest.mark.slow
def test_tiny_ablation_run_prints_the_table(tmp_path, capsys, one_thread):
    locale = write_fixture_catalogs(tmp_path / "locale")
    out = tmp_path / "out"
    variants = ["softmax", "no_factor"]
    # main() in this process (its fairseq commands are processes): no interpreter start and
    # imports of its own; one_thread puts back the thread count it sets
    assert ablations.main(["--tiny", "--quiet", "--jobs", "1", "--threads", "1",
                           "--locale-dir", str(locale), "--out", str(out),
                           "--variants", *variants]) == 0
    stdout = capsys.readouterr().out
    assert "3/4 training 2 variants" in stdout  # progress output
    rows = printed_table(stdout)
    assert list(rows) == [ablations.VARIANTS[key][0] for key in variants]
    for key in variants:
        row = rows[ablations.VARIANTS[key][0]]
        # trained its budget, decoded the test split from the reloaded checkpoint, measured
        assert int(row["updates"]) == ablations.ABLATION_SCALES["tiny"].budget.max_update
        assert math.isfinite(float(row["BLEU"])) and math.isfinite(float(row["entropy"]))
        assert (out / "work" / key / "generate.log").is_file()
    assert rows["Transformer (softmax)"]["L_norm"] == "-"  # softmax is not regularised
    # L_norm against the definition, recomputed from the checkpoint on the same sentences
    expected = recomputed_norm_loss(out / "work" / "no_factor" / "checkpoint_last.pt",
                                    out / "work" / "bin" / "sentences",
                                    ablations.ABLATION_SCALES["tiny"].analysis_sentences)
    saved = json.loads((out / "ablations.json").read_text())["no_factor"]["norm_loss"]
    assert saved == pytest.approx(expected, rel=1e-4)
    printed = float(rows["ReLU without the variance factor"]["L_norm"])  # 3 digits
    assert printed == pytest.approx(expected, rel=5e-3)
    report = (out / "ablations.md").read_text()
    assert "--relu-attention-scaling none" in report and "Wall time" in report


def test_a_diverged_run_is_a_result(tmp_path, monkeypatch):
    def fairseq_stops(run, *args):
        run.losses = [(1, 9.0), (2, 7.5)]
        raise RuntimeError("fairseq-train failed for no_factor (exit 1):\n...\n"
                           "FloatingPointError: Minimum loss scale reached (0.0001). Your "
                           "loss is probably exploding (nan)")

    monkeypatch.setattr(ablations, "train", fairseq_stops)
    run = ablations.plan(["no_factor"])[0]
    result = ablations.Result()
    ablations.train_variant(run, result, tmp_path, tmp_path, None, None, 0)
    assert not result.converged and "loss is probably exploding" in result.diverged
    row = ablations.table_rows([run], {run.key: result})[0]
    assert row[-1] == "diverged" and row[2] == "-"  # no BLEU, no crash
    path = ablations.write_report(tmp_path, [run], {run.key: result}, dict(
        command="x", corpus="c", model="m", machine="n", wall="1 min"))
    assert "stopped by fairseq" in path.read_text()


def test_converged_means_the_loss_fell(tmp_path, monkeypatch):
    def trains(run, *args):
        run.losses = [(1, 10.0), (2, 6.0)]
        run.valid_nll = 9.5 if run.key == "layernorm" else 5.0  # 0.9 x 10 is the line

    monkeypatch.setattr(ablations, "train", trains)
    results = {}
    for run in ablations.plan(["layernorm", "relu_former"]):
        results[run.key] = ablations.Result()
        ablations.train_variant(run, results[run.key], tmp_path, tmp_path, None, None, 0)
    assert not results["layernorm"].converged and not results["layernorm"].diverged
    assert results["relu_former"].converged


def test_bad_arguments_are_refused(capsys):
    for flags in (["--variants", "nope"], ["--jobs", "0"], ["--max-update", "0"],
                  ["--budget-scale", "-1"]):
        with pytest.raises(SystemExit):
            ablations.parse_args(flags)
        assert flags[0] in capsys.readouterr().err
