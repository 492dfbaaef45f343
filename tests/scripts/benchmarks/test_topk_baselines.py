"""The baselines of the pooling operator: exact top-k and Goyal et al.'s iterative soft top-k,
in float64 against their formulas (the per-example loop is the reference of
test_successive_halving.py)."""

from __future__ import annotations

import torch

from scripts.benchmarks.topk_baselines import hard_topk, iterative_soft_topk

from helpers import pooling_inputs, separated_scores

F64 = torch.float64


def _assert_same(a, b):
    torch.testing.assert_close(a.values, b.values)
    torch.testing.assert_close(a.scores, b.scores)
    assert torch.equal(a.padding_mask, b.padding_mask)


def test_gradcheck_iterative_soft_topk():
    values = torch.randn(2, 7, 3, dtype=F64, requires_grad=True)
    scores = separated_scores(2, 7).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda v, s: iterative_soft_topk(v, s, 3, alpha=4.0).values, (values, scores)
    )


def test_hard_topk_matches_sort_and_pads_short_examples():
    values, scores = pooling_inputs(2, 9)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, 2:] = True
    out = hard_topk(values, scores, 4, pad)
    order = scores[0].argsort(descending=True)[:4]
    torch.testing.assert_close(out.values[0], values[0, order])
    assert out.padding_mask[1].tolist() == [False, False, True, True]
    assert (out.values[1, 2:] == 0).all()
    back = hard_topk(values, scores, 4, pad, sort_back=True)
    torch.testing.assert_close(back.values[0], values[0, order.sort().values])
    torch.testing.assert_close(back.values[1, :2], values[1, :2])


def test_iterative_soft_topk_formula_and_padding():
    values, scores = pooling_inputs(2, 6)
    out = iterative_soft_topk(values, scores, 2, alpha=3.0)
    remaining = torch.ones(6, dtype=torch.bool)
    for j in range(2):
        peak = scores[0][remaining].max()
        w = torch.softmax((-3.0 * (scores[0] - peak) ** 2).masked_fill(~remaining, -1e300), 0)
        torch.testing.assert_close(out.values[0, j], w @ values[0])
        torch.testing.assert_close(out.scores[0, j], w @ scores[0])
        remaining[torch.where(remaining, scores[0], -1.0).argmax()] = False
    # Large alpha on separated scores approaches the hard top-k; padding is never picked.
    sep = separated_scores(2, 6)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    sharp = iterative_soft_topk(values, sep + 10 * pad, 5, pad, alpha=1e6)
    _assert_same(sharp, hard_topk(values, sep, 5, pad))
    back = iterative_soft_topk(values, sep, 3, alpha=1e6, sort_back=True)
    _assert_same(back, hard_topk(values, sep, 3, sort_back=True))
