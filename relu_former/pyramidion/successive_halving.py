r"""Successive-halving soft top-k pooling (Pietruszka et al., ACL 2022, arXiv:2009.05169).

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
weights along the path). These groups partition the input: each output is the coefficient-
weighted sum of its sources, gathered a few examples at a time (so that reads in rank order stay
in the cache) and written once. Backward inverts the partition into one output slot and one
coefficient per input position and reads the output gradient in input order; nothing of size
[B, n, d] is saved. The per-round work on scores is O(BL) plus the sort; the work on vectors is
O(BLd) once, instead of once per round.

**The sorting step.** ``sort=False`` pairs by position instead of by rank (the published
ablation). With ``resort=False`` the sequence is sorted once before the first round; later rounds
pair by position in the order the previous round produced, which is close to sorted because a
pooled score is a weighted mean dominated by the pair's winner. ``resort=True`` (default) sorts
before every round as the published code does; since the rows are then nearly sorted, rounds
after the first use a sort that is fast on such input (numpy's timsort of int64 keys on the CPU,
the same indices as torch's stable sort).

The baselines (exact top-k, Goyal et al.'s iterative soft top-k) and the per-example loop the
tests compare this operator with are in :mod:`scripts.benchmarks.topk_baselines`.
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

try:  # numpy ranks faster on the CPU; torch alone works too
    import numpy as np
except ImportError:  # pragma: no cover - fairseq installs numpy
    np = None

PAIRINGS = ("first_last", "halves")


class PooledSequence(NamedTuple):
    """k' = min(k, n) pooled slots per example; ``padding_mask`` is True at padded slots.

    ``source_slot`` and ``source_weight`` say where each input position went: the output slot
    that merged it and its coefficient there (0 at padding), so that
    ``values[b, j] = sum over i with source_slot[b, i] == j of source_weight[b, i] * x[b, i]``.
    """

    values: Tensor  # [B, k', d]
    scores: Tensor  # [B, k']
    padding_mask: Tensor  # [B, k'] bool
    source_slot: Tensor | None = None  # [B, n] long
    source_weight: Tensor | None = None  # [B, n]


def check_inputs(
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


def check_options(pairing: str, base: float, temperature: float | None) -> None:
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
        log_base = math.log(base)
        z = torch.exp(score_a * log_base) - torch.exp(score_b * log_base)
    w_a = torch.where(pad_b, 1.0, torch.sigmoid(z)).masked_fill(pad_a, 0.0)
    w_b = torch.where(pad_a, 1.0, torch.sigmoid(-z)).masked_fill(pad_b, 0.0)
    return w_a, w_b


def pairing_order(length: int, pairing: str, device: torch.device) -> Tensor:
    """Positions [a_1..a_h, b_1..b_h] of a ranked sequence: slot j merges a_j with b_j."""
    half = length // 2
    if pairing == "halves":
        return torch.arange(length, device=device)
    return torch.cat(
        [torch.arange(half, device=device), torch.arange(length - 1, half - 1, -1, device=device)]
    )


def _rank(scores: Tensor, pad: Tensor, nearly_sorted: bool = False) -> Tensor:
    """Indices sorting each row by score, descending, padding last; ties keep position order.

    ``nearly_sorted`` says the row is almost in descending order already (as a round's
    output is, see :func:`successive_halving_topk`); the CPU path then uses a sort that
    runs in about linear time on such input.
    """
    key = scores.detach().masked_fill(pad, float("-inf"))
    if (np is not None and key.device.type == "cpu" and key.dtype in _FLOAT32_EXACT
            and key.shape[1] < 2**31):
        return _rank_cpu_float32(key, nearly_sorted)
    return torch.sort(key, dim=1, descending=True, stable=True).indices


# dtypes whose every value is exactly a float32, so ranking their float32 copy is exact
_FLOAT32_EXACT = (torch.float32, torch.float16, torch.bfloat16)


def _rank_cpu_float32(key: Tensor, nearly_sorted: bool = False) -> Tensor:
    """``torch.sort(key, descending=True, stable=True).indices`` computed by numpy.

    torch's CPU sort is several times slower than numpy's sort of int64. Each score becomes an
    int64 whose high 32 bits order the floats (descending) and whose low 32 bits are the
    position, so every key is distinct and any sort of the keys is the stable descending
    sort; the low bits are then the indices. The keys are built in numpy too (torch's int64
    bitwise operations took several times as long as the sort). Random input gets numpy's
    default (vectorised quicksort); nearly sorted input its merge sort (timsort), which runs in
    about linear time on input made of few ascending runs, about five times faster here.
    """
    bits = (key.float() + 0.0).numpy().view(np.int32)  # + 0.0 turns -0.0 into 0.0
    # IEEE floats order like sign-magnitude integers: flipping a negative one's magnitude bits
    # orders them as two's complement integers; bitwise not then reverses the order
    keys = np.invert(bits ^ ((bits >> 31) & 0x7FFFFFFF)).astype(np.int64)
    keys <<= 32
    keys |= np.arange(key.shape[1], dtype=np.int64)
    keys.sort(axis=1, kind="stable" if nearly_sorted else None)
    keys &= 0xFFFFFFFF
    return torch.from_numpy(keys)


def _real_first(pad: Tensor) -> Tensor:
    """Stable partition without sorting: indices of the real positions, then the padded ones."""
    real = (~pad).long()
    n_real = real.sum(1, keepdim=True)
    dest = torch.where(pad, n_real + pad.long().cumsum(1) - 1, real.cumsum(1) - 1)
    positions = torch.arange(pad.shape[1], device=pad.device).expand_as(pad)
    return torch.empty_like(positions).scatter_(1, dest, positions)


def _paired(ranked: Tensor, pairing: str) -> Tensor:
    """Slot order [a_1..a_h, b_1..b_h] of a ranked row (slot j merges a_j with b_j)."""
    if pairing == "halves":
        return ranked
    half = ranked.shape[1] // 2
    return torch.cat([ranked[:, :half], ranked[:, half:].flip(1)], 1)


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
    scores, pad = check_inputs(values, scores, k, padding_mask)
    check_options(pairing, base, temperature)
    batch, length, _ = values.shape
    device = values.device
    out_len = min(k, length)
    rounds = num_rounds(length, k)
    full = out_len << rounds

    s, pad, start, pos = _first_round(scores, pad, sort, padding_mask is not None, sort_back,
                                      length, full)
    s, pad, pos, merges = _halving_rounds(s, pad, pos, rounds, sort, resort, pairing, base,
                                          temperature)
    final = _final_order(s, pad, pos, sort, sort_back, rounds, out_len, full)
    s, pad = s.gather(1, final), pad.gather(1, final)

    leaves, coef = _walk_back(final, (~pad).to(s.dtype), merges)
    if start is not None:
        start = torch.cat([start, torch.arange(length, full, device=device).expand(batch, -1)], 1)
        leaves = start.gather(1, leaves.reshape(batch, -1)).view(leaves.shape)
    pooled = _LeafWeightedSum.apply(values, leaves, coef.to(values.dtype))
    return PooledSequence(pooled, s, pad, *input_slots(leaves, coef.detach(), length))


def _first_round(scores: Tensor, pad: Tensor, sort: bool, padded: bool, sort_back: bool,
                 length: int, full: int):
    """Scores and padding of the first round, padded to ``full`` slots; the input position of
    each slot (``start``, when unsorted padding is moved last) and for ``sort_back``."""
    batch, device = scores.shape[0], scores.device
    s = scores.masked_fill(pad, 0.0)
    start: Tensor | None = None  # position in the input of each slot of the first round
    if not sort and padded:
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
    return s, pad, start, pos


def _halving_rounds(s: Tensor, pad: Tensor, pos: Tensor | None, rounds: int, sort: bool,
                    resort: bool, pairing: str, base: float, temperature: float | None):
    """The rounds of pairing and merging: (scores, padding, positions, merges per round)."""
    batch, device = s.shape[0], s.device
    merges: List[Tuple[Tensor, Tensor]] = []  # per round: (slot order [B, L], weights [B, L])
    for r in range(rounds):
        cur = s.shape[1]
        half = cur // 2
        if sort and (resort or r == 0):
            # A round's output is nearly sorted already: slot j holds the j-th best item's
            # pair, whose score is dominated by that item's.
            order = _paired(_rank(s, pad, nearly_sorted=r > 0), pairing)
            s_p, pad_p = s.gather(1, order), pad.gather(1, order)
        else:
            order = pairing_order(cur, pairing, device)
            s_p, pad_p = s.index_select(1, order), pad.index_select(1, order)
            order = order.expand(batch, cur)
        w_a, w_b = pair_weights(
            s_p[:, :half], s_p[:, half:], pad_p[:, :half], pad_p[:, half:], base, temperature
        )
        merges.append((order, torch.cat([w_a, w_b], 1)))
        s = w_a * s_p[:, :half] + w_b * s_p[:, half:]
        pad = pad_p[:, :half] & pad_p[:, half:]
        if pos is not None:
            pos = pos.gather(1, order[:, :half])
    return s, pad, pos, merges


def _final_order(s: Tensor, pad: Tensor, pos: Tensor | None, sort: bool, sort_back: bool,
                 rounds: int, out_len: int, full: int) -> Tensor:
    """Which of the final slots goes where in the output."""
    if sort_back:
        return torch.argsort(pos + pad.long() * full, dim=1)
    if sort and rounds == 0:
        return _rank(s, pad)
    return torch.arange(out_len, device=s.device).expand(s.shape[0], out_len)


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


def input_slots(leaves: Tensor, coef: Tensor, length: int) -> Tuple[Tensor, Tensor]:
    """The output slot of every input position and its coefficient there, [B, length] each,
    from the partition ``leaves`` / ``coef`` [B, m, k'] (the positions the operator added from
    ``length`` on are dropped)."""
    batch, leaf_count, out_len = leaves.shape
    flat_leaves = leaves.reshape(batch, -1)
    slots = torch.arange(out_len, device=leaves.device).expand(batch, leaf_count, out_len)
    slot_of = torch.empty_like(flat_leaves).scatter_(1, flat_leaves, slots.reshape(batch, -1))
    coef_of = coef.new_zeros(flat_leaves.shape).scatter_(1, flat_leaves, coef.reshape(batch, -1))
    return slot_of[:, :length], coef_of[:, :length]


# The vectors are read in slices of about this many elements (1 MiB of float32), so no temporary
# grows with the input (the per-example loop instead holds both members of every pair of every
# round for backward).
_SLICE_ELEMENTS = 1 << 18


def _slices(total: int, elements_per_item: int):
    """(i0, i1) ranges of ``total`` items, each about _SLICE_ELEMENTS elements."""
    step = max(1, _SLICE_ELEMENTS // max(1, elements_per_item))
    for i0 in range(0, total, step):
        yield i0, min(i0 + step, total)


class _LeafWeightedSum(torch.autograd.Function):
    """pooled[b, j] = sum over t of coef[b, t, j] * values[b, leaves[b, t, j]].

    The leaves of the k' output slots partition the (padded) positions 0 .. k' 2^r - 1;
    positions from n on were added by the operator and have coefficient 0. Forward gathers the
    leaves' vectors slot by slot, so it writes each output once and reads the input in an
    order that does not slow it down whatever the ranking did (adding every input into its
    slot instead scatters the writes, which was slower after sorting than without). Backward
    inverts the partition and reads the (small) output gradient for every input position in
    order. Nothing of size [B, n, d] is saved or allocated besides the input gradient.
    """

    @staticmethod
    def forward(ctx, values, leaves, coef):
        batch, length, dim = values.shape
        _, leaf_count, out_len = leaves.shape
        ctx.save_for_backward(values, leaves, coef)
        pooled = values.new_empty(batch, out_len, dim)
        leaves = leaves.clamp_max(length - 1)  # added positions: coefficient 0, any real row
        # A few examples at a time, so that the rows read in rank order stay in cache.
        for b0, b1 in _slices(batch, length * dim):
            rows = values[b0:b1].reshape((b1 - b0) * length, dim)
            offsets = (torch.arange(b1 - b0, device=values.device) * length).view(-1, 1, 1)
            part = rows.index_select(0, (leaves[b0:b1] + offsets).reshape(-1))
            part = part.view(b1 - b0, leaf_count, out_len, dim).mul_(coef[b0:b1].unsqueeze(-1))
            torch.sum(part, 1, out=pooled[b0:b1])
        return pooled

    @staticmethod
    def backward(ctx, grad_pooled):
        values, leaves, coef = ctx.saved_tensors
        batch, length, dim = values.shape
        _, leaf_count, out_len = leaves.shape
        full = leaf_count * out_len
        flat_leaves = leaves.reshape(batch, full)
        slot_of, coef_of = input_slots(leaves, coef, length)
        # rows of the flattened [B * k', d] output gradient
        slot_of = slot_of + (torch.arange(batch, device=values.device) * out_len).view(batch, 1)
        grad_rows = grad_pooled.reshape(batch * out_len, dim)
        grad_values = torch.empty_like(values) if ctx.needs_input_grad[0] else None
        grad_coef_of = coef.new_zeros(batch, full) if ctx.needs_input_grad[2] else None
        for r0, r1 in _slices(length, batch * dim):
            rows = grad_rows.index_select(0, slot_of[:, r0:r1].reshape(-1)).view(
                batch, r1 - r0, dim
            )
            if grad_values is not None:
                torch.mul(rows, coef_of[:, r0:r1].unsqueeze(-1), out=grad_values[:, r0:r1])
            if grad_coef_of is not None:
                grad_coef_of[:, r0:r1] = rows.mul_(values[:, r0:r1]).sum(-1)
        grad_coef = None
        if grad_coef_of is not None:
            grad_coef = grad_coef_of.gather(1, flat_leaves).view(coef.shape)
        return grad_values, None, grad_coef
