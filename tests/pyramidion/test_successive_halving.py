"""Successive-halving pooling, its baselines and nCCS, in float64 against reference formulas."""

from __future__ import annotations

import itertools

import pytest
import torch

from relu_former.pyramidion.successive_halving import (
    num_rounds,
    pair_weights,
    successive_halving_topk,
)
from scripts.benchmarks.topk_baselines import (
    hard_topk,
    iterative_soft_topk,
    successive_halving_topk_loop,
)
from scripts.benchmarks.topk_similarity import ncc_similarity

from helpers import pooling_inputs, separated_scores

F64 = torch.float64
OPTIONS = [
    {},
    {"sort_back": True},
    {"sort": False},
    {"sort": False, "sort_back": True},
    {"resort": False},
    {"pairing": "halves"},
    {"pairing": "halves", "sort_back": True},
    {"temperature": 0.1},
    {"base": 4.0, "resort": False, "sort_back": True},
]


def _assert_same(a, b, **tol):
    torch.testing.assert_close(a.values, b.values, **tol)
    torch.testing.assert_close(a.scores, b.scores, **tol)
    assert torch.equal(a.padding_mask, b.padding_mask)


def test_one_round_matches_the_published_formula():
    # n = 4, k = 2: rank 1 meets rank 4, rank 2 meets rank 3, weights softmax(20 ** v).
    values = torch.randn(1, 4, 2, dtype=F64)
    scores = torch.tensor([[0.3, 0.9, 0.1, 0.6]], dtype=F64)
    out = successive_halving_topk(values, scores, 2)
    expected_values, expected_scores = [], []
    for a, b in [(1, 2), (3, 0)]:
        w = torch.softmax(torch.stack([20.0 ** scores[0, a], 20.0 ** scores[0, b]]), 0)
        expected_values.append(w[0] * values[0, a] + w[1] * values[0, b])
        expected_scores.append(w[0] * scores[0, a] + w[1] * scores[0, b])
    torch.testing.assert_close(out.values[0], torch.stack(expected_values))
    torch.testing.assert_close(out.scores[0], torch.stack(expected_scores))
    assert not out.padding_mask.any()


def test_pair_weights_formulas_and_padding_never_wins():
    a = torch.tensor([0.2, 0.9, 0.5, 0.5], dtype=F64)
    b = torch.tensor([0.7, 0.1, 0.5, 0.5], dtype=F64)
    no = torch.zeros(4, dtype=torch.bool)
    w_a, w_b = pair_weights(a, b, no, no)
    torch.testing.assert_close(w_a, torch.softmax(torch.stack([20.0**a, 20.0**b]), 0)[0])
    torch.testing.assert_close(w_a + w_b, torch.ones(4, dtype=F64))
    w_a, _ = pair_weights(a, b, no, no, temperature=0.5)
    torch.testing.assert_close(w_a, torch.softmax(torch.stack([a / 0.5, b / 0.5]), 0)[0])
    # A padded member gets exactly 0, its real partner exactly 1, even with a far higher score.
    pad_a = torch.tensor([True, False, True, False])
    pad_b = torch.tensor([False, True, True, False])
    w_a, w_b = pair_weights(a + 5.0 * pad_a, b + 5.0 * pad_b, pad_a, pad_b)
    assert w_a.tolist()[:3] == [0.0, 1.0, 0.0] and w_b.tolist()[:3] == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("sort_back", [False, True])
@pytest.mark.parametrize("pairing", ["first_last", "halves"])
def test_well_separated_scores_give_the_hard_topk(sort_back, pairing):
    for length, k in [(1, 1), (7, 3), (16, 4), (37, 5), (64, 1), (50, 16), (9, 20)]:
        values = pooling_inputs(2, length)[0]
        scores = separated_scores(2, length, seed=length)
        # A small temperature makes every pair weight 0 or 1 to float64 precision.
        out = successive_halving_topk(
            values, scores, k, temperature=1e-3, sort_back=sort_back, pairing=pairing
        )
        _assert_same(out, hard_topk(values, scores, k, sort_back=sort_back), rtol=1e-12, atol=0)
    # The published base of 20 gets there too when the top-k stand well apart.
    values = pooling_inputs(2, 64)[0]
    ranks = separated_scores(2, 64) / 0.05
    scores = ranks / 64 - (ranks < 56).to(F64)  # top 8 in [0.87, 0.99], the rest <= -0.13
    out = successive_halving_topk(values, scores, 8, sort_back=sort_back, pairing=pairing)
    _assert_same(out, hard_topk(values, scores, 8, sort_back=sort_back), rtol=0, atol=1e-4)


def test_score_order_and_original_order():
    values, scores = pooling_inputs(3, 40)
    top = successive_halving_topk(values, scores, 8, temperature=1e-4)
    assert (top.scores[:, :-1] >= top.scores[:, 1:]).all()
    back = successive_halving_topk(values, scores, 8, temperature=1e-4, sort_back=True)
    chosen = torch.topk(scores, 8).indices.sort(1).values
    torch.testing.assert_close(back.scores, scores.gather(1, chosen))


def test_gradients_reach_the_scores_and_not_through_hard_topk():
    values, scores = pooling_inputs(2, 24)
    values.requires_grad_(True)
    scores.requires_grad_(True)
    probe = torch.randn(2, 4, 3, dtype=F64)
    out = successive_halving_topk(values, scores, 4)
    (grad,) = torch.autograd.grad((out.values * probe).sum(), scores)
    assert grad.abs().sum() > 0 and torch.isfinite(grad).all()
    hard = hard_topk(values, scores, 4)
    assert torch.autograd.grad((hard.values * probe).sum(), scores, allow_unused=True)[0] is None


@pytest.mark.parametrize("options", [{}, {"sort_back": True, "temperature": 0.3}, {"sort": False}])
def test_gradcheck(options):
    values = torch.randn(2, 11, 3, dtype=F64, requires_grad=True)
    scores = (separated_scores(2, 11) * 2).requires_grad_(True)  # ranks stable under eps
    pad = torch.zeros(2, 11, dtype=torch.bool)
    pad[1, 8:] = True

    def pool(v, s):
        out = successive_halving_topk(v, s, 3, pad, **options)
        return out.values, out.scores

    assert torch.autograd.gradcheck(pool, (values, scores))


@pytest.mark.parametrize("options", OPTIONS)
def test_batched_equals_per_example_reference(options):
    values, scores = pooling_inputs(4, 45, seed=1)
    pad = torch.zeros(4, 45, dtype=torch.bool)
    pad[1, 30:] = True  # right padding
    pad[2, :12] = True  # left padding
    pad[3, ::3] = True  # holes
    scores.requires_grad_(True)
    for k in [1, 3, 8, 12, 45, 60]:
        batched = successive_halving_topk(values, scores, k, pad, **options)
        loop = successive_halving_topk_loop(values, scores, k, pad, **options)
        _assert_same(batched, loop)
        probe = torch.randn_like(batched.values)
        grads = [
            torch.autograd.grad((out.values * probe).sum() + out.scores.sum(), scores)[0]
            for out in (batched, loop)
        ]
        torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("options", OPTIONS)
def test_source_slots_rebuild_the_pooled_values(options):
    """Each pooled value is the weighted sum of the inputs the operator says it merged, with
    weights summing to 1 on real slots and 0 at padding (what maps attention back)."""
    values, scores = pooling_inputs(4, 45, seed=3)
    pad = torch.zeros(4, 45, dtype=torch.bool)
    pad[1, 30:] = True
    pad[2, :12] = True
    pad[3, ::3] = True
    for k in [1, 3, 8, 45, 60]:
        out = successive_halving_topk(values, scores, k, pad, **options)
        slot, weight = out.source_slot, out.source_weight
        assert slot.shape == weight.shape == (4, 45)
        assert (weight[pad] == 0).all() and ((weight > 0) | pad).all()
        rebuilt = torch.zeros_like(out.values).scatter_add_(
            1, slot.unsqueeze(-1).expand_as(values), weight.unsqueeze(-1) * values)
        torch.testing.assert_close(rebuilt, out.values, rtol=1e-12, atol=1e-12)
        mass = torch.zeros_like(out.scores).scatter_add_(1, slot, weight)
        torch.testing.assert_close(mass, (~out.padding_mask).to(F64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("options", OPTIONS)
def test_padded_inputs_pool_like_unpadded_ones(options):
    values, scores = pooling_inputs(3, 21, seed=2)
    for extra, k in itertools.product([1, 11, 60], [1, 4, 6, 25]):
        total = 21 + extra
        gen = torch.Generator().manual_seed(extra)
        # Padding with scores above every real one and huge values: it must never win.
        junk_values = 1e3 * torch.randn(3, extra, 3, generator=gen, dtype=F64)
        junk_scores = torch.full((3, extra), 5.0, dtype=F64)
        for left in (False, True):
            parts = [(values, scores), (junk_values, junk_scores)][:: -1 if left else 1]
            padded_values = torch.cat([p[0] for p in parts], 1)
            padded_scores = torch.cat([p[1] for p in parts], 1)
            pad = torch.zeros(3, total, dtype=torch.bool)
            if left:
                pad[:, :extra] = True
            else:
                pad[:, 21:] = True
            got = successive_halving_topk(padded_values, padded_scores, k, pad, **options)
            want = successive_halving_topk(values, scores, k, **options)
            slots = min(k, 21)
            torch.testing.assert_close(got.values[:, :slots], want.values)
            torch.testing.assert_close(got.scores[:, :slots], want.scores)
            assert not got.padding_mask[:, :slots].any() and got.padding_mask[:, slots:].all()
            assert (got.values[:, slots:] == 0).all()


def test_partly_padded_examples_keep_only_real_slots():
    values, scores = pooling_inputs(2, 16)
    pad = torch.zeros(2, 16, dtype=torch.bool)
    pad[0, 3:] = True  # 3 real items, 8 slots asked for
    for options in OPTIONS:
        out = successive_halving_topk(values, scores, 8, pad, **options)
        assert out.padding_mask[0].tolist() == [False] * 3 + [True] * 5
        assert not out.padding_mask[1].any()


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 13, 33])
def test_any_length_and_k(length):
    values, scores = pooling_inputs(2, length)
    for k in [1, 2, 3, 7, length, length + 5]:
        for options in ({}, {"sort_back": True}, {"sort": False}):
            out = successive_halving_topk(values, scores, k, **options)
            slots = min(k, length)
            assert out.values.shape == (2, slots, 3) and out.scores.shape == (2, slots)
            assert out.padding_mask.shape == (2, slots) and not out.padding_mask.any()
            assert torch.isfinite(out.values).all()
        if k >= length:  # nothing to pool: the inputs come back, ranked or in place
            out = successive_halving_topk(values, scores, k)
            order = scores.argsort(1, descending=True)
            torch.testing.assert_close(out.scores, scores.gather(1, order), rtol=0, atol=0)
            back = successive_halving_topk(values, scores, k, sort_back=True)
            assert torch.equal(back.values, values) and torch.equal(back.scores, scores)
    assert num_rounds(length, 1) == (length - 1).bit_length()


def test_bad_input_gives_clear_errors():
    values, scores = pooling_inputs(1, 4)
    with pytest.raises(ValueError, match="k .* must be an integer >= 1, got 0"):
        successive_halving_topk(values, scores, 0)
    for bad_k in (-1, 2.5, True):
        with pytest.raises(ValueError, match="k "):
            successive_halving_topk(values, scores, bad_k)
    with pytest.raises(ValueError, match="k "):
        hard_topk(values, scores, 0)
    with pytest.raises(ValueError, match="k "):
        iterative_soft_topk(values, scores, 0)
    with pytest.raises(ValueError, match="scores must be"):
        successive_halving_topk(values, scores[:, :3], 2)
    with pytest.raises(ValueError, match="padding_mask must be"):
        successive_halving_topk(values, scores, 2, torch.zeros(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="pairing must be one of"):
        successive_halving_topk(values, scores, 2, pairing="random")
    with pytest.raises(ValueError, match="base must be > 1"):
        successive_halving_topk(values, scores, 2, base=1.0)
    with pytest.raises(ValueError, match="at least one position"):
        successive_halving_topk(values[:, :0], scores[:, :0], 2)


def test_scores_may_have_a_trailing_unit_dimension():
    values, scores = pooling_inputs(2, 10)
    _assert_same(
        successive_halving_topk(values, scores.unsqueeze(-1), 3),
        successive_halving_topk(values, scores, 3),
    )


def test_ncc_similarity():
    values, scores = pooling_inputs(2, 20)
    exact = hard_topk(values, scores, 5)
    perm = torch.randperm(5)
    # Exact top-k vectors, in any order and any positive scale, score 1.
    torch.testing.assert_close(
        ncc_similarity(3.0 * exact.values[:, perm], values, scores, 5), torch.tensor(1.0, dtype=F64)
    )
    # Hand-computed: the best cosine of each target, averaged.
    pooled = torch.randn(2, 4, 3, dtype=F64)
    cos = torch.nn.functional.cosine_similarity(
        exact.values.unsqueeze(2), pooled.unsqueeze(1), dim=-1
    )
    want = cos.max(-1).values.mean(-1)
    got = ncc_similarity(pooled, values, scores, 5, reduction="none")
    torch.testing.assert_close(got, want)
    # Padded pooled slots and padded targets are left out.
    pooled_pad = torch.tensor([[False, False, False, True]] * 2)
    masked = cos.masked_fill(pooled_pad.unsqueeze(1), -2).max(-1).values.mean(-1)
    torch.testing.assert_close(
        ncc_similarity(pooled, values, scores, 5, pooled_padding_mask=pooled_pad, reduction="none"),
        masked,
    )
    pad = torch.zeros(2, 20, dtype=torch.bool)
    pad[1, 2:] = True
    short = hard_topk(values, scores, 5, pad)
    # Example 0 keeps 2 of its 5 targets; example 1 has only 2 real targets, both kept.
    want = (_best_mean(exact.values[0], short.values[0, :2]).item() + 1.0) / 2
    assert ncc_similarity(short.values[:, :2], values, scores, 5, pad).item() == pytest.approx(want)


def _best_mean(targets, pooled):
    cos = torch.nn.functional.cosine_similarity(targets.unsqueeze(1), pooled.unsqueeze(0), dim=-1)
    return cos.max(-1).values.mean()


def test_successive_halving_beats_iterative_in_ncc_similarity():
    values = torch.rand(2, 256, 8, dtype=F64) * 2 - 1
    scores = torch.rand(2, 256, dtype=F64)
    ours = successive_halving_topk(values, scores, 16)
    goyal = iterative_soft_topk(values, scores, 16)
    ours_q = ncc_similarity(ours.values, values, scores, 16).item()
    goyal_q = ncc_similarity(goyal.values, values, scores, 16).item()
    assert ours_q > 0.9 and goyal_q < 0.5


def test_vectors_read_in_slices_give_the_same_result(monkeypatch):
    import relu_former.pyramidion.successive_halving as operator

    values, scores = pooling_inputs(3, 40, seed=3)
    pad = torch.zeros(3, 40, dtype=torch.bool)
    pad[2, 25:] = True
    values.requires_grad_(True)
    scores.requires_grad_(True)
    whole = successive_halving_topk(values, scores, 5, pad)
    monkeypatch.setattr(operator, "_SLICE_ELEMENTS", 1)  # one leaf column per slice
    sliced = successive_halving_topk(values, scores, 5, pad)
    _assert_same(sliced, whole)
    probe = torch.randn_like(whole.values)
    grads = [
        torch.autograd.grad((o.values * probe).sum(), (values, scores)) for o in (whole, sliced)
    ]
    torch.testing.assert_close(grads[0], grads[1])
    small_values = values[:, :9].detach().requires_grad_(True)
    small_scores = (separated_scores(3, 9) * 2).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda v, s: successive_halving_topk(v, s, 2, sort_back=True).values,
        (small_values, small_scores),
    )


def test_non_contiguous_values():
    values, scores = pooling_inputs(2, 30, dim=4, seed=4)
    strided = values.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(True)
    values.requires_grad_(True)
    assert not strided.is_contiguous()
    outs = [successive_halving_topk(v, scores, 4) for v in (values, strided)]
    _assert_same(outs[0], outs[1])
    grads = [
        torch.autograd.grad(o.values.pow(2).sum(), v)[0] for o, v in zip(outs, (values, strided))
    ]
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("nearly_sorted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_numpy_rank_equals_torch_stable_descending_sort(dtype, nearly_sorted):
    """The CPU fast path ranks exactly as torch's stable sort: ties, -0.0, -inf, padding;
    with either numpy sort (the one for nearly sorted rows gets random rows here too)."""
    from relu_former.pyramidion.successive_halving import _rank

    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(5, 301, generator=gen).to(dtype)
    scores[:, ::7] = 0.25  # many ties
    scores[0, :10] = -0.0
    scores[0, 10:20] = 0.0
    scores[1, 5:50] = float("-inf")
    scores[2] = torch.randint(-3, 3, (301,), generator=gen).to(dtype) * 1e3
    pad = torch.rand(5, 301, generator=gen) < 0.2
    expected = torch.sort(scores.masked_fill(pad, float("-inf")), dim=1, descending=True,
                          stable=True).indices
    assert torch.equal(_rank(scores, pad, nearly_sorted), expected)
    rows = scores.sort(dim=1, descending=True).values  # the case the merge sort is for
    rows[:, 1::9] = rows[:, 2::9]  # out-of-order pairs and ties
    expected = torch.sort(rows, dim=1, descending=True, stable=True).indices
    assert torch.equal(_rank(rows, torch.zeros_like(pad), nearly_sorted), expected)
