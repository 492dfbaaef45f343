"""The attention regularisers (ReLUFormer paper, section 4.2) against a float64 reference."""

import inspect
import math
from types import SimpleNamespace

import pytest
import torch
from fairseq.logging import metrics

from relu_former.criterions.regularized import (
    AttentionRegularizerConfig,
    RegularizedLabelSmoothedCrossEntropyConfig,
    RegularizedLabelSmoothedCrossEntropyCriterion,
    add_attention_regularizers,
    reduce_attention_metrics,
)
from relu_former.criterions.sparse_softmax_cross_entropy import SparseSoftmaxCrossEntropyCriterion
from relu_former.criterions.sparse_softmax_sentence_prediction import (
    SparseSoftmaxSentencePredictionCriterion,
)
from relu_former.errors import OptionError
from relu_former.relu_attention.activations import relu_attention
from relu_former.relu_attention.attention import ActivationMultiheadAttention
from relu_former.relu_attention.regularisers import (
    LOG_KEYS,
    MARGIN_SIDES,
    ROW_SUM_EPS,
    norm_rows,
)
from relu_former.relu_attention.regularisers import regularizer_terms as attention_regularizer_terms
from relu_former.relu_attention.statistics import AttentionStatisticsMixin

E, HEADS = 8, 2


class TwoAttentions(AttentionStatisticsMixin, torch.nn.Module):
    """A stand-in model: a relu self-attention feeding a softmax self-attention.

    ``asked``: its statistics are requested for every forward (as inside a criterion's
    request), so the tests below can call the regularisers after a plain forward.
    """

    def __init__(self, first="relu", second="softmax", asked=True):
        super().__init__()
        torch.manual_seed(0)
        self.first = ActivationMultiheadAttention(E, HEADS, self_attention=True, activation=first)
        self.second = ActivationMultiheadAttention(E, HEADS, self_attention=True,
                                                   activation=second)
        self.first.need_statistics = self.second.need_statistics = asked

    def attention_modules(self):
        return [self.first, self.second]

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
    ent = (0.7 * n.log() - entropy).clamp(min=0)[valid].mean()  # the default side, below
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


def test_nothing_asked_adds_nothing():
    model = TwoAttentions(asked=False).double().train()
    x, padding = inputs()
    model(x, padding)
    log = {}
    task_loss = torch.tensor(2.0)
    assert add_attention_regularizers(model, task_loss, 10, log, CFG) is task_loss
    assert log == {}


def regularized_step(model, x, padding, cfg=CFG):
    """The criterion's own path: its request around a forward whose task loss is sum(out)."""
    criterion = RegularizedLabelSmoothedCrossEntropyCriterion.__new__(
        RegularizedLabelSmoothedCrossEntropyCriterion)
    criterion.cfg = cfg

    def forward():
        return model(x, padding).sum(), 40, {}

    return criterion.regularized_forward(model, forward)


def test_criterion_asks_in_training_and_matches_the_float64_reference():
    """The request the criterion makes gives the same L_norm and L_ent as the row formulas."""
    model = TwoAttentions(asked=False).double().train()
    x, padding = inputs()
    loss, _, log = regularized_step(model, x, padding)
    row_sum, entropy, n, _, valid = reference_rows(model.first, x, padding)
    norm = row_sum.clamp(min=ROW_SUM_EPS).log().abs()[valid].mean()
    ent = (0.7 * n.log() - entropy).clamp(min=0)[valid].mean()
    torch.testing.assert_close(loss, model(x, padding).sum() + 40 * (0.3 * norm + 0.2 * ent))
    torch.testing.assert_close(log["attn_norm_loss"], 40 * norm.detach())
    torch.testing.assert_close(log["attn_entropy_loss"], 40 * ent.detach())
    assert model.first._statistics is None and not model.first.need_statistics  # cleared


def test_criterion_asks_nothing_in_evaluation():
    model = TwoAttentions(asked=False).double().eval()
    x, padding = inputs()
    loss, _, log = regularized_step(model, x, padding)
    torch.testing.assert_close(loss, model(x, padding).sum())
    assert "attn_rows" not in log


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


def criterion_cfg(**overrides):
    cfg = RegularizedLabelSmoothedCrossEntropyConfig(label_smoothing=0.1)
    for name, value in overrides.items():
        setattr(cfg, name, value)
    return cfg


TASK = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))


@pytest.mark.parametrize("field, value, flag", [
    ("attention_norm_loss_weight", -1.0, "--attention-norm-loss-weight"),
    ("attention_entropy_loss_weight", float("nan"), "--attention-entropy-loss-weight"),
    ("attention_entropy_margin", -1.0, "--attention-entropy-margin"),
    ("attention_entropy_margin_side", "sideways", "--attention-entropy-margin-side"),
    ("attention_norm_row_sum", "values", "--attention-norm-row-sum"),
    ("label_smoothing", 1.0, "--label-smoothing"),
])
def test_bad_settings_name_the_flag(field, value, flag):
    with pytest.raises(OptionError, match=flag) as caught:
        RegularizedLabelSmoothedCrossEntropyCriterion(TASK, criterion_cfg(**{field: value}))
    assert caught.value.flag == flag


def test_built_from_its_config_like_the_other_criteria():
    cfg = criterion_cfg(attention_norm_loss_weight=0.3, report_accuracy=True)
    criterion = RegularizedLabelSmoothedCrossEntropyCriterion.build_criterion(cfg, TASK)
    assert criterion.cfg is cfg and criterion.eps == 0.1 and criterion.report_accuracy
    for other in (SparseSoftmaxCrossEntropyCriterion, SparseSoftmaxSentencePredictionCriterion):
        assert list(inspect.signature(other).parameters) == ["task", "cfg"]


def test_log_sums_are_keyed_by_name():
    """Each log key holds its own figure, whichever order the statistics are pooled in."""
    model = TwoAttentions("relu", "relu").double().train()
    x, padding = inputs()
    model(x, padding)
    terms = attention_regularizer_terms(model.attention_statistics(), 0.7)
    stats = model.attention_statistics()
    valid = stats[0].valid
    assert set(LOG_KEYS) <= set(terms)
    assert terms["attn_rows"] == terms["attn_reg_rows"] == 2 * valid.sum().item()
    assert terms["attn_key_count"] == pytest.approx(sum(s.n[valid].sum().item() for s in stats))
    assert terms["attn_zero_count"] == pytest.approx(
        sum(s.zeros[valid].sum().item() for s in stats))
    assert terms["attn_row_sum_sum"] == pytest.approx(
        sum(s.row_sum[valid].sum().item() for s in stats))


@pytest.mark.parametrize("side", MARGIN_SIDES)
def test_margin_sides_match_reference(side):
    model = TwoAttentions().double().train()
    x, padding = inputs()
    model(x, padding)
    cfg = AttentionRegularizerConfig(attention_norm_loss_weight=0.0,
                                     attention_entropy_loss_weight=1.0,
                                     attention_entropy_margin=0.5,
                                     attention_entropy_margin_side=side)
    log = {}
    task_loss = torch.zeros((), dtype=torch.float64)
    loss = add_attention_regularizers(model, task_loss, 1, log, cfg)
    _, entropy, n, _, valid = reference_rows(model.first, x, padding)
    gap = 0.5 * n.log() - entropy if side == "below" else entropy - 0.5 * n.log()
    expected = gap.clamp(min=0)[valid].mean()
    assert expected > 0
    torch.testing.assert_close(loss, expected)


def test_norm_row_sum_of_the_applied_weights():
    """weights: S_i / (gamma sqrt(n_i/2)), with gradient to a learned gamma."""
    torch.manual_seed(0)
    module = ActivationMultiheadAttention(E, HEADS, self_attention=True, relu_gamma=1.5,
                                          relu_learn_gamma=True).double().train()
    module.need_statistics = True
    x, padding = inputs()
    module(x, x, x, key_padding_mask=padding)
    row_sum, _, n, _, valid = reference_rows(module, x, padding)
    scores = module.attention_statistics("scores").row_sum
    weights = module.attention_statistics("weights").row_sum
    torch.testing.assert_close(scores[valid], row_sum[valid])
    expected = row_sum / (module.gamma.detach()[:, None] * (n / 2).sqrt())
    torch.testing.assert_close(weights[valid], expected[valid])
    norm_rows(weights).masked_select(valid).mean().backward()
    assert module.log_gamma.grad is not None and torch.all(module.log_gamma.grad != 0)


def sparse_rows(seed=0):
    """q, k of 4 heads x 12 queries x 24 keys whose ReLU rows are sparse (about 70% zeros)."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, 12, 8, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 4, 24, 8, generator=generator, dtype=torch.float64) - 0.4 * q.mean(2, True)
    v = torch.randn(2, 4, 24, 8, generator=generator, dtype=torch.float64)
    return q.requires_grad_(), k.requires_grad_(), v


def mean_entropy(q, k, v):
    stats = relu_attention(q, k, v, need_statistics=True).statistics
    return stats.entropy[stats.valid].mean(), stats


LR = 1.0


@pytest.mark.parametrize("weights, side, rises", [
    ((0.0, 1.0), "below", True),    # the margin alone, flattening side: its purpose
    ((1.0, 1.0), "below", True),    # both regularisers, the default reading
    ((0.0, 1.0), "above", False),   # an upper bound lowers the entropy of rows above it
])
def test_one_step_on_the_regularisers_moves_entropy_as_meant(weights, side, rises):
    q, k, v = sparse_rows()
    before, stats = mean_entropy(q, k, v)
    zero_share = (stats.zeros / stats.n)[stats.valid].mean()
    assert zero_share > 0.5  # sparse ReLU rows, as trained ReLU attention has
    margin = 0.7 if side == "below" else 0.2  # "above": a margin the rows exceed
    terms = attention_regularizer_terms([stats], margin, side)
    loss = weights[0] * terms["norm_loss"] + weights[1] * terms["entropy_loss"]
    assert loss > 0
    grad_q, grad_k = torch.autograd.grad(loss, (q, k))
    with torch.no_grad():
        after, _ = mean_entropy(q - LR * grad_q, k - LR * grad_k, v)
    assert (after > before + 1e-3) if rises else (after < before - 1e-3), (before, after)


def test_a_model_that_records_no_statistics_is_refused_naming_the_arch():
    """The regularisers ask the model; a model that cannot answer is one line, not a loss
    silently without its regularisers."""
    criterion = RegularizedLabelSmoothedCrossEntropyCriterion(TASK, criterion_cfg())
    model = torch.nn.Linear(2, 2).train()
    with pytest.raises(OptionError, match="not Linear") as caught:
        criterion.regularized_forward(model, lambda: pytest.fail("forward ran"))
    assert caught.value.flag == "--arch"
