"""Token scorers and the pooling layer that calls the successive-halving operator."""

from __future__ import annotations

import math

import pytest
import torch

from relu_former.pyramidion.pooling import (
    SCORERS,
    IndexScorer,
    PowerScorer,
    TokenPooler,
    build_scorer,
)


def right_padding(lengths, total: int) -> torch.Tensor:
    return torch.arange(total)[None, :] >= torch.tensor(lengths)[:, None]


def to_left_padding(x: torch.Tensor, mask: torch.Tensor):
    """The same batch ([T, B, C] states, [B, T] mask) with each sentence moved to the end."""
    shifted = torch.zeros_like(x)
    for b in range(x.size(1)):
        n = int((~mask[b]).sum())
        shifted[x.size(0) - n:, b] = x[:n, b]
    return shifted, mask.flip(1)


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_scorers_give_one_score_in_unit_interval_per_token(name):
    torch.manual_seed(0)
    scorer = build_scorer(name, 8)
    x = torch.randn(3, 7, 8)
    mask = right_padding([7, 4, 1], 7)
    scores = scorer(x, mask)
    assert scores.shape == (3, 7)
    real = scores[~mask]
    assert torch.isfinite(scores).all()
    assert (real > 0).all() and (real <= 1).all()


def test_unknown_scorer_names_the_flag():
    with pytest.raises(ValueError, match="--pooling-scorer"):
        build_scorer("attention", 8)


def test_index_scorer_formula_and_padding_invariance():
    x = torch.zeros(2, 5, 3)
    right = right_padding([5, 3], 5)
    scores = IndexScorer(3)(x, right)
    torch.testing.assert_close(scores[0], torch.tensor([5, 4, 3, 2, 1]) / 5.0)
    torch.testing.assert_close(scores[1, :3], torch.tensor([3, 2, 1]) / 3.0)
    left_scores = IndexScorer(3)(x, right.flip(1))
    torch.testing.assert_close(left_scores[1, 2:], scores[1, :3])


def test_power_scorer_matches_dense_reference_in_chunks():
    torch.manual_seed(1)
    scorer = PowerScorer(6).double()
    scorer.query_chunk = 2  # several chunks, and a ragged last one
    x = torch.randn(2, 7, 6, dtype=torch.float64)
    mask = right_padding([7, 4], 7)
    got = scorer(x, mask)
    for b, n in enumerate([7, 4]):
        q = scorer.q_proj(x[b, :n]) / math.sqrt(6)
        k = scorer.k_proj(x[b, :n])
        received = torch.softmax(q @ k.T, dim=-1).sum(dim=0)
        torch.testing.assert_close(got[b, :n], received / received.max())
        assert torch.count_nonzero(got[b, n:]) == 0


@pytest.mark.parametrize("name", ["linear", "nonlinear", "power"])
def test_trainable_scorers_receive_gradients_through_the_operator(name):
    torch.manual_seed(2)
    pooler = TokenPooler(8, scorer=name).double()
    x = torch.randn(9, 2, 8, dtype=torch.float64)
    target = torch.randn(3, 2, 8, dtype=torch.float64)
    out, _, _ = pooler(x, right_padding([9, 6], 9), 3)
    ((out - target) ** 2).sum().backward()
    grads = [p.grad for p in pooler.scorer.parameters()]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(torch.count_nonzero(g) > 0 for g in grads)


def test_pooler_shapes_and_short_inputs():
    pooler = TokenPooler(4)
    x = torch.randn(10, 3, 4)
    mask = right_padding([10, 5, 2], 10)
    out, out_mask, _ = pooler(x, mask, 4)
    assert out.shape == (4, 3, 4) and out_mask.shape == (3, 4)
    # a sentence shorter than k keeps its tokens; the rest of its slots are padding
    assert out_mask.sum(dim=1).tolist() == [0, 0, 2]
    # a batch shorter than k is not lengthened: k' = min(k, T)
    out, out_mask, _ = pooler(x[:3], mask[:, :3], 8)
    assert out.shape == (3, 3, 4) and out_mask.shape == (3, 3)
    out, out_mask, _ = pooler(x, None, 4)
    assert not out_mask.any()


def test_pooler_rejects_bad_settings():
    with pytest.raises(ValueError, match="positive"):
        TokenPooler(4)(torch.randn(5, 1, 4), None, 0)
    with pytest.raises(ValueError, match="--pooling-base"):
        TokenPooler(4, base=1.0)
    with pytest.raises(ValueError, match="--pooling-temperature"):
        TokenPooler(4, temperature=0.0)


@pytest.mark.parametrize("scorer", ["linear", "index", "power"])
@pytest.mark.parametrize("keep_order", [True, False])
def test_left_and_right_padding_pool_identically(scorer, keep_order):
    torch.manual_seed(3)
    pooler = TokenPooler(6, scorer=scorer, keep_order=keep_order).double()
    x = torch.randn(12, 3, 6, dtype=torch.float64)
    mask = right_padding([12, 9, 4], 12)
    x = x.masked_fill(mask.T.unsqueeze(-1), 0.0)
    left_x, left_mask = to_left_padding(x, mask)
    out, out_mask, _ = pooler(x, mask, 5)
    left_out, left_out_mask, _ = pooler(left_x, left_mask, 5)
    assert torch.equal(out_mask, left_out_mask)
    torch.testing.assert_close(out, left_out, rtol=1e-12, atol=1e-12)


def test_hard_base_keeps_the_best_scored_tokens_in_order():
    """With a huge base the pooling is a hard top-k: index scoring keeps the first k tokens."""
    dim = 16
    x = torch.eye(dim, dtype=torch.float64).unsqueeze(1)  # token i = e_i, [16, 1, 16]
    pooler = TokenPooler(dim, scorer="index", base=1e6).double()
    out, out_mask, _ = pooler(x, None, 4)
    assert not out_mask.any()
    torch.testing.assert_close(out[:, 0], torch.eye(dim, dtype=torch.float64)[:4],
                               atol=1e-6, rtol=0)
    by_score, _, _ = TokenPooler(dim, scorer="index", base=1e6, keep_order=False).double()(
        x.flip(0), None, 4)
    # reversed input: the first real tokens are now e_15..e_12
    expect = torch.eye(dim, dtype=torch.float64)[[15, 14, 13, 12]]
    torch.testing.assert_close(by_score[:, 0], expect,
                               atol=1e-6, rtol=0)
