"""Sparse-softmax kernel against a float64 reference written from its formulas (the module
docstring of relu_former.sparse_softmax.sparse_softmax)."""

import math

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

from relu_former.sparse_softmax.sparse_softmax import (
    softmax_nll,
    sparse_log_softmax,
    sparse_softmax,
    sparse_softmax_cross_entropy,
    top_k,
)

PAD = 1


def reference_support(row, k):
    """Omega_k of one row: sort by (value descending, index ascending), keep the first k."""
    order = sorted(range(row.numel()), key=lambda j: (-float(row[j]), j))
    return order[:k]


def reference_loss(z, target, k, eps=0.0, ignore_index=None, smoothing="top_k"):
    """Per-row loss from the formula, with torch ops so autograd gives reference gradients:
    L = (1-eps) (lse_Omega - z_t) + w * sum_{j in Omega - {t}} (lse_Omega - z_j), with
    w = eps / |Omega - {t}| ("top_k") or eps / (V - 1) ("vocabulary")."""
    vocab = z.size(-1)
    losses = []
    for row, t in zip(z, target.tolist()):
        if t == ignore_index:
            losses.append(row.sum() * 0)
            continue
        omega = reference_support(row.detach(), k)
        lse = torch.logsumexp(row[omega], dim=0)
        loss = (1 - eps) * (lse - row[t])
        others = [j for j in omega if j != t]
        if eps > 0 and others:
            w = eps / len(others) if smoothing == "top_k" else eps / (vocab - 1)
            loss = loss + w * torch.stack([lse - row[j] for j in others]).sum()
        losses.append(loss)
    return torch.stack(losses)


def separated_logits(rows, vocab, seed=0):
    """Logits 0.3 apart within a row, so a gradcheck step never changes Omega_k."""
    gen = torch.Generator().manual_seed(seed)
    ranks = torch.stack([torch.randperm(vocab, generator=gen) for _ in range(rows)])
    return ranks.double() * 0.3 - 1.0


@pytest.mark.parametrize("smoothing", ["top_k", "vocabulary"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_k_at_least_vocab_is_cross_entropy(eps, smoothing):
    torch.manual_seed(0)
    z = torch.randn(7, 11, dtype=torch.float64)
    t = torch.tensor([0, 3, PAD, 10, 5, 5, 2])
    lprobs = F.log_softmax(z, dim=-1)
    want, _ = label_smoothed_nll_loss(lprobs, t, eps, ignore_index=PAD, reduce=False)
    for k in (11, 12, 1000):
        got = sparse_softmax_cross_entropy(z, t, k, eps, ignore_index=PAD, smoothing=smoothing)
        torch.testing.assert_close(got.loss, want.squeeze(-1), rtol=0, atol=1e-12)
        torch.testing.assert_close(
            got.nll_loss, F.cross_entropy(z, t, ignore_index=PAD, reduction="none"),
            rtol=0, atol=1e-12,
        )
        assert got.target_in_top_k.tolist() == [tt != PAD for tt in t.tolist()]


def test_k_one_is_max_minus_target_logit():
    torch.manual_seed(1)
    z = torch.randn(9, 13, dtype=torch.float64)
    t = torch.randint(0, 13, (9,))
    t[0] = int(z[0].argmax())  # one target inside the top 1: loss 0
    got = sparse_softmax_cross_entropy(z, t, 1).loss
    assert torch.equal(got, z.max(dim=-1).values - z.gather(1, t[:, None]).squeeze(1))
    assert got[0] == 0


@pytest.mark.parametrize("smoothing", ["top_k", "vocabulary"])
@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_loss_and_gradient_match_reference(k, eps, smoothing):
    z = separated_logits(8, 9, seed=k)
    # targets chosen so that some rows have t inside Omega_k and some outside
    t = torch.tensor([int(z[i].argsort(descending=True)[(i * 4) % 9]) for i in range(8)])
    t[5] = PAD
    z_ref = z.clone().requires_grad_()
    want = reference_loss(z_ref, t, k, eps, ignore_index=PAD, smoothing=smoothing)
    z_got = z.clone().requires_grad_()
    got = sparse_softmax_cross_entropy(z_got, t, k, eps, ignore_index=PAD, smoothing=smoothing)
    torch.testing.assert_close(got.loss, want, rtol=0, atol=1e-12)
    weights = torch.linspace(0.5, 2.0, 8, dtype=torch.float64)  # a non-uniform upstream grad
    (want * weights).sum().backward()
    (got.loss * weights).sum().backward()
    torch.testing.assert_close(z_got.grad, z_ref.grad, rtol=0, atol=1e-12)
    inside = [t[i].item() in reference_support(z[i], k) and t[i] != PAD for i in range(8)]
    assert got.target_in_top_k.tolist() == inside
    if k < 9:
        assert any(inside) and not all(inside[:5] + inside[6:])  # both cases really occur


@pytest.mark.parametrize("smoothing", ["top_k", "vocabulary"])
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_gradcheck_target_inside_and_outside(k, eps, smoothing):
    z = separated_logits(6, 8, seed=10 + k).requires_grad_()
    order = z.detach().argsort(dim=-1, descending=True)
    t = torch.stack([order[0, 0], order[1, k - 1], order[2, k], order[3, 7], order[4, 1],
                     torch.tensor(PAD)])
    result = sparse_softmax_cross_entropy(z, t, k, eps, ignore_index=PAD, smoothing=smoothing)
    assert result.target_in_top_k[0] and result.target_in_top_k[1]
    assert not result.target_in_top_k[2] and not result.target_in_top_k[3]
    assert torch.autograd.gradcheck(
        lambda x: sparse_softmax_cross_entropy(
            x, t, k, eps, ignore_index=PAD, smoothing=smoothing).loss, (z,)
    )


@pytest.mark.parametrize("k", [1, 3, 8, 20])
def test_vocabulary_smoothing_is_fairseqs_target_with_the_infinite_terms_left_out(k):
    # fairseq's smoothed target (1 - eps on t, eps / (V - 1) on every other class) against the
    # sparse log-probabilities, keeping only the classes where they are finite
    eps, vocab = 0.1, 20
    z = separated_logits(10, vocab, seed=40 + k)
    t = torch.tensor([int(z[i].argsort(descending=True)[(3 * i) % vocab]) for i in range(10)])
    lp = sparse_log_softmax(z, k)
    want = []
    for row, target in zip(lp, t.tolist()):
        others = [j for j in range(vocab) if j != target and torch.isfinite(row[j])]
        want.append(-(1 - eps) * row[target] - sum(eps / (vocab - 1) * row[j] for j in others))
    got = sparse_softmax_cross_entropy(z, t, k, eps, smoothing="vocabulary").loss
    # a target outside the top k has lp = -inf; the loss uses its finite form lse - z_t there
    inside = torch.isfinite(lp.gather(1, t[:, None]).squeeze(1))
    torch.testing.assert_close(got[inside], torch.stack(want)[inside], rtol=0, atol=1e-12)
    assert inside.any()
    # the top_k rule spreads all of eps: the two agree exactly where |C| = V - 1 (or k = 1:
    # then lse over Omega_1 is the maximum, and every smoothing term is 0) and differ elsewhere
    top = sparse_softmax_cross_entropy(z, t, k, eps, smoothing="top_k").loss
    n_other = k - inside.long()
    same = (n_other == vocab - 1) | (n_other == 0) | (k == 1)
    torch.testing.assert_close(top[same], got[same], rtol=0, atol=1e-12)
    assert ((top - got).abs()[~same] > 1e-6).all()
    assert same.all() == (k in (1, vocab))


def test_target_outside_top_k_gets_gradient_minus_one():
    z = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    t = torch.tensor([4])
    result = sparse_softmax_cross_entropy(z, t, 2)
    result.loss.sum().backward()
    p = torch.softmax(z.detach()[0, :2], dim=0)
    assert z.grad[0, 4] == -1
    torch.testing.assert_close(z.grad[0, :2], p, rtol=0, atol=1e-15)
    assert torch.equal(z.grad[0, 2:4], torch.zeros(2, dtype=torch.float64))
    assert result.loss.item() == pytest.approx(math.log(math.exp(4) + math.exp(3)) - 0.0)


def test_loss_is_non_negative_and_padding_is_ignored():
    torch.manual_seed(2)
    z = (torch.randn(4, 6, 50, dtype=torch.float64) * 4).requires_grad_()
    t = torch.randint(0, 50, (4, 6))
    t[:, 4:] = PAD
    result = sparse_softmax_cross_entropy(z, t, 5, 0.1, ignore_index=PAD)
    assert (result.loss >= 0).all() and (result.nll_loss >= 0).all()
    pad = t.eq(PAD)
    assert torch.equal(result.loss[pad], torch.zeros(int(pad.sum()), dtype=torch.float64))
    assert not result.target_in_top_k[pad].any()
    result.loss.sum().backward()
    assert torch.equal(z.grad[pad], torch.zeros_like(z.grad[pad]))
    # removing the padded positions changes nothing for the others
    kept = sparse_softmax_cross_entropy(z.detach()[~pad], t[~pad], 5, 0.1, ignore_index=PAD)
    torch.testing.assert_close(kept.loss, result.loss.detach()[~pad], rtol=0, atol=0)


def test_ties_at_the_kth_logit_lower_index_wins():
    # three logits tie at the boundary of the top 3: 1 (the largest), then 2, 3, 4 equal
    z = torch.tensor([[0.0, 3.0, 2.0, 2.0, 2.0, -1.0]], dtype=torch.float64, requires_grad=True)
    t = torch.tensor([4])
    values, indices = top_k(z.detach(), 3)
    assert sorted(indices[0].tolist()) == [1, 2, 3]
    result = sparse_softmax_cross_entropy(z, t, 3)
    assert not result.target_in_top_k[0]  # 4 ties with 2 and 3 but has the higher index
    result.loss.sum().backward()
    assert z.grad[0, 4] == -1 and (z.grad[0, [1, 2, 3]] > 0).all()
    assert z.grad[0, 0] == 0 and z.grad[0, 5] == 0
    # all equal: the first k indices
    assert sorted(top_k(torch.zeros(2, 10), 4)[1][0].tolist()) == [0, 1, 2, 3]
    assert torch.isinf(sparse_log_softmax(torch.zeros(1, 10), 4)[0, 4:]).all()


@pytest.mark.parametrize("vocab,k", [(1000, 20), (5003, 20), (32000, 20), (2000, 100),
                                     (1000, 100)])
def test_top_k_set_matches_sorting_for_large_vocabularies(vocab, k):
    # large V goes through the blocked candidate search; check it against a full stable sort,
    # with rounded logits so that ties (inside and across blocks) are frequent
    torch.manual_seed(vocab + k)
    z = (torch.randn(16, vocab) * 2).round(decimals=1)
    z[3] = 0.0  # a row that is one big tie
    z[4, 7::13] = 50.0  # many equal maxima spread over the blocks
    values, indices = top_k(z, k)
    want_values, want_indices = torch.sort(z, dim=-1, descending=True, stable=True)
    for row in range(16):
        assert set(indices[row].tolist()) == set(want_indices[row, :k].tolist()), row
    assert torch.equal(values, want_values[:, :k])
    assert torch.equal(z.gather(1, indices), values)


def test_sparse_softmax_distribution():
    torch.manual_seed(3)
    z = torch.randn(3, 4, 30, dtype=torch.float64)
    p = sparse_softmax(z, 6)
    torch.testing.assert_close(p.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    assert ((p > 0).sum(-1) == 6).all()
    assert torch.equal(p.argmax(-1), z.argmax(-1))
    torch.testing.assert_close(
        sparse_log_softmax(z, 30), F.log_softmax(z, dim=-1), rtol=0, atol=1e-12
    )
    # renormalising log-probabilities instead of logits gives the same thing
    torch.testing.assert_close(
        sparse_log_softmax(F.log_softmax(z, -1), 6), sparse_log_softmax(z, 6), rtol=0, atol=1e-12
    )
    # a row with fewer finite entries than k, and an all -inf row: no NaN
    rows = torch.full((2, 8), -math.inf)
    rows[0, 2] = 0.5
    out = sparse_log_softmax(rows, 3)
    assert out[0, 2] == 0 and torch.isinf(out).sum() == 15 and not torch.isnan(out).any()


def test_softmax_nll_is_cross_entropy_without_graph():
    torch.manual_seed(4)
    z = torch.randn(5, 3, 40, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 40, (5, 3))
    t[0, 0] = PAD
    got = softmax_nll(z, t, ignore_index=PAD)
    want = F.cross_entropy(z.transpose(1, 2), t, ignore_index=PAD, reduction="none")
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert not got.requires_grad


def test_low_precision_logits_keep_their_dtype():
    torch.manual_seed(5)
    z = torch.randn(6, 100).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, 100, (6,))
    result = sparse_softmax_cross_entropy(z, t, 10, 0.1)
    assert result.loss.dtype == torch.float32
    result.loss.sum().backward()
    assert z.grad.dtype == torch.bfloat16
    want = reference_loss(z.detach().double(), t, 10, 0.1)
    torch.testing.assert_close(result.loss.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_k_is_refused(k):
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        sparse_softmax_cross_entropy(torch.zeros(2, 5), torch.zeros(2, dtype=torch.long), k)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        sparse_log_softmax(torch.zeros(2, 5), k)


def test_bad_label_smoothing_and_shapes_are_refused():
    z, t = torch.zeros(2, 5), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="label smoothing"):
        sparse_softmax_cross_entropy(z, t, 2, label_smoothing=1.0)
    with pytest.raises(ValueError, match="do not match"):
        sparse_softmax_cross_entropy(z, torch.zeros(3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="smoothing must be one of top_k, vocabulary"):
        sparse_softmax_cross_entropy(z, t, 2, 0.1, smoothing="all")
