r"""Successive-halving soft top-k pooling (Pietruszka et al., 2020) and two baselines.

Input: n vectors :math:`x_i \in \mathbb{R}^d` with scalar scores :math:`v_i`; output: k vectors
that approximate the k best-scored ones, differentiably in the scores.

**One halving round** turns a sequence of length L into L/2 pooled items. Sort by score
(descending), pair rank i with its partner (``pairing="first_last"``: rank L+1-i, the best meets
the worst; ``"halves"``: rank L/2+i), and merge each pair (a, b) with a two-way softmax:

.. math::
    w_a = \operatorname{softmax}(\beta^{v_a}, \beta^{v_b})_a = \sigma(\beta^{v_a} - \beta^{v_b}),
    \qquad w_b = 1 - w_a = \sigma(\beta^{v_b} - \beta^{v_a}),

    x' = w_a x_a + w_b x_b, \qquad v' = w_a v_a + w_b v_b,

with base :math:`\beta = 20` as published (scores from a sigmoid scorer lie in (0, 1]). With
``temperature=T`` the weights are :math:`\sigma((v_a - v_b) / T)` instead (softmax of v / T;
:math:`T = 1/\ln\beta` weights the pair by :math:`\beta^{v}` itself). After
:math:`r = \lceil \log_2 (n / k) \rceil` rounds k items remain; ``sort_back=True`` puts them in the
original order of the sequence.

**Any n and k.** The sequence is padded to :math:`L = k' 2^r` (:math:`k' = \min(k, n)`) with
masked slots. A masked slot never wins a pair: paired with a real item its weight is exactly 0
(the real item passes through unchanged, weight exactly 1); two masked slots merge into a masked
slot with weights 0, so its pooled value and score are 0. A pooled slot is padding only if
everything it merged was padding. User padding (``padding_mask``, True = padding) is treated the
same way, so a padded example pools exactly like the same example without the padding. The
output is right-padded: real slots first. For ``k >= n`` no round runs and the n inputs come back
(sorted by score when ``sort`` and not ``sort_back``).

**Batched in one pass over the vectors.** The merge weights depend only on the scores, never on
the vectors, so every round runs on the [B, L] scores alone and records, per round, which two
slots each new slot merged and with what weights. Walking these records back from the k output
slots gives each output's :math:`2^r` source positions and their coefficients (products of
weights along the path). These groups partition the input, so they invert into one output slot
and one coefficient per input position, and the vectors are read once, in order, each added into
its slot (``index_add_``; backward reads them again and saves nothing of size [B, n, d]). The
per-round work on scores is O(BL) plus the sort; the work on vectors is O(BLd) once, instead of
once per round. ``successive_halving_topk_loop`` is the plain per-example,
per-round version (the published code's approach, with every pair's vectors materialised): a
reference for tests and the benchmark baseline.

**The sorting step.** ``sort=False`` pairs by position instead of by rank (the published
ablation). With ``resort=False`` the sequence is sorted once before the first round; later rounds
pair by position in the order the previous round produced, which is close to sorted because a
pooled score is a weighted mean dominated by the pair's winner. ``resort=True`` (default) sorts
before every round as the published code does.

Baselines, same signature and output:

* ``hard_topk``: exact top-k by score (:func:`torch.topk`); gradients reach the selected vectors
  but never the scores through them.
* ``iterative_soft_topk`` (Goyal et al., 2018, "A Continuous Relaxation of Beam Search"): k
  steps; step j takes the highest remaining score :math:`m_j`, weights every remaining item by
  :math:`\operatorname{softmax}_i(-\alpha (v_i - m_j)^2)`, emits the weighted sum of vectors and
  scores, then removes the arg-max item. O(nk) work; the published comparison uses
  :math:`\alpha = 1`.
"""

from __future__ import annotations

from typing import List, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

PAIRINGS = ("first_last", "halves")


class PooledSequence(NamedTuple):
    """k' = min(k, n) pooled slots per example; ``padding_mask`` is True at padded slots."""

    values: Tensor  # [B, k', d]
    scores: Tensor  # [B, k']
    padding_mask: Tensor  # [B, k'] bool


def _check_inputs(
    values: Tensor, scores: Tensor, k: int, padding_mask: Tensor | None
) -> Tuple[Tensor, Tensor]:
    """Validate shapes and k; return (scores as [B, n], padding mask as bool [B, n])."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (the number of pooled slots) must be an integer >= 1, got {k!r}")
    if values.dim() != 3:
        raise ValueError(f"values must be [batch, length, dim], got shape {tuple(values.shape)}")
    batch, length, _ = values.shape
    if length < 1:
        raise ValueError("values must have at least one position (length >= 1)")
    if scores.dim() == 3 and scores.shape[-1] == 1:
        scores = scores.squeeze(-1)
    if scores.shape != (batch, length):
        raise ValueError(
            f"scores must be [batch, length] = {(batch, length)} to match values, "
            f"got {tuple(scores.shape)}"
        )
    if not scores.is_floating_point():
        raise ValueError(f"scores must be a floating-point tensor, got {scores.dtype}")
    if padding_mask is None:
        return scores, torch.zeros(batch, length, dtype=torch.bool, device=scores.device)
    if padding_mask.shape != (batch, length):
        raise ValueError(
            f"padding_mask must be [batch, length] = {(batch, length)}, "
            f"got {tuple(padding_mask.shape)}"
        )
    return scores, padding_mask.to(torch.bool)


def _check_options(pairing: str, base: float, temperature: float | None) -> None:
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    if temperature is not None and not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if temperature is None and not base > 1:
        raise ValueError(f"base must be > 1 (the published value is 20), got {base!r}")


def num_rounds(length: int, k: int) -> int:
    """Halving rounds for n = ``length`` inputs: the smallest r with min(k, n) * 2^r >= n."""
    out_len = min(k, length)
    rounds = 0
    while out_len << rounds < length:
        rounds += 1
    return rounds


def pair_weights(
    score_a: Tensor,
    score_b: Tensor,
    pad_a: Tensor,
    pad_b: Tensor,
    base: float = 20.0,
    temperature: float | None = None,
) -> Tuple[Tensor, Tensor]:
    """Merge weights (w_a, w_b) of pairs (a, b); a padded member gets exactly 0.

    Scores at padded members must be finite (callers zero them) so that no NaN reaches the
    gradient through the discarded branch.
    """
    if temperature is not None:
        z = (score_a - score_b) / temperature
    else:
        # softmax over (base ** v_a, base ** v_b); base ** v must stay finite, so use bounded
        # scores (the published scorer is a sigmoid) or the temperature form for raw scores.
        log_base = float(torch.log(torch.tensor(float(base))))
        z = torch.exp(score_a * log_base) - torch.exp(score_b * log_base)
    w_a = torch.where(pad_b, 1.0, torch.sigmoid(z)).masked_fill(pad_a, 0.0)
    w_b = torch.where(pad_a, 1.0, torch.sigmoid(-z)).masked_fill(pad_b, 0.0)
    return w_a, w_b


def _pairing_order(length: int, pairing: str, device: torch.device) -> Tensor:
    """Positions [a_1..a_h, b_1..b_h] of a ranked sequence: slot j merges a_j with b_j."""
    half = length // 2
    if pairing == "halves":
        return torch.arange(length, device=device)
    return torch.cat(
        [torch.arange(half, device=device), torch.arange(length - 1, half - 1, -1, device=device)]
    )


def _rank(scores: Tensor, pad: Tensor) -> Tensor:
    """Indices sorting each row by score, descending, padding last; ties keep position order."""
    key = scores.detach().masked_fill(pad, float("-inf"))
    if key.device.type == "cpu" and key.dtype in _FLOAT32_EXACT and key.shape[1] < 2**31:
        return _rank_cpu_float32(key)
    return torch.sort(key, dim=1, descending=True, stable=True).indices


# dtypes whose every value is exactly a float32, so ranking their float32 copy is exact
_FLOAT32_EXACT = (torch.float32, torch.float16, torch.bfloat16)


def _rank_cpu_float32(key: Tensor) -> Tensor:
    """``torch.sort(key, descending=True, stable=True).indices`` computed by numpy.

    torch's CPU sort dominated the operator (about 7x slower than numpy's vectorised sort of
    int64 here). Each score becomes an int64 whose high 32 bits order the floats (descending)
    and whose low 32 bits are the position, so every key is distinct and a plain sort of the
    keys is the stable descending sort; the low bits are then the indices.
    """
    keys = (key.float() + 0.0).view(torch.int32).long()  # + 0.0 turns -0.0 into 0.0
    # IEEE floats order like sign-magnitude integers; flip the negative ones' magnitude bits
    keys = torch.where(keys >= 0, keys, keys ^ 0x7FFFFFFF).neg_()
    keys <<= 32
    keys |= torch.arange(key.shape[1])
    keys.numpy().sort(axis=1)  # in place, through the shared memory
    return keys.bitwise_and_(0xFFFFFFFF)


def _real_first(pad: Tensor) -> Tensor:
    """Stable partition without sorting: indices of the real positions, then the padded ones."""
    real = (~pad).long()
    n_real = real.sum(1, keepdim=True)
    dest = torch.where(pad, n_real + pad.long().cumsum(1) - 1, real.cumsum(1) - 1)
    positions = torch.arange(pad.shape[1], device=pad.device).expand_as(pad)
    return torch.empty_like(positions).scatter_(1, dest, positions)


def _gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """values[b, index[b, j]] for values [B, n, d] and index [B, m] -> [B, m, d]."""
    batch, length, dim = values.shape
    offsets = torch.arange(batch, device=index.device).unsqueeze(1) * length
    flat = values.reshape(batch * length, dim).index_select(0, (index + offsets).reshape(-1))
    return flat.view(batch, index.shape[1], dim)


def successive_halving_topk(
    values: Tensor,
    scores: Tensor,
    k: int,
    padding_mask: Tensor | None = None,
    *,
    sort: bool = True,
    resort: bool = True,
    sort_back: bool = False,
    base: float = 20.0,
    temperature: float | None = None,
    pairing: str = "first_last",
) -> PooledSequence:
    """Pool ``values`` [B, n, d] to k' = min(k, n) slots by successive halving on ``scores``.

    Args:
        values: vectors to pool, [B, n, d]; values at padded positions must be finite.
        scores: [B, n] (or [B, n, 1]) scores; higher is better.
        k: number of pooled slots (>= 1).
        padding_mask: [B, n] bool, True at padding; padding never wins a pair.
        sort: rank by score before pairing (False: pair by position, the published ablation).
        resort: re-rank before every round (published); False ranks only before the first.
        sort_back: return the pooled slots in the original order of their winning members.
        base: pair weights softmax(base ** v_a, base ** v_b) (published: 20).
        temperature: if given, pair weights softmax(v_a / T, v_b / T) instead; base is unused.
        pairing: "first_last" (rank i with rank L+1-i, published) or "halves" (i with L/2+i).
    """
    scores, pad = _check_inputs(values, scores, k, padding_mask)
    _check_options(pairing, base, temperature)
    batch, length, _ = values.shape
    device = values.device
    out_len = min(k, length)
    rounds = num_rounds(length, k)
    full = out_len << rounds

    s = scores.masked_fill(pad, 0.0)
    start: Tensor | None = None  # position in the input of each slot of the first round
    if not sort and padding_mask is not None:
        # Without ranking, put padding last so that pairing by position matches the unpadded
        # sequence (padding can then only meet padding or pass a real item through).
        start = _real_first(pad)
        s, pad = s.gather(1, start), pad.gather(1, start)
    if full > length:
        s = F.pad(s, (0, full - length))
        pad = F.pad(pad, (0, full - length), value=True)
    pos: Tensor | None = None
    if sort_back:
        pos = torch.arange(full, device=device).expand(batch, full)
        if start is not None:
            pos = torch.cat([start, pos[:, length:]], 1)

    merges: List[Tuple[Tensor, Tensor]] = []  # per round: (slot order [B, L], weights [B, L])
    for r in range(rounds):
        cur = s.shape[1]
        half = cur // 2
        order = _pairing_order(cur, pairing, device)
        if sort and (resort or r == 0):
            order = _rank(s, pad)[:, order]
        else:
            order = order.expand(batch, cur)
        s_p, pad_p = s.gather(1, order), pad.gather(1, order)
        w_a, w_b = pair_weights(
            s_p[:, :half], s_p[:, half:], pad_p[:, :half], pad_p[:, half:], base, temperature
        )
        merges.append((order, torch.cat([w_a, w_b], 1)))
        s = w_a * s_p[:, :half] + w_b * s_p[:, half:]
        pad = pad_p[:, :half] & pad_p[:, half:]
        if pos is not None:
            pos = pos.gather(1, order[:, :half])

    # Which of the final slots goes where in the output.
    if sort_back:
        final = torch.argsort(pos + pad.long() * full, dim=1)
    elif sort and rounds == 0:
        final = _rank(s, pad)
    else:
        final = torch.arange(out_len, device=device).expand(batch, out_len)
    s, pad = s.gather(1, final), pad.gather(1, final)

    leaves, coef = _walk_back(final, (~pad).to(s.dtype), merges)
    leaves = leaves.reshape(batch, -1)
    if start is not None:
        start = torch.cat([start, torch.arange(length, full, device=device).expand(batch, -1)], 1)
        leaves = start.gather(1, leaves)
    # The leaves partition the k' 2^r positions: invert them into the slot and coefficient of
    # every input position (positions added to reach k' 2^r are dropped; their coefficient is 0).
    slots = torch.arange(out_len, device=device).expand(batch, full // out_len, out_len)
    slot_of = torch.empty_like(leaves).scatter_(1, leaves, slots.reshape(batch, -1))
    coef_of = coef.new_zeros(batch, full).scatter(1, leaves, coef.reshape(batch, -1))
    del leaves, coef
    slot_of = slot_of[:, :length] + torch.arange(batch, device=device).unsqueeze(1) * out_len
    if batch * out_len < 2**31:  # index_add_ and index_select take int32: half the memory
        slot_of = slot_of.to(torch.int32)
    pooled = _SlotWeightedSum.apply(values, slot_of, coef_of[:, :length].to(values.dtype), out_len)
    return PooledSequence(pooled, s, pad)


def _walk_back(
    final: Tensor, real: Tensor, merges: List[Tuple[Tensor, Tensor]]
) -> Tuple[Tensor, Tensor]:
    """Source positions (leaves) of each output slot and their coefficients, [B, m, k'] each
    (leaf t of output slot j at [:, t, j]), from the per-round merge records (consumed).
    ``real`` is 1 at real output slots, 0 at padded ones."""
    batch = final.shape[0]
    leaves = final.unsqueeze(1)
    coef = real.unsqueeze(1)
    while merges:  # popping frees each round's record once used
        order, weights = merges.pop()
        half = order.shape[1] // 2
        flat = leaves.reshape(batch, -1)
        shape = leaves.shape
        leaves = torch.cat(
            [order.gather(1, flat).view(shape), order.gather(1, flat + half).view(shape)], 1
        )
        coef = torch.cat(
            [
                coef * weights.gather(1, flat).view(shape),
                coef * weights.gather(1, flat + half).view(shape),
            ],
            1,
        )
    return leaves, coef


# The vectors are read in slices of about this many elements (1 MiB of float32), so no temporary
# grows with the input (the per-example loop instead holds both members of every pair of every
# round for backward).
_SLICE_ELEMENTS = 1 << 18


def _row_slices(batch: int, length: int, dim: int):
    """(r0, r1) ranges of input positions, each about _SLICE_ELEMENTS vector elements."""
    step = max(1, _SLICE_ELEMENTS // (batch * dim))
    for r0 in range(0, length, step):
        yield r0, min(r0 + step, length)


class _SlotWeightedSum(torch.autograd.Function):
    """pooled[b, j] = sum of coef[b, i] * values[b, i] over the positions i with slot[b, i] = j.

    ``slot`` holds b * k' + j (rows of the flattened output). The vectors are read once, in order,
    and added into the (small) output; backward reads them again instead of saving anything.
    """

    @staticmethod
    def forward(ctx, values, slot, coef, out_len):
        ctx.save_for_backward(values, slot, coef)
        batch, length, dim = values.shape
        pooled = values.new_zeros(batch * out_len, dim)
        for r0, r1 in _row_slices(batch, length, dim):
            part = values[:, r0:r1] * coef[:, r0:r1].unsqueeze(-1)
            pooled.index_add_(0, slot[:, r0:r1].reshape(-1), part.reshape(-1, dim))
        return pooled.view(batch, out_len, dim)

    @staticmethod
    def backward(ctx, grad_pooled):
        values, slot, coef = ctx.saved_tensors
        batch, length, dim = values.shape
        grad_rows_of = grad_pooled.reshape(-1, dim)
        grad_values = torch.empty_like(values) if ctx.needs_input_grad[0] else None
        grad_coef = torch.empty_like(coef) if ctx.needs_input_grad[2] else None
        for r0, r1 in _row_slices(batch, length, dim):
            rows = grad_rows_of.index_select(0, slot[:, r0:r1].reshape(-1)).view(
                batch, r1 - r0, dim
            )
            if grad_values is not None:
                torch.mul(rows, coef[:, r0:r1].unsqueeze(-1), out=grad_values[:, r0:r1])
            if grad_coef is not None:
                grad_coef[:, r0:r1] = rows.mul_(values[:, r0:r1]).sum(-1)
        return grad_values, None, grad_coef, None


def successive_halving_topk_loop(
    values: Tensor,
    scores: Tensor,
    k: int,
    padding_mask: Tensor | None = None,
    *,
    sort: bool = True,
    resort: bool = True,
    sort_back: bool = False,
    base: float = 20.0,
    temperature: float | None = None,
    pairing: str = "first_last",
) -> PooledSequence:
    """Same operator, one example and one round at a time, both members of every pair gathered.

    The published code's approach (a Python loop over the batch); kept as the reference the
    batched operator is tested against and as the benchmark's per-example baseline. Each example
    drops its padding and pads only to its own k' 2^r_b.
    """
    scores, pad = _check_inputs(values, scores, k, padding_mask)
    _check_options(pairing, base, temperature)
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
            order = _pairing_order(x.shape[0], pairing, x.device)
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


def hard_topk(
    values: Tensor,
    scores: Tensor,
    k: int,
    padding_mask: Tensor | None = None,
    *,
    sort_back: bool = False,
) -> PooledSequence:
    """Exact top-k' by score (padding never selected; slots beyond an example's real items are
    padding with value 0). Score order, or original order with ``sort_back``."""
    scores, pad = _check_inputs(values, scores, k, padding_mask)
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
    scores, pad = _check_inputs(values, scores, k, padding_mask)
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
