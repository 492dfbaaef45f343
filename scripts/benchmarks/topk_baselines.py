r"""Baselines of the successive-halving soft top-k, with its signature and output.

* ``successive_halving_topk_loop``: the same operator as
  :func:`relu_former.pyramidion.successive_halving.successive_halving_topk`, one example and one
  round at a time, both members of every pair gathered (the published code's approach, with a
  Python loop over the batch). The reference the batched operator is tested against, and the
  benchmark's per-example baseline.
* ``hard_topk``: exact top-k by score (:func:`torch.topk`); gradients reach the selected vectors
  but never the scores through them.
* ``iterative_soft_topk`` (Goyal et al., 2018, "A Continuous Relaxation of Beam Search"): k
  steps; step j takes the highest remaining score :math:`m_j`, weights every remaining item by
  :math:`\operatorname{softmax}_i(-\alpha (v_i - m_j)^2)`, emits the weighted sum of vectors and
  scores, then removes the arg-max item. O(nk) work; the published comparison uses
  :math:`\alpha = 1`.
"""

from __future__ import annotations

import inspect

import torch
from torch import Tensor

from relu_former.pyramidion.successive_halving import (
    PooledSequence,
    check_inputs,
    check_options,
    num_rounds,
    pair_weights,
    pairing_order,
    successive_halving_topk,
)


def _gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """values[b, index[b, j]] for values [B, n, d] and index [B, m] -> [B, m, d]."""
    batch, length, dim = values.shape
    offsets = torch.arange(batch, device=index.device).unsqueeze(1) * length
    flat = values.reshape(batch * length, dim).index_select(0, (index + offsets).reshape(-1))
    return flat.view(batch, index.shape[1], dim)


def successive_halving_topk_loop(values: Tensor, scores: Tensor, k: int,
                                 padding_mask: Tensor | None = None, **options) -> PooledSequence:
    """Same operator, one example and one round at a time, both members of every pair gathered.

    The published code's approach (a Python loop over the batch); kept as the reference the
    batched operator is tested against and as the benchmark's per-example baseline. Each example
    drops its padding and pads only to its own k' 2^r_b. ``options`` are the keyword options of
    :func:`successive_halving_topk`, with its defaults.
    """
    bound = inspect.signature(successive_halving_topk).bind(values, scores, k, padding_mask,
                                                            **options)
    bound.apply_defaults()
    sort, resort, sort_back, base, temperature, pairing = (
        bound.arguments[name]
        for name in ("sort", "resort", "sort_back", "base", "temperature", "pairing"))
    scores, pad = check_inputs(values, scores, k, padding_mask)
    check_options(pairing, base, temperature)
    batch, length, dim = values.shape
    out_len = min(k, length)
    pooled, pooled_scores, pooled_pad = [], [], []
    for b in range(batch):
        real = (~pad[b]).nonzero().squeeze(1)
        full = out_len << num_rounds(max(real.numel(), 1), out_len)
        extra = full - real.numel()
        x = torch.cat([values[b, real], values.new_zeros(extra, dim)])
        s = torch.cat([scores[b, real], scores.new_zeros(extra)])
        p = torch.cat([pad.new_zeros(real.numel()), pad.new_ones(extra)])
        pos = torch.cat([real, torch.arange(length, length + extra, device=real.device)])
        first = True
        while x.shape[0] > out_len:
            half = x.shape[0] // 2
            order = pairing_order(x.shape[0], pairing, x.device)
            if sort and (resort or first):
                key = s.detach().masked_fill(p, float("-inf"))
                order = torch.sort(key, descending=True, stable=True).indices[order]
            a, c = order[:half], order[half:]
            w_a, w_b = pair_weights(s[a], s[c], p[a], p[c], base, temperature)
            x = w_a.to(x.dtype).unsqueeze(1) * x[a] + w_b.to(x.dtype).unsqueeze(1) * x[c]
            s = w_a * s[a] + w_b * s[c]
            p, pos = p[a] & p[c], pos[a]
            first = False
        if sort_back:
            final = torch.argsort(pos + p.long() * (length + full))
        elif sort and full == out_len:
            final = torch.sort(
                s.detach().masked_fill(p, float("-inf")), descending=True, stable=True
            ).indices
        else:
            final = torch.arange(out_len, device=x.device)
        pooled.append(x[final])
        pooled_scores.append(s[final])
        pooled_pad.append(p[final])
    return PooledSequence(torch.stack(pooled), torch.stack(pooled_scores), torch.stack(pooled_pad))


def hard_topk(values: Tensor, scores: Tensor, k: int, padding_mask: Tensor | None = None, *,
              sort_back: bool = False) -> PooledSequence:
    """Exact top-k' by score (padding never selected; slots beyond an example's real items are
    padding with value 0). Score order, or original order with ``sort_back``."""
    scores, pad = check_inputs(values, scores, k, padding_mask)
    length = values.shape[1]
    out_len = min(k, length)
    key = scores.detach().masked_fill(pad, float("-inf"))
    index = torch.topk(key, out_len, dim=1, sorted=True).indices
    chosen_pad = pad.gather(1, index)
    if sort_back:
        index = index.gather(1, torch.argsort(index + chosen_pad.long() * length, dim=1))
        chosen_pad = pad.gather(1, index)
    pooled = _gather_rows(values, index).masked_fill(chosen_pad.unsqueeze(-1), 0.0)
    return PooledSequence(pooled, scores.gather(1, index).masked_fill(chosen_pad, 0.0), chosen_pad)


def iterative_soft_topk(
    values: Tensor,
    scores: Tensor,
    k: int,
    padding_mask: Tensor | None = None,
    *,
    alpha: float = 1.0,
    sort_back: bool = False,
) -> PooledSequence:
    """Goyal et al. (2018) iterative soft top-k: k' peaked softmaxes over the remaining items.

    Step j: m = max remaining score, w = softmax(-alpha (v - m)^2) over the remaining items,
    emit (w @ x, w @ v), remove the arg-max. Batched over examples, sequential over the k' steps.
    """
    scores, pad = check_inputs(values, scores, k, padding_mask)
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    batch, length, _ = values.shape
    out_len = min(k, length)
    s = scores.masked_fill(pad, 0.0)
    taken = pad.clone()
    rows = torch.arange(batch, device=values.device)
    pooled, pooled_scores, pooled_pad, winners = [], [], [], []
    for _ in range(out_len):
        left = ~taken.all(1, keepdim=True)
        best = s.detach().masked_fill(taken, float("-inf")).max(1)
        peak = s.gather(1, best.indices.unsqueeze(1)) * left  # differentiable max
        logits = (-alpha * (s - peak) ** 2).masked_fill(taken & left, float("-inf"))
        weights = torch.softmax(logits, dim=1) * left
        pooled.append(torch.bmm(weights.unsqueeze(1).to(values.dtype), values).squeeze(1))
        pooled_scores.append((weights * s).sum(1))
        pooled_pad.append(~left.squeeze(1))
        winners.append(best.indices)
        taken = taken.index_put((rows, best.indices), torch.ones_like(rows, dtype=torch.bool))
    result = PooledSequence(
        torch.stack(pooled, 1), torch.stack(pooled_scores, 1), torch.stack(pooled_pad, 1)
    )
    if not sort_back:
        return result
    where = torch.stack(winners, 1) + result.padding_mask.long() * length
    final = torch.argsort(where, dim=1)
    return PooledSequence(
        _gather_rows(result.values, final),
        result.scores.gather(1, final),
        result.padding_mask.gather(1, final),
    )
