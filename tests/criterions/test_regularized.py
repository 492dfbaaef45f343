"""The attention regularisers of DESIGN.md §2.2 against a float64 reference."""

import math
from types import SimpleNamespace

import pytest
import torch
from fairseq.logging import metrics

from relu_former.criterions.regularized import (
    ROW_SUM_EPS,
    AttentionRegularizerConfig,
    RegularizedLabelSmoothedCrossEntropyCriterion,
    add_attention_regularizers,
    reduce_attention_metrics,
)
from relu_former.modules.attention import ActivationMultiheadAttention

E, HEADS = 8, 2


class TwoAttentions(torch.nn.Module):
    """A stand-in model: a relu self-attention feeding a softmax self-attention."""

    def __init__(self, first="relu", second="softmax"):
        super().__init__()
        torch.manual_seed(0)
        self.first = ActivationMultiheadAttention(E, HEADS, self_attention=True, activation=first)
        self.second = ActivationMultiheadAttention(E, HEADS, self_attention=True,
                                                   activation=second)

    def forward(self, x, padding):
        x = self.first(x, x, x, key_padding_mask=padding)[0]
        return self.second(x, x, x, key_padding_mask=padding)[0]


def reference_rows(module, x, padding):
    """S_i, H_i, n_i, zero counts and the real-row mask, from the projections, in float64."""
    tgt_len, bsz, _ = x.shape
    q = module.q_proj(x).view(tgt_len, bsz, HEADS, -1).permute(1, 2, 0, 3)
    k = module.k_proj(x).view(tgt_len, bsz, HEADS, -1).permute(1, 2, 0, 3)
    visible = ~padding[:, None, None, :]
    s = torch.relu(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))) * visible
    row_sum = s.sum(-1)
    p = s / row_sum.clamp(min=1e-300)[..., None]
    entropy = -(p * torch.where(p > 0, p, torch.ones_like(p)).log()).sum(-1)
    n = visible.sum(-1).double().expand(row_sum.shape)
    zeros = ((s == 0) & visible).sum(-1).double()
    valid = ~padding[:, None, :].expand(row_sum.shape)
    return row_sum, entropy, n, zeros, valid


def inputs():
    torch.manual_seed(1)
    x = torch.randn(6, 3, E, dtype=torch.float64)
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[0, -2:] = True
    padding[2, :1] = True
    return x, padding


CFG = AttentionRegularizerConfig(attention_norm_loss_weight=0.3,
                                 attention_entropy_loss_weight=0.2,
                                 attention_entropy_margin=0.7)


def test_losses_logs_and_gradients_match_reference():
    model = TwoAttentions().double().train()
    x, padding = inputs()
    task_loss = torch.tensor(5.0, dtype=torch.float64, requires_grad=True)
    model(x, padding)
    log = {}
    loss = add_attention_regularizers(model, task_loss, 40, log, CFG)

    row_sum, entropy, n, zeros, valid = reference_rows(model.first, x, padding)
    norm = row_sum.clamp(min=ROW_SUM_EPS).log().abs()[valid].mean()
    ent = (entropy - 0.7 * n.log()).clamp(min=0)[valid].mean()
    expected = task_loss + 40 * (0.3 * norm + 0.2 * ent)
    torch.testing.assert_close(loss, expected)
    assert ent > 0 and norm > 0  # both terms are really exercised
    torch.testing.assert_close(log["attn_norm_loss"], 40 * norm.detach())
    torch.testing.assert_close(log["attn_entropy_loss"], 40 * ent.detach())

    # the log pools the rows of both modules; only the relu one is regularised
    second = model.second.attention_statistics()
    rows = valid.sum().item()
    assert log["attn_reg_rows"] == rows and log["attn_rows"] == 2 * rows
    assert log["attn_zero_count"] == pytest.approx(zeros[valid].sum().item()
                                                   + second.zeros[valid].sum().item())
    assert log["attn_key_count"] == pytest.approx(2 * n[valid].sum().item())
    assert log["attn_row_sum_sum"] == pytest.approx(row_sum[valid].sum().item() + rows)
    assert log["attn_entropy_sum"] == pytest.approx(entropy[valid].sum().item()
                                                    + second.entropy[valid].sum().item())

    params = list(model.first.parameters())
    got = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    want = torch.autograd.grad(expected, params, allow_unused=True)
    for g, w in zip(got, want):
        if w is None:
            assert g is None or torch.all(g == 0)
        else:
            torch.testing.assert_close(g, w)


def test_all_zero_rows_get_the_clamped_norm_and_no_nan():
    model = TwoAttentions().double().train()
    with torch.no_grad():  # q = -k: every score of a token with itself is negative
        model.first.q_proj.weight.copy_(-model.first.k_proj.weight)
        model.first.q_proj.bias.copy_(-model.first.k_proj.bias)
    x = torch.randn(1, 2, E, dtype=torch.float64)
    padding = torch.zeros(2, 1, dtype=torch.bool)
    model(x, padding)
    log = {}
    loss = add_attention_regularizers(model, torch.zeros((), dtype=torch.float64,
                                                         requires_grad=True), 1, log, CFG)
    torch.testing.assert_close(log["attn_norm_loss"], torch.tensor(-math.log(ROW_SUM_EPS),
                                                                   dtype=torch.float64))
    assert log["attn_entropy_loss"] == 0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_evaluation_mode_adds_nothing():
    model = TwoAttentions().double().eval()
    x, padding = inputs()
    model(x, padding)
    log = {}
    task_loss = torch.tensor(2.0)
    assert add_attention_regularizers(model, task_loss, 10, log, CFG) is task_loss
    assert log == {}


def test_zero_weights_only_log():
    model = TwoAttentions().double().train()
    x, padding = inputs()
    model(x, padding)
    log = {}
    cfg = AttentionRegularizerConfig(attention_norm_loss_weight=0.0,
                                     attention_entropy_loss_weight=0.0)
    task_loss = torch.tensor(2.0, dtype=torch.float64)
    assert add_attention_regularizers(model, task_loss, 10, log, cfg) is task_loss
    assert log["attn_norm_loss"] > 0


def test_reduce_logs_pooled_figures():
    logs = [
        dict(attn_rows=4, attn_entropy_sum=2.0, attn_row_sum_sum=8.0, attn_zero_count=3,
             attn_key_count=12, attn_reg_rows=4, attn_norm_loss=torch.tensor(6.0),
             attn_entropy_loss=torch.tensor(1.0), sample_size=10),
        dict(attn_rows=6, attn_entropy_sum=5.0, attn_row_sum_sum=2.0, attn_zero_count=9,
             attn_key_count=18, attn_reg_rows=6, attn_norm_loss=torch.tensor(4.0),
             attn_entropy_loss=torch.tensor(3.0), sample_size=30),
    ]
    with metrics.aggregate() as agg:
        reduce_attention_metrics(logs)
        values = agg.get_smoothed_values()
    assert values["attn_entropy"] == pytest.approx(0.7)
    assert values["attn_row_sum"] == pytest.approx(1.0)
    assert values["attn_zero_share"] == pytest.approx(0.4)
    assert values["attn_norm_loss"] == pytest.approx(0.25)
    assert values["attn_entropy_loss"] == pytest.approx(0.1)


@pytest.mark.parametrize("field, flag", [
    ("attention_norm_loss_weight", "--attention-norm-loss-weight"),
    ("attention_entropy_loss_weight", "--attention-entropy-loss-weight"),
    ("attention_entropy_margin", "--attention-entropy-margin"),
])
def test_bad_weights_name_the_flag(field, flag):
    kwargs = dict(attention_norm_loss_weight=0.1, attention_entropy_loss_weight=0.1,
                  attention_entropy_margin=0.7)
    kwargs[field] = -1.0
    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))
    with pytest.raises(ValueError, match=flag):
        RegularizedLabelSmoothedCrossEntropyCriterion(task, False, 0.1, **kwargs)
