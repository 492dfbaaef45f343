"""scripts/analysis/analyze_attention.py: its statistics against float64 reference loops, and a
real run on checkpoints trained by fairseq-train (a ReLU relu_former next to a softmax
transformer)."""

from __future__ import annotations

import json
import logging
import math
import re

import pytest
import torch

from scripts.analysis import analyze_attention as aa

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def reference(weights: torch.Tensor, visible: torch.Tensor, top_share: float) -> dict:
    """Row by row, in float64 Python arithmetic, the means the module docstring defines."""
    entropies, tops, zeros, seen, empty = [], [], 0, 0, 0
    for row, mask in zip(weights.tolist(), visible.tolist()):
        values = [w for w, m in zip(row, mask) if m]
        zeros += sum(1 for w in values if w == 0)
        seen += len(values)
        total = sum(values)
        if total == 0:
            empty += 1
            continue
        p = [w / total for w in values]
        entropies.append(-sum(x * math.log(x) for x in p if x > 0))
        k = max(1, math.ceil(top_share * len(values)))
        tops.append(sum(sorted(p, reverse=True)[:k]))
    return {"entropy": sum(entropies) / len(entropies), "top_mass": sum(tops) / len(tops),
            "zeros": zeros / seen, "empty_rows": empty / len(weights)}


def test_row_statistics_match_a_reference_loop():
    torch.manual_seed(0)
    weights = torch.relu(torch.randn(12, 700, dtype=torch.float64))  # about half exact zeros
    weights[3] = 0.0  # an empty row
    visible = torch.rand(12, 700) < 0.8
    visible[5] = torch.arange(700) <= 5  # a causal-like row that sees 6 keys
    for top_share in (0.002, 0.05):
        got = aa.row_sums(weights, visible, top_share).means()
        want = reference(weights, visible, top_share)
        assert got["rows"] == 12
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert math.isnan(got["norm_loss"])  # no regulariser terms without module statistics


def test_row_statistics_ignore_hidden_keys_and_scale():
    weights = torch.tensor([[1.0, 1.0, 1.0, 1.0, 7.0], [0.0, 5.0, 0.0, 0.0, 9.0]])
    visible = torch.tensor([True, True, True, True, False])  # broadcast over rows
    got = aa.row_sums(weights, visible).means()
    # row 0: uniform over 4 keys; row 1: all mass on one key. Key 4 is hidden in both.
    assert got["entropy"] == pytest.approx(math.log(4) / 2)
    assert got["top_mass"] == pytest.approx((0.25 + 1.0) / 2)
    assert got["zeros"] == pytest.approx(3 / 8)
    assert got["empty_rows"] == 0
    scaled = aa.row_sums(weights * 123.0, visible).means()
    assert scaled == pytest.approx(got, nan_ok=True)
    with pytest.raises(ValueError, match="non-negative"):
        aa.row_sums(-weights, visible)


def test_row_sums_add_up_over_batches():
    torch.manual_seed(1)
    weights = torch.relu(torch.randn(10, 30))
    total = aa.RowSums()
    total.add(aa.row_sums(weights[:4]))
    total.add(aa.row_sums(weights[4:]))
    assert total.means() == pytest.approx(aa.row_sums(weights).means(), nan_ok=True)


def test_anisotropy_is_the_mean_pairwise_cosine():
    torch.manual_seed(2)
    vectors = torch.randn(9, 5, dtype=torch.float64)
    unit = vectors / vectors.norm(dim=-1, keepdim=True)
    pairs = [float(unit[i] @ unit[j]) for i in range(9) for j in range(9) if i != j]
    assert aa.anisotropy(vectors) == pytest.approx(sum(pairs) / len(pairs), rel=1e-12)
    assert aa.anisotropy(torch.ones(4, 3)) == pytest.approx(1.0)
    assert aa.anisotropy(torch.eye(3)) == pytest.approx(0.0, abs=1e-15)
    assert math.isnan(aa.anisotropy(torch.ones(1, 3)))


def test_per_head_weights_accepts_both_layouts():
    weights = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 1, 3, 4)
    assert torch.equal(aa.per_head_weights(weights, heads=2), weights[:, 0])
    assert torch.equal(aa.per_head_weights(weights.transpose(0, 1), heads=2), weights[:, 0])
    with pytest.raises(ValueError, match="need_head_weights"):
        aa.per_head_weights(weights.mean(0), heads=2)


def test_bad_arguments_are_refused_early(tmp_path, capsys):
    with pytest.raises(SystemExit):
        aa.parse_args([str(tmp_path), "--path", "a.pt", "b.pt", "--labels", "x",
                       "--out", str(tmp_path)])
    assert "--labels gives 1 names for 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        aa.parse_args([str(tmp_path / "missing"), "--path", "a.pt", "--out", str(tmp_path)])
    assert "does not exist" in capsys.readouterr().err


def summary(markdown: str) -> dict[tuple[str, str], list]:
    """``{(model, module): [rows, entropy, zeros, top mass, empty rows, anisotropy, L_norm,
    L_ent below, L_ent above]}`` of the summary ("-" cells as None)."""
    section = markdown.split("## Summary")[1].split("## Attention per layer")[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 11 and cells[1] in aa.MODULES:
            table[(cells[0], cells[1])] = [None if c == "-" else float(c) for c in cells[2:]]
    return table


def test_regularizer_terms_are_the_criterion_s():
    """The analysis' L_norm and L_ent equal what the training criterion computes."""
    from relu_former.relu_attention.attention import ActivationMultiheadAttention
    from relu_former.relu_attention.regularisers import (
        regularizer_terms as attention_regularizer_terms,
    )

    torch.manual_seed(3)
    module = ActivationMultiheadAttention(8, 2, self_attention=True).double().eval()
    module.need_statistics = True
    x = torch.randn(7, 1, 8, dtype=torch.float64)
    module(x, x, x, attn_mask=torch.triu(torch.full((7, 7), float("-inf")), 1))
    stats = module.attention_statistics()
    total = aa.RowSums()
    for head in aa.regularizer_sums(stats, 0.4):
        total.add(head)
    means = total.means()
    for side, name in (("below", "entropy_below"), ("above", "entropy_above")):
        terms = attention_regularizer_terms([stats], 0.4, side)
        assert means[name] == pytest.approx(terms["entropy_loss"].item(), rel=1e-12)
        assert means["norm_loss"] == pytest.approx(terms["norm_loss"].item(), rel=1e-12)
    assert means["entropy_below"] > 0 and means["entropy_above"] > 0
    softmax = ActivationMultiheadAttention(8, 2, self_attention=True, activation="softmax")
    softmax.need_statistics = True
    softmax(x.float(), x.float(), x.float())
    assert aa.regularizer_sums(softmax.attention_statistics(), 0.4) == []


@pytest.mark.slow
def test_analysis_of_trained_relu_and_softmax_checkpoints(fairseq_run, toy_data_bin,
                                                          one_thread):
    fairseq_run.train("--criterion", "regularized_label_smoothed_cross_entropy",
                      "--attention-activation", "relu", arch="relu_former", save_dir="relu")
    fairseq_run.train(arch="transformer", save_dir="softmax")
    out = fairseq_run.work / "analysis"
    # its main() in this process, as the demo calls the analysis (the reproduction's tables
    # run it as a command): one_thread and the line below put back the thread count and
    # fairseq's log level it sets
    fairseq_log = logging.getLogger("fairseq")
    level = fairseq_log.level
    try:
        assert aa.main([
            str(toy_data_bin), "--path", str(fairseq_run.work / "relu" / "checkpoint_last.pt"),
            str(fairseq_run.work / "softmax" / "checkpoint_last.pt"), "--out", str(out),
            "--max-sentences", "8", "--sentence", "3", "--json", str(out / "means.json")]) == 0
    finally:
        fairseq_log.setLevel(level)
    text = (out / "analyze_attention.md").read_text()
    table = summary(text)
    assert set(table) == {(model, module) for model in ("relu", "softmax")
                          for module in aa.MODULES}
    for key, (rows, *values) in table.items():
        assert rows > 0 and all(math.isfinite(v) for v in values[:4]), (key, values)
    for module in aa.MODULES[:3]:
        # ReLU attention gives exact zeros; softmax never does (at these sizes)
        assert table[("relu", module)][2] > 0.05
        assert table[("softmax", module)][2] == 0
        # the regulariser terms exist for ReLU attention only
        assert all(v is not None and v >= 0 for v in table[("relu", module)][6:])
        assert table[("softmax", module)][6:] == [None] * 3
    layers = text.split("## Attention per layer")[1].split("## Per layer")[0]
    assert re.search(r"^\| relu \| decoder.encoder_attn \| 0 \|( [\d.e+-]+ \|){5}$", layers,
                     flags=re.M), layers
    # per layer and head: both heads of every attention module, FFN rows with an anisotropy
    per_layer = text.split("## Per layer")[1]
    for model in ("relu", "softmax"):
        for module in aa.MODULES[:3]:
            for head in (0, 1):
                assert f"| {model} | {module} | 0 | {head} |" in per_layer
        for module in aa.MODULES[3:]:
            match = re.search(rf"^\| {model} \| {module} \| 0 \| - \|.*\| ([^|]+) \|"
                              r"( - \|){3}$", per_layer, flags=re.M)
            assert match and math.isfinite(float(match.group(1)))
    for name in ("entropy", "zeros", "top_mass", "anisotropy", "heatmap"):
        assert (out / f"analyze_attention_{name}.png").read_bytes()[:8] == PNG_MAGIC
    # --json: each model's means over the rows of all three attention modules, so each lies
    # within the range of the three modules' own means in the summary (a weighted mean)
    means = {model["label"]: model["attention"]
             for model in json.loads((out / "means.json").read_text())["models"]}
    assert set(means) == {"relu", "softmax"}
    for model, pooled in means.items():
        modules = [table[(model, module)] for module in aa.MODULES[:3]]
        assert pooled["rows"] == sum(module[0] for module in modules)
        for column, name in ((1, "entropy"), (2, "zeros")):
            shown = [module[column] for module in modules]  # 3 significant digits
            assert min(shown) - 0.01 <= pooled[name] <= max(shown) + 0.01, (model, name)
    assert means["softmax"]["zeros"] == 0 and means["relu"]["zeros"] > 0.05
    assert means["softmax"]["norm_loss"] is None and means["relu"]["norm_loss"] >= 0
